package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// DeferredStore is the deferred-execution surface of an adapter: the
// statements in sql/queries/<dialect>/trigger_requests.sql.
type DeferredStore interface {
	EpisodeStore
	CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error)
	ClaimTriggerRequests(ctx context.Context, q episodes.RequestQuery) ([]episodes.TriggerRequest, error)
	DispatchTriggerRequest(ctx context.Context, r episodes.TriggerRequest, lease time.Duration) (episodes.Dispatched, error)
	ExpireTriggerRequests(ctx context.Context, q episodes.ExpireQuery) ([]episodes.Expired, error)
	ReleaseTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest) ([]int64, error)
	NextTriggerRequestDue(ctx context.Context, q episodes.RequestQuery) (time.Duration, bool, error)
	ListTriggerRequests(ctx context.Context, q episodes.RequestListQuery) ([]episodes.RequestInfo, error)
	RetryEpisode(ctx context.Context, id int64, t claims.Token, r episodes.Retry) (episodes.Retried, error)
	// Work that flows (flow.go): cluster-wide cancel and retry, and
	// recovery's requeue.
	CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error)
	ListCancelRequests(ctx context.Context, owner string) ([]episodes.CancelRequest, error)
	RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error)
	RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error)
	FinishEpisodes(ctx context.Context, owner string, items []episodes.FinishItem) ([]int64, error)
	CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error)
}

