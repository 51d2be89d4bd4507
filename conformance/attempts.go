package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// runGivenBack runs the scenarios of what recovery's restart counts as an
// attempt (sql/queries/postgres/recovery.sql): a grant its holder gave back
// (released, fenced), or one that expired before the episode was started
// under it, restarts as the same attempt, once per orphaning across
// concurrent sweepers; one that expired after the start counts; and the
// hand-backs
// are free only up to max_attempts, so an episode whose runs keep giving
// their grant back still runs out of attempts.
func runGivenBack(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("GivenBackGrantIsNotAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		n := flowEpisode("event:a:e:given-back")
		n.Owner, n.Lease, n.Start = "slow", time.Minute, true
		o, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.NoError(t, b.Store.AppendStep(ctx(t), o.Episode.ID, o.Claim.Token, 1, []byte(`{}`), time.Minute))
		// The holder gives the grant back (a drain, a failed journal
		// write, a lease past its local deadline): fenced, so a stale
		// token cannot.
		require.ErrorIs(t, b.Store.Release(ctx(t), claims.Token{Key: o.Claim.Key, Owner: "slow", Fence: o.Claim.Fence + 1}), claims.ErrNotOwner)
		require.NoError(t, b.Store.Release(ctx(t), o.Claim.Token))

		list := listedOrphan(t, b, o.Episode.ID)
		require.True(t, list.GivenBack, "a released grant is listed as given back")
		require.EqualValues(t, 1, list.Episode.Attempt())

		const sweepers = 4
		wins := requeueRace(t, b, o.Episode.ID, 0, sweepers)
		require.Len(t, wins, 1, "exactly one sweeper requeues the orphan, though its attempts did not change")
		require.EqualValues(t, 0, wins[0].Attempts, "the run given back is not counted")
		got := get(t, e, o.Episode.ID)
		require.Equal(t, episodes.StatusQueued, got.Status)
		require.EqualValues(t, 1, got.Attempt(), "the restart is the same attempt again")
		require.ErrorIs(t, b.Store.AppendStep(ctx(t), o.Episode.ID, o.Claim.Token, 2, nil, time.Minute), claims.ErrLeaseLost,
			"the grant given back is fenced out")
		_, err = b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 0, "late-sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy, "a sweeper that listed it before the requeue finds it available, the pollers'")

		d := takeOne(t, b, "poller")
		require.Equal(t, o.Episode.ID, d.EpisodeID)
		require.EqualValues(t, 1, d.Episode.Attempt(), "the restarted run is attempt 1")
		require.EqualValues(t, 2, d.NextStep, "and resumes after the journal")

		// That run's holder dies (its lease expires, nothing given back):
		// the restart counts.
		b.ExpireClaim(t, o.Claim.Key)
		list = listedOrphan(t, b, o.Episode.ID)
		require.False(t, list.GivenBack, "an expired grant is not given back")
		again, err := b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 0, "sweeper", time.Minute)
		require.NoError(t, err)
		require.EqualValues(t, 1, again.Attempts, "an expired grant is an attempt")
	})

	t.Run("GivenBackIsListedForQueuedOrphansToo", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Queued under a grant (created, not started): the listing's
		// second branch.
		given := flowEpisode("event:a:e:queued-given-back")
		given.Owner, given.Lease = "node-a", time.Minute
		g, err := b.Store.CreateEpisode(ctx(t), given)
		require.NoError(t, err)
		require.Equal(t, episodes.StatusQueued, g.Episode.Status)
		require.NoError(t, b.Store.Release(ctx(t), g.Claim.Token))
		expired := flowEpisode("event:a:e:queued-expired")
		expired.Owner, expired.Lease = "node-a", time.Minute
		x, err := b.Store.CreateEpisode(ctx(t), expired)
		require.NoError(t, err)
		b.ExpireClaim(t, x.Claim.Key)

		// Finished by another grant of its key (a direct claims user's
		// Complete) while still queued.
		finished := flowEpisode("event:a:e:queued-finished")
		finished.Owner, finished.Lease = "node-a", time.Minute
		f, err := b.Store.CreateEpisode(ctx(t), finished)
		require.NoError(t, err)
		require.NoError(t, b.Store.Complete(ctx(t), f.Claim.Token))

		require.True(t, listedOrphan(t, b, g.Episode.ID).GivenBack, "a queued orphan's released grant is given back")
		require.True(t, listedOrphan(t, b, x.Episode.ID).GivenBack,
			"a queued orphan's expired grant never started the episode: nothing ran, nothing counts")
		require.True(t, listedOrphan(t, b, f.Episode.ID).GivenBack, "nor did a grant that finished the key elsewhere")
		for _, id := range []int64{g.Episode.ID, x.Episode.ID, f.Episode.ID} {
			r, err := b.Store.RequeueOrphan(ctx(t), id, 0, "sweeper", time.Minute)
			require.NoError(t, err)
			require.EqualValues(t, 0, r.Attempts, "episode %d: a queued orphan restarts as the same attempt", id)
		}
	})

	t.Run("GrantThatExpiredBeforeTheStartIsNotAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		// Granted to a node that never started it (too slow to start it
		// before its lease ran out, and then to give it back; or dead
		// before StartEpisode): the strategy was never called.
		n := flowEpisode("event:a:e:expired-before-start")
		n.Owner, n.Lease, n.MaxAttempts = "slow", time.Minute, 1
		o, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.Equal(t, episodes.StatusQueued, o.Episode.Status)
		b.ExpireClaim(t, o.Claim.Key)
		_, err = b.Store.StartEpisode(ctx(t), o.Episode.ID, o.Claim.Token)
		require.ErrorIs(t, err, claims.ErrLeaseLost, "an expired grant starts nothing")
		list := listedOrphan(t, b, o.Episode.ID)
		require.True(t, list.GivenBack)
		require.EqualValues(t, 1, list.Episode.Attempt())

		// With max_attempts 1, only a free restart is possible at all.
		wins := requeueRace(t, b, o.Episode.ID, 0, 4)
		require.Len(t, wins, 1, "exactly one sweeper requeues it")
		require.EqualValues(t, 0, wins[0].Attempts, "a run that never started is not counted")
		require.ErrorIs(t, b.Store.AppendStep(ctx(t), o.Episode.ID, o.Claim.Token, 1, nil, time.Minute), claims.ErrLeaseLost,
			"the expired grant is fenced out")

		d := takeOne(t, b, "poller")
		require.Equal(t, o.Episode.ID, d.EpisodeID)
		require.EqualValues(t, 1, d.Episode.Attempt(), "the only attempt, at last")
		require.Equal(t, episodes.StatusRunning, get(t, e, o.Episode.ID).Status)

		// Started, then its holder dies: that run counts, and with it the
		// episode is out of attempts.
		b.ExpireClaim(t, o.Claim.Key)
		list = listedOrphan(t, b, o.Episode.ID)
		require.False(t, list.GivenBack, "a started episode's expired grant is an attempt")
		_, err = b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 0, "sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy, "out of attempts: recovery fails it instead")
	})

	t.Run("GivenBackGrantsAreFreeOnlyUpToMaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := flowEpisode("event:a:e:poison")
		n.Owner, n.Lease, n.Start, n.MaxAttempts = "node-a", time.Minute, true, 2
		o, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		id, grant, attempts := o.Episode.ID, o.Claim, int32(0)
		// Every run gives its grant back at once. The first max_attempts
		// hand-backs are free; then each counts, and the episode runs out.
		var seen []int32
		var free []bool
		for runs := 1; ; runs++ {
			require.LessOrEqual(t, runs, 2*int(n.MaxAttempts), "runs that give their grant back are bounded")
			require.NoError(t, b.Store.Release(ctx(t), grant.Token))
			listed := listedOrphan(t, b, id)
			require.Equal(t, attempts, listed.Episode.Attempts)
			seen = append(seen, listed.Episode.Attempt())
			free = append(free, listed.GivenBack)
			res, err := b.Store.RequeueOrphan(ctx(t), id, attempts, "sweeper", time.Minute)
			if err != nil {
				require.ErrorIs(t, err, claims.ErrBusy, "out of attempts: recovery fails it instead")
				require.Equal(t, 2*int(n.MaxAttempts), runs)
				break
			}
			attempts = res.Attempts
			d := takeOne(t, b, "poller")
			require.Equal(t, id, d.EpisodeID)
			grant = d.Claim
		}
		require.Equal(t, []int32{1, 1, 1, 2}, seen, "attempt 1 three times (twice given back for free), then attempt 2, the last")
		require.Equal(t, []bool{true, true, false, false}, free,
			"listed as given back while the key's grants are at most attempts + max_attempts (the second: exactly that)")
	})
}

