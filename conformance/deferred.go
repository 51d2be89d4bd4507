package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// DeferredStore is the available-work surface of an adapter: the
// statements in sql/queries/<dialect>/available.sql, and the episode
// statements that make work available again (a retry, an operator's
// requeue, recovery's requeue) or end it (a cancel).
type DeferredStore interface {
	EpisodeStore
	CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error)
	CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error)
	ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error)
	ExpireAvailable(ctx context.Context, q episodes.ExpireQuery) ([]int64, error)
	NextAvailableDue(ctx context.Context, q episodes.AvailableQuery) (time.Duration, bool, error)
	RetryEpisode(ctx context.Context, id int64, t claims.Token, r episodes.Retry) (episodes.Retried, error)
	// Work that flows (flow.go): cluster-wide cancel and retry, and
	// recovery's requeue.
	CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error)
	ListCancelRequests(ctx context.Context, owner string) ([]episodes.CancelRequest, error)
	RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error)
	RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error)
	FinishEpisodes(ctx context.Context, owner string, items []episodes.FinishItem) ([]int64, error)
}

// DeferredBackend is what the deferred scenarios need from one isolated
// backend.
type DeferredBackend struct {
	Store DeferredStore
	// AgeAvailable moves available episode id's run_after and created_at
	// back by d (it fell due d earlier).
	AgeAvailable func(t testing.TB, id int64, d time.Duration)
	// Age moves the episode's created_at (and start, last step) back by d.
	Age func(t testing.TB, id int64, d time.Duration)
	// ExpireClaim makes key's lease past on the database clock.
	ExpireClaim func(t testing.TB, key string)
	// Archive sets the episode's archived_at.
	Archive func(t testing.TB, id int64)
	// DropClaim deletes key's claim row, as if it had never been granted
	// (a claim-less episode: recovery's staleness branch).
	DropClaim func(t testing.TB, key string)
}

