package sqlite_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/episodes"
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
// AUTOINCREMENT counter (no id is reused after the rebuild). Requests are
// checked at version 15, the last that takes new ones (version 16
// refuses them; TestMigrate16MakesOpenRequestsAvailable).
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
	_, err = p.UpTo(t.Context(), 15)
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
	_, err = p.Up(t.Context())
	require.NoError(t, err)
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

// Version 16 folds the trigger request into the episode: on a file at
// version 15, every open request (pending, or claimed by a poller) whose
// episode is queued, unarchived and held live by nobody makes that episode
// available (a pending request's due time and opts kept, a claimed one due
// at once) and is closed; an open request of any other episode is closed
// too, its episode left as it was; a closed request stays as it was. Then
// the file refuses a new request, as an older binary would write it (a
// plain insert, or ReopenTriggerRequest's upsert), and the new adapter's
// poll takes what came due. Down gives the available episodes their
// pending request back.
func TestMigrate16MakesOpenRequestsAvailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqlitetest.OpenUnmigrated(t, sqlitetest.Path(t))
	p, err := sqlite.NewMigrator(db)
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 15)
	require.NoError(t, err)

	const now = sqlitetest.Now
	episode := func(key, status string, archived bool) int64 {
		t.Helper()
		var id int64
		require.NoError(t, db.QueryRow(`INSERT INTO leasehold_episodes
			(actor_id, expectation_id, trigger_type, dedupe_key, key_version, status, archived_at)
			VALUES ('mon', 'ping', 'event', ?1, 2, ?2, CASE WHEN ?3 THEN `+now+` END) RETURNING id`,
			key, status, archived).Scan(&id))
		return id
	}
	request := func(id int64, status, runAfter string, opts any) {
		t.Helper()
		sqlitetest.Exec(t, db, `INSERT INTO leasehold_trigger_requests
			(episode_id, actor_id, expectation_id, source_node, opts, status, claimed_by, claim_until, fence, run_after, finished_at)
			VALUES (?1, 'mon', 'ping', 'trigger-node', ?3, ?2,
				CASE WHEN ?2 = 'claimed' THEN 'poller' END,
				CASE WHEN ?2 = 'claimed' THEN `+now+` + 60000 END,
				CASE WHEN ?2 = 'claimed' THEN 1 ELSE 0 END,
				`+runAfter+`,
				CASE WHEN ?2 IN ('completed', 'expired') THEN `+now+` - 5000 END)`, id, status, opts)
	}
	claim := func(key string, live bool) {
		t.Helper()
		sqlitetest.Exec(t, db, `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, fence)
			VALUES (?1, 'claimed', 'holder', `+now+` + CASE WHEN ?2 THEN 60000 ELSE -60000 END, `+now+` - 120000, 4)`, key, live)
	}

	delayed := episode("k:delayed", "queued", false) // pending, due in an hour, with opts
	request(delayed, "pending", now+" + 3600000", `{"region":"eu"}`)
	due := episode("k:due", "queued", false) // pending, due a minute ago
	request(due, "pending", now+" - 60000", nil)
	polled := episode("k:polled", "queued", false) // a poller claimed it, due in an hour: due at once now
	request(polled, "claimed", now+" + 3600000", nil)
	lapsed := episode("k:lapsed", "queued", false) // its old grant expired: nobody holds it
	request(lapsed, "pending", now+" - 60000", nil)
	claim("k:lapsed", false)
	held := episode("k:held", "queued", false) // queued in its holder's slot queue
	request(held, "pending", now+" - 60000", nil)
	claim("k:held", true)
	running := episode("k:running", "running", false)
	request(running, "pending", now+" - 60000", nil)
	archived := episode("k:archived", "queued", true)
	request(archived, "pending", now+" - 60000", nil)
	handed := episode("k:handed", "queued", false) // handed over before the migration
	request(handed, "completed", now+" - 60000", nil)
	expired := episode("k:expired", "canceled", false)
	request(expired, "expired", now+" - 60000", nil)
	bare := episode("k:bare", "queued", false) // no request: a local episode

	var before int64
	require.NoError(t, db.QueryRow(`SELECT `+now).Scan(&before))
	_, err = p.UpTo(ctx, 16)
	require.NoError(t, err)

	type row struct {
		runAfter *int64
		opts     *string
		status   string
	}
	read := func(id int64) row {
		t.Helper()
		var r row
		require.NoError(t, db.QueryRow(`SELECT run_after, opts, status FROM leasehold_episodes WHERE id = ?`, id).Scan(&r.runAfter, &r.opts, &r.status))
		return r
	}
	var delayedDue, dueDue int64
	require.NoError(t, db.QueryRow(`SELECT run_after FROM leasehold_trigger_requests WHERE episode_id = ?`, delayed).Scan(&delayedDue))
	require.NoError(t, db.QueryRow(`SELECT run_after FROM leasehold_trigger_requests WHERE episode_id = ?`, due).Scan(&dueDue))

	d := read(delayed)
	require.NotNil(t, d.runAfter)
	require.Equal(t, delayedDue, *d.runAfter, "a pending request's due time is kept")
	require.NotNil(t, d.opts)
	require.JSONEq(t, `{"region":"eu"}`, *d.opts)
	require.Equal(t, "queued", d.status)
	require.Equal(t, &dueDue, read(due).runAfter)
	pr := read(polled)
	require.NotNil(t, pr.runAfter)
	require.GreaterOrEqual(t, *pr.runAfter, before, "a request a poller had claimed is due at once")
	require.Less(t, *pr.runAfter, before+60000)
	require.NotNil(t, read(lapsed).runAfter, "an expired grant holds nothing")
	for name, id := range map[string]int64{"held": held, "running": running, "archived": archived, "handed": handed, "expired": expired, "bare": bare} {
		require.Nil(t, read(id).runAfter, "%s: not available", name)
	}

	var open int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_trigger_requests WHERE status IN ('pending', 'claimed')`).Scan(&open))
	require.Zero(t, open, "every open request is closed")
	var completed int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_trigger_requests
		WHERE status = 'completed' AND finished_at >= ?`, before).Scan(&completed))
	require.Equal(t, 7, completed, "the open requests, closed by the migration")
	var kept string
	require.NoError(t, db.QueryRow(`SELECT status FROM leasehold_trigger_requests WHERE episode_id = ?`, expired).Scan(&kept))
	require.Equal(t, "expired", kept)

	// An older binary's writes of the old model fail loudly.
	_, err = db.Exec(`INSERT INTO leasehold_trigger_requests (episode_id, actor_id, expectation_id, source_node)
		VALUES (?, 'mon', 'ping', 'old-node')`, bare)
	require.ErrorContains(t, err, "leasehold: trigger requests are episode rows since schema 16")
	_, err = db.Exec(`INSERT INTO leasehold_trigger_requests AS t (episode_id, actor_id, expectation_id, source_node, status)
		VALUES (?, 'mon', 'ping', 'old-node', 'pending')
		ON CONFLICT (episode_id) DO UPDATE SET status = 'pending', run_after = excluded.run_after`, due)
	require.ErrorContains(t, err, "leasehold: trigger requests are episode rows since schema 16",
		"a reopening upsert of an existing request is refused too")
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_trigger_requests WHERE status = 'pending'`).Scan(&open))
	require.Zero(t, open)

	// The new poll takes what came due, and sees the delayed one's due time.
	s := sqlite.New(db)
	q := episodes.AvailableQuery{Owner: "full", Lease: time.Minute, Runnable: []episodes.Runnable{{ActorID: "mon", ExpectationID: "ping"}}, Limit: 10}
	ds, err := s.ClaimAvailable(ctx, q)
	require.NoError(t, err)
	var took []int64
	for _, x := range ds {
		require.True(t, x.Started, "episode %d", x.EpisodeID)
		require.Equal(t, "full", x.Claim.Owner)
		took = append(took, x.EpisodeID)
	}
	require.ElementsMatch(t, []int64{due, polled, lapsed}, took)
	wait, ok, err := s.NextAvailableDue(ctx, q)
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), time.Minute.Seconds())

	// Down: the available episode gets its request back, pending, due as
	// it was, with its opts; new requests are taken again.
	_, err = p.DownTo(ctx, 15)
	require.NoError(t, err)
	var status string
	var runAfter int64
	var opts *string
	require.NoError(t, db.QueryRow(`SELECT status, run_after, opts FROM leasehold_trigger_requests WHERE episode_id = ?`, delayed).
		Scan(&status, &runAfter, &opts))
	require.Equal(t, "pending", status)
	require.Equal(t, delayedDue, runAfter)
	require.NotNil(t, opts)
	require.JSONEq(t, `{"region":"eu"}`, *opts)
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_trigger_requests WHERE status = 'pending'`).Scan(&open))
	require.Equal(t, 1, open, "only the episode still available")
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_trigger_requests (episode_id, actor_id, expectation_id, source_node)
		VALUES (?, 'mon', 'ping', 'old-node')`, bare)
}
