package sqlite_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/sql/schema"
)

// migrators is how many processes migrate one file at once in the
// concurrency tests (the demo starts three).
const migrators = 6

// latestVersion is the newest embedded migration's version.
func latestVersion(t *testing.T) int64 {
	t.Helper()
	p, err := sqlite.NewMigrator(sqlitetest.OpenUnmigrated(t, sqlitetest.Path(t)))
	require.NoError(t, err)
	v := p.ListSources()
	require.NotEmpty(t, v)
	return v[len(v)-1].Version
}

// migrateAtOnce runs Migrate on n independent pools on the file at path,
// as n processes would, all released at once.
func migrateAtOnce(t *testing.T, path string, n int) []error {
	t.Helper()
	dbs := make([]*sql.DB, n)
	for i := range dbs {
		dbs[i] = sqlitetest.OpenUnmigrated(t, path)
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
	)
	for i, db := range dbs {
		wg.Go(func() {
			<-start
			errs[i] = sqlite.Migrate(context.Background(), db)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// requireAppliedOnce: every migration is recorded applied exactly once.
func requireAppliedOnce(t *testing.T, db *sql.DB, latest int64) {
	t.Helper()
	rows, err := db.Query(`SELECT version_id, count(*) FROM ` + schema.VersionTable +
		` WHERE is_applied AND version_id > 0 GROUP BY version_id ORDER BY version_id`)
	require.NoError(t, err)
	defer rows.Close()
	var want int64 = 1
	for rows.Next() {
		var v, n int64
		require.NoError(t, rows.Scan(&v, &n))
		require.Equal(t, want, v)
		require.EqualValues(t, 1, n, "version %d recorded %d times", v, n)
		want++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, latest+1, want, "not every migration was applied")
}

// Many processes starting together on a fresh file all migrate it: each
// waits for the migration lock, and every migration is applied once.
// Several rounds, each on a new file, because an unlocked run fails on most
// rounds but not on all.
func TestMigrateConcurrentFreshFile(t *testing.T) {
	t.Parallel()
	latest := latestVersion(t)
	for round := range 4 {
		path := sqlitetest.Path(t)
		for i, err := range migrateAtOnce(t, path, migrators) {
			require.NoError(t, err, "round %d, migrator %d", round, i)
		}
		requireAppliedOnce(t, sqlitetest.OpenUnmigrated(t, path), latest)
	}
}

// A rolling deploy: the file is some migrations behind, and several new
// binaries start at once. The missing migrations are applied once.
func TestMigrateConcurrentBehind(t *testing.T) {
	t.Parallel()
	latest := latestVersion(t)
	path := sqlitetest.Path(t)
	p, err := sqlite.NewMigrator(sqlitetest.OpenUnmigrated(t, path))
	require.NoError(t, err)
	_, err = p.UpTo(t.Context(), latest-3)
	require.NoError(t, err)
	for i, err := range migrateAtOnce(t, path, migrators) {
		require.NoError(t, err, "migrator %d", i)
	}
	requireAppliedOnce(t, sqlitetest.OpenUnmigrated(t, path), latest)
}

// Down and Up again, all the way: every Down section runs, the schema is
// empty after it (but for goose's table), and Up rebuilds it.
func TestMigrateDownUp(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	p, err := sqlite.NewMigrator(db)
	require.NoError(t, err)
	_, err = p.DownTo(t.Context(), 0)
	require.NoError(t, err)
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM sqlite_schema
		WHERE type IN ('table', 'index') AND name LIKE 'leasehold_%' AND name <> ?`, schema.VersionTable).Scan(&n))
	require.Zero(t, n)
	_, err = p.Up(t.Context())
	require.NoError(t, err)
	require.NoError(t, sqlite.Migrate(t.Context(), db))
}

// A migration holds foreign keys valid and keeps ids: the rebuilds of
// versions 6 and 7 keep every row, every step's instance and every
// AUTOINCREMENT counter (no id is reused after the rebuild).
func TestMigrateRebuildsKeepRowsAndIDs(t *testing.T) {
	t.Parallel()
	db := sqlitetest.OpenUnmigrated(t, sqlitetest.Path(t))
	p, err := sqlite.NewMigrator(db)
	require.NoError(t, err)
	_, err = p.UpTo(t.Context(), 5)
	require.NoError(t, err)
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_workflow_instances (workflow_id, subject) VALUES ('w', 's1'), ('w', 's2')`)
	sqlitetest.Exec(t, db, `DELETE FROM leasehold_workflow_instances WHERE subject = 's2'`)
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_workflow_steps (instance_id, step_id) VALUES (1, 'a')`)
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_episodes (actor_id, expectation_id, trigger_type) VALUES ('a', 'e', 'event'), ('a', 'e', 'event')`)
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_trigger_requests (episode_id, actor_id, expectation_id, source_node) VALUES (1, 'a', 'e', 'n'), (2, 'a', 'e', 'n')`)
	sqlitetest.Exec(t, db, `DELETE FROM leasehold_trigger_requests WHERE episode_id = 2`)
	_, err = p.Up(t.Context())
	require.NoError(t, err)

	var steps, runAfter int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_workflow_steps WHERE instance_id = 1`).Scan(&steps))
	require.Equal(t, 1, steps)
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_trigger_requests WHERE run_after > 0`).Scan(&runAfter))
	require.Equal(t, 1, runAfter)
	var id int64
	require.NoError(t, db.QueryRow(`INSERT INTO leasehold_workflow_instances (workflow_id, subject, status) VALUES ('w', 's3', 'canceled') RETURNING id`).Scan(&id))
	require.EqualValues(t, 3, id, "instance ids continue after the rebuild")
	require.NoError(t, db.QueryRow(`INSERT INTO leasehold_trigger_requests (episode_id, actor_id, expectation_id, source_node) VALUES (2, 'a', 'e', 'n') RETURNING id`).Scan(&id))
	require.EqualValues(t, 3, id, "request ids continue after the rebuild")
	// The steps' foreign key follows the renamed instance table.
	sqlitetest.Exec(t, db, `DELETE FROM leasehold_workflow_instances WHERE id = 1`)
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_workflow_steps`).Scan(&steps))
	require.Zero(t, steps, "ON DELETE CASCADE still applies")
	var fkErrors int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pragma_foreign_key_check`).Scan(&fkErrors))
	require.Zero(t, fkErrors)
}

// A migrator waits for the lock held by another (here: a connection holding
// BEGIN EXCLUSIVE on the lock file, as a migrating process does), gives up
// when its context ends, and goes ahead once the holder is gone.
func TestMigrateWaitsForTheLock(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	db := sqlitetest.OpenUnmigrated(t, path)
	holder, err := sql.Open(sqlite.DriverName, path+sqlite.LockSuffix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	conn, err := holder.Conn(t.Context())
	require.NoError(t, err)
	_, err = conn.ExecContext(t.Context(), "BEGIN EXCLUSIVE")
	require.NoError(t, err)

	// Long enough for what Migrate does before it asks for the lock on a
	// loaded host (300 ms ran out before, beside two CPU hogs), so that the
	// deadline ends the wait for the lock itself.
	ctx, cancel := context.WithTimeout(t.Context(), testbound.Margin)
	defer cancel()
	err = sqlite.Migrate(ctx, db)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "migration lock")

	done := make(chan error, 1)
	go func() { done <- sqlite.Migrate(context.Background(), db) }()
	select {
	case err := <-done:
		t.Fatalf("migrated while the lock was held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	_, err = conn.ExecContext(t.Context(), "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.NoError(t, <-done)
	require.NoError(t, sqlite.New(db).CheckSchema(t.Context()))
}
