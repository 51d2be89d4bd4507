package sqlite_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/maintenance"
)

func TestConformanceMaintenance(t *testing.T) {
	t.Parallel()
	conformance.RunMaintenance(t, func(t *testing.T) conformance.MaintenanceBackend {
		db := sqlitetest.DB(t)
		return conformance.MaintenanceBackend{
			Store: sqlite.New(db),
			AgeEpisode: func(t testing.TB, id int64, d time.Duration) {
				n := sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET created_at = created_at - ?2,
					queued_at = queued_at - ?2, started_at = started_at - ?2,
					last_step_at = last_step_at - ?2, finished_at = finished_at - ?2
					WHERE id = ?1`, id, d.Milliseconds())
				require.EqualValues(t, 1, n, "no episode %d", id)
			},
			AgeClaim: func(t testing.TB, key string, d time.Duration) {
				n := sqlitetest.Exec(t, db, `UPDATE leasehold_work_claims SET claimed_at = claimed_at - ?2,
					last_heartbeat_at = last_heartbeat_at - ?2, lease_until = lease_until - ?2,
					finished_at = finished_at - ?2
					WHERE dedupe_key = ?1`, key, d.Milliseconds())
				require.EqualValues(t, 1, n, "no claim %q", key)
			},
			AgeAvailable: func(t testing.TB, id int64, d time.Duration) { ageAvailable(t, db, id, d) },
			AgeNode: func(t testing.TB, id string, d time.Duration) {
				n := sqlitetest.Exec(t, db, `UPDATE leasehold_nodes SET started_at = started_at - ?2,
					heartbeat_at = heartbeat_at - ?2 WHERE node_id = ?1`, id, d.Milliseconds())
				require.EqualValues(t, 1, n, "no node %q", id)
			},
			HoldLock: func(t testing.TB) func() { return holdLock(t, db) },
			ClaimExists: func(t testing.TB, key string) bool {
				var ok bool
				require.NoError(t, db.QueryRow(
					`SELECT EXISTS (SELECT 1 FROM leasehold_work_claims WHERE dedupe_key = ?)`, key).Scan(&ok))
				return ok
			},
		}
	})
}

// holdLock takes the maintenance lock as another process's run would: a
// BEGIN IMMEDIATE transaction on another pool on the file, running the
// statement the adapter runs (TryMaintenanceLock). It holds the database
// write lock, so a Maintain meanwhile waits BusyTimeout in BEGIN and then
// reports Ran false. release rolls the transaction back.
func holdLock(t testing.TB, db *sql.DB) (release func()) {
	t.Helper()
	tx, err := sqlitetest.Another(t, db).BeginTx(context.Background(), nil)
	require.NoError(t, err)
	got, err := sqlitedb.New().TryMaintenanceLock(context.Background(), tx)
	require.NoError(t, err)
	require.EqualValues(t, 1, got)
	var once sync.Once
	release = func() {
		once.Do(func() { require.NoError(t, tx.Rollback()) })
	}
	t.Cleanup(release)
	return release
}

// impatient opens another pool on db's file whose statements wait only
// briefly for the write lock, so that a test of a held lock need not wait
// sqlite.BusyTimeout.
func impatient(t testing.TB, db *sql.DB) *sql.DB {
	t.Helper()
	var file string
	require.NoError(t, db.QueryRow(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file))
	other, err := sqlite.Open(context.Background(), file+"?_busy_timeout=100")
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	return other
}

// staleNode gives maintenance something to do (a node row two days
// without a heartbeat), so that a run takes the write lock: with nothing
// due, Maintain takes no lock (MaintenanceDue).
func staleNode(t testing.TB, db *sql.DB) {
	t.Helper()
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_nodes (node_id, mode, started_at, heartbeat_at)
		VALUES ('node-gone', 'full', `+sqlitetest.Now+` - 172800000, `+sqlitetest.Now+` - 172800000)`)
}

// The lock is the database file's: installations in other files do not
// exclude each other (Postgres: TestMaintainLockIsPerSchema).
func TestMaintainLockIsPerDatabaseFile(t *testing.T) {
	t.Parallel()
	a, b := sqlitetest.DB(t), sqlitetest.DB(t)
	staleNode(t, a)
	staleNode(t, b)
	holdLock(t, a)
	res, err := sqlite.New(impatient(t, a)).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.False(t, res.Ran)
	res, err = sqlite.New(b).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.True(t, res.Ran, "another database file is another installation")
}

// A run that waits for the write lock runs once it gets it: a writer that
// holds the lock for a moment delays maintenance, it does not skip it.
func TestMaintainWaitsForTheWriteLock(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	staleNode(t, db)
	release := holdLock(t, db)
	time.AfterFunc(200*time.Millisecond, release)
	res, err := sqlite.New(db).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.True(t, res.Ran)
	require.EqualValues(t, 1, res.NodesDeleted)
}

func TestMaintainInACallersTransaction(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	staleNode(t, db)
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	res, err := sqlite.New(tx).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.Equal(t, maintenance.Result{Ran: true, NodesDeleted: 1}, res)

	// The run's savepoint is released into tx, whose BEGIN IMMEDIATE holds
	// the write lock until it ends.
	other, err := sqlite.New(impatient(t, db)).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.False(t, other.Ran)
	require.NoError(t, tx.Commit())
	other, err = sqlite.New(db).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.Equal(t, maintenance.Result{Ran: true}, other, "the caller's commit applied the run")
}

// A run with nothing due takes no write lock: it returns at once, found
// nothing, while another connection holds the lock.
func TestMaintainWithNothingDueTakesNoLock(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	holdLock(t, db)
	res, err := sqlite.New(impatient(t, db)).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.Equal(t, maintenance.Result{Ran: true}, res)
}

func TestMaintainRejects(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	// A DBTX that cannot begin a transaction.
	_, err := sqlite.New(struct{ sqlitedb.DBTX }{db}).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.ErrorContains(t, err, "begins transactions")

	for _, p := range []maintenance.Plan{
		{Batch: 0},
		{Batch: maintenance.MaxBatch + 1},
		{Batch: 1, Retention: -time.Second},
		{Batch: 1, ClaimHorizon: -time.Second},
	} {
		_, err := sqlite.New(db).Maintain(t.Context(), p)
		require.ErrorIs(t, err, maintenance.ErrInvalid, "%+v", p)
	}
}

func TestMaintainCancelledEndsTheTransaction(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	staleNode(t, db)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := sqlite.New(db).Maintain(ctx, maintenance.DefaultConfig().Plan())
	require.ErrorIs(t, err, context.Canceled)
	res, err := sqlite.New(impatient(t, db)).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.Equal(t, maintenance.Result{Ran: true, NodesDeleted: 1}, res, "no lock left behind")
}

// Postgres picks old finished claims from a snapshot and must re-check the
// age on the row it locks (TestDeleteSpentClaimsRechecksAgeUnderTheRowLock).
// Here a re-grant that is being written holds the write lock, so the run
// waits for it in BEGIN and then reads the committed, fresh row: the
// released grant is seconds old and stays.
func TestDeleteSpentClaimsSeesTheRegrant(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	c, err := s.Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(t.Context(), c.Token))
	forty := (40 * 24 * time.Hour).Milliseconds()
	sqlitetest.Exec(t, db, `UPDATE leasehold_work_claims SET claimed_at = claimed_at - ?1,
		lease_until = lease_until - ?1, finished_at = finished_at - ?1`, forty)

	tx, err := sqlitetest.Another(t, db).BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	again, err := sqlite.New(tx).Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-b", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, sqlite.New(tx).Release(t.Context(), again.Token))

	type outcome struct {
		res maintenance.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.Maintain(context.Background(), maintenance.DefaultConfig().Plan())
		done <- outcome{res, err}
	}()
	select {
	case got := <-done:
		t.Fatalf("the run did not wait for the write lock: %+v", got)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, tx.Commit())
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, maintenance.Result{Ran: true}, got.res, "the released grant is seconds old")
	var fence int64
	require.NoError(t, db.QueryRow(`SELECT fence FROM leasehold_work_claims WHERE dedupe_key = 'k'`).Scan(&fence))
	require.EqualValues(t, 2, fence)
}