// RunDeferred runs the available-work scenarios: creation in one row,
// polls (ClaimAvailable) that grant and start each available episode once,
// scoped by env, stack and runnable pairs and taking only due work, expiry
// (ExpireAvailable), and the paths that make work available again (retry,
// requeue, recovery) or end it (cancel).
func RunDeferred(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("CreateWritesOneAvailableEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: flowEpisode("event:a:e:1"), Opts: json.RawMessage(`{"lane":"slow"}`)})
		require.NoError(t, err)
		require.True(t, res.Created)
		require.Equal(t, episodes.StatusQueued, res.Episode.Status)
		requireSameEpisode(t, get(t, e, res.Episode.ID), res.Episode)

		again := deferEpisode(t, b, "event:a:e:1", "", "")
		require.False(t, again.Created, "a live episode holds the key")
		require.Equal(t, res.Episode.ID, again.ExistingID)
		direct := flowEpisode("event:a:e:1")
		direct.Owner, direct.Lease = "full-node", time.Minute
		d, err := b.Store.CreateEpisode(ctx(t), direct)
		require.NoError(t, err)
		require.False(t, d.Created, "deferred and direct creation share one dedupe index")

		// An available episode waits for a poller, not for a lease: recovery
		// never takes it for an orphan, however old it is.
		b.AgeAvailable(t, res.Episode.ID, time.Hour)
		list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, list)
		_, _, err = b.Store.ClaimForRecovery(ctx(t), res.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy)
		_, err = b.Store.RequeueOrphan(ctx(t), res.Episode.ID, 0, "sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy)

		// A poller takes it, with what the deferring node passed on.
		got := takeOne(t, b, "poller")
		require.Equal(t, res.Episode.ID, got.EpisodeID)
		require.Equal(t, [2]string{"a", "e"}, [2]string{got.ActorID, got.ExpectationID})
		require.JSONEq(t, `{"lane":"slow"}`, string(got.Opts))
	})

	t.Run("APollGrantsAndStartsTheEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		res := deferEpisode(t, b, "event:a:e:1", "", "")
		before := time.Now()
		ds := claimAvailable(t, b, "poller-1", "", "", 10)
		after := time.Now()
		require.Len(t, ds, 1)
		d := ds[0]
		require.Equal(t, res.Episode.ID, d.EpisodeID)
		require.Equal(t, claims.Token{Key: "event:a:e:1", Owner: "poller-1", Fence: 1}, d.Claim.Token)
		require.EqualValues(t, 1, d.Claim.Attempt)
		require.Equal(t, claims.GrantFresh, d.Claim.Grant)
		require.False(t, d.Claim.LocalStart().Before(before), "the poll stamps its grant's local start")
		require.False(t, d.Claim.LocalStart().After(after))
		require.WithinDuration(t, leaseOf(t, b.Store, "event:a:e:1"), d.Claim.LeaseUntil, time.Microsecond, "the lease returned is the lease stored")
		require.True(t, d.Started, "the poll starts the episode under the grant it makes")
		require.EqualValues(t, 1, d.NextStep)
		require.Equal(t, episodes.StatusRunning, d.Episode.Status)
		require.Equal(t, "poller-1", d.Episode.OwnerNode)
		require.NotNil(t, d.Episode.StartedAt)
		require.NotNil(t, d.Episode.LastStepAt)
		stored := get(t, e, res.Episode.ID)
		require.Equal(t, episodes.StatusRunning, stored.Status)
		require.Equal(t, "poller-1", stored.OwnerNode)
		requireSameEpisode(t, stored, d.Episode)
		require.NoError(t, b.Store.AppendStep(ctx(t), res.Episode.ID, d.Claim.Token, d.NextStep, nil, time.Minute), "the granted claim runs the episode")
		_, err := b.Store.StartEpisode(ctx(t), res.Episode.ID, d.Claim.Token)
		require.NoError(t, err)

		require.Empty(t, claimAvailable(t, b, "poller-2", "", "", 10), "a started episode left the available set")
		require.Empty(t, claimAvailable(t, b, "poller-1", "", "", 10), "even for the poller that took it")
		// Its grant lapses: the episode is recovery's (it ran), never a poll's.
		b.ExpireClaim(t, "event:a:e:1")
		require.Empty(t, claimAvailable(t, b, "poller-2", "", "", 10))
		require.False(t, listedOrphan(t, b, res.Episode.ID).GivenBack)
	})

	t.Run("APollReturnsTheGrantItMade", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// As RecoveryReturnsTheGrantItMade: keys whose claim an earlier grant
		// finished, so the poll's grant is attempt 1 at fence 2 and a grant
		// returned with one in the other's place is seen; alone (a poll of
		// one) and in a batch.
		for _, key := range []string{"reused-1", "reused-2", "reused-3"} {
			onAFinishedKey(t, b, key)
		}
		lease := 90 * time.Second
		var got []episodes.Dispatched
		for _, limit := range []int{1, 10} {
			ds, err := b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{Owner: "poller", Lease: lease, Runnable: onE("a"), Limit: limit})
			require.NoError(t, err)
			require.Len(t, ds, min(limit, 3-len(got)))
			got = append(got, ds...)
		}
		var keys []string
		for _, d := range got {
			key := d.Episode.DedupeKey
			keys = append(keys, key)
			require.Equal(t, claims.Token{Key: key, Owner: "poller", Fence: 2}, d.Claim.Token)
			require.EqualValues(t, 1, d.Claim.Attempt)
			require.Equal(t, claims.GrantReclaim, d.Claim.Grant)
			require.Equal(t, lease, d.Claim.LeaseUntil.Sub(d.Claim.ClaimedAt), "lease_until is the grant's instant plus the lease")
			require.WithinDuration(t, leaseOf(t, b.Store, key), d.Claim.LeaseUntil, time.Microsecond)
			require.True(t, d.Started)
		}
		require.ElementsMatch(t, []string{"reused-1", "reused-2", "reused-3"}, keys)
	})

	// The episode a poll returns is the episode as it now stands, field for
	// field (the runner hands it to the strategy): a retried run with a
	// stack, a payload, a trace and the error of its last attempt, alone
	// (a poll of one) and in a batch.
	t.Run("APollReturnsTheEpisodeAsStored", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		firstStart := map[int64]time.Time{}
		for _, key := range []string{"retried-1", "retried-2", "retried-3"} {
			n := flowEpisode(key)
			n.Owner, n.Lease, n.SourceStack = "node-a", time.Minute, "blue"
			n.TriggerRef = []byte(`{"ref":"` + key + `"}`)
			n.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			res, err := b.Store.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			// Created an hour before its first start, which is its own
			// instant, apart from its last step's.
			b.Age(t, res.Episode.ID, time.Hour)
			_, err = b.Store.StartEpisode(ctx(t), res.Episode.ID, res.Claim.Token)
			require.NoError(t, err)
			b.Age(t, res.Episode.ID, time.Minute)
			firstStart[res.Episode.ID] = *get(t, e, res.Episode.ID).StartedAt
			_, err = b.Store.RetryEpisode(ctx(t), res.Episode.ID, res.Claim.Token,
				episodes.Retry{ErrorClass: "timeout", ErrorDetail: []byte(`{"after":"` + key + `"}`)})
			require.NoError(t, err)
		}
		var got []episodes.Dispatched
		got = append(got, claimAvailable(t, b, "poller", "", "", 1)...)
		got = append(got, claimAvailable(t, b, "poller", "", "", 10)...)
		require.Len(t, got, 3)
		for _, d := range got {
			require.True(t, d.Started)
			stored := get(t, e, d.EpisodeID)
			require.Equal(t, "blue", stored.SourceStack)
			require.Equal(t, "timeout", stored.ErrorClass)
			require.Empty(t, stored.Phase, "running: the retry's phase is over")
			require.EqualValues(t, 2, stored.Attempt())
			require.WithinDuration(t, firstStart[d.EpisodeID], *stored.StartedAt, time.Microsecond, "a re-run keeps the first start")
			requireSameEpisode(t, stored, d.Episode)
		}
	})

	t.Run("PollersAreScopedByEnvStackAndActor", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		deferEpisode(t, b, "event:a:e:default", "", "")
		deferEpisode(t, b, "env:rc:event:a:e:rc", "", "rc")
		deferEpisode(t, b, "event:a:e:stack-a", "stack-a", "")
		deferEpisode(t, b, "event:a:e:stack-b", "stack-b", "")
		taken := func(owner, stack, env string, limit int, actors ...string) []string {
			t.Helper()
			ds, err := b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{
				Owner: owner, Lease: time.Minute, Env: env, Stack: stack, Runnable: onE(actors...), Limit: limit,
			})
			require.NoError(t, err)
			var keys []string
			for _, d := range ds {
				require.True(t, d.Started)
				keys = append(keys, d.Episode.DedupeKey)
			}
			return keys
		}
		require.Empty(t, taken("p", "", "", 10, "other-actor"), "only the poller's full actors")
		require.Empty(t, taken("p", "", "staging", 10), "no actors, nothing taken")
		require.Empty(t, taken("p", "", "", 0, "a"), "no slots, nothing taken")
		require.ElementsMatch(t, []string{"event:a:e:default", "event:a:e:stack-a"}, taken("p", "stack-a", "", 10, "a"),
			"a stack takes its own and unstamped episodes of its env")
		require.ElementsMatch(t, []string{"event:a:e:stack-b"}, taken("p", "", "", 10, "a"),
			"an empty stack filter takes every stack; rc is another env")
		require.ElementsMatch(t, []string{"env:rc:event:a:e:rc"}, taken("p", "", "rc", 10, "a"))
	})

	// A node of another version (an expectation added or removed) asks for
	// the (actor, expectation) pairs it runs: an episode of a pair it does
	// not run is neither taken nor counted in its next due time, so it is
	// never started, nor an attempt spent, where its code is missing.
	t.Run("PollersTakeOnlyTheExpectationsTheyRun", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Expectations the old node lacks, named on both sides of its own
		// ("e"), so no ordering of the names can pass for equality.
		deferFor := func(exp, key string, delay time.Duration) {
			t.Helper()
			n := newEpisode(key)
			n.ActorID, n.ExpectationID = "a", exp
			res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n, Delay: delay})
			require.NoError(t, err)
			require.True(t, res.Created)
		}
		deferFor("audit", "event:a:audit:1", 0)
		deferFor("refund", "event:a:refund:1", 0)
		deferFor("refund", "event:a:refund:later", time.Hour)
		charge := deferEpisode(t, b, "event:a:e:charge", "", "")

		old := []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}, {ActorID: "b", ExpectationID: "refund"}}
		_, ok, err := b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Runnable: old})
		require.NoError(t, err)
		require.False(t, ok, "the delayed refund is not the old node's to wait for")
		deferFor("audit", "event:a:audit:later", time.Minute)
		_, ok, err = b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Runnable: old})
		require.NoError(t, err)
		require.False(t, ok, "nor the delayed audit")
		ds, err := b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{Owner: "old-node", Lease: time.Minute, Runnable: old, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ds, 1, "only the expectation the old node runs")
		require.Equal(t, charge.Episode.ID, ds[0].EpisodeID)

		current := []episodes.Runnable{{ActorID: "a", ExpectationID: "refund"}}
		w, ok, err := b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Runnable: current})
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, w, 59*time.Minute)
		ds, err = b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{Owner: "new-node", Lease: time.Minute, Runnable: current, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ds, 1, "the due refund, for the node that runs it")
		require.Equal(t, "refund", ds[0].ExpectationID)
		require.True(t, ds[0].Started)
		require.Equal(t, "event:a:refund:1", ds[0].Episode.DedupeKey)
		require.EqualValues(t, 1, ds[0].Episode.Attempt(), "waiting cost no attempt")
	})

	// The invariant of available work (nobody holds a live grant on it) is
	// broken here by a direct claims user holding the episode's key: the
	// poll grants nothing, starts nothing, and the episode leaves the
	// available set, for its holder or, once that lease ends, recovery.
	t.Run("AnEpisodeHeldLiveElsewhereIsNotStarted", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		held := deferEpisode(t, b, "event:a:e:held", "", "")
		acquire(t, EpisodesBackend{Store: b.Store}, "event:a:e:held", "recoverer")
		ds := claimAvailable(t, b, "poller", "", "", 10)
		require.Len(t, ds, 1)
		d := ds[0]
		require.Equal(t, held.Episode.ID, d.EpisodeID)
		require.Zero(t, d.Claim.Fence, "a live claim elsewhere is never stolen")
		require.False(t, d.Started, "and the episode is not started")
		got := get(t, EpisodesBackend{Store: b.Store}, held.Episode.ID)
		require.Equal(t, episodes.StatusQueued, got.Status)
		require.Empty(t, got.OwnerNode)
		require.Nil(t, got.StartedAt)

		require.Empty(t, claimAvailable(t, b, "poller-2", "", "", 10), "it left the available set: no poll picks it again")
		_, ok, err := b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Runnable: onE("a")})
		require.NoError(t, err)
		require.False(t, ok)
		b.ExpireClaim(t, "event:a:e:held")
		require.Empty(t, claimAvailable(t, b, "poller-2", "", "", 10), "nor once the holder's lease ended")
		require.True(t, listedOrphan(t, b, held.Episode.ID).GivenBack, "recovery has it: queued, its holder's lease over")
	})

	t.Run("PollsNeverTakeFinishedCanceledOrArchivedWork", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		// Run to the end under a grant made another way while it was
		// available; canceled; archived while queued.
		done, c := startedElsewhere(t, b, "event:a:e:done")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), done.Episode.ID, c.Token, episodes.Finish{Status: episodes.StatusDone}))
		canceled := deferEpisode(t, b, "event:a:e:canceled", "", "")
		cn, err := b.Store.CancelEpisode(ctx(t), canceled.Episode.ID, nil)
		require.NoError(t, err)
		require.True(t, cn.Ended)
		archived := deferEpisode(t, b, "event:a:e:archived", "", "")
		b.Archive(t, archived.Episode.ID)
		for _, id := range []int64{done.Episode.ID, canceled.Episode.ID, archived.Episode.ID} {
			b.AgeAvailable(t, id, time.Hour) // due long ago, had they stayed available
		}

		require.Empty(t, claimAvailable(t, b, "poller", "", "", 10))
		require.Equal(t, episodes.StatusDone, get(t, e, done.Episode.ID).Status)
		require.Equal(t, episodes.StatusCanceled, get(t, e, canceled.Episode.ID).Status)
		require.Equal(t, episodes.StatusQueued, get(t, e, archived.Episode.ID).Status)
		_, err = b.Store.Renew(ctx(t), c.Token, time.Minute)
		require.ErrorIs(t, err, claims.ErrNotOwner, "the claim stays done")
		expired, err := b.Store.ExpireAvailable(ctx(t), episodes.ExpireQuery{TTL: time.Minute})
		require.NoError(t, err)
		require.Empty(t, expired, "nor are they expired")
	})

	t.Run("AnOrphanIsNotHiddenByAnotherEpisodesAvailability", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// An orphan is excluded from recovery by its own availability
		// (pollers take it instead), never by another episode's: a later
		// available episode, with a higher id, leaves an orphan recoverable.
		orphan := func(key string, start bool) episodes.Created {
			n := newEpisode(key)
			n.Owner, n.Lease, n.Start = "dead", time.Minute, start
			o, err := b.Store.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			b.ExpireClaim(t, key)
			return o
		}
		// Running, and granted but never started (queued).
		o, requeued := orphan("event:a:e:orphan", true), orphan("event:a:e:requeued", true)
		granted := orphan("event:a:e:granted", false)
		later := deferEpisode(t, b, "event:a:e:later", "", "")
		require.Greater(t, later.Episode.ID, requeued.Episode.ID)

		list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 10})
		require.NoError(t, err)
		var listed []int64
		for _, x := range list {
			listed = append(listed, x.Episode.ID)
		}
		require.ElementsMatch(t, []int64{o.Episode.ID, requeued.Episode.ID, granted.Episode.ID}, listed)
		q, err := b.Store.RequeueOrphan(ctx(t), requeued.Episode.ID, 0, "sweeper", time.Minute)
		require.NoError(t, err, "an orphan was left for another episode's availability")
		require.Equal(t, episodes.StatusQueued, q.Status)
		ep, c, err := b.Store.ClaimForRecovery(ctx(t), o.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.NoError(t, err, "an orphan was left for another episode's availability")
		require.Equal(t, o.Episode.ID, ep.ID)
		require.Equal(t, o.Claim.Fence+1, c.Fence)
		_, _, err = b.Store.ClaimForRecovery(ctx(t), later.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy, "the available episode is the pollers'")
	})

	t.Run("DeferredEpisodeOnAFinishedKeyIsNotAnOrphan", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// The key's claim was finished by an earlier grant; the deferred
		// episode waits for a poller, not for recovery.
		d := onAFinishedKey(t, b, "reused")
		list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, list)
		_, _, err = b.Store.ClaimForRecovery(ctx(t), d.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy)
		_, err = b.Store.RequeueOrphan(ctx(t), d.Episode.ID, 0, "sweeper", time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy)

		before := time.Now()
		got := takeOne(t, b, "poller")
		require.Equal(t, d.Episode.ID, got.EpisodeID)
		require.Equal(t, claims.Token{Key: "reused", Owner: "poller", Fence: 2}, got.Claim.Token)
		require.False(t, got.Claim.LocalStart().Before(before), "the poll stamps its grant's local start")
		require.False(t, got.Claim.LocalStart().After(time.Now()))
	})

	// A cancel fences out only an expired grant of the episode it ends: the
	// claim an earlier episode of the same key finished stays finished, so
	// the key's next grant is a first attempt again.
	t.Run("CancelLeavesTheKeysFinishedClaimAlone", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		d := onAFinishedKey(t, b, "reused")
		canceled, err := b.Store.CancelEpisode(ctx(t), d.Episode.ID, nil)
		require.NoError(t, err)
		require.True(t, canceled.Ended, "nobody holds the available episode: it ends at once")
		next, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "reused", Owner: "later", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, claims.Token{Key: "reused", Owner: "later", Fence: 2}, next.Token, "the cancel fenced out a finished claim")
		require.EqualValues(t, 1, next.Attempt, "the finished claim was rewritten as failed")
	})

	// An operator's requeue is the one way back from a terminal status, and
	// it refuses an archived episode: archiving is for good, which is what
	// lets every other statement treat "queued or running" as "not archived".
	t.Run("RequeueRefusesAnArchivedEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		o := startedFlow(t, b, "archived", "node-a")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), o.Episode.ID, o.Claim.Token, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: "error"}))
		b.Archive(t, o.Episode.ID)
		_, err := b.Store.RequeueEpisode(ctx(t), o.Episode.ID, "operator")
		require.Error(t, err, "an archived episode was requeued")
		got := get(t, EpisodesBackend{Store: b.Store}, o.Episode.ID)
		require.Equal(t, episodes.StatusFailed, got.Status)
		require.Equal(t, o.Episode.Attempts, got.Attempts)
		require.Empty(t, claimAvailable(t, b, "poller", "", "", 10), "nothing was made available")
	})

	t.Run("DelayedWorkIsTakenOnlyWhenDue", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		later, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: flowEpisode("event:a:e:later"), Delay: time.Hour})
		require.NoError(t, err)
		require.True(t, later.Created)
		now := deferEpisode(t, b, "event:a:e:now", "", "")
		ds := claimAvailable(t, b, "poller", "", "", 10)
		require.Len(t, ds, 1, "the delayed episode is not due for an hour")
		require.Equal(t, now.Episode.ID, ds[0].EpisodeID)
		require.Empty(t, claimAvailable(t, b, "poller", "", "", 10))

		// Expiry counts from when an episode fell due, not from its
		// creation: created two hours ago, due in an hour.
		b.Age(t, later.Episode.ID, 2*time.Hour)
		expired, err := b.Store.ExpireAvailable(ctx(t), episodes.ExpireQuery{TTL: time.Minute})
		require.NoError(t, err)
		require.Empty(t, expired)

		b.AgeAvailable(t, later.Episode.ID, time.Hour+time.Second)
		got := takeOne(t, b, "poller")
		require.Equal(t, later.Episode.ID, got.EpisodeID, "due now")
	})

	// A -> A: the same node's earlier grant differs from its current one
	// only in the fence, which alone must refuse its retry (a retry ends
	// the attempt: a stale one would release the live grant and queue the
	// episode while it runs).
	t.Run("RetryOfTheSameNodesEarlierGrantIsRefused", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := newEpisode("event:a:e:retry-aa")
		n.ActorID, n.ExpectationID, n.Owner, n.Lease, n.Start = "a", "e", "node-a", time.Minute, true
		res, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		old := res.Claim
		b.ExpireClaim(t, old.Key)
		cur, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: old.Key, Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		require.Equal(t, old.Fence+1, cur.Fence)

		_, err = b.Store.RetryEpisode(ctx(t), res.Episode.ID, old.Token, episodes.Retry{ErrorClass: "error", Backoff: time.Hour})
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		forged := cur.Token
		forged.Owner = "a-node" // the current fence under an owner sorting before node-a
		_, err = b.Store.RetryEpisode(ctx(t), res.Episode.ID, forged, episodes.Retry{ErrorClass: "error", Backoff: time.Hour})
		require.ErrorIs(t, err, claims.ErrLeaseLost, "the owner is part of the grant")
		got := get(t, EpisodesBackend{Store: b.Store}, res.Episode.ID)
		require.Equal(t, episodes.StatusRunning, got.Status, "the refused retry changed nothing")
		require.EqualValues(t, 0, got.Attempts)
		r, err := b.Store.RetryEpisode(ctx(t), res.Episode.ID, cur.Token, episodes.Retry{ErrorClass: "error", Backoff: time.Hour})
		require.NoError(t, err, "the current grant is intact")
		require.EqualValues(t, 1, r.Attempts)
	})

	t.Run("RetryMakesTheEpisodeAvailableAfterItsBackoff", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		for _, deferred := range []bool{false, true} { // created under a grant, and taken by a poll
			key := fmt.Sprintf("event:a:e:retry-%v", deferred)
			var ep episodes.Episode
			var c claims.Claim
			if deferred {
				d := deferEpisode(t, b, key, "", "")
				got := takeOne(t, b, "poller")
				require.Equal(t, d.Episode.ID, got.EpisodeID)
				ep, c = d.Episode, got.Claim
			} else {
				n := flowEpisode(key)
				n.Owner, n.Lease = "node-a", time.Minute
				res, err := b.Store.CreateEpisode(ctx(t), n)
				require.NoError(t, err)
				ep, c = res.Episode, res.Claim
			}
			_, err := b.Store.StartEpisode(ctx(t), ep.ID, c.Token)
			require.NoError(t, err)

			stale := c.Token
			stale.Fence++
			_, err = b.Store.RetryEpisode(ctx(t), ep.ID, stale, episodes.Retry{ErrorClass: "error", Backoff: time.Hour})
			require.ErrorIs(t, err, claims.ErrLeaseLost, "fenced: a retry from another grant changes nothing")

			beforeRetry := time.Now()
			r, err := b.Store.RetryEpisode(ctx(t), ep.ID, c.Token, episodes.Retry{ErrorClass: "error",
				ErrorDetail: []byte(`{"reason":"gateway timeout"}`), StepNo: 1, StepData: []byte(`{"error":"gateway timeout"}`),
				Backoff: time.Hour})
			require.NoError(t, err)
			require.EqualValues(t, 1, r.Attempts)
			require.WithinDuration(t, beforeRetry.Add(time.Hour), r.RunAfter, time.Minute, "due after its backoff")
			got := get(t, EpisodesBackend{Store: b.Store}, ep.ID)
			require.Equal(t, episodes.StatusQueued, got.Status)
			require.Equal(t, "retrying", got.Phase)
			require.EqualValues(t, 2, got.Attempt())
			require.Equal(t, "error", got.ErrorClass)
			_, err = b.Store.RetryEpisode(ctx(t), ep.ID, c.Token, episodes.Retry{Backoff: time.Hour})
			require.ErrorIs(t, err, claims.ErrLeaseLost, "the claim was released: a second retry lands nothing")
			require.Empty(t, claimAvailable(t, b, "poller", "", "", 10), "not due for an hour")
			w, ok, err := b.Store.NextAvailableDue(ctx(t), episodes.AvailableQuery{Runnable: onE("a")})
			require.NoError(t, err)
			require.True(t, ok, "the poller waits for it")
			require.Greater(t, w, 59*time.Minute)
			// Its claim is released, but it is available work, the pollers':
			// recovery neither lists nor takes it (that would skip the
			// backoff and count the attempt twice).
			list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 10})
			require.NoError(t, err)
			require.Empty(t, list)
			_, _, err = b.Store.ClaimForRecovery(ctx(t), ep.ID, "sweeper", time.Minute, time.Minute)
			require.ErrorIs(t, err, claims.ErrBusy)
			_, err = b.Store.RequeueOrphan(ctx(t), ep.ID, r.Attempts, "sweeper", time.Minute)
			require.ErrorIs(t, err, claims.ErrBusy)

			b.AgeAvailable(t, ep.ID, time.Hour+time.Second)
			next := takeOne(t, b, "poller")
			require.Equal(t, ep.ID, next.EpisodeID, "due: available to any poller")
			require.Equal(t, c.Fence+1, next.Claim.Fence, "the next attempt holds a new grant")
			require.Equal(t, c.Attempt+1, next.Claim.Attempt, "of the released claim")
			require.Equal(t, claims.GrantReclaim, next.Claim.Grant)
			require.EqualValues(t, 2, next.Episode.Attempt())
			require.EqualValues(t, 2, next.NextStep, "the run appends after the failed attempt's step")
			steps, err := b.Store.ListSteps(ctx(t), ep.ID)
			require.NoError(t, err)
			require.Len(t, steps, 1, "the failed attempt is journaled")
		}
	})

	runFlow(t, newBackend)
	runGivenBack(t, newBackend)
	runBatchRequeue(t, newBackend)
	runPolls(t, newBackend)

	t.Run("PollsNeverTakeARunningEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Available, then started under a grant made another way, whose
		// lease has expired: an orphan for recovery, not available work a
		// poll may grant.
		d, _ := startedElsewhere(t, b, "event:a:e:running")
		b.ExpireClaim(t, "event:a:e:running")
		b.AgeAvailable(t, d.Episode.ID, time.Hour)
		require.Empty(t, claimAvailable(t, b, "poller", "", "", 10), "a running episode is never taken by a poll")
		ep := get(t, EpisodesBackend{Store: b.Store}, d.Episode.ID)
		require.Equal(t, episodes.StatusRunning, ep.Status)
		require.Equal(t, "other", ep.OwnerNode)
	})

	// The same episode is recovery's once that grant lapsed: it ran, and
	// no poll or expiry takes a running episode, so nothing else ever would.
	t.Run("AnEpisodeStartedWhileAvailableIsAnOrphanOnceItsGrantLapses", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		d, _ := startedElsewhere(t, b, "event:a:e:running")
		b.ExpireClaim(t, "event:a:e:running")
		require.False(t, listedOrphan(t, b, d.Episode.ID).GivenBack, "listed as an orphan whose run counts")
		q, err := b.Store.RequeueOrphan(ctx(t), d.Episode.ID, 0, "sweeper", time.Minute)
		require.NoError(t, err)
		require.EqualValues(t, 1, q.Attempts)
		require.Equal(t, d.Episode.ID, takeOne(t, b, "poller").EpisodeID, "requeued, then taken by a poll")
	})

	t.Run("ExpiryNeverCancelsAStartedEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Available, then started under a grant made another way, and that
		// grant's lease expires: the episode is running, an orphan for
		// recovery, not available work the expiry may cancel, however long
		// ago it fell due.
		d, _ := startedElsewhere(t, b, "event:a:e:started")
		b.ExpireClaim(t, "event:a:e:started")
		b.AgeAvailable(t, d.Episode.ID, 2*time.Hour)
		// And one a poll started, which fell due as long ago.
		taken := deferEpisode(t, b, "event:a:e:taken", "", "")
		b.AgeAvailable(t, taken.Episode.ID, 2*time.Hour)
		require.Equal(t, taken.Episode.ID, takeOne(t, b, "poller").EpisodeID)
		b.ExpireClaim(t, "event:a:e:taken")

		expired, err := b.Store.ExpireAvailable(ctx(t), episodes.ExpireQuery{TTL: time.Hour})
		require.NoError(t, err)
		require.Empty(t, expired)
		expired, err = b.Store.ExpireAvailable(ctx(t), episodes.ExpireQuery{TTL: time.Hour, AllEnvs: true})
		require.NoError(t, err)
		require.Empty(t, expired)
		for _, id := range []int64{d.Episode.ID, taken.Episode.ID} {
			require.Equal(t, episodes.StatusRunning, get(t, EpisodesBackend{Store: b.Store}, id).Status)
		}
	})

	t.Run("ExpiryCancelsOnlyAvailableEpisodesInScopeDueLongerAgoThanTheTTL", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		e := EpisodesBackend{Store: b.Store}
		// Taken by a poll first (the poll takes the earliest due): started,
		// no longer available.
		taken := deferEpisode(t, b, "event:a:e:taken", "", "")
		require.Equal(t, taken.Episode.ID, takeOne(t, b, "poller").EpisodeID)
		old := deferEpisode(t, b, "event:a:e:old", "", "")
		fresh := deferEpisode(t, b, "event:a:e:fresh", "", "")
		blue := deferEpisode(t, b, "event:a:e:blue", "blue", "")
		rc := deferEpisode(t, b, "env:rc:event:a:e:old", "", "rc")
		staging := deferEpisode(t, b, "env:staging:event:a:e:old", "stack-b", "staging")
		held := deferEpisode(t, b, "event:a:e:held", "", "")
		acquire(t, e, "event:a:e:held", "recoverer") // a direct claims user holds its key live
		// A retried run, available again (phase retrying), due at once.
		r := startedFlow(t, b, "event:a:e:retried", "node-a")
		_, err := b.Store.RetryEpisode(ctx(t), r.Episode.ID, r.Claim.Token, episodes.Retry{ErrorClass: "error"})
		require.NoError(t, err)
		for _, id := range []int64{taken.Episode.ID, old.Episode.ID, blue.Episode.ID, rc.Episode.ID, staging.Episode.ID, held.Episode.ID, r.Episode.ID} {
			b.AgeAvailable(t, id, 2*time.Hour)
		}
		b.AgeAvailable(t, fresh.Episode.ID, 59*time.Minute)

		expire := func(q episodes.ExpireQuery) []int64 {
			t.Helper()
			q.TTL = time.Hour
			ids, err := b.Store.ExpireAvailable(ctx(t), q)
			require.NoError(t, err)
			return ids
		}
		require.ElementsMatch(t, []int64{old.Episode.ID, r.Episode.ID}, expire(episodes.ExpireQuery{Stack: "green"}),
			"a stack expires its own and unstamped episodes of its env, due longer ago than the TTL, nobody holding them")
		require.ElementsMatch(t, []int64{blue.Episode.ID}, expire(episodes.ExpireQuery{}), "an empty stack, every stack")
		require.Empty(t, expire(episodes.ExpireQuery{}), "expiry is idempotent")
		require.ElementsMatch(t, []int64{rc.Episode.ID}, expire(episodes.ExpireQuery{Env: "rc"}), "each env expires its own")
		require.ElementsMatch(t, []int64{staging.Episode.ID}, expire(episodes.ExpireQuery{Env: "rc", Stack: "green", AllEnvs: true}),
			"maintenance expires every env's and stack's")

		for _, id := range []int64{old.Episode.ID, r.Episode.ID, blue.Episode.ID, rc.Episode.ID, staging.Episode.ID} {
			got := get(t, e, id)
			require.Equal(t, episodes.StatusCanceled, got.Status, got.DedupeKey)
			require.Equal(t, episodes.ClassTriggerExpired, got.ErrorClass, got.DedupeKey)
			require.Empty(t, got.Phase, got.DedupeKey)
			require.NotNil(t, got.FinishedAt, got.DedupeKey)
			_, err := b.Store.CancelEpisode(ctx(t), id, nil)
			require.ErrorIs(t, err, episodes.ErrNotLive, "%s ended", got.DedupeKey)
		}
		require.Equal(t, episodes.StatusRunning, get(t, e, taken.Episode.ID).Status)
		require.Equal(t, episodes.StatusQueued, get(t, e, held.Episode.ID).Status, "its key is held live: left to its holder")
		require.Equal(t, episodes.StatusQueued, get(t, e, fresh.Episode.ID).Status, "due less than the TTL ago")
		// What is left available is the fresh one (and held, which the
		// poll leaves to its holder): nothing expired is taken.
		got := claimAvailable(t, b, "poller", "", "", 10)
		granted := map[int64]int64{}
		for _, d := range got {
			granted[d.EpisodeID] = d.Claim.Fence
		}
		require.Equal(t, map[int64]int64{fresh.Episode.ID: 1, held.Episode.ID: 0}, granted)
	})
}