// DeferredBackend is what the deferred scenarios need from one isolated
// backend.
type DeferredBackend struct {
	Store DeferredStore
	// LapseRequestClaim makes the poller claim on request id past on the
	// database clock (claim_until in the past).
	LapseRequestClaim func(t testing.TB, id int64)
	// AgeRequest moves request id's created_at back by d.
	AgeRequest func(t testing.TB, id int64, d time.Duration)
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

// RunDeferred runs the trigger-request scenarios: atomic creation, one
// dispatch per request under concurrent pollers, lapsed poller claims,
// scoping by env, stack and actor, and expiry.
func RunDeferred(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("CreateWritesEpisodeAndRequest", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		res := deferEpisode(t, b, "event:a:e:1", "", "")
		require.True(t, res.Created)
		require.Positive(t, res.RequestID)
		require.Equal(t, episodes.StatusQueued, res.Episode.Status)

		again := deferEpisode(t, b, "event:a:e:1", "", "")
		require.False(t, again.Created, "a live episode holds the key")
		direct := newEpisode("event:a:e:1")
		direct.Owner, direct.Lease = "full-node", time.Minute
		d, err := b.Store.CreateEpisode(ctx(t), direct)
		require.NoError(t, err)
		require.False(t, d.Created, "deferred and direct creation share one dedupe index")

		reqs := listRequests(t, b, "", "")
		require.Len(t, reqs, 1)
		r := reqs[0]
		require.Equal(t, res.RequestID, r.ID)
		require.Equal(t, res.Episode.ID, r.EpisodeID)
		require.Equal(t, episodes.RequestPending, r.Status)
		require.Equal(t, "trigger-node", r.SourceNode)
		require.Equal(t, "a", r.ActorID)
		require.Equal(t, "e", r.ExpectationID)

		// A deferred episode waits for a poller, not for a lease: recovery
		// never takes it for an orphan, however old it is.
		b.Age(t, res.Episode.ID, time.Hour)
		orphans, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, orphans)
	})

	t.Run("ClaimThenDispatchGrantsTheEpisodeClaim", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		res := deferEpisode(t, b, "event:a:e:1", "", "")
		reqs := claimRequests(t, b, "poller-1", "", "", 10)
		require.Len(t, reqs, 1)
		require.EqualValues(t, 1, reqs[0].Fence)
		require.Equal(t, "poller-1", reqs[0].Owner)
		require.Empty(t, claimRequests(t, b, "poller-2", "", "", 10), "a live request claim excludes other pollers")

		d, err := b.Store.DispatchTriggerRequest(ctx(t), reqs[0], time.Minute)
		require.NoError(t, err)
		require.Equal(t, res.Episode.ID, d.EpisodeID)
		require.EqualValues(t, 1, d.Claim.Fence)
		require.Equal(t, "poller-1", d.Claim.Owner)
		require.Equal(t, "event:a:e:1", d.Claim.Key)
		require.True(t, d.Started, "the hand-over starts the episode under the grant it makes")
		require.Equal(t, res.Episode.ID, d.Episode.ID)
		require.Equal(t, episodes.StatusRunning, d.Episode.Status)
		require.Equal(t, "poller-1", d.Episode.OwnerNode)
		require.Equal(t, "event:a:e:1", d.Episode.DedupeKey)
		require.EqualValues(t, 1, d.NextStep)
		require.NotNil(t, d.Episode.StartedAt)
		stored := get(t, EpisodesBackend{Store: b.Store}, res.Episode.ID)
		require.Equal(t, episodes.StatusRunning, stored.Status)
		require.Equal(t, "poller-1", stored.OwnerNode)
		require.Equal(t, stored.ActorID, d.Episode.ActorID)
		require.Equal(t, stored.ExpectationID, d.Episode.ExpectationID)
		require.Equal(t, stored.MaxAttempts, d.Episode.MaxAttempts)
		require.Equal(t, stored.Attempts, d.Episode.Attempts)
		_, err = b.Store.StartEpisode(ctx(t), res.Episode.ID, d.Claim.Token)
		require.NoError(t, err, "the granted claim runs the episode")
		require.Equal(t, episodes.RequestCompleted, listRequests(t, b, "", "")[0].Status)

		_, err = b.Store.DispatchTriggerRequest(ctx(t), reqs[0], time.Minute)
		require.ErrorIs(t, err, claims.ErrLeaseLost, "a request is handed over once")
		require.Empty(t, claimRequests(t, b, "poller-2", "", "", 10), "completed requests are never claimed")
	})

	t.Run("LapsedPollerClaimIsTakenOver", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		res := deferEpisode(t, b, "event:a:e:1", "", "")
		dead := claimRequests(t, b, "dead-poller", "", "", 10)
		require.Len(t, dead, 1)
		require.Empty(t, claimRequests(t, b, "live-poller", "", "", 10))

		b.LapseRequestClaim(t, dead[0].ID)
		live := claimRequests(t, b, "live-poller", "", "", 10)
		require.Len(t, live, 1)
		require.EqualValues(t, 2, live[0].Fence)

		_, err := b.Store.DispatchTriggerRequest(ctx(t), dead[0], time.Minute)
		require.ErrorIs(t, err, claims.ErrLeaseLost, "the dead poller's claim was taken over")
		d, err := b.Store.DispatchTriggerRequest(ctx(t), live[0], time.Minute)
		require.NoError(t, err)
		require.Equal(t, res.Episode.ID, d.EpisodeID)
		require.Equal(t, "live-poller", d.Claim.Owner)
	})

	t.Run("AnEarlierClaimOfTheSamePollerCannotHandOver", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		res := deferEpisode(t, b, "event:a:e:1", "", "")
		first := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, first, 1)
		b.LapseRequestClaim(t, first[0].ID)
		second := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, second, 1)
		require.Equal(t, first[0].Fence+1, second[0].Fence)
		_, err := b.Store.DispatchTriggerRequest(ctx(t), first[0], time.Minute)
		require.ErrorIs(t, err, claims.ErrLeaseLost, "the request claim's fence, not only its owner, decides")
		d, err := b.Store.DispatchTriggerRequest(ctx(t), second[0], time.Minute)
		require.NoError(t, err)
		require.Equal(t, res.Episode.ID, d.EpisodeID)
		require.True(t, d.Started)
	})

	t.Run("AHandOverReturnsTheGrantItMade", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// As RecoveryReturnsTheGrantItMade: a key whose claim an earlier
		// grant finished, so the hand-over's grant is attempt 1 at fence 2
		// and a grant returned with one in the other's place is seen; alone
		// and, where the adapter has it, in a batch.
		for _, key := range []string{"reused-alone", "reused-batch"} {
			c, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: key, Owner: "earlier", Lease: time.Minute})
			require.NoError(t, err)
			require.NoError(t, b.Store.Complete(ctx(t), c.Token))
			deferEpisode(t, b, key, "", "")
		}
		reqs := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 2)
		lease := 90 * time.Second
		requireGrant := func(d episodes.Dispatched, key string) {
			t.Helper()
			require.Equal(t, claims.Token{Key: key, Owner: "poller", Fence: 2}, d.Claim.Token)
			require.EqualValues(t, 1, d.Claim.Attempt)
			require.Equal(t, claims.GrantReclaim, d.Claim.Grant)
			require.Equal(t, lease, d.Claim.LeaseUntil.Sub(d.Claim.ClaimedAt), "lease_until is the grant's instant plus the lease")
			require.True(t, d.Started)
			require.Equal(t, key, d.Episode.DedupeKey)
		}
		for _, r := range reqs {
			if ep := get(t, EpisodesBackend{Store: b.Store}, r.EpisodeID); ep.DedupeKey == "reused-alone" {
				d, err := b.Store.DispatchTriggerRequest(ctx(t), r, lease)
				require.NoError(t, err)
				requireGrant(d, "reused-alone")
			} else if bd, ok := b.Store.(BatchDispatcher); ok {
				ds, err := bd.DispatchTriggerRequests(ctx(t), "poller", []episodes.TriggerRequest{r}, lease)
				require.NoError(t, err)
				require.Len(t, ds, 1)
				requireGrant(ds[0], "reused-batch")
			}
		}
	})

	// The episode a hand-over returns is the episode as it now stands, field
	// for field (the runner hands it to the strategy): a retried run with a
	// stack, a payload and the error of its last attempt, alone and, where
	// the adapter has it, in a batch.
	t.Run("AHandOverReturnsTheEpisodeAsStored", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		for _, key := range []string{"retried-alone", "retried-batch"} {
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
			_, err = b.Store.RetryEpisode(ctx(t), res.Episode.ID, res.Claim.Token,
				episodes.Retry{ErrorClass: "timeout", ErrorDetail: []byte(`{"after":"` + key + `"}`)})
			require.NoError(t, err)
		}
		reqs := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 2)
		e := EpisodesBackend{Store: b.Store}
		for _, r := range reqs {
			var d episodes.Dispatched
			if ep := get(t, e, r.EpisodeID); ep.DedupeKey == "retried-alone" {
				var err error
				d, err = b.Store.DispatchTriggerRequest(ctx(t), r, time.Minute)
				require.NoError(t, err)
			} else if bd, ok := b.Store.(BatchDispatcher); ok {
				ds, err := bd.DispatchTriggerRequests(ctx(t), "poller", []episodes.TriggerRequest{r}, time.Minute)
				require.NoError(t, err)
				require.Len(t, ds, 1)
				d = ds[0]
			} else {
				continue
			}
			require.True(t, d.Started)
			stored := get(t, e, r.EpisodeID)
			require.Equal(t, "blue", stored.SourceStack)
			require.Equal(t, "timeout", stored.ErrorClass)
			requireSameEpisode(t, stored, d.Episode)
		}
	})

	// A poller's request claim is matched on its fence exactly: one never
	// granted (above the request's current fence) hands nothing over, alone
	// or batched.
	t.Run("AHandOverNamingAFenceNeverGrantedDoesNothing", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		deferEpisode(t, b, "ahead-alone", "", "")
		deferEpisode(t, b, "ahead-batch", "", "")
		reqs := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 2)
		for i := range reqs {
			reqs[i].Fence++
		}
		_, err := b.Store.DispatchTriggerRequest(ctx(t), reqs[0], time.Minute)
		require.ErrorIs(t, err, claims.ErrLeaseLost, "a fence never granted handed a request over")
		if bd, ok := b.Store.(BatchDispatcher); ok {
			ds, err := bd.DispatchTriggerRequests(ctx(t), "poller", reqs[1:], time.Minute)
			require.NoError(t, err)
			require.Empty(t, ds, "a fence never granted handed a request over in a batch")
		}
		released, err := b.Store.ReleaseTriggerRequests(ctx(t), "poller", reqs)
		require.NoError(t, err)
		require.Empty(t, released, "a fence never granted released a request")
		for _, r := range listRequests(t, b, "", "") {
			require.Equal(t, episodes.RequestClaimed, r.Status, "request %d", r.ID)
		}
	})

	t.Run("OnlyThePollerThatClaimedARequestHandsItOver", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		res := deferEpisode(t, b, "event:a:e:1", "", "")
		mine := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, mine, 1)
		// Another poller presenting the claim's fence, whether its name
		// sorts after the claimer's or before it, hands nothing over: the
		// claimer is compared for equality.
		for _, other := range []string{"zz-poller", "a-poller"} {
			forged := mine[0]
			forged.Owner = other
			_, err := b.Store.DispatchTriggerRequest(ctx(t), forged, time.Minute)
			require.ErrorIs(t, err, claims.ErrLeaseLost, "%s handed over poller's request", other)
		}
		require.Equal(t, episodes.RequestClaimed, listRequests(t, b, "", "")[0].Status)
		require.Equal(t, episodes.StatusQueued, get(t, EpisodesBackend{Store: b.Store}, res.Episode.ID).Status)
		d, err := b.Store.DispatchTriggerRequest(ctx(t), mine[0], time.Minute)
		require.NoError(t, err)
		require.True(t, d.Started)
		require.Equal(t, "poller", d.Claim.Owner)
	})

	t.Run("ConcurrentPollersDispatchEachRequestOnce", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		const requests, pollers = 120, 8
		for i := range requests {
			deferEpisode(t, b, fmt.Sprintf("event:a:e:%d", i), "", "")
		}
		var (
			mu         sync.Mutex
			dispatched = map[int64][]string{}
			errs       []error
			wg         sync.WaitGroup
			start      = make(chan struct{})
		)
		for p := range pollers {
			owner := fmt.Sprintf("poller-%d", p)
			wg.Go(func() {
				<-start
				for {
					reqs, err := b.Store.ClaimTriggerRequests(context.Background(), episodes.RequestQuery{
						Owner: owner, Lease: time.Minute, Runnable: onE("a"), Limit: 4,
					})
					if err == nil && len(reqs) == 0 {
						return
					}
					for _, r := range reqs {
						var d episodes.Dispatched
						if d, err = b.Store.DispatchTriggerRequest(context.Background(), r, time.Minute); err != nil {
							break
						}
						if d.Claim.Fence > 0 {
							mu.Lock()
							dispatched[d.EpisodeID] = append(dispatched[d.EpisodeID], owner)
							mu.Unlock()
						}
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs)
		require.Len(t, dispatched, requests, "every request dispatched")
		for id, owners := range dispatched {
			require.Len(t, owners, 1, "episode %d dispatched to %v", id, owners)
		}
		require.Len(t, listRequests(t, b, "", episodes.RequestCompleted), requests)
	})

	t.Run("PollersAreScopedByEnvStackAndActor", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		deferEpisode(t, b, "event:a:e:default", "", "")
		deferEpisode(t, b, "env:rc:event:a:e:rc", "", "rc")
		deferEpisode(t, b, "event:a:e:stack-a", "stack-a", "")
		deferEpisode(t, b, "event:a:e:stack-b", "stack-b", "")
		claimed := func(owner, stack, env string, actors ...string) []string {
			reqs, err := b.Store.ClaimTriggerRequests(ctx(t), episodes.RequestQuery{
				Owner: owner, Lease: time.Minute, Env: env, Stack: stack, Runnable: onE(actors...), Limit: 10,
			})
			require.NoError(t, err)
			var keys []string
			for _, r := range reqs {
				ep, err := b.Store.GetEpisode(ctx(t), r.EpisodeID)
				require.NoError(t, err)
				keys = append(keys, ep.DedupeKey)
			}
			return keys
		}
		require.Empty(t, claimed("p", "", "", "other-actor"), "only the poller's full actors")
		require.Empty(t, claimed("p", "", "staging"), "no actors, no claims")
		require.ElementsMatch(t, []string{"event:a:e:default", "event:a:e:stack-a"}, claimed("p", "stack-a", "", "a"),
			"a stack sees its own and unstamped requests of its env")
		require.ElementsMatch(t, []string{"event:a:e:stack-b"}, claimed("p", "", "", "a"),
			"an empty stack filter sees every stack; rc is another env")
		require.ElementsMatch(t, []string{"env:rc:event:a:e:rc"}, claimed("p", "", "rc", "a"))
	})

	// A node of another version (an expectation added or removed) asks for
	// the (actor, expectation) pairs it runs: a request of a pair it does
	// not run is neither claimed nor counted in its next due time, so it
	// is never started, nor an attempt spent, where its code is missing.
	t.Run("PollersTakeOnlyTheExpectationsTheyRun", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Expectations the old node lacks, named on both sides of its own
		// ("e"), so no ordering of the names can pass for equality.
		deferFor := func(exp, key string, delay time.Duration) {
			t.Helper()
			n := newEpisode(key)
			n.ActorID, n.ExpectationID = "a", exp
			res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n, SourceNode: "new-node", Delay: delay})
			require.NoError(t, err)
			require.True(t, res.Created)
		}
		deferFor("audit", "event:a:audit:1", 0)
		deferFor("refund", "event:a:refund:1", 0)
		deferFor("refund", "event:a:refund:later", time.Hour)
		charge := deferEpisode(t, b, "event:a:e:charge", "", "")

		old := []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}, {ActorID: "b", ExpectationID: "refund"}}
		_, ok, err := b.Store.NextTriggerRequestDue(ctx(t), episodes.RequestQuery{Runnable: old})
		require.NoError(t, err)
		require.False(t, ok, "the delayed refund is not the old node's to wait for")
		deferFor("audit", "event:a:audit:later", time.Minute)
		_, ok, err = b.Store.NextTriggerRequestDue(ctx(t), episodes.RequestQuery{Runnable: old})
		require.NoError(t, err)
		require.False(t, ok, "nor the delayed audit")
		reqs, err := b.Store.ClaimTriggerRequests(ctx(t), episodes.RequestQuery{Owner: "old-node", Lease: time.Minute, Runnable: old, Limit: 10})
		require.NoError(t, err)
		require.Len(t, reqs, 1, "only the expectation the old node runs")
		require.Equal(t, charge.Episode.ID, reqs[0].EpisodeID)

		current := []episodes.Runnable{{ActorID: "a", ExpectationID: "refund"}}
		w, ok, err := b.Store.NextTriggerRequestDue(ctx(t), episodes.RequestQuery{Runnable: current})
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, w, 59*time.Minute)
		reqs, err = b.Store.ClaimTriggerRequests(ctx(t), episodes.RequestQuery{Owner: "new-node", Lease: time.Minute, Runnable: current, Limit: 10})
		require.NoError(t, err)
		require.Len(t, reqs, 1, "the due refund, for the node that runs it")
		require.Equal(t, "refund", reqs[0].ExpectationID)
		ep, err := b.Store.GetEpisode(ctx(t), reqs[0].EpisodeID)
		require.NoError(t, err)
		require.Equal(t, "event:a:refund:1", ep.DedupeKey)
		require.Zero(t, ep.Attempts, "waiting cost no attempt")
	})

	t.Run("DispatchSkipsEpisodesThatAreNotOurs", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		held := deferEpisode(t, b, "event:a:e:held", "", "")
		_, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "event:a:e:held", Owner: "recoverer", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		reqs := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 1)
		d, err := b.Store.DispatchTriggerRequest(ctx(t), reqs[0], time.Minute)
		require.NoError(t, err)
		require.Equal(t, held.Episode.ID, d.EpisodeID)
		require.Zero(t, d.Claim.Fence, "a live claim elsewhere is never stolen")
		require.False(t, d.Started, "and the episode is not started")
		require.Equal(t, episodes.StatusQueued, get(t, EpisodesBackend{Store: b.Store}, held.Episode.ID).Status)
		require.Equal(t, episodes.RequestCompleted, listRequests(t, b, "", "")[0].Status)
	})

	t.Run("DispatchNeverRunsFinishedWorkAgain", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// The request is claimed, then its episode runs to the end under a
		// grant made another way; the hand-over that comes after must
		// neither grant the finished claim nor start the episode again.
		d, reqs, c := startedElsewhere(t, b, "event:a:e:done")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), d.Episode.ID, c.Token, episodes.Finish{Status: episodes.StatusDone}))

		requireNotHandedOver(t, b, reqs[0], d.Episode.ID, episodes.StatusDone)
		_, err := b.Store.Renew(ctx(t), c.Token, time.Minute)
		require.ErrorIs(t, err, claims.ErrNotOwner, "the claim stays done")

		// A completed request whose old claim time has passed is never
		// claimed again.
		b.LapseRequestClaim(t, reqs[0].ID)
		require.Empty(t, claimRequests(t, b, "poller-2", "", "", 10), "completed requests are never claimed")
	})

	t.Run("AnOrphanIsLeftOnlyForItsOwnRequest", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// An orphan is excluded from recovery by its own open trigger
		// request (pollers hand it over instead), never by another
		// episode's: a later episode waiting in the queue, with a higher
		// id, leaves an orphan recoverable.
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
		require.NoError(t, err, "an orphan was left for another episode's request")
		require.Equal(t, episodes.StatusQueued, q.Status)
		ep, c, err := b.Store.ClaimForRecovery(ctx(t), o.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.NoError(t, err, "an orphan was left for another episode's request")
		require.Equal(t, o.Episode.ID, ep.ID)
		require.Equal(t, o.Claim.Fence+1, c.Fence)
		_, _, err = b.Store.ClaimForRecovery(ctx(t), later.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy, "the queued episode's own request keeps it for the pollers")
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

		reqs := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 1)
		before := time.Now()
		got, err := b.Store.DispatchTriggerRequest(ctx(t), reqs[0], time.Minute)
		require.NoError(t, err)
		require.Equal(t, claims.Token{Key: "reused", Owner: "poller", Fence: 2}, got.Claim.Token)
		require.False(t, got.Claim.LocalStart().Before(before), "Dispatch stamps its grant's local start")
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
		require.True(t, canceled.Ended, "nobody holds the queued episode: it ends at once")
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
		require.Empty(t, claimRequests(t, b, "poller", "", "", 10), "no request was reopened")
	})

	t.Run("DelayedRequestIsClaimedOnlyWhenDue", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := newEpisode("event:a:e:later")
		n.ActorID, n.ExpectationID = "a", "e"
		later, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n, SourceNode: "trigger-node", Delay: time.Hour})
		require.NoError(t, err)
		require.True(t, later.Created)
		now := deferEpisode(t, b, "event:a:e:now", "", "")
		reqs := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 1, "the delayed request is not due for an hour")
		require.Equal(t, now.RequestID, reqs[0].ID)

		// Expiry counts from when a request was due, not from its creation.
		expired, err := b.Store.ExpireTriggerRequests(ctx(t), episodes.ExpireQuery{TTL: time.Minute})
		require.NoError(t, err)
		require.Empty(t, expired)

		b.AgeRequest(t, later.RequestID, time.Hour+time.Second)
		reqs = claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 1, "due now")
		require.Equal(t, later.RequestID, reqs[0].ID)
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
		for _, deferred := range []bool{false, true} { // with no request yet, and reusing its request
			key := fmt.Sprintf("event:a:e:retry-%v", deferred)
			var ep episodes.Episode
			var c claims.Claim
			if deferred {
				d := deferEpisode(t, b, key, "", "")
				reqs := claimRequests(t, b, "poller", "", "", 10)
				require.Len(t, reqs, 1)
				got, err := b.Store.DispatchTriggerRequest(ctx(t), reqs[0], time.Minute)
				require.NoError(t, err)
				ep, c = d.Episode, got.Claim
			} else {
				n := newEpisode(key)
				n.ActorID, n.ExpectationID, n.Owner, n.Lease = "a", "e", "node-a", time.Minute
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

			r, err := b.Store.RetryEpisode(ctx(t), ep.ID, c.Token, episodes.Retry{ErrorClass: "error",
				ErrorDetail: []byte(`{"reason":"gateway timeout"}`), StepNo: 1, StepData: []byte(`{"error":"gateway timeout"}`),
				Backoff: time.Hour})
			require.NoError(t, err)
			require.EqualValues(t, 1, r.Attempts)
			got := get(t, EpisodesBackend{Store: b.Store}, ep.ID)
			require.Equal(t, episodes.StatusQueued, got.Status)
			require.Equal(t, "retrying", got.Phase)
			require.EqualValues(t, 2, got.Attempt())
			require.Equal(t, "error", got.ErrorClass)
			_, err = b.Store.RetryEpisode(ctx(t), ep.ID, c.Token, episodes.Retry{Backoff: time.Hour})
			require.ErrorIs(t, err, claims.ErrLeaseLost, "the claim was released: a second retry lands nothing")
			require.Empty(t, claimRequests(t, b, "poller", "", "", 10), "not due for an hour")
			// Its claim is released, but it is available work, the pollers':
			// recovery neither lists nor takes it (that would skip the
			// backoff and count the attempt twice).
			list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 10})
			require.NoError(t, err)
			require.Empty(t, list)
			_, _, err = b.Store.ClaimForRecovery(ctx(t), ep.ID, "sweeper", time.Minute, time.Minute)
			require.ErrorIs(t, err, claims.ErrBusy)

			b.AgeRequest(t, r.RequestID, time.Hour+time.Second)
			reqs := claimRequests(t, b, "poller", "", "", 10)
			require.Len(t, reqs, 1, "due: available to any poller")
			require.Equal(t, r.RequestID, reqs[0].ID)
			next, err := b.Store.DispatchTriggerRequest(ctx(t), reqs[0], time.Minute)
			require.NoError(t, err)
			require.Equal(t, c.Fence+1, next.Claim.Fence, "the next attempt holds a new grant")
			steps, err := b.Store.ListSteps(ctx(t), ep.ID)
			require.NoError(t, err)
			require.Len(t, steps, 1, "the failed attempt is journaled")
		}
	})

	runFlow(t, newBackend)
	runGivenBack(t, newBackend)
	runBatchRequeue(t, newBackend)
	runBatchDispatch(t, newBackend)
	runRequestGiveBack(t, newBackend)

	t.Run("DispatchNeverTakesARunningEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// The episode runs under another grant whose lease has expired: an
		// orphan for recovery, not queued work a hand-over may grant.
		d, reqs, _ := startedElsewhere(t, b, "event:a:e:running")
		b.ExpireClaim(t, "event:a:e:running")
		requireNotHandedOver(t, b, reqs[0], d.Episode.ID, episodes.StatusRunning)
	})

	t.Run("ExpiryNeverCancelsAStartedEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// The request is claimed, then its episode is started under a grant
		// made another way, and that grant's lease expires: the episode is
		// running, an orphan for recovery, not available work the trigger
		// expiry may cancel, however old its open request.
		d, _, _ := startedElsewhere(t, b, "event:a:e:started")
		b.ExpireClaim(t, "event:a:e:started")
		b.AgeRequest(t, d.RequestID, 2*time.Hour)
		b.LapseRequestClaim(t, d.RequestID)

		expired, err := b.Store.ExpireTriggerRequests(ctx(t), episodes.ExpireQuery{TTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, []episodes.Expired{{RequestID: d.RequestID, EpisodeID: d.Episode.ID}}, expired, "the request expires, its episode is not canceled")
		require.Equal(t, episodes.StatusRunning, get(t, EpisodesBackend{Store: b.Store}, d.Episode.ID).Status)
	})

	t.Run("ExpiryCancelsUnclaimedEpisodesInScope", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		old := deferEpisode(t, b, "event:a:e:old", "", "")
		fresh := deferEpisode(t, b, "event:a:e:fresh", "", "")
		rc := deferEpisode(t, b, "env:rc:event:a:e:old", "", "rc")
		claimedOld := deferEpisode(t, b, "event:a:e:claimed", "", "")
		b.AgeRequest(t, old.RequestID, 2*time.Hour)
		b.AgeRequest(t, rc.RequestID, 2*time.Hour)
		reqs := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, reqs, 3)
		b.AgeRequest(t, claimedOld.RequestID, 2*time.Hour)
		for _, id := range []int64{old.RequestID, fresh.RequestID} {
			b.LapseRequestClaim(t, id) // lapsed claims count as open
		}

		expired, err := b.Store.ExpireTriggerRequests(ctx(t), episodes.ExpireQuery{TTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, []episodes.Expired{{RequestID: old.RequestID, EpisodeID: old.Episode.ID, EpisodeCanceled: true}}, expired,
			"only the old request of this env whose claim is not live")
		ep, err := b.Store.GetEpisode(ctx(t), old.Episode.ID)
		require.NoError(t, err)
		require.Equal(t, episodes.StatusCanceled, ep.Status)
		require.Equal(t, episodes.ClassTriggerExpired, ep.ErrorClass)
		for _, id := range []int64{fresh.Episode.ID, rc.Episode.ID, claimedOld.Episode.ID} {
			ep, err := b.Store.GetEpisode(ctx(t), id)
			require.NoError(t, err)
			require.Equal(t, episodes.StatusQueued, ep.Status)
		}

		again, err := b.Store.ExpireTriggerRequests(ctx(t), episodes.ExpireQuery{TTL: time.Hour})
		require.NoError(t, err)
		require.Empty(t, again, "expiry is idempotent")
		rcExpired, err := b.Store.ExpireTriggerRequests(ctx(t), episodes.ExpireQuery{Env: "rc", TTL: time.Hour})
		require.NoError(t, err)
		require.Len(t, rcExpired, 1, "each env expires its own")
	})
}

