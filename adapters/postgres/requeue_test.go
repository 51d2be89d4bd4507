package postgres_test

import (
	"context"
	"testing"
	"time"

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

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var pid int32
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid))
	first, err := postgres.New(tx).RequeueOrphan(t.Context(), o.Episode.ID, 0, "sweeper-1", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 0, first.Attempts, "a grant given back is not an attempt")

	done := make(chan error, 1)
	go func() {
		_, err := s.RequeueOrphan(context.Background(), o.Episode.ID, 0, "sweeper-2", time.Minute)
		done <- err
	}()
	// The database says when the second waits for the first's row lock.
	for blocked := false; !blocked; {
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, pid).Scan(&blocked))
	}
	require.NoError(t, tx.Commit(t.Context()))
	require.ErrorIs(t, <-done, claims.ErrBusy, "the orphan was requeued once")
	var fence int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT fence FROM leasehold_work_claims WHERE dedupe_key = 'k'`).Scan(&fence))
	require.Equal(t, o.Claim.Fence+1, fence, "fenced out once")
}
