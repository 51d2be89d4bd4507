package sqlserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/sql/queries"
)

// TestConformanceMaintenance runs the maintenance suite (membership rows,
// archiving, purges, expiry, spent claims, one run at a time), with
// READ_COMMITTED_SNAPSHOT off and on: ArchiveEpisodes' READPAST and the
// unhinted candidate reads are where that setting matters. Every backend is
// its own database, so its maintenance lock is its own too.
func TestConformanceMaintenance(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	for _, rcsi := range []bool{false, true} {
		t.Run(fmt.Sprintf("RCSI=%v", rcsi), func(t *testing.T) {
			t.Parallel()
			conformance.RunMaintenance(t, func(t *testing.T) conformance.MaintenanceBackend {
				db := freshDatabase(t, admin, dsn, rcsi)
				store, err := sqlserver.New(db)
				require.NoError(t, err)
				return conformance.MaintenanceBackend{
					Store: store,
					AgeEpisode: func(t testing.TB, id int64, d time.Duration) {
						updateOne(t, db, fmt.Sprintf("episode %d", id), `
UPDATE leasehold_episodes
SET created_at   = DATEADD(millisecond, -@ms, DATEADD(second, -@s, created_at)),
    queued_at    = DATEADD(millisecond, -@ms, DATEADD(second, -@s, queued_at)),
    started_at   = DATEADD(millisecond, -@ms, DATEADD(second, -@s, started_at)),
    last_step_at = DATEADD(millisecond, -@ms, DATEADD(second, -@s, last_step_at)),
    finished_at  = DATEADD(millisecond, -@ms, DATEADD(second, -@s, finished_at))
OUTPUT inserted.id
WHERE id = @id;`, back(d, sql.Named("id", id))...)
					},
					AgeClaim: func(t testing.TB, key string, d time.Duration) {
						updateOne(t, db, fmt.Sprintf("claim %q", key), `
UPDATE leasehold_work_claims
SET claimed_at        = DATEADD(millisecond, -@ms, DATEADD(second, -@s, claimed_at)),
    last_heartbeat_at = DATEADD(millisecond, -@ms, DATEADD(second, -@s, last_heartbeat_at)),
    lease_until       = DATEADD(millisecond, -@ms, DATEADD(second, -@s, lease_until)),
    finished_at       = DATEADD(millisecond, -@ms, DATEADD(second, -@s, finished_at))
OUTPUT inserted.dedupe_key
WHERE dedupe_key = @key;`, back(d, sql.Named("key", key))...)
					},
					AgeAvailable: func(t testing.TB, id int64, d time.Duration) { ageAvailable(t, db, id, d) },
					AgeNode: func(t testing.TB, id string, d time.Duration) {
						updateOne(t, db, fmt.Sprintf("node %q", id), `
UPDATE leasehold_nodes
SET started_at   = DATEADD(millisecond, -@ms, DATEADD(second, -@s, started_at)),
    heartbeat_at = DATEADD(millisecond, -@ms, DATEADD(second, -@s, heartbeat_at))
OUTPUT inserted.node_id
WHERE node_id = @id;`, back(d, sql.Named("id", id))...)
					},
					HoldLock: func(t testing.TB) func() { return holdMaintenanceLock(t, db) },
					ClaimExists: func(t testing.TB, key string) bool {
						t.Helper()
						var n int64
						require.NoError(t, db.QueryRowContext(context.Background(),
							`SELECT COUNT_BIG(*) FROM leasehold_work_claims WHERE dedupe_key = @key`,
							sql.Named("key", key)).Scan(&n))
						return n > 0
					},
				}
			})
		})
	}
}

// TestConformanceMaintenanceLockIsPerDatabase: a run holding the lock in
// one database does not stop a run in another on the same server.
func TestConformanceMaintenanceLockIsPerDatabase(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	a, b := freshDatabase(t, admin, dsn, false), freshDatabase(t, admin, dsn, false)
	holdMaintenanceLock(t, a)
	plan := maintenance.DefaultConfig().Plan()
	for _, tc := range []struct {
		db   *sql.DB
		runs bool
	}{{a, false}, {b, true}} {
		s, err := sqlserver.New(tc.db)
		require.NoError(t, err)
		res, err := s.Maintain(t.Context(), plan)
		require.NoError(t, err)
		require.Equal(t, tc.runs, res.Ran)
	}
}

// TestConformanceTryMaintenanceLockNeedsATransaction: sent on its own, the
// batch fails loudly instead of reporting the lock as held.
func TestConformanceTryMaintenanceLockNeedsATransaction(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	db := freshDatabase(t, admin, dsn, false)
	var acquired bool
	err := db.QueryRowContext(t.Context(), maintenanceLockBatch(t)).Scan(&acquired)
	require.ErrorContains(t, err, "must run inside the maintenance transaction")
}

// holdMaintenanceLock takes the maintenance lock as another node's run
// would: in a transaction on a connection of its own, with the batch the
// adapter sends (TryMaintenanceLock). release rolls the transaction back,
// which releases the lock.
func holdMaintenanceLock(t testing.TB, db *sql.DB) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	var acquired bool
	require.NoError(t, tx.QueryRowContext(ctx, maintenanceLockBatch(t)).Scan(&acquired))
	require.True(t, acquired, "the maintenance lock was already held")
	var once sync.Once
	release = func() {
		once.Do(func() {
			require.NoError(t, tx.Rollback())
			require.NoError(t, conn.Close())
		})
	}
	t.Cleanup(release)
	return release
}

func maintenanceLockBatch(t testing.TB) string {
	t.Helper()
	stmts, err := queries.SQLServer()
	require.NoError(t, err)
	return stmts["TryMaintenanceLock"].SQL
}

// back returns the @s and @ms arguments of DATEADD(millisecond, -@ms,
// DATEADD(second, -@s, x)), which moves x back by d (to the millisecond;
// whole seconds keep DATEADD within its int for centuries), followed by
// more.
func back(d time.Duration, more ...any) []any {
	return append([]any{
		sql.Named("s", int32(d/time.Second)),
		sql.Named("ms", int32(d%time.Second/time.Millisecond)),
	}, more...)
}

// ageAvailable moves episode id's run_after (the instant it fell due) and
// created_at back by d.
func ageAvailable(t testing.TB, db *sql.DB, id int64, d time.Duration) {
	updateOne(t, db, fmt.Sprintf("episode %d", id), `
UPDATE leasehold_episodes
SET created_at = DATEADD(millisecond, -@ms, DATEADD(second, -@s, created_at)),
    run_after  = DATEADD(millisecond, -@ms, DATEADD(second, -@s, run_after))
OUTPUT inserted.id
WHERE id = @id;`, back(d, sql.Named("id", id))...)
}

// updateOne runs an UPDATE ... OUTPUT and requires exactly one row back.
func updateOne(t testing.TB, db *sql.DB, what, stmt string, args ...any) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), stmt, args...)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, 1, n, "no %s to age", what)
}
