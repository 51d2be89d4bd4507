package conformance

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// runPolls runs the scenarios of a poll as a batch (ClaimAvailable): it
// takes at most its limit, each row granted on its own claim row's state,
// each available episode granted and started once under concurrent polls;
// and of NextAvailableDue, which tells a poller how long to sleep until the
// next episode of its scope falls due.
func runPolls(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("APollTakesAtMostItsLimitEachWithItsOwnGrant", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		ids := map[string]int64{}
		for _, k := range []string{"run-1", "run-2", "run-3", "reused", "lapsed", "held", "canceled", "archived"} {
			key := "event:a:e:" + k
			if k == "reused" { // an earlier grant of the key finished
				require.NoError(t, b.Store.Complete(ctx(t), acquire(t, e, key, "earlier").Token))
			}
			ids[k] = deferEpisode(t, b, key, "", "").Episode.ID
		}
		// One key's claim was granted elsewhere and lapsed; one is held live
		// elsewhere; one episode is canceled and one archived before the poll.
		acquire(t, e, "event:a:e:lapsed", "dead")
		b.ExpireClaim(t, "event:a:e:lapsed")
		acquire(t, e, "event:a:e:held", "recoverer")
		_, err := b.Store.CancelEpisode(ctx(t), ids["canceled"], nil)
		require.NoError(t, err)
		b.Archive(t, ids["archived"])

		before := time.Now()
		first := claimAvailable(t, b, "poller-1", "", "", 2)
		require.Len(t, first, 2, "a poll takes at most its limit")
		rest := claimAvailable(t, b, "poller-1", "", "", 10)
		after := time.Now()
		require.Len(t, rest, 4, "the next poll takes the rest of the six available")
		got := map[int64]episodes.Dispatched{}
		for _, d := range append(first, rest...) {
			require.NotContains(t, got, d.EpisodeID, "episode %d picked twice", d.EpisodeID)
			got[d.EpisodeID] = d
		}
		require.NotContains(t, got, ids["canceled"], "a canceled episode is not available")
		require.NotContains(t, got, ids["archived"], "nor an archived one")
		require.Contains(t, got, ids["held"])
		require.Zero(t, got[ids["held"]].Claim.Fence, "a live claim elsewhere is never stolen")
		require.False(t, got[ids["held"]].Started)
		require.Equal(t, episodes.StatusQueued, get(t, e, ids["held"]).Status)
		require.Equal(t, episodes.StatusCanceled, get(t, e, ids["canceled"]).Status)

		type grant struct {
			fence   int64
			attempt int32
			kind    claims.GrantKind
		}
		for k, want := range map[string]grant{
			"run-1": {1, 1, claims.GrantFresh}, "run-2": {1, 1, claims.GrantFresh}, "run-3": {1, 1, claims.GrantFresh},
			"reused": {2, 1, claims.GrantReclaim}, "lapsed": {2, 2, claims.GrantSteal},
		} {
			d := got[ids[k]]
			key := "event:a:e:" + k
			require.Equal(t, claims.Token{Key: key, Owner: "poller-1", Fence: want.fence}, d.Claim.Token, k)
			require.Equal(t, want.attempt, d.Claim.Attempt, k)
			require.Equal(t, want.kind, d.Claim.Grant, k)
			require.Equal(t, time.Minute, d.Claim.LeaseUntil.Sub(d.Claim.ClaimedAt), k)
			require.False(t, d.Claim.LocalStart().Before(before), "%s: the poll stamps its grants' local start", k)
			require.False(t, d.Claim.LocalStart().After(after), k)
			require.True(t, d.Started, k)
			require.EqualValues(t, 1, d.NextStep, k)
			require.Equal(t, [2]string{"a", "e"}, [2]string{d.ActorID, d.ExpectationID}, k)
			require.Equal(t, key, d.Episode.DedupeKey, k)
			stored := get(t, e, ids[k])
			require.Equal(t, episodes.StatusRunning, stored.Status, k)
			require.Equal(t, "poller-1", stored.OwnerNode, k)
			requireSameEpisode(t, stored, d.Episode)
			require.NoError(t, b.Store.AppendStep(ctx(t), ids[k], d.Claim.Token, d.NextStep, nil, time.Minute), "%s: the grant runs the episode", k)
		}
		require.Empty(t, claimAvailable(t, b, "poller-1", "", "", 10), "each episode is taken once")
	})

	// Each available episode is granted and started exactly once, whatever
	// the polls' interleaving, one episode or a batch at a time.
	t.Run("ConcurrentPollsStartEachAvailableEpisodeOnce", func(t *testing.T) {
		t.Parallel()
		for _, limit := range []int{4, 7} {
			t.Run(fmt.Sprintf("Limit%d", limit), func(t *testing.T) {
				t.Parallel()
				b := newBackend(t)
				const available, pollers = 120, 8
				for i := range available {
					deferEpisode(t, b, fmt.Sprintf("event:a:e:%d", i), "", "")
				}
				var (
					mu    sync.Mutex
					taken = map[int64][]string{}
					errs  []error
					wg    sync.WaitGroup
					start = make(chan struct{})
				)
				for p := range pollers {
					owner := fmt.Sprintf("poller-%d", p)
					wg.Go(func() {
						<-start
						for {
							ds, err := b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{
								Owner: owner, Lease: time.Minute, Runnable: onE("a"), Limit: limit,
							})
							mu.Lock()
							if err == nil && len(ds) > limit {
								err = fmt.Errorf("%s took %d, above its limit %d", owner, len(ds), limit)
							}
							for _, d := range ds {
								if d.Claim.Fence != 1 || !d.Started || d.Claim.Owner != owner {
									errs = append(errs, fmt.Errorf("%s: episode %d granted %+v, started %v", owner, d.EpisodeID, d.Claim.Token, d.Started))
								}
								taken[d.EpisodeID] = append(taken[d.EpisodeID], owner)
							}
							if err != nil {
								errs = append(errs, err)
							}
							mu.Unlock()
							if err != nil || len(ds) == 0 {
								return
							}
						}
					})
				}
				close(start)
				wg.Wait()
				require.Empty(t, errs)
				require.Len(t, taken, available, "every episode taken")
				for id, owners := range taken {
					require.Len(t, owners, 1, "episode %d taken by %v", id, owners)
					got := get(t, EpisodesBackend{Store: b.Store}, id)
					require.Equal(t, episodes.StatusRunning, got.Status)
					require.Equal(t, owners[0], got.OwnerNode, "episode %d runs on the poller granted it", id)
				}
				require.Empty(t, claimAvailable(t, b, "late-poller", "", "", available))
			})
		}
	})

	t.Run("NextDueIsTheEarliestAvailableEpisodeOfTheScopeNotYetDue", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		due := func(env, stack string, actors ...string) (time.Duration, bool) {
			t.Helper()
			w, ok, err := b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Env: env, Stack: stack, Runnable: onE(actors...)})
			require.NoError(t, err)
			return w, ok
		}
		deferAfter := func(key, actor, stack, env string, delay time.Duration) episodes.DeferredCreated {
			t.Helper()
			n := newEpisode(key)
			n.ActorID, n.ExpectationID, n.SourceStack, n.SourceEnv = actor, "e", stack, env
			res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n, Delay: delay})
			require.NoError(t, err)
			require.True(t, res.Created)
			return res
		}
		_, ok := due("", "", "a")
		require.False(t, ok, "nothing waits")
		deferEpisode(t, b, "event:a:e:now", "", "")
		_, ok = due("", "", "a")
		require.False(t, ok, "an episode due now is the poll's, not the wait's")

		// Elapsed test time is the margin: the wait counts down from the
		// delay on the database clock.
		start := time.Now()
		within := func(w, delay time.Duration, ok bool, msg string) {
			t.Helper()
			require.True(t, ok, msg)
			require.LessOrEqual(t, w, delay, msg)
			require.Greater(t, w, delay-time.Since(start)-time.Second, msg)
		}
		hour := deferAfter("event:a:e:hour", "a", "", "", time.Hour)
		deferAfter("event:b:e:minute", "b", "", "", time.Minute)
		deferAfter("env:rc:event:a:e:rc", "a", "", "rc", 2*time.Minute)
		deferAfter("event:a:e:blue", "a", "blue", "", 30*time.Minute)
		w, ok := due("", "green", "a")
		within(w, time.Hour, ok, "the hour's episode, not another actor's, env's or stack's")
		w, ok = due("", "", "a")
		within(w, 30*time.Minute, ok, "an empty stack waits for every stack")
		w, ok = due("", "blue", "a")
		within(w, 30*time.Minute, ok, "a stack waits for its own")
		w, ok = due("", "green", "a", "b")
		within(w, time.Minute, ok, "each runnable pair")
		w, ok = due("rc", "", "a")
		within(w, 2*time.Minute, ok, "each env its own")
		_, ok = due("", "", "c")
		require.False(t, ok, "scoped by actor")
		_, ok = due("", "")
		require.False(t, ok, "no actors, no wait")

		// A poll takes the due episode: the wait is unchanged, for work not
		// yet due. A canceled episode waits for nothing.
		require.Equal(t, "event:a:e:now", takeOne(t, b, "poller").Episode.DedupeKey)
		w, ok = due("", "green", "a")
		within(w, time.Hour, ok, "a taken episode waits for nothing")
		c, err := b.Store.CancelEpisode(ctx(t), hour.Episode.ID, nil)
		require.NoError(t, err)
		require.True(t, c.Ended)
		_, ok = due("", "green", "a")
		require.False(t, ok, "a canceled episode waits for nothing")
	})
}
