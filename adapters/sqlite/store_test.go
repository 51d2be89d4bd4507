package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/sql/schema"
)

func TestDSN(t *testing.T) {
	t.Parallel()
	all := "_busy_timeout=10000&_journal_mode=WAL&_foreign_keys=1&_synchronous=FULL&_txlock=immediate"
	for _, tc := range []struct{ in, want string }{
		{"/tmp/x.db", "/tmp/x.db?" + all},
		{"file:/tmp/x.db", "file:/tmp/x.db?" + all},
		{"file:/tmp/x.db?mode=rwc", "file:/tmp/x.db?mode=rwc&" + all},
		{"x.db?_busy_timeout=500&_sync=NORMAL", "x.db?_busy_timeout=500&_sync=NORMAL&_journal_mode=WAL&_foreign_keys=1&_txlock=immediate"},
		{"x.db?_txlock=IMMEDIATE&_fk=true&_journal=wal", "x.db?_txlock=IMMEDIATE&_fk=true&_journal=wal&_busy_timeout=10000&_synchronous=FULL"},
	} {
		got, err := sqlite.DSN(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "x.db?_txlock=deferred", "x.db?_foreign_keys=0", "x.db?_journal_mode=DELETE", "x.db?%zz"} {
		_, err := sqlite.DSN(bad)
		require.ErrorIs(t, err, claims.ErrInvalid, bad)
	}
}

// Open sets the pragmas on every connection of the pool.
func TestOpenPragmas(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	db.SetMaxOpenConns(3)
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := db.Conn(t.Context())
		require.NoError(t, err)
		conns[i] = c
	}
	for _, c := range conns {
		var (
			journal      string
			busy, fk, sy int
		)
		require.NoError(t, c.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&journal))
		require.NoError(t, c.QueryRowContext(t.Context(), "PRAGMA busy_timeout").Scan(&busy))
		require.NoError(t, c.QueryRowContext(t.Context(), "PRAGMA foreign_keys").Scan(&fk))
		require.NoError(t, c.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&sy))
		require.Equal(t, "wal", journal)
		// SQLite waits one try; the pool's connections wait the rest of
		// BusyTimeout themselves (see the package's Lock section).
		require.Equal(t, int(sqlite.TrySlice.Milliseconds()), busy)
		require.Equal(t, 1, fk)
		require.Equal(t, 2, sy) // FULL
		require.NoError(t, c.Close())
	}
}

// BeginTx is BEGIN IMMEDIATE: a transaction holds the write lock from its
// start, so a second one (another pool on the file, as another process)
// cannot begin until the first ends, and reports SQLITE_BUSY as
// claims.ErrRetryable when it waited out busy_timeout.
func TestBeginIsImmediate(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	a := sqlitetest.Open(t, path)
	impatient, err := sqlite.Open(t.Context(), path+"?_busy_timeout=50")
	require.NoError(t, err)
	t.Cleanup(func() { _ = impatient.Close() })

	tx, err := a.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	// Nothing written yet, and still the other pool cannot write.
	_, err = sqlite.New(impatient).Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "b", Lease: time.Minute})
	require.ErrorIs(t, err, claims.ErrRetryable)
	require.ErrorContains(t, err, "AcquireClaim")
	_, err = impatient.BeginTx(t.Context(), nil)
	require.Error(t, err)
	// Readers are never blocked (WAL).
	var n int
	require.NoError(t, impatient.QueryRow(`SELECT count(*) FROM leasehold_work_claims`).Scan(&n))
	require.NoError(t, tx.Rollback())
	_, err = sqlite.New(impatient).Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "b", Lease: time.Minute})
	require.NoError(t, err)
}

