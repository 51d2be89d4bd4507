package conformance

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
)

// RunWaitingForNode runs the scenarios of work no live node can run: what
// ListWaitingForNode reports (which nodes count as able to run a pair, and
// which do not: silent, draining, another env, another stack, not full),
// and maintenance's waiting-for-node finding, raised only once the work has
// waited longer than the bound and cleared once a node that runs the pair
// is live or the work is canceled. Node and available episodes' ages are
// moved back with the backend's Age hooks, never slept for. RunMaintenance
// runs it.
func RunWaitingForNode(t *testing.T, newBackend func(t *testing.T) MaintenanceBackend) {
	refund := []episodes.Runnable{{ActorID: "billing", ExpectationID: "refund"}}
	charge := []episodes.Runnable{{ActorID: "billing", ExpectationID: "charge"}}
	silent := membership.DefaultSilentAfter + time.Minute

	t.Run("NoNodeRunsThePair", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		register(t, b, membership.Member{ID: "node-charge", Mode: "full", Runnable: charge})
		first := deferPair(t, b, "billing", "refund", "", "")
		second := deferPair(t, b, "billing", "refund", "", "")
		deferPair(t, b, "billing", "charge", "", "") // node-charge runs it
		b.AgeAvailable(t, first.Episode.ID, time.Minute)

		got := waitingFor(t, b, time.Hour)
		require.Len(t, got, 1, "only refund waits: %+v", got)
		w := got[0]
		require.Equal(t, "billing/refund", w.Pair())
		require.Equal(t, "", w.Env)
		require.EqualValues(t, 2, w.Episodes)
		require.Equal(t, first.Episode.ID, w.OldestEpisodeID, "the oldest by due time")
		require.WithinDuration(t, first.Episode.CreatedAt.Add(-time.Minute), w.Since, time.Second, "waiting since it fell due")
		require.False(t, w.Overdue, "a minute is not an hour")
		require.Empty(t, w.LastNode, "no node row lists refund")
		require.True(t, w.LastHeartbeatAt.IsZero())
		require.Equal(t, "waiting for a node that runs billing/refund (no node that runs it has been seen)", w.Reason())
		_ = second

		overdue := waitingFor(t, b, 30*time.Second)
		require.Len(t, overdue, 1)
		require.True(t, overdue[0].Overdue, "a minute on the database clock is over 30 s")
	})

	// A node that runs one expectation of an actor runs none of its others:
	// each pair is matched whole, for whether it waits, which episode is its
	// oldest and which node row last listed it.
	t.Run("EachPairIsItsOwn", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		register(t, b, membership.Member{ID: "node-refund", Mode: "full", Runnable: refund})
		void := deferPair(t, b, "billing", "void", "", "")
		b.AgeAvailable(t, void.Episode.ID, 2*time.Minute)
		charged := deferPair(t, b, "billing", "charge", "", "")
		b.AgeAvailable(t, charged.Episode.ID, time.Minute)

		byPair := map[string]membership.Waiting{}
		for _, w := range waitingFor(t, b, time.Hour) {
			byPair[w.Pair()] = w
		}
		require.Len(t, byPair, 2, "a node that runs billing/refund runs neither charge nor void: %+v", byPair)
		for pair, ep := range map[string]int64{"billing/charge": charged.Episode.ID, "billing/void": void.Episode.ID} {
			require.EqualValues(t, 1, byPair[pair].Episodes, pair)
			require.Equal(t, ep, byPair[pair].OldestEpisodeID, "%s's oldest is its own", pair)
			require.Empty(t, byPair[pair].LastNode, "no node row lists %s", pair)
		}
	})

	t.Run("SilentNodeIsLastSeenButDoesNotCount", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		register(t, b, membership.Member{ID: "node-7", Mode: "full", Runnable: refund})
		b.AgeNode(t, "node-7", silent)
		ep := deferPair(t, b, "billing", "refund", "", "")

		got := waitingFor(t, b, time.Hour)
		require.Len(t, got, 1, "a node silent for longer than DefaultSilentAfter runs nothing")
		require.Equal(t, ep.Episode.ID, got[0].OldestEpisodeID)
		require.Equal(t, "node-7", got[0].LastNode)
		require.WithinDuration(t, time.Now().Add(-silent), got[0].LastHeartbeatAt, 10*time.Second)

		// Its heartbeat comes back: it counts again.
		require.NoError(t, b.Store.HeartbeatNode(ctx(t), membership.Member{ID: "node-7", Mode: "full", Runnable: refund}))
		require.Empty(t, waitingFor(t, b, time.Hour), "a live node that runs refund takes it on its next poll")
	})

	t.Run("FreshNodeRunsIt", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		register(t, b, membership.Member{ID: "node-old", Mode: "full", Runnable: charge})
		register(t, b, membership.Member{ID: "node-new", Mode: "full",
			Runnable: append(append([]episodes.Runnable{}, charge...), refund...)})
		deferPair(t, b, "billing", "refund", "", "")
		require.Empty(t, waitingFor(t, b, time.Hour))

		// node-new's actor turns trigger_only: its heartbeat lists charge
		// only, and refund waits again, last seen nowhere.
		require.NoError(t, b.Store.HeartbeatNode(ctx(t), membership.Member{ID: "node-new", Mode: "full", Runnable: charge}))
		got := waitingFor(t, b, time.Hour)
		require.Len(t, got, 1)
		require.Empty(t, got[0].LastNode, "no row lists refund any more")

		// node-old restarts as the new version: its new row lists refund.
		register(t, b, membership.Member{ID: "node-old", Mode: "full", Runnable: refund})
		require.Empty(t, waitingFor(t, b, time.Hour))
	})

	t.Run("NodesThatCannotClaimDoNotCount", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		register(t, b, membership.Member{ID: "node-draining", Mode: "full", Runnable: refund})
		require.NoError(t, b.Store.HeartbeatNode(ctx(t), membership.Member{ID: "node-draining", Mode: "full", Draining: true, Runnable: refund}))
		register(t, b, membership.Member{ID: "node-trigger-only", Mode: "trigger_only", Runnable: refund})
		register(t, b, membership.Member{ID: "node-rc", Env: "rc", Mode: "full", Runnable: refund})
		register(t, b, membership.Member{ID: "node-blue", Stack: "blue", Mode: "full", Runnable: refund})
		b.AgeNode(t, "node-trigger-only", time.Second) // node-draining heartbeated last
		b.AgeNode(t, "node-blue", time.Second)
		deferPair(t, b, "billing", "refund", "green", "")

		got := waitingFor(t, b, time.Hour)
		require.Len(t, got, 1, "draining, trigger_only, another env, another stack: none claims it")
		require.Equal(t, "node-draining", got[0].LastNode, "the env's row that lists refund and heartbeated last")

		// Work of no stack is any stack's: node-blue takes it; green's waits.
		deferPair(t, b, "billing", "refund", "", "")
		got = waitingFor(t, b, time.Hour)
		require.Len(t, got, 1)
		require.EqualValues(t, 1, got[0].Episodes, "only green's episode waits")

		// env rc's node runs rc's work, and only that.
		deferPair(t, b, "billing", "refund", "", "rc")
		got = waitingFor(t, b, time.Hour)
		require.Len(t, got, 1)
		require.Equal(t, "", got[0].Env)
	})

	t.Run("OnlyDueQueuedWorkWaits", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := newEpisode("")
		n.ActorID, n.ExpectationID = "billing", "refund"
		_, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n, Delay: time.Hour})
		require.NoError(t, err)
		require.Empty(t, waitingFor(t, b, 0), "work due in an hour does not wait for a node yet")

		canceled := deferPair(t, b, "billing", "refund", "", "")
		c, err := b.Store.CancelEpisode(ctx(t), canceled.Episode.ID, []byte(`{"reason":"ops"}`))
		require.NoError(t, err)
		require.True(t, c.Ended, "a waiting episode is canceled at once: no node holds it")
		require.Empty(t, waitingFor(t, b, 0), "a canceled episode waits for nothing")

		// An episode a poller took runs: it waits for nothing.
		taken := deferPair(t, b, "billing", "refund", "", "")
		ds, err := b.Store.ClaimAvailable(ctx(t), episodes.AvailableQuery{Owner: "poller", Lease: time.Hour, Runnable: refund, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, taken.Episode.ID, ds[0].EpisodeID)
		require.True(t, ds[0].Started)
		require.Empty(t, waitingFor(t, b, 0), "an episode a poller took waits for nothing")

		// An available episode its key's holder (a direct claims user)
		// started under its own grant runs: it waits for nothing.
		started := deferPair(t, b, "billing", "refund", "", "")
		grant, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "episode:" + strconv.FormatInt(started.Episode.ID, 10),
			Owner: "node-x", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		_, err = b.Store.StartEpisode(ctx(t), started.Episode.ID, grant.Token)
		require.NoError(t, err)
		require.Empty(t, waitingFor(t, b, 0), "a running episode waits for nothing")
	})

	t.Run("FindingAfterTheBoundClearedByANode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		plan := maintenance.DefaultConfig().Plan() // WaitingForNodeAfter: 1 hour
		require.Equal(t, time.Hour, plan.WaitingForNodeAfter)
		key := maintenance.WaitingKey("", "billing", "refund")
		register(t, b, membership.Member{ID: "node-7", Mode: "full", Runnable: charge})
		older := deferPair(t, b, "billing", "refund", "", "")
		newer := deferPair(t, b, "billing", "refund", "", "")
		b.AgeAvailable(t, newer.Episode.ID, 59*time.Minute)

		res := maintain(t, b, plan)
		require.Zero(t, res.WaitingRaised, "not yet waited an hour")
		require.Empty(t, activeFinding(t, b, key))

		b.AgeAvailable(t, older.Episode.ID, 2*time.Hour)
		res = maintain(t, b, plan)
		require.EqualValues(t, 1, res.WaitingRaised)
		got := activeFinding(t, b, key)
		require.Len(t, got, 1)
		f := got[0]
		require.Equal(t, maintenance.ClassWaitingForNode, f.Class)
		require.Equal(t, maintenance.SeverityWaitingForNode, f.Severity)
		require.Equal(t, "billing", f.ActorID)
		require.Equal(t, older.Episode.ID, f.RaisedByEpisode, "raised by the oldest waiting episode")
		require.Contains(t, f.Summary, "2 queued episode(s) of billing/refund")
		require.Contains(t, f.Summary, "waiting for a node that runs billing/refund (no node that runs it has been seen)")
		require.JSONEq(t, `"billing"`, string(jsonField(t, f.Data, "actor_id")))
		require.JSONEq(t, `2`, string(jsonField(t, f.Data, "waiting")))

		res = maintain(t, b, plan)
		require.EqualValues(t, 1, res.WaitingRaised, "refreshed while it waits")
		require.Zero(t, res.WaitingCleared)
		again := activeFinding(t, b, key)
		require.Len(t, again, 1)
		require.Equal(t, f.ID, again[0].ID, "the same finding, not a new one")
		require.EqualValues(t, 1, again[0].RaiseCount)

		register(t, b, membership.Member{ID: "node-8", Mode: "full", Runnable: refund})
		res = maintain(t, b, plan)
		require.Zero(t, res.WaitingRaised)
		require.EqualValues(t, 1, res.WaitingCleared, "a node that runs refund is live")
		require.Empty(t, activeFinding(t, b, key))
		require.Zero(t, maintain(t, b, plan).WaitingCleared, "a cleared finding is history: it is not cleared again")
	})

	t.Run("FindingClearedOnceTheWorkIsCanceled", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		plan := maintenance.DefaultConfig().Plan()
		key := maintenance.WaitingKey("rc", "billing", "refund")
		ep := deferPair(t, b, "billing", "refund", "", "rc")
		b.AgeAvailable(t, ep.Episode.ID, 3*time.Hour)
		require.EqualValues(t, 1, maintain(t, b, plan).WaitingRaised)
		require.Len(t, activeFindingIn(t, b, "rc", key), 1)

		c, err := b.Store.CancelEpisode(ctx(t), ep.Episode.ID, []byte(`{"reason":"ops"}`))
		require.NoError(t, err)
		require.True(t, c.Ended)
		res := maintain(t, b, plan)
		require.EqualValues(t, 1, res.WaitingCleared, "nothing of the pair waits any more")
		require.Empty(t, activeFindingIn(t, b, "rc", key))
	})
}

