package sqlserver

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
)

// TestUnitDurationsAsMilliseconds: every Store method that takes
// durations, called with pairwise distinct ones (none a multiple of
// another by 1,000), sends each @..._ms parameter as exactly the
// milliseconds of the duration it is named after: not seconds, not
// microseconds, not another duration of the same call. Every _ms
// parameter any statement receives is checked; the list of names below
// is the Go-side meaning of each (lease_ms is the lease, ...).
func TestUnitDurationsAsMilliseconds(t *testing.T) {
	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult {
		switch {
		case name == "TryMaintenanceLock":
			return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{true}}}
		case slices.Equal(resultColumns[name], rowsAffected):
			return fakeResult{cols: resultColumns[name], rows: [][]driver.Value{{int64(0)}}}
		}
		return fakeResult{cols: resultColumns[name]}
	}
	s, ctx := f.store, context.Background()
	const (
		lease      = 17_321 * time.Millisecond
		staleAfter = 5_077 * time.Millisecond
		ttl        = 3_989_011 * time.Millisecond
		retention  = 7_919_003 * time.Millisecond
		horizon    = 9_007_001 * time.Millisecond
		nodeStale  = 61_007 * time.Millisecond
		delay      = 2_333 * time.Millisecond
		waiting    = 7_001_009 * time.Millisecond
	)
	want := map[string]map[string]time.Duration{}
	sent := func(name string, params map[string]time.Duration) { want[name] = params }

	tk := claims.Token{Key: "k", Owner: "a", Fence: 3}
	_, _ = s.Acquire(ctx, claims.AcquireParams{Key: "k", Owner: "a", Lease: lease, WorkType: "w"})
	sent("AcquireClaim", map[string]time.Duration{"lease_ms": lease})
	_, _ = s.Renew(ctx, tk, lease)
	sent("RenewClaim", map[string]time.Duration{"lease_ms": lease})
	_, _ = s.RenewMany(ctx, "a", []claims.Held{{Key: "k", Fence: 3}}, lease)
	sent("RenewClaims", map[string]time.Duration{"lease_ms": lease})
	_, _ = s.CreateEpisode(ctx, episodes.New{ActorID: "x", MaxAttempts: 3, Owner: "a", Lease: lease})
	sent("CreateEpisode", map[string]time.Duration{"lease_ms": lease})
	_ = s.AppendStep(ctx, 1, tk, 2, json.RawMessage(`{}`), lease)
	sent("AppendStep", map[string]time.Duration{"lease_ms": lease})
	_, _ = s.ListOrphans(ctx, episodes.OrphanQuery{StaleAfter: staleAfter, Limit: 5})
	sent("ListOrphanedEpisodes", map[string]time.Duration{"stale_after_ms": staleAfter})
	_, _, _ = s.ClaimForRecovery(ctx, 1, "a", lease, staleAfter)
	sent("ClaimForRecovery", map[string]time.Duration{"lease_ms": lease, "stale_after_ms": staleAfter})
	_, _ = s.InspectEpisodes(ctx, inspect.EpisodeQuery{StaleOnly: true, StaleAfter: staleAfter, Limit: 10})
	sent("InspectEpisodes", map[string]time.Duration{"stale_after_ms": staleAfter})
	_, _ = s.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "x", MaxAttempts: 3}, Delay: delay})
	sent("CreateDeferredEpisode", map[string]time.Duration{"delay_ms": delay})
	_, _ = s.CreateDeferredEpisodes(ctx, episodes.DeferredBatch{New: episodes.New{ActorID: "x", MaxAttempts: 3},
		Items: []episodes.BatchItem{{DedupeKey: "k"}}, Delay: delay})
	sent("CreateDeferredEpisodes", map[string]time.Duration{"delay_ms": delay})
	_, _ = s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "a", Lease: lease, Runnable: []episodes.Runnable{{ActorID: "x", ExpectationID: "e"}}, Limit: 5})
	sent("ClaimAvailable", map[string]time.Duration{"lease_ms": lease})
	_, err := s.Maintain(ctx, maintenance.Plan{Retention: retention, ClaimHorizon: horizon, RequestTTL: ttl, NodeStaleAfter: nodeStale,
		Batch: 10, WaitingForNodeAfter: waiting})
	require.NoError(t, err)
	sent("ListWaitingForNode", map[string]time.Duration{"silent_after_ms": membership.DefaultSilentAfter, "overdue_after_ms": waiting})
	sent("ArchiveEpisodes", map[string]time.Duration{"retention_ms": retention})
	sent("ExpireAvailable", map[string]time.Duration{"ttl_ms": ttl})
	sent("DeleteSpentClaims", map[string]time.Duration{"horizon_ms": horizon})
	sent("DeleteStaleNodes", map[string]time.Duration{"stale_after_ms": nodeStale})

	for name, params := range f.params {
		for p, v := range params {
			if !strings.HasSuffix(p, "_ms") || p == "bound_ms" { // bound_ms: TestUnitBounds
				continue
			}
			d, ok := want[name][p]
			require.True(t, ok, "%s sends @%s, which this test does not know the duration of: add it", name, p)
			require.Equal(t, d.Milliseconds(), v, "%s @%s", name, p)
		}
		for p := range want[name] {
			require.Contains(t, slices.Collect(maps.Keys(params)), p, "%s does not send @%s", name, p)
		}
	}
	for name := range want {
		require.Contains(t, f.params, name, "%s was not sent", name)
	}
}