// Two pools on one file, as two processes would have, race Acquire on the
// same keys (a fresh key, then a stolen expired lease): exactly one caller
// wins each round, every other one is busy, and nobody errs otherwise.
func TestAcquireRaceAcrossPools(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	pools := []*sql.DB{sqlitetest.Open(t, path), sqlitetest.OpenUnmigrated(t, path)}
	const perPool = 8
	for round := range 10 {
		key := fmt.Sprintf("k%d", round%2)
		if round >= 2 {
			sqlitetest.ExpireClaim(t, pools[0], key)
		}
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
			wins  []claims.Claim
			busy  int
		)
		for p, db := range pools {
			s := sqlite.New(db)
			for i := range perPool {
				wg.Go(func() {
					<-start
					c, err := s.Acquire(context.Background(), claims.AcquireParams{
						Key: key, Owner: fmt.Sprintf("p%d-%d", p, i), Lease: time.Minute,
					})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins = append(wins, c)
					case errors.Is(err, claims.ErrBusy):
						busy++
					default:
						t.Errorf("round %d: %v", round, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		require.Len(t, wins, 1, "round %d", round)
		require.Equal(t, 2*perPool-1, busy, "round %d", round)
		require.EqualValues(t, round/2+1, wins[0].Fence, "round %d: the fence grows once per grant", round)
	}
}

func TestUniqueViolationIsNotRetryable(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_nodes (node_id, mode) VALUES ('n', 'full')`)
	_, err := db.Exec(`INSERT INTO leasehold_nodes (node_id, mode) VALUES ('n', 'full')`)
	require.Error(t, err)
	require.True(t, sqlite.IsUniqueViolation(err), "%v", err)
	require.False(t, sqlite.IsRetryable(err))
	// A partial unique index too (one live episode per trigger).
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_episodes (actor_id, expectation_id, trigger_type, dedupe_key, key_version) VALUES ('a', 'e', 'event', 'd', 2)`)
	_, err = db.Exec(`INSERT INTO leasehold_episodes (actor_id, expectation_id, trigger_type, dedupe_key, key_version) VALUES ('a', 'e', 'event', 'd', 2)`)
	require.True(t, sqlite.IsUniqueViolation(err), "%v", err)
	sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET archived_at = 1 WHERE dedupe_key = 'd'`)
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_episodes (actor_id, expectation_id, trigger_type, dedupe_key, key_version) VALUES ('a', 'e', 'event', 'd', 2)`)
	// A CHECK is not a unique violation.
	_, err = db.Exec(`INSERT INTO leasehold_nodes (node_id, mode) VALUES ('m', 'bogus')`)
	require.Error(t, err)
	require.False(t, sqlite.IsUniqueViolation(err))
}

func TestSchemaLimits(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	for i, stmt := range []string{
		`INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at) VALUES ('', 'claimed', 'o', 0, 0)`,
		`INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at) VALUES ('k', 'bogus', 'o', 0, 0)`,
		`INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, fence) VALUES ('k', 'claimed', 'o', 0, 0, 0)`,
		`INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, error_detail) VALUES ('k', 'claimed', 'o', 0, 0, '{bad')`,
		`INSERT INTO leasehold_episode_steps (episode_id, step_no, fence) VALUES (12345, 1, 1)`, // foreign key
		`INSERT INTO leasehold_nodes (node_id, mode, draining) VALUES ('n', 'full', 2)`,
	} {
		_, err := db.Exec(stmt)
		require.Error(t, err, "statement %d", i)
	}
	insert := `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at) VALUES (?, 'claimed', 'o', 0, 0)`
	// length() counts characters, as varchar(512) does: 512 three-byte
	// characters fit, 513 do not.
	_, err := db.Exec(insert, strings.Repeat("€", claims.MaxKeyLen+1))
	require.Error(t, err, "a key over 512 characters")
	_, err = db.Exec(insert, strings.Repeat("€", claims.MaxKeyLen))
	require.NoError(t, err)
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	db := sqlitetest.OpenUnmigrated(t, path)
	s := sqlite.New(db)
	require.ErrorIs(t, s.CheckSchema(t.Context()), schema.ErrSchema)
	p, err := sqlite.NewMigrator(db)
	require.NoError(t, err)
	_, err = p.UpTo(t.Context(), 3)
	require.NoError(t, err)
	require.ErrorIs(t, s.CheckSchema(t.Context()), schema.ErrSchema)
	require.NoError(t, sqlite.Migrate(t.Context(), db))
	require.NoError(t, s.CheckSchema(t.Context()))
}

func TestNodes(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	ctx := t.Context()
	require.NoError(t, s.RegisterNode(ctx, membership.Member{ID: "b", Stack: "st", Env: "e", Mode: "full"}))
	require.NoError(t, s.RegisterNode(ctx, membership.Member{ID: "a", Mode: "trigger_only"}))
	_, err := s.Acquire(ctx, claims.AcquireParams{Key: "k1", Owner: "b", Lease: time.Minute})
	require.NoError(t, err)
	_, err = s.Acquire(ctx, claims.AcquireParams{Key: "k2", Owner: "b", Lease: time.Minute})
	require.NoError(t, err)
	sqlitetest.ExpireClaim(t, db, "k2")
	sqlitetest.Exec(t, db, `UPDATE leasehold_nodes SET heartbeat_at = heartbeat_at - 5000 WHERE node_id = 'b'`)

	rows, err := s.ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, membership.Member{ID: "a", Mode: "trigger_only"}, rows[0].Member)
	require.Equal(t, membership.Member{ID: "b", Stack: "st", Env: "e", Mode: "full"}, rows[1].Member)
	require.EqualValues(t, 1, rows[1].LiveLeases)
	require.GreaterOrEqual(t, rows[1].HeartbeatAge, 5*time.Second)
	require.Less(t, rows[1].HeartbeatAge, time.Minute)
	require.Equal(t, time.UTC, rows[1].StartedAt.Location())

	// The heartbeat refreshes mode and drain state, keeps stack and
	// started_at, and recreates a removed row.
	require.NoError(t, s.HeartbeatNode(ctx, membership.Member{ID: "b", Stack: "other", Env: "e", Mode: "disabled", Draining: true}))
	rows, err = s.ListNodes(ctx)
	require.NoError(t, err)
	require.Equal(t, membership.Member{ID: "b", Stack: "st", Env: "e", Mode: "disabled", Draining: true}, rows[1].Member)
	require.Less(t, rows[1].HeartbeatAge, 5*time.Second)
	// Re-registering resets draining.
	require.NoError(t, s.RegisterNode(ctx, membership.Member{ID: "b", Stack: "st", Env: "e", Mode: "full"}))
	rows, err = s.ListNodes(ctx)
	require.NoError(t, err)
	require.False(t, rows[1].Draining)

	require.NoError(t, s.DeregisterNode(ctx, "b"))
	require.NoError(t, s.DeregisterNode(ctx, "b"))
	require.NoError(t, s.HeartbeatNode(ctx, membership.Member{ID: "c", Mode: "full", Draining: true}))
	rows, err = s.ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.True(t, rows[1].Draining)
}

// inTx commits when its func succeeds, rolls back when it fails, runs
// nested in the Store's transaction when bound to one, and reports a BEGIN
// IMMEDIATE that could not get the write lock as retryable.
func TestInTx(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	db := sqlitetest.Open(t, path)
	s := sqlite.New(db)
	insert := func(id string) func(*sqlite.Store) error {
		return func(tx *sqlite.Store) error {
			return tx.RegisterNode(t.Context(), membership.Member{ID: id, Mode: "full"})
		}
	}
	count := func() int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_nodes`).Scan(&n))
		return n
	}
	require.NoError(t, sqlite.RunInTx(s, t.Context(), insert("a")))
	require.Equal(t, 1, count())

	boom := errors.New("boom")
	err := sqlite.RunInTx(s, t.Context(), func(tx *sqlite.Store) error {
		require.NoError(t, insert("b")(tx))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, count())

	// Bound to a caller's transaction: runs in it, commits nothing itself.
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, sqlite.RunInTx(s.WithTx(tx), t.Context(), insert("c")))
	require.NoError(t, tx.Rollback())
	require.Equal(t, 1, count())

	// Another process holds the write lock past busy_timeout.
	impatient, err := sqlite.Open(t.Context(), path+"?_busy_timeout=50")
	require.NoError(t, err)
	t.Cleanup(func() { _ = impatient.Close() })
	tx, err = db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	err = sqlite.RunInTx(sqlite.New(impatient), t.Context(), insert("d"))
	require.ErrorIs(t, err, claims.ErrRetryable)
	require.NoError(t, tx.Rollback())
	require.NoError(t, sqlite.RunInTx(sqlite.New(impatient), t.Context(), insert("d")))
	require.Equal(t, 2, count())
}
