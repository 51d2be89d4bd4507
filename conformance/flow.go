package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// runFlow runs the scenarios of work that flows to free capacity: an
// episode started by its creating statement, duplicates that name their
// episode, cluster-wide cancel and retry, and recovery's requeue.
func runFlow(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("CreateStartsOnlyWithItsGrant", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := flowEpisode("event:a:e:start")
		n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
		res, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.True(t, res.Started)
		require.Positive(t, res.Claim.Fence)
		got := get(t, EpisodesBackend{Store: b.Store}, res.Episode.ID)
		require.Equal(t, episodes.StatusRunning, got.Status)
		require.Equal(t, "node-a", got.OwnerNode)
		require.NotNil(t, got.StartedAt)
		require.NotNil(t, got.LastStepAt, "started now: staleness counts from the start")
		// The run writes under its grant as after StartEpisode.
		require.NoError(t, b.Store.AppendStep(ctx(t), res.Episode.ID, res.Claim.Token, 1, nil, time.Minute))
		require.NoError(t, b.Store.FinishEpisode(ctx(t), res.Episode.ID, res.Claim.Token, episodes.Finish{Status: episodes.StatusDone}))

		// The key's claim held live elsewhere (a direct claims user): the
		// episode is created, but neither granted nor started.
		held := acquire(t, EpisodesBackend{Store: b.Store}, "event:a:e:held", "someone")
		n = flowEpisode("event:a:e:held")
		n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
		busy, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.True(t, busy.Created)
		require.Zero(t, busy.Claim.Fence)
		require.False(t, busy.Started, "no grant, no start")
		queued := get(t, EpisodesBackend{Store: b.Store}, busy.Episode.ID)
		require.Equal(t, episodes.StatusQueued, queued.Status)
		require.Empty(t, queued.OwnerNode)
		require.Nil(t, queued.StartedAt)
		require.Nil(t, queued.LastStepAt)
		require.NoError(t, b.Store.Release(ctx(t), held.Token))

		// Without start, created queued as before.
		n = flowEpisode("event:a:e:queued")
		n.Owner, n.Lease = "node-a", time.Minute
		q, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.False(t, q.Started)
		require.Equal(t, episodes.StatusQueued, get(t, EpisodesBackend{Store: b.Store}, q.Episode.ID).Status)
	})

	t.Run("DuplicatesNameTheLiveEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Older live episodes whose keys sort after and before the
		// duplicate's: a duplicate names the episode of its own key exactly.
		deferEpisode(t, b, "event:a:e:dup~after", "", "")
		deferEpisode(t, b, "event:a:e:dua-before", "", "")
		// And an earlier episode of the key itself, archived: history, which
		// a duplicate never names.
		archived := deferEpisode(t, b, "event:a:e:dup", "", "")
		_, err := b.Store.CancelEpisode(ctx(t), archived.Episode.ID, nil)
		require.NoError(t, err)
		b.Archive(t, archived.Episode.ID)
		first := deferEpisode(t, b, "event:a:e:dup", "", "")
		require.True(t, first.Created, "the archived episode freed its key")
		again := deferEpisode(t, b, "event:a:e:dup", "", "")
		require.False(t, again.Created)
		require.Equal(t, first.Episode.ID, again.ExistingID)
		n := flowEpisode("event:a:e:dup")
		n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
		direct, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.False(t, direct.Created)
		require.Equal(t, first.Episode.ID, direct.ExistingID)

		// Many creators at once: one wins, every other names the winner.
		const creators = 8
		ids := make([]int64, creators)
		var wg sync.WaitGroup
		for i := range creators {
			wg.Go(func() {
				n := flowEpisode("event:a:e:race")
				n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
				res, err := b.Store.CreateEpisode(ctx(t), n)
				require.NoError(t, err)
				ids[i] = res.Episode.ID
				if !res.Created {
					ids[i] = res.ExistingID
				}
			})
		}
		wg.Wait()
		for _, id := range ids {
			require.Equal(t, ids[0], id, "every duplicate names the one live episode: %v", ids)
		}
		require.Positive(t, ids[0])
	})

	t.Run("CancelEndsAvailableWorkAndAsksTheHolder", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Available: ended at once, out of the available set.
		d := deferEpisode(t, b, "event:a:e:avail", "", "")
		c, err := b.Store.CancelEpisode(ctx(t), d.Episode.ID, []byte(`{"reason":"ops"}`))
		require.NoError(t, err)
		require.True(t, c.Ended)
		require.Equal(t, episodes.StatusCanceled, c.Status)
		got := get(t, EpisodesBackend{Store: b.Store}, d.Episode.ID)
		require.Equal(t, episodes.StatusCanceled, got.Status)
		require.Equal(t, episodes.ClassCanceled, got.ErrorClass)
		require.NotNil(t, got.FinishedAt)
		b.AgeAvailable(t, d.Episode.ID, time.Hour) // due long ago, had it stayed available
		require.Empty(t, claimAvailable(t, b, "poller", "", "", 10), "a canceled episode is never taken")
		expired, err := b.Store.ExpireAvailable(ctx(t), episodes.ExpireQuery{TTL: time.Minute})
		require.NoError(t, err)
		require.Empty(t, expired, "nor expired")
		require.Equal(t, episodes.ClassCanceled, get(t, EpisodesBackend{Store: b.Store}, d.Episode.ID).ErrorClass)
		_, err = b.Store.CancelEpisode(ctx(t), d.Episode.ID, nil)
		require.ErrorIs(t, err, episodes.ErrNotLive)
		_, err = b.Store.CancelEpisode(ctx(t), 987654321, nil)
		require.ErrorIs(t, err, episodes.ErrNotFound)

		// Held live: asked, not ended; the holder, and only it, lists it.
		n := flowEpisode("event:a:e:live")
		n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
		live, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		c, err = b.Store.CancelEpisode(ctx(t), live.Episode.ID, nil)
		require.NoError(t, err)
		require.False(t, c.Ended)
		require.Equal(t, episodes.StatusRunning, c.Status)
		reqs, err := b.Store.ListCancelRequests(ctx(t), "node-a")
		require.NoError(t, err)
		require.Equal(t, []episodes.CancelRequest{{EpisodeID: live.Episode.ID, Fence: live.Claim.Fence}}, reqs)
		others, err := b.Store.ListCancelRequests(ctx(t), "node-b")
		require.NoError(t, err)
		require.Empty(t, others)
		require.NoError(t, b.Store.AppendStep(ctx(t), live.Episode.ID, live.Claim.Token, 1, []byte(`{}`), time.Minute),
			"a live grant is left to its holder, not fenced out")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), live.Episode.ID, live.Claim.Token,
			episodes.Finish{Status: episodes.StatusCanceled, ErrorClass: episodes.ClassCanceled}), "the holder ends it with its fenced finish")
		reqs, err = b.Store.ListCancelRequests(ctx(t), "node-a")
		require.NoError(t, err)
		require.Empty(t, reqs, "terminal: no longer listed")
		// Nor once its key is granted to the same node again: the ended
		// episode is not that grant's run.
		_, err = b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "event:a:e:live", Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		reqs, err = b.Store.ListCancelRequests(ctx(t), "node-a")
		require.NoError(t, err)
		require.Empty(t, reqs, "an ended episode under a new grant of its key is not listed")

		// Expired: nobody holds it live, so ended at once and its grant
		// fenced out: the zombie's writes match nothing.
		n = flowEpisode("event:a:e:zombie")
		n.Owner, n.Lease, n.Start = "zombie", time.Minute, true
		z, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		b.ExpireClaim(t, "event:a:e:zombie")
		c, err = b.Store.CancelEpisode(ctx(t), z.Episode.ID, nil)
		require.NoError(t, err)
		require.True(t, c.Ended)
		require.ErrorIs(t, b.Store.AppendStep(ctx(t), z.Episode.ID, z.Claim.Token, 1, nil, time.Minute), claims.ErrLeaseLost)
		require.ErrorIs(t, b.Store.FinishEpisode(ctx(t), z.Episode.ID, z.Claim.Token, episodes.Finish{Status: episodes.StatusDone}), claims.ErrLeaseLost)
		require.ErrorIs(t, b.Store.Release(ctx(t), z.Claim.Token), claims.ErrNotOwner,
			"the expired grant's fence moved on: its holder cannot even give it back (the writes above fail on the expired lease alone)")

		// A cancel asked while an attempt runs wins over its retry.
		n = flowEpisode("event:a:e:retry")
		n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
		r, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		_, err = b.Store.CancelEpisode(ctx(t), r.Episode.ID, nil)
		require.NoError(t, err)
		retried, err := b.Store.RetryEpisode(ctx(t), r.Episode.ID, r.Claim.Token, episodes.Retry{ErrorClass: "error", Backoff: time.Second})
		require.NoError(t, err)
		require.True(t, retried.Canceled)
		require.Equal(t, episodes.StatusCanceled, get(t, EpisodesBackend{Store: b.Store}, r.Episode.ID).Status)
		require.Empty(t, claimAvailable(t, b, "poller", "", "", 10), "the canceled retry is not available")
	})

	// A holder lists the cancel requests of the runs it holds, and no
	// other's: not another node's (whatever their names' order), not one
	// whose grant it gave back.
	t.Run("CancelRequestsAreListedOnlyToTheirHolder", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		requested := func(key, owner string) episodes.Created {
			t.Helper()
			res := startedFlow(t, b, key, owner)
			c, err := b.Store.CancelEpisode(ctx(t), res.Episode.ID, nil)
			require.NoError(t, err)
			require.False(t, c.Ended, "held live: asked, not ended")
			return res
		}
		mine := requested("event:a:e:mine", "node-a")
		theirs := requested("event:a:e:theirs", "node-b")
		given := requested("event:a:e:given-back", "node-a")
		require.NoError(t, b.Store.Release(ctx(t), given.Claim.Token))

		reqs, err := b.Store.ListCancelRequests(ctx(t), "node-a")
		require.NoError(t, err)
		require.Equal(t, []episodes.CancelRequest{{EpisodeID: mine.Episode.ID, Fence: mine.Claim.Fence}}, reqs)
		reqs, err = b.Store.ListCancelRequests(ctx(t), "node-b")
		require.NoError(t, err)
		require.Equal(t, []episodes.CancelRequest{{EpisodeID: theirs.Episode.ID, Fence: theirs.Claim.Fence}}, reqs)
	})

	// A group of one finishes its run: each row's re-checks find its own
	// claim, never rely on another row's.
	t.Run("AGroupOfOneFinishes", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		one := startedFlow(t, b, "event:a:e:one", "node-a")
		finished, err := b.Store.FinishEpisodes(ctx(t), "node-a", []episodes.FinishItem{{ID: one.Episode.ID, Token: one.Claim.Token,
			Finish: episodes.Finish{Status: episodes.StatusDone, StepNo: 1, StepData: []byte(`{"last":true}`)}}})
		require.NoError(t, err)
		require.Equal(t, []int64{one.Episode.ID}, finished)
		require.Equal(t, episodes.StatusDone, get(t, EpisodesBackend{Store: b.Store}, one.Episode.ID).Status)
		steps, err := b.Store.ListSteps(ctx(t), one.Episode.ID)
		require.NoError(t, err)
		require.Len(t, steps, 1)
		_, err = b.Store.Renew(ctx(t), one.Claim.Token, time.Minute)
		require.ErrorIs(t, err, claims.ErrNotOwner, "the claim ended with its episode")
	})

	t.Run("RequeueRunsFailedOrCanceledAgain", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := flowEpisode("event:a:e:failed")
		n.Owner, n.Lease, n.Start, n.MaxAttempts = "node-a", time.Minute, true, 1
		f, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.NoError(t, b.Store.FinishEpisode(ctx(t), f.Episode.ID, f.Claim.Token, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: "error"}))

		r, err := b.Store.RequeueEpisode(ctx(t), f.Episode.ID, "ops")
		require.NoError(t, err)
		require.EqualValues(t, 1, r.Attempts)
		got := get(t, EpisodesBackend{Store: b.Store}, f.Episode.ID)
		require.Equal(t, episodes.StatusQueued, got.Status)
		require.EqualValues(t, 2, got.Attempt())
		require.EqualValues(t, 2, got.MaxAttempts, "one more attempt granted to an exhausted episode")
		_, err = b.Store.RequeueEpisode(ctx(t), f.Episode.ID, "ops")
		require.ErrorIs(t, err, episodes.ErrNotRetryable, "two operators: the second changes nothing")

		d := takeOne(t, b, "poller")
		require.Equal(t, f.Episode.ID, d.EpisodeID, "available at once")
		require.Equal(t, f.Claim.Fence+1, d.Claim.Fence, "a new grant")
		require.EqualValues(t, 2, d.Episode.Attempt())
		_, err = b.Store.StartEpisode(ctx(t), f.Episode.ID, d.Claim.Token)
		require.NoError(t, err)
		require.NoError(t, b.Store.FinishEpisode(ctx(t), f.Episode.ID, d.Claim.Token, episodes.Finish{Status: episodes.StatusDone}))
		_, err = b.Store.RequeueEpisode(ctx(t), f.Episode.ID, "ops")
		require.ErrorIs(t, err, episodes.ErrNotRetryable, "done work is never reopened")
		_, err = b.Store.RequeueEpisode(ctx(t), 987654321, "ops")
		require.ErrorIs(t, err, episodes.ErrNotFound)
	})

	t.Run("ARunMadeAvailableAgainKeepsItsScope", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Actor, expectation, stack and env all differ, so that an episode
		// made available with one in another's place is seen: a poller of
		// the swapped scope takes nothing.
		start := func(key string) episodes.Created {
			n := flowEpisode(key)
			n.SourceStack, n.SourceEnv = "blue", "prod"
			n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
			res, err := b.Store.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			return res
		}
		retried := start("event:a:e:retried")
		r, err := b.Store.RetryEpisode(ctx(t), retried.Episode.ID, retried.Claim.Token, episodes.Retry{ErrorClass: "error", Backoff: time.Hour})
		require.NoError(t, err)
		require.False(t, r.Canceled)

		requeued := start("event:a:e:requeued")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), requeued.Episode.ID, requeued.Claim.Token, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: "error"}))
		_, err = b.Store.RequeueEpisode(ctx(t), requeued.Episode.ID, "ops")
		require.NoError(t, err)

		orphan := start("event:a:e:orphan")
		b.ExpireClaim(t, "event:a:e:orphan")
		q, err := b.Store.RequeueOrphan(ctx(t), orphan.Episode.ID, 0, "sweeper", time.Minute)
		require.NoError(t, err)
		require.Equal(t, episodes.StatusQueued, q.Status)
		require.EqualValues(t, 1, q.Attempts)
		require.EqualValues(t, 3, q.MaxAttempts)

		poll := func(env, stack string, runnable ...episodes.Runnable) []episodes.Dispatched {
			t.Helper()
			ds, err := b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{
				Owner: "poller", Lease: time.Minute, Env: env, Stack: stack, Runnable: runnable, Limit: 10})
			require.NoError(t, err)
			return ds
		}
		mine := episodes.Runnable{ActorID: "a", ExpectationID: "e"}
		require.Empty(t, poll("blue", "prod", mine), "stack and env are not each other's")
		require.Empty(t, poll("", "blue", mine), "nor is prod the unset env")
		require.Empty(t, poll("prod", "green", mine), "nor blue another stack")
		require.Empty(t, poll("prod", "blue", episodes.Runnable{ActorID: "e", ExpectationID: "a"}), "actor and expectation are not each other's")
		w, ok, err := b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Env: "prod", Stack: "blue", Runnable: []episodes.Runnable{mine}})
		require.NoError(t, err)
		require.True(t, ok, "the retry waits its backoff in its scope")
		require.Greater(t, w, 59*time.Minute)

		// Each is taken by a poller of that scope.
		requireTaken := func(ds []episodes.Dispatched, ids ...int64) {
			t.Helper()
			got := make([]int64, len(ds))
			for i, d := range ds {
				got[i] = d.EpisodeID
				require.True(t, d.Started)
				require.Equal(t, [4]string{"a", "e", "blue", "prod"},
					[4]string{d.ActorID, d.ExpectationID, d.Episode.SourceStack, d.Episode.SourceEnv})
			}
			require.ElementsMatch(t, ids, got)
		}
		requireTaken(poll("prod", "blue", mine), requeued.Episode.ID, orphan.Episode.ID)
		b.AgeAvailable(t, retried.Episode.ID, time.Hour+time.Second)
		requireTaken(poll("prod", "blue", mine), retried.Episode.ID)
	})

	t.Run("BatchCreatesEachKeyOnce", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		first := deferEpisode(t, b, "event:a:e:b1", "", "")
		batch := episodes.DeferredBatch{New: flowEpisode(""), Items: []episodes.BatchItem{
			{DedupeKey: "event:a:e:b1", Payload: []byte(`{"n":1}`)},
			{DedupeKey: "event:a:e:b2", Payload: []byte(`{"n":2}`), TriggerRef: []byte(`{"event":"x"}`)},
			{DedupeKey: "event:a:e:b3"},
		}}
		res, err := b.Store.CreateDeferredEpisodes(ctx(t), batch)
		require.NoError(t, err)
		require.Len(t, res, 3)
		require.False(t, res[0].Created)
		require.Equal(t, first.Episode.ID, res[0].ExistingID, "a duplicate names the live episode")
		require.True(t, res[1].Created)
		require.True(t, res[2].Created)
		for _, r := range res[1:] {
			requireSameEpisode(t, get(t, EpisodesBackend{Store: b.Store}, r.Episode.ID), r.Episode)
		}
		got := get(t, EpisodesBackend{Store: b.Store}, res[1].Episode.ID)
		require.Equal(t, episodes.StatusQueued, got.Status)
		require.JSONEq(t, `{"n":2}`, string(got.Payload))
		require.Equal(t, "event:a:e:b2", got.DedupeKey)
		require.Len(t, claimAvailable(t, b, "poller", "", "", 10), 3, "the two new ones and the first, all available")

		// Fired again with every key live: each duplicate names its own
		// key's episode, never another live one of the batch.
		again, err := b.Store.CreateDeferredEpisodes(ctx(t), batch)
		require.NoError(t, err)
		require.Len(t, again, 3)
		for i, want := range []int64{first.Episode.ID, res[1].Episode.ID, res[2].Episode.ID} {
			require.False(t, again[i].Created, "item %d", i)
			require.Equal(t, want, again[i].ExistingID, "item %d names its own key's episode", i)
		}
		_, err = b.Store.CreateDeferredEpisodes(ctx(t), episodes.DeferredBatch{New: flowEpisode(""), Items: []episodes.BatchItem{{}}})
		require.Error(t, err, "an item without a key is refused")
	})

	t.Run("BatchEpisodesKeepTheirScope", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := flowEpisode("")
		n.SourceStack, n.SourceEnv = "blue", "prod"
		res, err := b.Store.CreateDeferredEpisodes(ctx(t), episodes.DeferredBatch{New: n,
			Items: []episodes.BatchItem{{DedupeKey: "event:a:e:s1"}, {DedupeKey: "event:a:e:s2"}}})
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.Empty(t, claimAvailable(t, b, "poller", "prod", "blue", 10), "stack and env are not each other's")
		ds := claimAvailable(t, b, "poller", "blue", "prod", 10)
		require.Len(t, ds, 2, "each episode carries the batch's stack and env")
		for _, d := range ds {
			require.Equal(t, [2]string{"blue", "prod"}, [2]string{d.Episode.SourceStack, d.Episode.SourceEnv})
		}
	})

	t.Run("GroupedFinishIsFencedRowByRow", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		start := func(key, owner string) episodes.Created { return startedFlow(t, b, key, owner) }
		ok1, ok2 := start("event:a:e:g1", "node-a"), start("event:a:e:g2", "node-a")
		stolen := start("event:a:e:g3", "node-a")
		b.ExpireClaim(t, "event:a:e:g3")
		thief, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "event:a:e:g3", Owner: "node-b", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		ended := start("event:a:e:g4", "node-a")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), ended.Episode.ID, ended.Claim.Token, episodes.Finish{Status: episodes.StatusDone}))
		// A -> A: node-a's own later grant of g5; the group names the
		// earlier one, whose fence alone tells them apart.
		earlier := start("event:a:e:g5", "node-a")
		b.ExpireClaim(t, "event:a:e:g5")
		current, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "event:a:e:g5", Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		require.Equal(t, earlier.Claim.Fence+1, current.Fence)

		items := []episodes.FinishItem{
			{ID: ok1.Episode.ID, Token: ok1.Claim.Token, Finish: episodes.Finish{Status: episodes.StatusDone, Result: []byte(`{"n":1}`),
				StepNo: 1, StepData: []byte(`{"last":true}`)}},
			{ID: ok2.Episode.ID, Token: ok2.Claim.Token, Finish: episodes.Finish{Status: episodes.StatusFailed, ErrorClass: "panic",
				ErrorDetail: []byte(`{"panic":"x"}`)}},
			{ID: stolen.Episode.ID, Token: stolen.Claim.Token, Finish: episodes.Finish{Status: episodes.StatusDone, StepNo: 1, StepData: []byte(`{}`)}},
			{ID: ended.Episode.ID, Token: ended.Claim.Token, Finish: episodes.Finish{Status: episodes.StatusFailed}},
			{ID: earlier.Episode.ID, Token: earlier.Claim.Token, Finish: episodes.Finish{Status: episodes.StatusDone, StepNo: 1, StepData: []byte(`{}`)}},
		}
		// Another owner, whose name sorts before node-a's, naming node-a's
		// grants by their keys and fences finishes nothing.
		forged := make([]episodes.FinishItem, len(items))
		for i, it := range items {
			it.Token.Owner = "a-node"
			forged[i] = it
		}
		finished, err := b.Store.FinishEpisodes(ctx(t), "a-node", forged)
		require.NoError(t, err)
		require.Empty(t, finished, "the owner is part of the grant")
		// A grant its holder released (a drain's hand-over) finishes nothing.
		released := start("event:a:e:g6", "node-a")
		require.NoError(t, b.Store.Release(ctx(t), released.Claim.Token))
		items = append(items, episodes.FinishItem{ID: released.Episode.ID, Token: released.Claim.Token,
			Finish: episodes.Finish{Status: episodes.StatusDone, StepNo: 1, StepData: []byte(`{}`)}})

		// A fence never granted (above the key's current one) finishes
		// nothing either: the fence is matched exactly.
		ahead := start("event:a:e:g7", "node-a")
		aheadToken := ahead.Claim.Token
		aheadToken.Fence++
		items = append(items, episodes.FinishItem{ID: ahead.Episode.ID, Token: aheadToken,
			Finish: episodes.Finish{Status: episodes.StatusDone, StepNo: 1, StepData: []byte(`{}`)}})

		finished, err = b.Store.FinishEpisodes(ctx(t), "node-a", items)
		require.NoError(t, err)
		require.ElementsMatch(t, []int64{ok1.Episode.ID, ok2.Episode.ID}, finished, "only the rows whose grant is current")
		_, err = b.Store.Renew(ctx(t), ahead.Claim.Token, time.Minute)
		require.NoError(t, err, "a fence never granted ended the grant it is above")
		require.Equal(t, episodes.StatusRunning, get(t, EpisodesBackend{Store: b.Store}, ahead.Episode.ID).Status)
		require.Equal(t, episodes.StatusRunning, get(t, EpisodesBackend{Store: b.Store}, released.Episode.ID).Status, "a released grant wrote nothing")

		e := EpisodesBackend{Store: b.Store}
		got := get(t, e, ok1.Episode.ID)
		require.Equal(t, episodes.StatusDone, got.Status)
		require.JSONEq(t, `{"n":1}`, string(got.Result))
		steps, err := b.Store.ListSteps(ctx(t), ok1.Episode.ID)
		require.NoError(t, err)
		require.Len(t, steps, 1, "the last step journaled with the finish")
		got = get(t, e, ok2.Episode.ID)
		require.Equal(t, episodes.StatusFailed, got.Status)
		require.Equal(t, "panic", got.ErrorClass)
		require.Equal(t, episodes.StatusRunning, get(t, e, stolen.Episode.ID).Status, "the zombie's row wrote nothing")
		steps, err = b.Store.ListSteps(ctx(t), stolen.Episode.ID)
		require.NoError(t, err)
		require.Empty(t, steps)
		require.NoError(t, b.Store.FinishEpisode(ctx(t), stolen.Episode.ID, thief.Token, episodes.Finish{Status: episodes.StatusDone}), "the thief's grant is intact")
		require.Equal(t, episodes.StatusDone, get(t, e, ended.Episode.ID).Status, "a terminal episode is not finished again")
		// The ended episode's key granted to node-a again: a live grant that
		// a group presents with the ended episode's id, which is not its
		// run, while other episodes are open.
		regrant, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "event:a:e:g4", Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		finished, err = b.Store.FinishEpisodes(ctx(t), "node-a", []episodes.FinishItem{
			{ID: ended.Episode.ID, Token: regrant.Token, Finish: episodes.Finish{Status: episodes.StatusFailed}}})
		require.NoError(t, err)
		require.Empty(t, finished)
		require.Equal(t, episodes.StatusDone, get(t, e, ended.Episode.ID).Status)
		_, err = b.Store.Renew(ctx(t), regrant.Token, time.Minute)
		require.NoError(t, err, "the grant presented with the ended episode's id is intact")
		require.Equal(t, episodes.StatusRunning, get(t, e, earlier.Episode.ID).Status, "the same node's earlier grant wrote nothing")
		steps, err = b.Store.ListSteps(ctx(t), earlier.Episode.ID)
		require.NoError(t, err)
		require.Empty(t, steps)
		require.NoError(t, b.Store.FinishEpisode(ctx(t), earlier.Episode.ID, current.Token, episodes.Finish{Status: episodes.StatusDone}), "node-a's current grant is intact")

		again, err := b.Store.FinishEpisodes(ctx(t), "node-a", items[:2])
		require.NoError(t, err)
		require.Empty(t, again, "a duplicate group finishes nothing")
		_, err = b.Store.FinishEpisodes(ctx(t), "node-b", items[:1])
		require.Error(t, err, "rows fenced by another node are refused before sending")
	})

	// A running episode with no claim row (none was ever granted under its
	// key, or it is gone) has no lease to expire: it is an orphan only once
	// its last sign of life is older than StaleAfter on the database clock,
	// for the listing, the recovery grant and the requeue alike; a queued
	// one is never an orphan, nothing having run.
	t.Run("AClaimlessEpisodeIsAnOrphanOnlyOnceStale", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		const stale = time.Minute
		running := func(key string) episodes.Episode {
			t.Helper()
			res := startedFlow(t, b, key, "node-a")
			require.True(t, res.Started)
			b.DropClaim(t, key)
			b.Age(t, res.Episode.ID, stale/2)
			return res.Episode
		}
		requeued, recovered := running("event:a:e:claimless-requeue"), running("event:a:e:claimless-recover")
		n := flowEpisode("event:a:e:claimless-queued")
		queued, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		b.Age(t, queued.Episode.ID, time.Hour)

		listed := func() []int64 {
			t.Helper()
			list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: stale, Limit: 10})
			require.NoError(t, err)
			ids := make([]int64, len(list))
			for i, o := range list {
				ids[i] = o.Episode.ID
			}
			return ids
		}
		require.Empty(t, listed(), "half of StaleAfter: not stale yet")
		_, _, err = b.Store.ClaimForRecovery(ctx(t), recovered.ID, "sweeper", time.Minute, stale)
		require.ErrorIs(t, err, claims.ErrBusy, "a claim-less episode not yet stale was taken over")
		_, err = b.Store.RequeueOrphan(ctx(t), requeued.ID, requeued.Attempts, "sweeper", stale)
		require.ErrorIs(t, err, claims.ErrBusy, "a claim-less episode not yet stale was requeued")
		_, err = b.Store.RequeueOrphan(ctx(t), queued.Episode.ID, queued.Episode.Attempts, "sweeper", stale)
		require.ErrorIs(t, err, claims.ErrBusy, "a queued episode nobody granted was requeued")

		b.Age(t, requeued.ID, stale)
		b.Age(t, recovered.ID, stale)
		require.ElementsMatch(t, []int64{requeued.ID, recovered.ID}, listed())
		_, won, err := b.Store.ClaimForRecovery(ctx(t), recovered.ID, "sweeper", time.Minute, stale)
		require.NoError(t, err)
		require.Equal(t, claims.Token{Key: "event:a:e:claimless-recover", Owner: "sweeper", Fence: 1}, won.Token, "a fresh grant")
		r, err := b.Store.RequeueOrphan(ctx(t), requeued.ID, requeued.Attempts, "sweeper", stale)
		require.NoError(t, err)
		require.Equal(t, episodes.StatusQueued, r.Status)
		require.Equal(t, episodes.StatusQueued, get(t, e, requeued.ID).Status)
		_, err = b.Store.RequeueOrphan(ctx(t), requeued.ID, requeued.Attempts, "sweeper", stale)
		require.ErrorIs(t, err, claims.ErrBusy, "a second requeue of the same orphan matches nothing")
		require.Equal(t, requeued.ID, takeOne(t, b, "poller").EpisodeID, "requeued as available work")
		require.Equal(t, episodes.StatusQueued, get(t, e, queued.Episode.ID).Status)
	})

	t.Run("RequeueOrphanLeavesFinishedWorkAlone", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Each ended by its holder (its claim ended with it), with the
		// attempts a sweep would have listed: recovery reopens none of them.
		for _, status := range []episodes.Status{episodes.StatusDone, episodes.StatusFailed, episodes.StatusCanceled} {
			n := flowEpisode("event:a:e:" + string(status))
			n.Owner, n.Lease, n.Start = "node-a", time.Minute, true
			res, err := b.Store.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			require.NoError(t, b.Store.FinishEpisode(ctx(t), res.Episode.ID, res.Claim.Token, episodes.Finish{Status: status}))
			ended := get(t, EpisodesBackend{Store: b.Store}, res.Episode.ID)
			_, err = b.Store.RequeueOrphan(ctx(t), res.Episode.ID, ended.Attempts, "sweeper", time.Minute)
			require.ErrorIs(t, err, claims.ErrBusy, "a %s episode was requeued", status)
			require.Equal(t, status, get(t, EpisodesBackend{Store: b.Store}, res.Episode.ID).Status)
		}
		require.Empty(t, claimAvailable(t, b, "poller", "", "", 10), "nothing was made available")
		_, ok, err := b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Runnable: onE("a")})
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("RequeueOrphanOnceAcrossSweepers", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := flowEpisode("event:a:e:orphan")
		n.Owner, n.Lease, n.Start = "dead", time.Minute, true
		o, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		for step := int32(1); step <= 2; step++ {
			require.NoError(t, b.Store.AppendStep(ctx(t), o.Episode.ID, o.Claim.Token, step, []byte(`{}`), time.Minute))
		}
		// Live: not an orphan.
		_, err = b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 0, "sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy)
		b.ExpireClaim(t, "event:a:e:orphan")

		const sweepers = 4
		won := make([]bool, sweepers)
		var wg sync.WaitGroup
		for i := range sweepers {
			wg.Go(func() {
				_, err := b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 0, "sweeper", time.Minute)
				if err == nil {
					won[i] = true
					return
				}
				require.ErrorIs(t, err, claims.ErrBusy)
			})
		}
		wg.Wait()
		wins := 0
		for _, w := range won {
			if w {
				wins++
			}
		}
		require.Equal(t, 1, wins, "exactly one sweeper requeues the orphan")
		got := get(t, EpisodesBackend{Store: b.Store}, o.Episode.ID)
		require.Equal(t, episodes.StatusQueued, got.Status)
		require.Equal(t, "recovering", got.Phase)
		require.EqualValues(t, 2, got.Attempt())
		require.ErrorIs(t, b.Store.AppendStep(ctx(t), o.Episode.ID, o.Claim.Token, 1, nil, time.Minute), claims.ErrLeaseLost, "the dead grant is fenced out")
		_, err = b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 1, "sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy, "available work is the pollers'")

		d := takeOne(t, b, "poller")
		require.Equal(t, o.Episode.ID, d.EpisodeID)
		require.Equal(t, o.Claim.Fence+2, d.Claim.Fence, "after the requeue's fence")
		require.EqualValues(t, 2, d.Episode.Attempt(), "the requeued attempt runs")
		steps, err := b.Store.ListSteps(ctx(t), o.Episode.ID)
		require.NoError(t, err)
		require.Len(t, steps, 2)
		require.EqualValues(t, 3, d.NextStep, "a re-run appends after the old journal")
		next, err := b.Store.StartEpisode(ctx(t), o.Episode.ID, d.Claim.Token)
		require.NoError(t, err)
		require.Equal(t, next, d.NextStep)

		// That run dies too. A sweeper that listed the orphan before the
		// first requeue (attempts 0) requeues nothing: the listed attempt
		// was requeued once already; one that lists it now (attempts 1)
		// requeues it.
		b.ExpireClaim(t, "event:a:e:orphan")
		_, err = b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 0, "slow-sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy, "each listed attempt is requeued at most once")
		again, err := b.Store.RequeueOrphan(ctx(t), o.Episode.ID, 1, "sweeper", time.Minute)
		require.NoError(t, err)
		require.EqualValues(t, 2, again.Attempts)

		// Out of attempts: never requeued (recovery fails it instead).
		n = flowEpisode("event:a:e:last")
		n.Owner, n.Lease, n.Start, n.MaxAttempts = "dead", time.Minute, true, 1
		last, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		b.ExpireClaim(t, "event:a:e:last")
		_, err = b.Store.RequeueOrphan(ctx(t), last.Episode.ID, 0, "sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy)

		// A cancel requested while its holder lived: recovery ends it canceled.
		n = flowEpisode("event:a:e:cancel")
		n.Owner, n.Lease, n.Start = "dead", time.Minute, true
		cn, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		_, err = b.Store.CancelEpisode(ctx(t), cn.Episode.ID, nil)
		require.NoError(t, err)
		b.ExpireClaim(t, "event:a:e:cancel")
		rq, err := b.Store.RequeueOrphan(ctx(t), cn.Episode.ID, 0, "sweeper", time.Minute)
		require.NoError(t, err)
		require.Equal(t, episodes.StatusCanceled, rq.Status)
		require.Equal(t, episodes.StatusCanceled, get(t, EpisodesBackend{Store: b.Store}, cn.Episode.ID).Status)
		require.Equal(t, o.Episode.ID, takeOne(t, b, "poller").EpisodeID, "the requeued orphan is available; the canceled one is not")
	})
}

// flowEpisode is newEpisode of the pair the pollers of claimAvailable run.
func flowEpisode(key string) episodes.New {
	n := newEpisode(key)
	n.ActorID, n.ExpectationID = "a", "e"
	return n
}

// startedFlow creates an episode of key started by owner under a minute's
// lease.
func startedFlow(t testing.TB, b DeferredBackend, key, owner string) episodes.Created {
	t.Helper()
	n := flowEpisode(key)
	n.Owner, n.Lease, n.Start = owner, time.Minute, true
	res, err := b.Store.CreateEpisode(ctx(t), n)
	require.NoError(t, err)
	return res
}