// startedElsewhere defers an episode of key, then grants its key to
// "other" (a direct claims user) and starts it under that grant: an
// available episode started another way than by a poll.
func startedElsewhere(t *testing.T, b DeferredBackend, key string) (episodes.DeferredCreated, claims.Claim) {
	t.Helper()
	d := deferEpisode(t, b, key, "", "")
	c := acquire(t, EpisodesBackend{Store: b.Store}, key, "other")
	_, err := b.Store.StartEpisode(ctx(t), d.Episode.ID, c.Token)
	require.NoError(t, err)
	return d, c
}

// deferEpisode creates an available episode of key for actor a's
// expectation e, due at once.
func deferEpisode(t *testing.T, b DeferredBackend, key, stack, env string) episodes.DeferredCreated {
	t.Helper()
	n := flowEpisode(key)
	n.SourceStack, n.SourceEnv = stack, env
	res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n})
	require.NoError(t, err)
	return res
}

// onE is the (actor, "e") pair of each actor: what a poller that runs
// expectation "e" of those actors asks work for.
func onE(actors ...string) []episodes.Runnable {
	out := make([]episodes.Runnable, len(actors))
	for i, a := range actors {
		out[i] = episodes.Runnable{ActorID: a, ExpectationID: "e"}
	}
	return out
}