// startedElsewhere defers an episode of key, claims its request for
// "poller", then grants its key to "other" and starts it there: a request
// still open for an episode another grant runs.
func startedElsewhere(t *testing.T, b DeferredBackend, key string) (episodes.DeferredCreated, []episodes.TriggerRequest, claims.Claim) {
	t.Helper()
	d := deferEpisode(t, b, key, "", "")
	reqs := claimRequests(t, b, "poller", "", "", 10)
	require.Len(t, reqs, 1)
	c, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: key, Owner: "other", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	_, err = b.Store.StartEpisode(ctx(t), d.Episode.ID, c.Token)
	require.NoError(t, err)
	return d, reqs, c
}

// requireNotHandedOver hands req over and requires that it granted and
// started nothing: the episode, which "other" ran, is still status and
// still names "other".
func requireNotHandedOver(t *testing.T, b DeferredBackend, req episodes.TriggerRequest, episodeID int64, status episodes.Status) {
	t.Helper()
	got, err := b.Store.DispatchTriggerRequest(ctx(t), req, time.Minute)
	require.NoError(t, err)
	require.Zero(t, got.Claim.Fence, "a %s episode's claim is never granted by a hand-over", status)
	require.False(t, got.Started)
	ep := get(t, EpisodesBackend{Store: b.Store}, episodeID)
	require.Equal(t, status, ep.Status)
	require.Equal(t, "other", ep.OwnerNode)
}

func deferEpisode(t *testing.T, b DeferredBackend, key, stack, env string) episodes.DeferredCreated {
	t.Helper()
	n := newEpisode(key)
	n.ActorID, n.ExpectationID = "a", "e"
	n.SourceStack, n.SourceEnv = stack, env
	res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n, SourceNode: "trigger-node"})
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

func claimRequests(t *testing.T, b DeferredBackend, owner, stack, env string, limit int) []episodes.TriggerRequest {
	t.Helper()
	reqs, err := b.Store.ClaimTriggerRequests(ctx(t), episodes.RequestQuery{
		Owner: owner, Lease: time.Minute, Env: env, Stack: stack, Runnable: onE("a"), Limit: limit,
	})
	require.NoError(t, err)
	return reqs
}

func listRequests(t *testing.T, b DeferredBackend, env, status string) []episodes.RequestInfo {
	t.Helper()
	reqs, err := b.Store.ListTriggerRequests(ctx(t), episodes.RequestListQuery{Env: env, Status: status, Limit: 1000})
	require.NoError(t, err)
	return reqs
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
