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
// see. RequeueOrphanLock locks the claim row before RequeueOrphan takes its
// snapshot, NOWAIT: a second sweeper sent while the first's transaction is
// open gives up at once (busy) instead of queueing behind it, and one sent
// after the first committed sees its open request. Either way the orphan
// is requeued once.
func TestRequeueOrphanSkipsAnOrphanAnotherRequeueHolds(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := startedEpisode(t, s, "k", "slow")
	require.NoError(t, s.Release(t.Context(), o.Claim.Token), "the holder gives the grant back")

	// A lock wait would last a minute: only NOWAIT returns before the first
	// commits.
	long := claims.WithTxBound(context.Background(), time.Minute)
	waited, err := interleave(t, pool, func(tx pgx.Tx) {
		first, err := postgres.New(tx).RequeueOrphan(t.Context(), o.Episode.ID, 0, "sweeper-1", time.Minute)
		require.NoError(t, err)
		require.EqualValues(t, 0, first.Attempts, "a grant given back is not an attempt")
	}, func() error {
		_, err := s.RequeueOrphan(long, o.Episode.ID, 0, "sweeper-2", time.Minute)
		return err
	})
	require.False(t, waited, "the second requeue waited for the first's row lock instead of giving up")
	require.ErrorIs(t, err, claims.ErrBusy, "the second requeue found the orphan locked")

	_, err = s.RequeueOrphan(long, o.Episode.ID, 0, "sweeper-3", time.Minute)
	require.ErrorIs(t, err, claims.ErrBusy, "after the first committed: its open request says the orphan is requeued")
	require.NotErrorIs(t, err, claims.ErrLocked, "nothing holds its rows any more")
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

// A sweep's requeues skip the orphans whose claim rows another
// transaction holds (another sweeper requeuing them, a holder finishing or
// frozen inside its transaction) at once, instead of queueing behind it,
// and requeue them on a later sweep. Here a competitor holds the claim rows
// of three orphans; RequeueOrphans, whose lock waits would last a minute,
// must return while the competitor still holds them, every orphan busy and
// untouched, and requeue all three once the competitor is gone.
func TestRequeueOrphansSkipLockedOrphansAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	var items []episodes.RequeueItem
	var keys []string
	for _, key := range []string{"locked-1", "locked-2", "locked-3"} {
		o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
			DedupeKey: key, MaxAttempts: 3, Owner: "dead", Lease: time.Minute, Start: true})
		require.NoError(t, err)
		pgtest.ExpireClaim(t, pool, key)
		items = append(items, episodes.RequeueItem{ID: o.Episode.ID})
		keys = append(keys, key)
	}
	fences := func() []int64 {
		var out []int64
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT array_agg(fence ORDER BY dedupe_key) FROM leasehold_work_claims WHERE dedupe_key = ANY ($1)`, keys).Scan(&out))
		return out
	}
	before := fences()

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM leasehold_work_claims WHERE dedupe_key = ANY ($1) FOR UPDATE`, keys)
	require.NoError(t, err)

	long := claims.WithTxBound(context.Background(), time.Minute)
	done := make(chan []episodes.RequeueResult, 1)
	go func() { done <- s.RequeueOrphans(long, items, "sweeper", time.Minute) }()
	select {
	case res := <-done:
		for i, r := range res {
			require.ErrorIs(t, r.Err, claims.ErrBusy, "orphan %d: its claim row is locked", i)
			require.ErrorIs(t, r.Err, claims.ErrLocked, "orphan %d: told apart from work already requeued", i)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RequeueOrphans waited for the competitor's row locks")
	}
	require.Equal(t, before, fences(), "nothing was fenced out while the rows were locked")
	require.NoError(t, tx.Rollback(t.Context()))

	for i, r := range s.RequeueOrphans(long, items, "sweeper", time.Minute) {
		require.NoError(t, r.Err, "orphan %d", i)
		require.Equal(t, episodes.StatusQueued, r.Status, "orphan %d requeued", i)
	}
}
