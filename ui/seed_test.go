package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/workflows"
)

// Stored text the pages must show as text: HTML that would run if it were
// interpreted, and a key holding a newline.
const (
	trickyKey     = "tricky\n<b>key</b> & \"quotes\""
	trickyPayload = `{"html":"<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">","note":"line1\nline2"}`
	trickyNode    = "node-<i>4</i>"
)

// seeded is a schema holding one of each kind of history the dashboard
// shows, made through the adapter's own statements (no row is written by
// hand), and the IDs of its episodes.
type seeded struct {
	store *postgres.Store
	pool  *pgxpool.Pool
	url   string // a URL whose connections use the schema alone

	done      int64 // done on node-2, three steps
	takenOver int64 // node-1 died holding it; recovery requeued it; node-3 finished it
	retried   int64 // failed once, retried (RetryEpisode), then done on node-3
	failed    int64 // failed with class error: retryable
	available int64 // deferred by a trigger_only node, unclaimed: cancels at once
	running   int64 // running on node-2 under a live lease
	orphan    int64 // running on node-1, whose lease expired: not recovered yet
	tricky    int64 // HTML payload, key with a newline; done
	bulk      []int64
	instance  int64 // a workflow instance: extract done, enrich running, score and publish pending
}

// reportWorkflow is the definition of the seeded workflow, for the graph.
var reportWorkflow = workflows.Definition{ID: "report", Steps: []workflows.Step{
	{ID: "extract", Actor: "etl", Expectation: "extract"},
	{ID: "enrich", Actor: "etl", Expectation: "enrich", After: []string{"extract"}, MaxAttempts: 3},
	{ID: "score", Actor: "etl", Expectation: "score", After: []string{"extract"}},
	{ID: "publish", Actor: "etl", Expectation: "publish", After: []string{"enrich", "score"}},
}}

const lease = 10 * time.Minute