func register(t testing.TB, b MaintenanceBackend, m membership.Member) {
	t.Helper()
	require.NoError(t, b.Store.RegisterNode(ctx(t), m))
}

// registerFull registers a full node of each id, with no runnable pairs.
func registerFull(t testing.TB, b MaintenanceBackend, ids ...string) {
	t.Helper()
	for _, id := range ids {
		register(t, b, membership.Member{ID: id, Mode: "full"})
	}
}

// deferPair writes a deferred episode of actor/expectation, due at once.
func deferPair(t testing.TB, b MaintenanceBackend, actor, expectation, stack, env string) episodes.DeferredCreated {
	t.Helper()
	n := newEpisode("")
	n.ActorID, n.ExpectationID, n.SourceStack, n.SourceEnv = actor, expectation, stack, env
	res, err := b.Store.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: n})
	require.NoError(t, err)
	require.True(t, res.Created)
	return res
}

func waitingFor(t testing.TB, b MaintenanceBackend, overdueAfter time.Duration) []membership.Waiting {
	t.Helper()
	got, err := b.Store.ListWaitingForNode(ctx(t), membership.WaitingQuery{OverdueAfter: overdueAfter})
	require.NoError(t, err)
	return got
}

func maintain(t testing.TB, b MaintenanceBackend, p maintenance.Plan) maintenance.Result {
	t.Helper()
	res, err := b.Store.Maintain(ctx(t), p)
	require.NoError(t, err)
	require.True(t, res.Ran)
	return res
}

func activeFinding(t testing.TB, b MaintenanceBackend, key string) []findings.Finding {
	return activeFindingIn(t, b, "", key)
}

func activeFindingIn(t testing.TB, b MaintenanceBackend, env, key string) []findings.Finding {
	t.Helper()
	got, err := b.Store.ActiveFindings(ctx(t), findings.Query{Env: env, Key: key, Limit: 10})
	require.NoError(t, err)
	return got
}

// jsonField is the raw value of doc's top-level field name.
func jsonField(t testing.TB, doc json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(doc, &m))
	require.Contains(t, m, name)
	return m[name]
}
