package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// TestDashboardReads runs the statements of dashboard.sql against a real
// schema: what the charts derive from the journal's fences (a retry one
// fence up, a takeover two up, with its latency), the outcome buckets,
// keyset pages and the literal dedupe-key search, and an episode with its
// trace context, claim and request.
func TestDashboardReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	const lease = time.Minute
	create := func(key, owner, trace string) (int64, claims.Token) {
		t.Helper()
		c, err := s.CreateEpisode(ctx, episodes.New{ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerEvent,
			DedupeKey: key, MaxAttempts: 3, Owner: owner, Lease: lease, Start: true, TraceParent: trace})
		require.NoError(t, err)
		return c.Episode.ID, c.Claim.Token
	}
	take := func(id int64, owner string) (claims.Token, int32) {
		t.Helper()
		ds, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: owner, Lease: lease, Runnable: []episodes.Runnable{{ActorID: "billing", ExpectationID: "charge"}}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, id, ds[0].EpisodeID)
		require.True(t, ds[0].Started)
		return ds[0].Claim.Token, ds[0].NextStep
	}

	// A retry: fences 1 then 2.
	retried, tk := create("k:retry", "a", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.NoError(t, s.AppendStep(ctx, retried, tk, 1, json.RawMessage(`{}`), lease))
	_, err := s.RetryEpisode(ctx, retried, tk, episodes.Retry{ErrorClass: "error", StepNo: 2, StepData: json.RawMessage(`{"error":"x"}`)})
	require.NoError(t, err)
	tk, next := take(retried, "b")
	require.NoError(t, s.FinishEpisode(ctx, retried, tk, episodes.Finish{Status: episodes.StatusDone, StepNo: next, StepData: json.RawMessage(`{}`)}))

	// A takeover: fences 1 then 3 (recovery's fence-out is 2), the new
	// grant's first step 1.5 s after the old grant's last.
	taken, tk := create("k:taken%_", "a", "")
	require.NoError(t, s.AppendStep(ctx, taken, tk, 1, json.RawMessage(`{}`), lease))
	pgtest.ExpireClaim(t, pool, "k:taken%_")
	_, err = s.RequeueOrphan(ctx, taken, 0, "sweeper", time.Minute)
	require.NoError(t, err)
	tk, next = take(taken, "c")
	require.NoError(t, s.AppendStep(ctx, taken, tk, next, json.RawMessage(`{}`), lease))
	pgtest.Exec(t, pool, `UPDATE leasehold_episode_steps SET created_at = created_at - interval '1500 milliseconds'
		WHERE episode_id = $1 AND fence = 1`, taken)
	require.NoError(t, s.FinishEpisode(ctx, taken, tk, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: "error"}))

	q := inspect.SeriesQuery{Window: time.Hour, Bucket: time.Hour}
	hs, err := s.DashboardHandovers(ctx, q)
	require.NoError(t, err)
	kinds := map[string]inspect.Handover{}
	for _, h := range hs {
		kinds[h.Kind] = h
	}
	require.Len(t, kinds, 2, "%+v", hs)
	require.Equal(t, int64(1), kinds[inspect.HandoverRetry].Handovers)
	require.Equal(t, int64(1), kinds[inspect.HandoverTakeover].Handovers)
	lat := kinds[inspect.HandoverTakeover].MaxLatency
	require.True(t, lat >= 1500*time.Millisecond && lat < time.Minute, "takeover latency %v", lat)
	require.Equal(t, time.Duration(0), kinds[inspect.HandoverTakeover].Start.Sub(kinds[inspect.HandoverTakeover].Start.Truncate(time.Hour)),
		"buckets are aligned to the epoch")

	outs, err := s.DashboardOutcomes(ctx, q)
	require.NoError(t, err)
	byStatus := map[episodes.Status]int64{}
	for _, o := range outs {
		byStatus[o.Status] += o.Episodes
	}
	require.Equal(t, map[episodes.Status]int64{episodes.StatusDone: 1, episodes.StatusFailed: 1}, byStatus)
	_, err = s.DashboardOutcomes(ctx, inspect.SeriesQuery{Window: 30 * 24 * time.Hour, Bucket: time.Hour})
	require.Error(t, err, "longer than the SQL Server twin can add")

	// The search is literal: "%_" matches only the key that holds it.
	rows, err := s.DashboardEpisodes(ctx, inspect.EpisodeFilter{DedupeKeyContains: "%_", Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, taken, rows[0].ID)
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []int64{taken}, []int64{rows[0].ID})
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{BeforeID: taken, Limit: 5})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, retried, rows[0].ID, "the next page starts below the last ID shown")
	unset := ""
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Env: &unset, Node: "c", Status: episodes.StatusFailed, Limit: 5})
	require.NoError(t, err)
	require.Len(t, rows, 1)

	d, err := s.DashboardEpisode(ctx, retried)
	require.NoError(t, err)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", d.TraceParent)
	require.NotNil(t, d.Claim)
	require.Equal(t, int64(2), d.Claim.Fence)
	require.Equal(t, "b", d.Claim.Owner)
	require.Nil(t, d.RunAfter, "taken: no longer available")
	grants, err := s.DashboardGrants(ctx, taken)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3}, []int64{grants[0].Fence, grants[1].Fence})
	_, err = s.DashboardEpisode(ctx, 999_999)
	require.True(t, errors.Is(err, episodes.ErrNotFound), "%v", err)

	clock, err := s.DashboardClock(ctx)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), clock, time.Minute)
}