func seed(t testing.TB, bulk int) seeded {
	t.Helper()
	pool := pgtest.Schema(t)
	s := seeded{store: postgres.New(pool), pool: pool}
	schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
	sep := "?"
	if strings.Contains(pgtest.URL(), "?") {
		sep = "&"
	}
	s.url = pgtest.URL() + sep + "search_path=" + schema
	ctx := context.Background()
	st := s.store

	for _, m := range []membership.Member{
		{ID: "node-1", Mode: "full"}, {ID: "node-2", Mode: "full"}, {ID: "node-3", Mode: "full"},
		{ID: trickyNode, Stack: "blue", Env: "rc", Mode: "trigger_only"},
	} {
		require.NoError(t, st.RegisterNode(ctx, m))
	}
	require.NoError(t, st.HeartbeatNode(ctx, membership.Member{ID: "node-3", Mode: "full", Draining: true}))
	for _, d := range []episodes.Definition{
		{ActorID: "billing", ExpectationID: "charge", RecoveryPolicy: "restart", MaxAttempts: 3},
		{ActorID: "monitor", ExpectationID: "check", RecoveryPolicy: "fail", MaxAttempts: 1},
		{ActorID: "reports", ExpectationID: "build", RecoveryPolicy: "restart", MaxAttempts: 3},
	} {
		require.NoError(t, st.PutAgentDefinition(ctx, d))
	}

	create := func(actor, exp, key, owner string, payload string) (int64, claims.Token) {
		t.Helper()
		n := episodes.New{ActorID: actor, ExpectationID: exp, TriggerType: episodes.TriggerEvent, DedupeKey: key,
			MaxAttempts: 3, Owner: owner, Lease: lease, Start: true}
		if payload != "" {
			n.Payload = json.RawMessage(payload)
		}
		c, err := st.CreateEpisode(ctx, n)
		require.NoError(t, err)
		require.True(t, c.Created && c.Started, "created and started: %+v", c)
		return c.Episode.ID, c.Claim.Token
	}
	step := func(id int64, tk claims.Token, no int32, data string) {
		t.Helper()
		require.NoError(t, st.AppendStep(ctx, id, tk, no, json.RawMessage(data), lease))
	}
	finish := func(id int64, tk claims.Token, f episodes.Finish) {
		t.Helper()
		require.NoError(t, st.FinishEpisode(ctx, id, tk, f))
	}
	// take makes available episode id the first due and takes it for
	// owner, granted and started, as a poller does.
	take := func(id int64, actor, owner string) (claims.Token, int32) {
		t.Helper()
		ep, err := st.GetEpisode(ctx, id)
		require.NoError(t, err)
		pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET run_after = run_after - interval '1 day' WHERE id = $1 AND run_after IS NOT NULL`, id)
		ds, err := st.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: owner, Lease: lease,
			Runnable: []episodes.Runnable{{ActorID: actor, ExpectationID: ep.ExpectationID}}, Limit: 1})
		require.NoError(t, err)
		require.Len(t, ds, 1, "episode %d is available", id)
		d := ds[0]
		require.Equal(t, id, d.EpisodeID)
		require.NotZero(t, d.Claim.Fence, "taken with a grant")
		require.True(t, d.Started)
		return d.Claim.Token, d.NextStep
	}

	var tk claims.Token
	s.done, tk = create("billing", "charge", "invoice:inv-1", "node-2", `{"invoice":"inv-1","amount":42}`)
	step(s.done, tk, 1, `{"n":1}`)
	step(s.done, tk, 2, `{"n":2}`)
	finish(s.done, tk, episodes.Finish{Status: episodes.StatusDone, Result: json.RawMessage(`{"charged":true}`), StepNo: 3, StepData: json.RawMessage(`{"n":3}`)})

	// node-1 dies mid-episode: its lease runs out, recovery on node-2
	// requeues the orphan, node-3's poller takes it and finishes it.
	s.takenOver, tk = create("billing", "charge", "invoice:inv-2", "node-1", `{"invoice":"inv-2","amount":7}`)
	step(s.takenOver, tk, 1, `{"n":1}`)
	step(s.takenOver, tk, 2, `{"n":2}`)
	pgtest.ExpireClaim(t, pool, "invoice:inv-2")
	rq, err := st.RequeueOrphan(ctx, s.takenOver, 0, "node-2", time.Minute)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, rq.Status)
	tk3, next := take(s.takenOver, "billing", "node-3")
	step(s.takenOver, tk3, next, `{"n":3,"resumed":true}`)
	finish(s.takenOver, tk3, episodes.Finish{Status: episodes.StatusDone, Result: json.RawMessage(`{"charged":true}`)})

	// A failed attempt retried by its holder, then done elsewhere.
	s.retried, tk = create("billing", "charge", "invoice:inv-3", "node-2", `{"invoice":"inv-3"}`)
	step(s.retried, tk, 1, `{"n":1}`)
	_, err = st.RetryEpisode(ctx, s.retried, tk, episodes.Retry{ErrorClass: episodes.ClassError,
		ErrorDetail: json.RawMessage(`{"reason":"card declined","attempt":1}`), StepNo: 2,
		StepData: json.RawMessage(`{"attempt":1,"error":"card declined","retry_in_ms":0}`)})
	require.NoError(t, err)
	tk, next = take(s.retried, "billing", "node-3")
	finish(s.retried, tk, episodes.Finish{Status: episodes.StatusDone, Result: json.RawMessage(`{"charged":true}`), StepNo: next, StepData: json.RawMessage(`{"n":2}`)})

	s.failed, tk = create("monitor", "check", "check:disk", "node-2", `{"path":"/var"}`)
	step(s.failed, tk, 1, `{"used":0.97}`)
	finish(s.failed, tk, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: episodes.ClassError, ErrorDetail: json.RawMessage(`{"message":"disk full"}`)})

	s.tricky, tk = create("billing", "charge", trickyKey, "node-2", trickyPayload)
	step(s.tricky, tk, 1, `{"html":"<b>bold?</b>"}`)
	finish(s.tricky, tk, episodes.Finish{Status: episodes.StatusDone})

	d, err := st.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "reports", ExpectationID: "build",
		TriggerType: episodes.TriggerSchedule, DedupeKey: "report:daily", MaxAttempts: 3, SourceEnv: "rc", SourceStack: "blue"}})
	require.NoError(t, err)
	s.available = d.Episode.ID

	s.running, tk = create("monitor", "watch", "watch:cpu", "node-2", `{"host":"db-1"}`)
	for i := int32(1); i <= 3; i++ {
		step(s.running, tk, i, fmt.Sprintf(`{"load":%d}`, i))
	}
	_, err = st.RaiseFinding(ctx, tk, s.running, findings.Raise{Key: "cpu:db-1", Class: "capacity", Severity: "high",
		Summary: "load above 90% on <db-1>", Data: json.RawMessage(`{"load":0.93}`)})
	require.NoError(t, err)
	_, err = st.ClearFinding(ctx, tk, s.running, "cpu:db-1")
	require.NoError(t, err)
	_, err = st.RaiseFinding(ctx, tk, s.running, findings.Raise{Key: "cpu:db-1", Class: "capacity", Severity: "critical",
		Summary: "load above 95% on <db-1>", Data: json.RawMessage(`{"load":0.97}`)})
	require.NoError(t, err)

	// The workflow: extract done, enrich running, score and publish pending.
	version, err := reportWorkflow.Version()
	require.NoError(t, err)
	inst, created, err := st.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "report", Subject: "customer-42",
		Payload: json.RawMessage(`{"customer":42}`), DefinitionVersion: version})
	require.NoError(t, err)
	require.True(t, created)
	s.instance = inst
	for _, sd := range reportWorkflow.Steps {
		require.NoError(t, st.InsertWorkflowStep(ctx, inst, sd.ID, max(sd.MaxAttempts, 1)))
	}
	wf := func(stepID string) (int64, claims.Token) {
		t.Helper()
		c, err := st.CreateEpisode(ctx, episodes.New{ActorID: "etl", ExpectationID: stepID, TriggerType: episodes.TriggerWorkflow,
			MaxAttempts: 1, Owner: "node-2", Lease: lease, Start: true})
		require.NoError(t, err)
		ok, err := st.StartWorkflowStep(ctx, inst, stepID, workflows.StepPending, 0, c.Episode.ID)
		require.NoError(t, err)
		require.True(t, ok)
		return c.Episode.ID, c.Claim.Token
	}
	ex, tk := wf("extract")
	finish(ex, tk, episodes.Finish{Status: episodes.StatusDone})
	ok, err := st.EndWorkflowStep(ctx, inst, "extract", ex, workflows.StepDone)
	require.NoError(t, err)
	require.True(t, ok)
	en, tk := wf("enrich")
	step(en, tk, 1, `{"rows":120}`)

	for i := range bulk {
		id, tk := create("bulk", "noop", fmt.Sprintf("bulk:%03d_%%", i), "node-2", "")
		finish(id, tk, episodes.Finish{Status: episodes.StatusDone})
		s.bulk = append(s.bulk, id)
	}

	// node-1 died holding another episode too, not recovered yet.
	s.orphan, tk = create("billing", "charge", "invoice:inv-4", "node-1", `{"invoice":"inv-4"}`)
	step(s.orphan, tk, 1, `{"n":1}`)
	pgtest.ExpireClaim(t, pool, "invoice:inv-4")

	// node-1 has been silent for two minutes.
	pgtest.Exec(t, pool, `UPDATE leasehold_nodes SET heartbeat_at = now() - interval '2 minutes' WHERE node_id = 'node-1'`)
	return s
}

// status reads an episode's status through the adapter.
func (s seeded) status(t testing.TB, id int64) episodes.Episode {
	t.Helper()
	e, err := s.store.GetEpisode(context.Background(), id)
	require.NoError(t, err)
	return e
}