// claimAvailable polls for owner, a poller that runs actor a's expectation
// e in env and stack, under a minute's lease: what it took.
func claimAvailable(t testing.TB, b DeferredBackend, owner, stack, env string, limit int) []episodes.Dispatched {
	t.Helper()
	ds, err := b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{
		Owner: owner, Lease: time.Minute, Env: env, Stack: stack, Runnable: onE("a"), Limit: limit,
	})
	require.NoError(t, err)
	return ds
}

// takeOne polls for owner and requires that it took exactly one episode,
// granted and started.
func takeOne(t testing.TB, b DeferredBackend, owner string) episodes.Dispatched {
	t.Helper()
	ds := claimAvailable(t, b, owner, "", "", 10)
	require.Len(t, ds, 1)
	require.Positive(t, ds[0].Claim.Fence, "granted")
	require.True(t, ds[0].Started)
	return ds[0]
}

// onAFinishedKey defers an episode of key after an earlier grant of key
// ("earlier") finished: the key's claim row is done, fence 1.
func onAFinishedKey(t *testing.T, b DeferredBackend, key string) episodes.DeferredCreated {
	t.Helper()
	c, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: key, Owner: "earlier", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, b.Store.Complete(ctx(t), c.Token))
	return deferEpisode(t, b, key, "", "")
}
