package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// Migration 00016 folds the trigger request into the episode row with live
// work in the database: every open request (pending and due later, pending
// and due, claimed by a poller) of a queued episode nobody holds becomes
// an available episode, due as it was (a claimed one at once); a request
// whose episode is held live, or ended, or archived, does not; every open
// request is closed, so an old poller's hand-over finds nothing. Then the
// database refuses a new request (LH003), a poll takes what is due, and
// the migration goes down again with the available work pending.
func TestMigrate16MakesOpenRequestsAvailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Schema(t, pgtest.Options{UpTo: 15})
	episode := func(key, status string, archived bool) int64 {
		t.Helper()
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO leasehold_episodes
			(actor_id, expectation_id, trigger_type, dedupe_key, key_version, status, max_attempts, source_stack, source_env, archived_at)
			VALUES ('a', 'e', 'event', $1, 2, $2, 3, '', '', CASE WHEN $3 THEN now() END) RETURNING id`, key, status, archived).Scan(&id))
		return id
	}
	request := func(id int64, status, runAfter string) {
		t.Helper()
		pgtest.Exec(t, pool, `INSERT INTO leasehold_trigger_requests
			(episode_id, actor_id, expectation_id, source_node, status, opts, claimed_by, claim_until, fence, run_after)
			VALUES ($1, 'a', 'e', 'old-node', $2::text, '{"o":1}', CASE WHEN $2::text = 'claimed' THEN 'old-poller' END,
				CASE WHEN $2::text = 'claimed' THEN now() + interval '1 minute' END, 1, now() + $3::interval)`, id, status, runAfter)
	}
	later := episode("later", "queued", false)
	request(later, "pending", "1 hour")
	due := episode("due", "queued", false)
	request(due, "pending", "-1 minute")
	claimed := episode("claimed", "queued", false)
	request(claimed, "claimed", "1 hour")
	held := episode("held", "queued", false)
	request(held, "pending", "-1 minute")
	pgtest.Exec(t, pool, `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, fence, work_type)
		VALUES ('held', 'claimed', 'node-x', now() + interval '1 minute', now(), 1, 'episode')`)
	canceled := episode("canceled", "canceled", false)
	request(canceled, "pending", "-1 minute")
	archived := episode("archived", "queued", true)
	request(archived, "pending", "-1 minute")

	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	p, err := postgres.NewMigrator(sqlDB)
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 16)
	require.NoError(t, err)

	runAfter := func(id int64) *time.Time {
		t.Helper()
		var at *time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT run_after FROM leasehold_episodes WHERE id = $1`, id).Scan(&at))
		return at
	}
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	require.NotNil(t, runAfter(later))
	require.WithinDuration(t, now.Add(time.Hour), *runAfter(later), time.Minute, "due as the request was")
	require.NotNil(t, runAfter(due))
	require.NotNil(t, runAfter(claimed))
	require.False(t, runAfter(claimed).After(now.Add(time.Second)), "a request a poller had claimed is due at once")
	for name, id := range map[string]int64{"held live": held, "canceled": canceled, "archived": archived} {
		require.Nil(t, runAfter(id), "the %s episode was made available", name)
	}
	var open int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM leasehold_trigger_requests
		WHERE status IN ('pending', 'claimed')`).Scan(&open))
	require.Zero(t, open, "an open request is left for an old poller")

	_, err = pool.Exec(ctx, `INSERT INTO leasehold_trigger_requests (episode_id, actor_id, expectation_id, source_node)
		VALUES ($1, 'a', 'e', 'old-node')`, later)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "LH003", pgErr.Code, "an old binary's request was accepted: %v", err)

	ds, err := postgres.New(pool).ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "new-node", Lease: time.Minute,
		Runnable: []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}, Limit: 10})
	require.NoError(t, err)
	got := map[int64]bool{}
	for _, d := range ds {
		require.True(t, d.Started)
		require.JSONEq(t, `{"o":1}`, string(d.Opts), "the request's opts came with it")
		got[d.EpisodeID] = true
	}
	require.Equal(t, map[int64]bool{due: true, claimed: true}, got, "the due work, once each")

	_, err = p.DownTo(ctx, 15)
	require.NoError(t, err)
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM leasehold_trigger_requests
		WHERE episode_id = $1 AND status = 'pending'`, later).Scan(&status))
	require.Equal(t, "pending", status, "down gives available work its request back")
}

// A node older than migration 00016 that still runs beside new ones writes
// the episode row without knowing run_after: its recovery can take over an
// available episode (its ClaimForRecovery knows nothing of run_after) and
// finish it, or start it, and leave run_after set. A poll and the expiry
// then meet an ended or running episode that still looks available: they
// must leave it alone (the status test on the locked row), never run a
// failed episode again nor cancel running work.
func TestPollAndExpiryLeaveAnOldBinarysLeftoversAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	leftover := func(key, status string) int64 {
		t.Helper()
		d, err := s.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "a", ExpectationID: "e",
			TriggerType: episodes.TriggerEvent, DedupeKey: key, MaxAttempts: 3}})
		require.NoError(t, err)
		// What the old binary's takeover left: its grant (expired, or
		// finished) and the episode moved on, run_after untouched.
		pgtest.Exec(t, pool, `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, fence, work_type)
			VALUES ($1, CASE WHEN $2::text = 'running' THEN 'claimed' ELSE 'failed' END, 'old-node', now() - interval '1 second',
				now() - interval '1 minute', 1, 'episode')`, key, status)
		pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET status = $2::text, owner_node = 'old-node',
			finished_at = CASE WHEN $2::text = 'failed' THEN now() END, run_after = run_after - interval '2 hours'
			WHERE id = $1`, d.Episode.ID, status)
		return d.Episode.ID
	}
	failed := leftover("old-failed", "failed")
	running := leftover("old-running", "running")

	ds, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "new-node", Lease: time.Minute,
		Runnable: []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, ds, "a poll took an episode an older binary ended or runs")
	expired, err := s.ExpireAvailable(ctx, episodes.ExpireQuery{TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, expired, "the expiry canceled an episode an older binary ended or runs")
	for id, status := range map[int64]episodes.Status{failed: episodes.StatusFailed, running: episodes.StatusRunning} {
		ep, err := s.GetEpisode(ctx, id)
		require.NoError(t, err)
		require.Equal(t, status, ep.Status)
		require.Equal(t, "old-node", ep.OwnerNode)
	}
}
