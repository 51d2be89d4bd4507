package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// BatchDispatcher is the batch hand-over (DispatchTriggerRequests) of the
// adapters that have one; the runner's poller uses it when present.
type BatchDispatcher interface {
	DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error)
}

// runBatchDispatch runs the batch hand-over's scenarios when the store has
// it: each row fenced on its own request claim exactly as
// DispatchTriggerRequest fences one, and one grant per episode under
// concurrent pollers.
func runBatchDispatch(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	batch := func(t *testing.T, b DeferredBackend) BatchDispatcher {
		bd, ok := b.Store.(BatchDispatcher)
		if !ok {
			t.Skip("this adapter hands requests over one at a time (sql/queries/dialects.go)")
		}
		return bd
	}

	t.Run("BatchDispatchFencesEachRequest", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		bd := batch(t, b)
		ids := map[string]int64{}
		for _, k := range []string{"run-1", "run-2", "lapsed", "reclaimed", "held", "canceled"} {
			ids[k] = deferEpisode(t, b, "event:a:e:"+k, "", "").Episode.ID
		}
		reqs := claimRequests(t, b, "poller-1", "", "", 10)
		require.Len(t, reqs, 6)
		byEpisode := map[int64]episodes.TriggerRequest{}
		for _, r := range reqs {
			byEpisode[r.EpisodeID] = r
		}
		// One request claim lapses and another poller takes it; one
		// episode's key is held live elsewhere; one is canceled (its
		// request closed) before the hand-over.
		b.LapseRequestClaim(t, byEpisode[ids["lapsed"]].ID)
		require.Len(t, claimRequests(t, b, "poller-2", "", "", 10), 1)
		// One lapses and the same poller claims it again: the batch still
		// carries the old claim's fence, which must hand nothing over.
		b.LapseRequestClaim(t, byEpisode[ids["reclaimed"]].ID)
		again := claimRequests(t, b, "poller-1", "", "", 10)
		require.Len(t, again, 1)
		require.Equal(t, byEpisode[ids["reclaimed"]].Fence+1, again[0].Fence)
		_, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "event:a:e:held", Owner: "recoverer", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		_, err = b.Store.CancelEpisode(ctx(t), ids["canceled"], nil)
		require.NoError(t, err)

		before := time.Now()
		ds, err := bd.DispatchTriggerRequests(ctx(t), "poller-1", reqs, time.Minute)
		require.NoError(t, err)
		got := map[int64]episodes.Dispatched{}
		for _, d := range ds {
			require.Equal(t, byEpisode[d.EpisodeID].ID, d.RequestID)
			got[d.EpisodeID] = d
		}
		require.NotContains(t, got, ids["lapsed"], "a lapsed request claim hands nothing over")
		require.NotContains(t, got, ids["reclaimed"], "nor does an earlier claim of the same poller (its fence)")
		require.NotContains(t, got, ids["canceled"], "a closed request hands nothing over")
		require.Contains(t, got, ids["held"])
		require.Zero(t, got[ids["held"]].Claim.Fence, "a live claim elsewhere is never stolen")
		require.False(t, got[ids["held"]].Started)
		require.Equal(t, episodes.StatusQueued, get(t, EpisodesBackend{Store: b.Store}, ids["held"]).Status)
		require.Equal(t, episodes.StatusCanceled, get(t, EpisodesBackend{Store: b.Store}, ids["canceled"]).Status)
		for _, k := range []string{"run-1", "run-2"} {
			d := got[ids[k]]
			require.Equal(t, claims.Token{Key: "event:a:e:" + k, Owner: "poller-1", Fence: 1}, d.Claim.Token)
			require.True(t, d.Started, k)
			require.EqualValues(t, 1, d.NextStep)
			require.Equal(t, episodes.StatusRunning, d.Episode.Status)
			require.Equal(t, "event:a:e:"+k, d.Episode.DedupeKey)
			require.False(t, d.Claim.LocalStart().Before(before), "the batch stamps its grants' local start")
			stored := get(t, EpisodesBackend{Store: b.Store}, ids[k])
			require.Equal(t, episodes.StatusRunning, stored.Status)
			require.Equal(t, "poller-1", stored.OwnerNode)
			require.NoError(t, b.Store.AppendStep(ctx(t), ids[k], d.Claim.Token, d.NextStep, nil, time.Minute), "the grant runs the episode")
		}

		repeat, err := bd.DispatchTriggerRequests(ctx(t), "poller-1", reqs, time.Minute)
		require.NoError(t, err)
		require.Empty(t, repeat, "a request is handed over once")
		// run-1, run-2 and held by the hand-over, canceled by the cancel;
		// the lapsed one is still poller-2's, the reclaimed one poller-1's
		// under its new fence, which hands it over.
		require.Len(t, listRequests(t, b, "", episodes.RequestCompleted), 4)
		require.Len(t, listRequests(t, b, "", episodes.RequestClaimed), 2)
		ds, err = bd.DispatchTriggerRequests(ctx(t), "poller-1", again, time.Minute)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.True(t, ds[0].Started)
		require.Equal(t, ids["reclaimed"], ds[0].EpisodeID)
	})

	t.Run("OnlyThePollerThatClaimedARequestHandsItOverInABatch", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		bd := batch(t, b)
		res := deferEpisode(t, b, "event:a:e:1", "", "")
		mine := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, mine, 1)
		// As DispatchTriggerRequest: another poller presenting the claim's
		// fence, its name sorting after the claimer's or before it.
		for _, other := range []string{"zz-poller", "a-poller"} {
			forged := mine[0]
			forged.Owner = other
			ds, err := bd.DispatchTriggerRequests(ctx(t), other, []episodes.TriggerRequest{forged}, time.Minute)
			require.NoError(t, err)
			require.Empty(t, ds, "%s handed over poller's request", other)
		}
		require.Equal(t, episodes.RequestClaimed, listRequests(t, b, "", "")[0].Status)
		require.Equal(t, episodes.StatusQueued, get(t, EpisodesBackend{Store: b.Store}, res.Episode.ID).Status)
		ds, err := bd.DispatchTriggerRequests(ctx(t), "poller", mine, time.Minute)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.True(t, ds[0].Started)
	})

	t.Run("BatchDispatchNeverTakesARunningEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		bd := batch(t, b)
		d, reqs, _ := startedElsewhere(t, b, "event:a:e:running")
		b.ExpireClaim(t, "event:a:e:running")
		ds, err := bd.DispatchTriggerRequests(ctx(t), "poller", reqs, time.Minute)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Zero(t, ds[0].Claim.Fence, "a running episode's claim is never granted by a hand-over")
		require.False(t, ds[0].Started)
		require.Equal(t, "other", get(t, EpisodesBackend{Store: b.Store}, d.Episode.ID).OwnerNode)
	})

	t.Run("ConcurrentPollersBatchDispatchEachRequestOnce", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		bd := batch(t, b)
		const requests, pollers = 200, 8
		for i := range requests {
			deferEpisode(t, b, fmt.Sprintf("event:a:e:%d", i), "", "")
		}
		var (
			mu      sync.Mutex
			granted = map[int64][]string{}
			errs    []error
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		for p := range pollers {
			owner := fmt.Sprintf("poller-%d", p)
			wg.Go(func() {
				<-start
				for {
					reqs, err := b.Store.ClaimTriggerRequests(context.Background(), episodes.RequestQuery{
						Owner: owner, Lease: time.Minute, Runnable: onE("a"), Limit: 7,
					})
					if err == nil && len(reqs) == 0 {
						return
					}
					var ds []episodes.Dispatched
					if err == nil {
						ds, err = bd.DispatchTriggerRequests(context.Background(), owner, reqs, time.Minute)
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					mu.Lock()
					for _, d := range ds {
						if d.Claim.Fence > 0 && d.Started {
							granted[d.EpisodeID] = append(granted[d.EpisodeID], owner)
						}
					}
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs)
		require.Len(t, granted, requests, "every request handed over and started")
		for id, owners := range granted {
			require.Len(t, owners, 1, "episode %d granted to %v", id, owners)
		}
		require.Len(t, listRequests(t, b, "", episodes.RequestCompleted), requests)
	})
}
