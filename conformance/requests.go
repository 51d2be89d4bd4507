package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// runRequestGiveBack runs the scenarios of the statements a poller uses
// around its claims: ReleaseTriggerRequests, which gives back claims it
// will not hand over (a drain, a failed hand-over), each fenced on its own
// request claim; and NextTriggerRequestDue, which tells it how long to
// sleep until the next request of its scope becomes claimable.
func runRequestGiveBack(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("ReleaseGivesBackOnlyThePollersCurrentClaims", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ids := map[string]int64{}
		for _, k := range []string{"release", "lapsed", "handed", "earlier"} {
			ids[k] = deferEpisode(t, b, "event:a:e:"+k, "", "").RequestID
		}
		byID := func(reqs []episodes.TriggerRequest) map[int64]episodes.TriggerRequest {
			m := map[int64]episodes.TriggerRequest{}
			for _, r := range reqs {
				m[r.ID] = r
			}
			return m
		}
		mine := byID(claimRequests(t, b, "poller", "", "", 10))
		require.Len(t, mine, 4)

		// lapsed: the claim lapsed and another poller holds it (fence + 1).
		b.LapseRequestClaim(t, ids["lapsed"])
		b.LapseRequestClaim(t, ids["earlier"])
		taken := claimRequests(t, b, "other-poller", "", "", 1)
		require.Len(t, taken, 1)
		// earlier: the same poller claimed it again since (fence + 1).
		again := claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, again, 1)
		lapsedID, earlierID := taken[0].ID, again[0].ID
		require.ElementsMatch(t, []int64{ids["lapsed"], ids["earlier"]}, []int64{lapsedID, earlierID})
		// handed: handed over already (completed).
		_, err := b.Store.DispatchTriggerRequest(ctx(t), mine[ids["handed"]], time.Minute)
		require.NoError(t, err)

		intruder := mine[ids["release"]]
		intruder.Owner = "intruder"
		none, err := b.Store.ReleaseTriggerRequests(ctx(t), "intruder", []episodes.TriggerRequest{intruder})
		require.NoError(t, err)
		require.Empty(t, none, "another node's claim is not released")

		released, err := b.Store.ReleaseTriggerRequests(ctx(t), "poller", []episodes.TriggerRequest{
			mine[ids["release"]], mine[lapsedID], mine[ids["handed"]], mine[earlierID],
		})
		require.NoError(t, err)
		require.Equal(t, []int64{ids["release"]}, released, "only the poller's current claim, each row on its own fence")

		status := map[int64]episodes.RequestInfo{}
		for _, r := range listRequests(t, b, "", "") {
			status[r.ID] = r
		}
		require.Equal(t, episodes.RequestPending, status[ids["release"]].Status)
		require.Empty(t, status[ids["release"]].ClaimedBy)
		require.Equal(t, mine[ids["release"]].Fence, status[ids["release"]].Fence, "the fence is kept; the next claim bumps it")
		require.Equal(t, episodes.RequestClaimed, status[lapsedID].Status)
		require.Equal(t, "other-poller", status[lapsedID].ClaimedBy)
		require.Equal(t, episodes.RequestCompleted, status[ids["handed"]].Status)
		require.Equal(t, episodes.RequestClaimed, status[earlierID].Status)
		require.Equal(t, again[0].Fence, status[earlierID].Fence)

		// Released: due at once for any poller, and the releasing claim can
		// no longer hand it over.
		next := claimRequests(t, b, "next-poller", "", "", 10)
		require.Len(t, next, 1)
		require.Equal(t, ids["release"], next[0].ID)
		require.Equal(t, mine[ids["release"]].Fence+1, next[0].Fence)
		_, err = b.Store.DispatchTriggerRequest(ctx(t), mine[ids["release"]], time.Minute)
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		d, err := b.Store.DispatchTriggerRequest(ctx(t), next[0], time.Minute)
		require.NoError(t, err)
		require.True(t, d.Started)

		empty, err := b.Store.ReleaseTriggerRequests(ctx(t), "poller", nil)
		require.NoError(t, err)
		require.Empty(t, empty)
	})

	t.Run("NextDueIsTheEarliestRequestOfTheScopeNotYetClaimable", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		due := func(env string, actors ...string) (time.Duration, bool) {
			t.Helper()
			w, ok, err := b.Store.NextTriggerRequestDue(ctx(t), episodes.RequestQuery{Env: env, Runnable: onE(actors...)})
			require.NoError(t, err)
			return w, ok
		}
		deferAfter := func(key, actor, env string, delay time.Duration) {
			t.Helper()
			n := newEpisode(key)
			n.ActorID, n.ExpectationID, n.SourceEnv = actor, "e", env
			res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n, SourceNode: "trigger-node", Delay: delay})
			require.NoError(t, err)
			require.True(t, res.Created)
		}
		_, ok := due("", "a")
		require.False(t, ok, "nothing waits")
		deferEpisode(t, b, "event:a:e:now", "", "")
		_, ok = due("", "a")
		require.False(t, ok, "a request due now is the poll's, not the wait's")

		// Elapsed test time is the margin: the wait counts down from the
		// delay on the database clock.
		start := time.Now()
		deferAfter("event:a:e:hour", "a", "", time.Hour)
		deferAfter("event:b:e:minute", "b", "", time.Minute)
		deferAfter("event:a:e:rc", "a", "rc", 2*time.Minute)
		w, ok := due("", "a")
		require.True(t, ok)
		require.LessOrEqual(t, w, time.Hour)
		require.Greater(t, w, time.Hour-time.Since(start)-time.Second, "the hour's request, not another actor's or env's")
		w, ok = due("", "a", "b")
		require.True(t, ok)
		require.LessOrEqual(t, w, time.Minute)
		require.Greater(t, w, time.Minute-time.Since(start)-time.Second)
		w, ok = due("rc", "a")
		require.True(t, ok)
		require.LessOrEqual(t, w, 2*time.Minute)
		require.Greater(t, w, 2*time.Minute-time.Since(start)-time.Second)
		_, ok = due("", "c")
		require.False(t, ok, "scoped by actor")

		// A claimed request may be let lapse: its claim_until counts too.
		start = time.Now()
		claimed := claimRequests(t, b, "poller", "", "", 10) // event:a:e:now, claimed for a minute
		require.Len(t, claimed, 1)
		w, ok = due("", "a")
		require.True(t, ok)
		require.LessOrEqual(t, w, time.Minute)
		require.Greater(t, w, time.Minute-time.Since(start)-time.Second)
		// Once lapsed, it is claimable now: the poll's, not the wait's.
		b.LapseRequestClaim(t, claimed[0].ID)
		w, ok = due("", "a")
		require.True(t, ok)
		require.Greater(t, w, time.Hour-time.Since(start)-time.Second, "a lapsed claim is due now, not waited for")
		claimed = claimRequests(t, b, "poller", "", "", 10)
		require.Len(t, claimed, 1)
		_, err := b.Store.DispatchTriggerRequest(ctx(t), claimed[0], time.Minute)
		require.NoError(t, err)
		w, ok = due("", "a")
		require.True(t, ok)
		require.Greater(t, w, time.Hour-time.Since(start)-time.Second, "a handed-over request waits for nothing")

		_, ok = due("")
		require.False(t, ok, "no actors, no wait")
	})
}