// batchRequeuer is recovery.BatchRequeuer, for the stores that have it.
type batchRequeuer interface {
	RequeueOrphans(ctx context.Context, items []episodes.RequeueItem, owner string, staleAfter time.Duration) []episodes.RequeueResult
}

// runBatchRequeue: a store's RequeueOrphans decides each orphan as
// RequeueOrphan would, on its own conditions, with its own outcome; and of
// sweepers that requeue the same orphans at once, each orphan goes to one.
func runBatchRequeue(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("BatchRequeueDecidesEachOrphanAlone", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		br, ok := b.Store.(batchRequeuer)
		if !ok {
			t.Skip("this store requeues orphans one at a time (no RequeueOrphans)")
		}
		e := EpisodesBackend{Store: b.Store}
		var (
			items []episodes.RequeueItem
			want  []error
		)
		add := func(key string, attempts int32, wantErr error, prepare func(o episodes.Created)) {
			n := flowEpisode(key)
			n.Owner, n.Lease, n.Start = "dead", time.Minute, true
			o, err := b.Store.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			prepare(o)
			items = append(items, episodes.RequeueItem{ID: o.Episode.ID, Attempts: attempts})
			want = append(want, wantErr)
		}
		expire := func(o episodes.Created) { b.ExpireClaim(t, o.Claim.Key) }
		giveBack := func(o episodes.Created) { require.NoError(t, b.Store.Release(ctx(t), o.Claim.Token)) }
		add("event:a:e:batch-expired", 0, nil, expire)
		add("event:a:e:batch-live", 0, claims.ErrBusy, func(episodes.Created) {}) // its holder is alive
		add("event:a:e:batch-given-back", 0, nil, giveBack)
		add("event:a:e:batch-stale-count", 3, claims.ErrBusy, expire) // listed with other attempts
		add("event:a:e:batch-expired-2", 0, nil, expire)

		got := br.RequeueOrphans(ctx(t), items, "sweeper", time.Minute)
		require.Len(t, got, len(items))
		for i, r := range got {
			if want[i] != nil {
				require.ErrorIs(t, r.Err, want[i], "item %d", i)
				require.NotEqual(t, episodes.StatusQueued, get(t, e, items[i].ID).Status, "item %d untouched", i)
				continue
			}
			require.NoError(t, r.Err, "item %d", i)
			require.Equal(t, episodes.StatusQueued, r.Status, "item %d", i)
			require.Equal(t, episodes.StatusQueued, get(t, e, items[i].ID).Status, "item %d", i)
		}
		require.EqualValues(t, 1, got[0].Attempts, "an expired grant counts an attempt")
		require.EqualValues(t, 0, got[2].Attempts, "a grant given back does not")

		again := br.RequeueOrphans(ctx(t), items, "late-sweeper", time.Minute)
		for i, r := range again {
			require.ErrorIs(t, r.Err, claims.ErrBusy, "item %d requeued once", i)
		}
		var taken []int64
		for _, d := range claimAvailable(t, b, "poller", "", "", 10) {
			require.True(t, d.Started)
			taken = append(taken, d.EpisodeID)
		}
		require.ElementsMatch(t, []int64{items[0].ID, items[2].ID, items[4].ID}, taken, "each requeued orphan available, once")
	})

	t.Run("ConcurrentBatchRequeuesTakeEachOrphanOnce", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		br, ok := b.Store.(batchRequeuer)
		if !ok {
			t.Skip("this store requeues orphans one at a time (no RequeueOrphans)")
		}
		var items []episodes.RequeueItem
		for i := range 12 {
			n := flowEpisode(fmt.Sprintf("event:a:e:batch-race-%d", i))
			n.Owner, n.Lease, n.Start = "dead", time.Minute, true
			o, err := b.Store.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			if i%2 == 0 {
				b.ExpireClaim(t, o.Claim.Key)
			} else {
				require.NoError(t, b.Store.Release(ctx(t), o.Claim.Token))
			}
			items = append(items, episodes.RequeueItem{ID: o.Episode.ID})
		}
		const sweepers = 4
		wins := make([]int, len(items))
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for k := range sweepers {
			mine := slices.Clone(items)
			rand.New(rand.NewPCG(uint64(k), 1)).Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			wg.Go(func() {
				res := br.RequeueOrphans(ctx(t), mine, fmt.Sprintf("sweeper-%d", k), time.Minute)
				mu.Lock()
				defer mu.Unlock()
				for i, r := range res {
					if r.Err == nil {
						wins[slices.IndexFunc(items, func(it episodes.RequeueItem) bool { return it.ID == mine[i].ID })]++
					} else {
						require.ErrorIs(t, r.Err, claims.ErrBusy)
					}
				}
			})
		}
		wg.Wait()
		for i, w := range wins {
			require.Equal(t, 1, w, "orphan %d requeued by exactly one sweeper", i)
		}
		require.Len(t, claimAvailable(t, b, "poller", "", "", 100), len(items), "each requeued orphan available, once")
	})
}

// listedOrphan returns the listed orphan of episode id.
func listedOrphan(t *testing.T, b DeferredBackend, id int64) episodes.Orphan {
	t.Helper()
	list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 100})
	require.NoError(t, err)
	for _, o := range list {
		if o.Episode.ID == id {
			return o
		}
	}
	require.Failf(t, "not listed", "episode %d is not an orphan", id)
	return episodes.Orphan{}
}

// requeueRace has n sweepers requeue episode id, listed with attempts, at
// once, and returns the results of those that won.
func requeueRace(t *testing.T, b DeferredBackend, id int64, attempts int32, n int) []episodes.Requeued {
	t.Helper()
	var (
		mu   sync.Mutex
		wins []episodes.Requeued
		wg   sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			res, err := b.Store.RequeueOrphan(ctx(t), id, attempts, "sweeper", time.Minute)
			if err != nil {
				require.ErrorIs(t, err, claims.ErrBusy)
				return
			}
			mu.Lock()
			wins = append(wins, res)
			mu.Unlock()
		})
	}
	wg.Wait()
	return wins
}
