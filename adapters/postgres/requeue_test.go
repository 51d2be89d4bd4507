package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// A requeue of a grant given back leaves the episode's attempts as they
// were, so nothing on the episode row tells a second sweeper that the
// first requeued it; only the first's open trigger request does, which a
// statement whose snapshot was taken before the first committed cannot
// see. RequeueOrphanLock makes the second wait on the claim row before
// RequeueOrphan takes its snapshot. Here the second is sent while the
// first's transaction is open, and must requeue nothing once it commits.
func TestRequeueOrphanWaitsForAConcurrentRequeue(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
		DedupeKey: "k", MaxAttempts: 3, Owner: "slow", Lease: time.Minute, Start: true})
	require.NoError(t, err)
	require.NoError(t, s.Release(t.Context(), o.Claim.Token), "the holder gives the grant back")

	waited, err := interleave(t, pool, func(tx pgx.Tx) {
		first, err := postgres.New(tx).RequeueOrphan(t.Context(), o.Episode.ID, 0, "sweeper-1", time.Minute)
		require.NoError(t, err)
		require.EqualValues(t, 0, first.Attempts, "a grant given back is not an attempt")
	}, func() error {
		_, err := s.RequeueOrphan(context.Background(), o.Episode.ID, 0, "sweeper-2", time.Minute)
		return err
	})
	require.True(t, waited, "the second requeue did not wait for the first's row lock")
	require.ErrorIs(t, err, claims.ErrBusy, "the orphan was requeued once")
	var fence int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT fence FROM leasehold_work_claims WHERE dedupe_key = 'k'`).Scan(&fence))
	require.Equal(t, o.Claim.Fence+1, fence, "fenced out once")
}

// A claim-less orphan has no claim row for RequeueOrphanLock to wait on:
// the episode row's FOR UPDATE OF e is what makes a second sweeper wait
// for the first and re-check the orphan on its latest version, where the
// first requeue counted an attempt (attempts no longer the count the
// second listed). Without that lock the second decides on its snapshot,
// then its UPDATE waits for the first and writes over it: the orphan is
// requeued twice and its one crash counted as two attempts.
func TestRequeueOrphanWaitsForAConcurrentRequeueOfAClaimlessOrphan(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	var id int64
	require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO leasehold_episodes
		(actor_id, expectation_id, trigger_type, status, max_attempts, owner_node, created_at, started_at, last_step_at)
		VALUES ('a', 'e', 'event', 'running', 3, 'dead', now() - interval '2 hours', now() - interval '1 hour', now() - interval '1 hour')
		RETURNING id`).Scan(&id))

	waited, err := interleave(t, pool, func(tx pgx.Tx) {
		first, err := postgres.New(tx).RequeueOrphan(t.Context(), id, 0, "sweeper-1", time.Minute)
		require.NoError(t, err)
		require.EqualValues(t, 1, first.Attempts, "a claim-less orphan's run counts")
	}, func() error {
		_, err := s.RequeueOrphan(context.Background(), id, 0, "sweeper-2", time.Minute)
		return err
	})
	require.True(t, waited, "the second requeue did not wait for the first's row lock")
	require.ErrorIs(t, err, claims.ErrBusy, "the orphan was requeued once")
	got, err := s.GetEpisode(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, got.Status)
	require.EqualValues(t, 1, got.Attempts, "the orphan's run was counted once")
}

// A sweep's requeues wait for row locks (a holder's finish, another
// sweeper): RequeueOrphans runs several at once on a pool, so those waits
// overlap instead of adding up. Here a competitor holds the claim rows of
// three orphans; all three requeues must be waiting on it at the same
// moment (one at a time, only one would be), and each requeues its orphan
// once the competitor commits.
func TestRequeueOrphansOverlapTheirLockWaits(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	var items []episodes.RequeueItem
	var keys []string
	for _, key := range []string{"overlap-1", "overlap-2", "overlap-3"} {
		o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
			DedupeKey: key, MaxAttempts: 3, Owner: "dead", Lease: time.Minute, Start: true})
		require.NoError(t, err)
		pgtest.ExpireClaim(t, pool, key)
		items = append(items, episodes.RequeueItem{ID: o.Episode.ID})
		keys = append(keys, key)
	}

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var pid int32
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid))
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM leasehold_work_claims WHERE dedupe_key = ANY ($1) FOR UPDATE`, keys)
	require.NoError(t, err)

	done := make(chan []episodes.RequeueResult, 1)
	go func() { done <- s.RequeueOrphans(context.Background(), items, "sweeper", time.Minute) }()
	most := 0
	for most < len(items) {
		select {
		case res := <-done:
			t.Fatalf("RequeueOrphans returned while the competitor held every row (most waiting at once: %d): %+v", most, res)
		default:
		}
		var waiting int
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiting))
		most = max(most, waiting)
	}
	require.NoError(t, tx.Commit(t.Context()))
	for i, r := range <-done {
		require.NoError(t, r.Err, "orphan %d", i)
		require.Equal(t, episodes.StatusQueued, r.Status, "orphan %d requeued", i)
	}
}
