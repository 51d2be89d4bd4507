package workflows_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
	"github.com/leasehold/leasehold/workflows"
)

// twoSteps is extract then second (publish before a deploy, ship after it
// renamed the step).
func twoSteps(id, second string) workflows.Definition {
	return workflows.Definition{ID: id, Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: second, Actor: "wf", Expectation: second, After: []string{"extract"}},
	}}
}

// endBehindTheBack ends an episode as a foreign writer would.
func endBehindTheBack(t *testing.T, c cluster, id int64, status string) {
	t.Helper()
	pgtest.Exec(t, c.Pool, `UPDATE leasehold_episodes SET status = $2, finished_at = now() WHERE id = $1`, id, status)
}

// unversioned makes an instance one started before definitions were
// versioned (migration 00013): it has no definition version, so it is
// advanced with the definition registered where it advances, and parked
// when that does not match its steps.
func unversioned(t *testing.T, c cluster, id int64) {
	t.Helper()
	require.EqualValues(t, 1, pgtest.Exec(t, c.Pool, `UPDATE leasehold_workflow_instances SET definition_version = '' WHERE id = $1`, id))
}

func triggerOnly(t *testing.T, c cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		require.NoError(t, n.SetMode(runner.ModeTriggerOnly)) // nothing runs: the test ends the episodes
	}
}

// Issue 23 item 1: an instance Reconcile cannot advance (here: one started
// before definitions were versioned, and node-1's definition renamed a
// step) is reported, counted and parked, and the others are advanced all
// the same, on every call; a node whose definition matches advances the
// parked one later and clears its reason.
func TestReconcileGoesOnPastAStuckInstance(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := startEach(t, 2, s, func(i int) []workflows.Definition {
		if i == 1 {
			return []workflows.Definition{twoSteps("deployed", "ship"), twoSteps("healthy", "publish")}
		}
		return []workflows.Definition{twoSteps("deployed", "publish"), twoSteps("healthy", "publish")}
	})
	triggerOnly(t, c)
	ctx := context.Background()
	stuck, _, err := c.engines[0].Start(ctx, "deployed", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	healthy, _, err := c.engines[0].Start(ctx, "healthy", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	require.Less(t, stuck.ID, healthy.ID, "the stuck instance comes first")
	unversioned(t, c, stuck.ID)
	for _, id := range []int64{stuck.ID, healthy.ID} {
		_, st := stepStates(t, c.engines[0], id)
		endBehindTheBack(t, c, st["extract"].EpisodeID, "done")
	}
	rec := &telemetry.Recorder{}
	c.engines[1].SetObserver(rec)

	for range 2 { // and again: nothing is held hostage on a later call either
		rep, err := c.engines[1].Reconcile(ctx, workflows.ReconcileOptions{})
		require.NoError(t, err, "one stuck instance is not Reconcile's error")
		require.Equal(t, 1, rep.Stuck)
		require.Len(t, rep.StuckSteps, 1)
		require.Equal(t, stuck.ID, rep.StuckSteps[0].InstanceID)
		require.Equal(t, "extract", rep.StuckSteps[0].StepID)
		require.True(t, rep.StuckSteps[0].Parked)
		require.Contains(t, rep.StuckSteps[0].Reason, `"ship"`)
		require.Contains(t, rep.StuckSteps[0].Reason, `"publish"`)
	}
	_, st := stepStates(t, c.engines[0], healthy.ID)
	require.Equal(t, workflows.StepDone, st["extract"].Status, "the healthy instance advanced")
	require.Equal(t, workflows.StepRunning, st["publish"].Status)

	got, st := stepStates(t, c.engines[0], stuck.ID)
	require.Equal(t, workflows.InstanceRunning, got.Status)
	require.Contains(t, got.ParkedReason, `"ship"`)
	require.Equal(t, workflows.StepRunning, st["extract"].Status)
	parked, err := c.engines[0].List(ctx, workflows.ListQuery{ParkedOnly: true})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.Equal(t, stuck.ID, parked[0].ID)

	var reconciles []telemetry.Event
	for _, ev := range rec.Events() {
		if ev.Name == workflows.EventReconcile {
			reconciles = append(reconciles, ev)
		}
	}
	require.Len(t, reconciles, 2)
	require.Equal(t, map[string]int{"found": 2, "advanced": 1, "skipped": 0, "stuck": 1}, reconciles[0].Counts)

	// node-0 still has the instance's steps: it advances the parked one.
	rep, err := c.engines[0].Reconcile(ctx, workflows.ReconcileOptions{})
	require.NoError(t, err)
	require.Equal(t, workflows.ReconcileReport{Found: 1, Advanced: 1}, rep)
	got, st = stepStates(t, c.engines[0], stuck.ID)
	require.Empty(t, got.ParkedReason, "a successful advance clears the reason")
	require.Equal(t, workflows.StepDone, st["extract"].Status)
	require.Equal(t, workflows.StepRunning, st["publish"].Status)
}

// Issue 23 item 7: a rolling deploy renamed a step. The node with the new
// definition runs the first step of an old instance started before
// definitions were versioned: the episode's finish stands (it ran once,
// it is done), the instance is parked with the reason, and an operator can
// see and cancel it. (A versioned instance is advanced by its own
// definition instead: TestRollingDeployFollowsTheInstancesVersion.)
func TestRenamedStepKeepsTheEpisodesFinish(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := startEach(t, 2, s, func(i int) []workflows.Definition {
		if i == 1 {
			return []workflows.Definition{twoSteps("deployed", "ship")}
		}
		return []workflows.Definition{twoSteps("deployed", "publish")}
	})
	triggerOnly(t, c) // until the instance is unversioned; then node-1, deployed, runs the step
	finished := make(chan workflows.Event, 10)
	c.engines[1].Subscribe(func(ev workflows.Event) {
		if ev.Kind == workflows.EpisodeCompleted || ev.Kind == workflows.EpisodeFailed {
			finished <- ev
		}
	})
	ctx := context.Background()
	inst, _, err := c.engines[0].Start(ctx, "deployed", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	unversioned(t, c, inst.ID)
	require.NoError(t, c.Nodes[1].SetMode(runner.ModeFull))
	c.Nodes[1].PollNow()
	var ev workflows.Event
	select {
	case ev = <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("the step's episode never finished: its finish was rolled back with the advance")
	}
	require.Equal(t, workflows.EpisodeCompleted, ev.Kind)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done'", ev.EpisodeID), "the finish committed")
	require.Equal(t, 1, s.count("extract"), "the step ran once")

	got, st := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.InstanceRunning, got.Status)
	require.Contains(t, got.ParkedReason, `"ship"`, "parked, with why")
	require.Equal(t, workflows.StepRunning, st["extract"].Status, "the advance waits for a node with the instance's steps")

	rep, err := c.engines[1].Reconcile(ctx, workflows.ReconcileOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Stuck, "Reconcile reports it")

	got, canceled, err := c.engines[1].Cancel(ctx, inst.ID, "renamed step")
	require.NoError(t, err)
	require.True(t, canceled)
	require.Equal(t, workflows.InstanceCanceled, got.Status)
}

// Issue 23 item 8: cancel and list, from any node; the instance-not-found
// error is ErrNoInstance.
func TestCancelAndList(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 2, s, pipeline("report", nil))
	triggerOnly(t, c)
	ctx := context.Background()
	inst, _, err := c.engines[0].Start(ctx, "report", "c-1", nil, workflows.StartOptions{})
	require.NoError(t, err)
	other, _, err := c.engines[0].Start(ctx, "report", "c-2", nil, workflows.StartOptions{})
	require.NoError(t, err)

	got, canceled, err := c.engines[1].Cancel(ctx, inst.ID, "not needed")
	require.NoError(t, err)
	require.True(t, canceled)
	require.Equal(t, workflows.InstanceCanceled, got.Status)
	ev := c.waitEnded(t)
	require.Equal(t, workflows.WorkflowCanceled, ev.Kind)
	require.Equal(t, inst.ID, ev.InstanceID)
	got, st := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.InstanceCanceled, got.Status)
	require.JSONEq(t, `{"reason":"canceled","message":"not needed"}`, string(got.ErrorDetail))
	require.Equal(t, workflows.StepRunning, st["extract"].Status, "a running step's episode is not interrupted")
	for _, id := range []string{"enrich", "score", "publish"} {
		require.Equal(t, workflows.StepSkipped, st[id].Status, id)
	}
	// The running step's end starts nothing.
	endBehindTheBack(t, c, st["extract"].EpisodeID, "done")
	rep, err := c.engines[0].Reconcile(ctx, workflows.ReconcileOptions{})
	require.NoError(t, err)
	require.Zero(t, rep.Found, "a canceled instance is not reconciled")

	_, canceled, err = c.engines[0].Cancel(ctx, inst.ID, "again")
	require.NoError(t, err)
	require.False(t, canceled, "an ended instance stays as it ended")
	_, _, err = c.engines[0].Cancel(ctx, 987654321, "")
	require.ErrorIs(t, err, workflows.ErrNoInstance)
	_, _, err = c.engines[0].Cancel(ctx, other.ID, "bad\x00reason")
	require.ErrorIs(t, err, workflows.ErrInvalid)

	list, err := c.engines[1].List(ctx, workflows.ListQuery{WorkflowID: "report"})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, other.ID, list[0].ID, "newest first")
	list, err = c.engines[1].List(ctx, workflows.ListQuery{Status: workflows.InstanceCanceled})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, inst.ID, list[0].ID)
	list, err = workflows.List(ctx, postgres.New(c.Pool), workflows.ListQuery{Subject: "c-2", Env: new(string)})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, other.ID, list[0].ID)
	rc := "rc"
	list, err = c.engines[1].List(ctx, workflows.ListQuery{Env: &rc})
	require.NoError(t, err)
	require.Empty(t, list)
	_, err = c.engines[1].List(ctx, workflows.ListQuery{Status: "nope"})
	require.ErrorIs(t, err, workflows.ErrInvalid)
}

// Issue 23 item 8: the Sweeper's AfterSweep hook is where Reconcile runs,
// with no loop of the user's own: an episode ended behind the engine's
// back is advanced after the next sweep.
func TestSweeperReconcilesAfterEachSweep(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	s := &steps{runs: map[string]int{}, fail: func(step string, n int) error {
		if step == "extract" && n == 1 {
			<-block
		}
		return nil
	}}
	c := start(t, 1, s, pipeline("report", func(st *workflows.Step) {
		if st.ID == "extract" {
			st.OnError = workflows.Skip
		}
	}))
	t.Cleanup(func() { close(block) })
	ctx := context.Background()
	inst, _, err := c.engines[0].Start(ctx, "report", "p", nil, workflows.StartOptions{})
	require.NoError(t, err)
	_, st := stepStates(t, c.engines[0], inst.ID)
	endBehindTheBack(t, c, st["extract"].EpisodeID, "partially_failed")

	rcv, err := recovery.New(postgres.New(c.Pool), c.Nodes[0], slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	reports := make(chan workflows.ReconcileReport, 100)
	sw, err := recovery.NewSweeper(rcv, recovery.SweeperConfig{
		InitialDelay: time.Millisecond, Interval: 50 * time.Millisecond,
		AfterSweep: func(ctx context.Context) {
			rep, err := c.engines[0].Reconcile(ctx, workflows.ReconcileOptions{})
			if err == nil {
				reports <- rep
			}
		},
	})
	require.NoError(t, err)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sw.Run(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Equal(t, workflows.WorkflowCompleted, c.waitEnded(t).Kind)
	require.Equal(t, 1, (<-reports).Advanced, "the first sweep's hook advanced the step")
	_, st = stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.StepSkipped, st["extract"].Status)
}

// Issue 23 item 8: Subscribe sees this node's events only.
func TestSubscribeSeesOnlyItsNode(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 2, s, pipeline("report", nil))
	triggerOnly(t, c)
	var mine, theirs []workflows.Event
	done := make(chan struct{}, 2)
	c.engines[0].Subscribe(func(ev workflows.Event) { mine = append(mine, ev); done <- struct{}{} })
	c.engines[1].Subscribe(func(ev workflows.Event) { theirs = append(theirs, ev) })
	ctx := context.Background()
	inst, _, err := c.engines[1].Start(ctx, "report", "x", nil, workflows.StartOptions{})
	require.NoError(t, err)
	_, _, err = c.engines[0].Cancel(ctx, inst.ID, "")
	require.NoError(t, err)
	<-done
	require.Len(t, mine, 1)
	require.Equal(t, workflows.WorkflowCanceled, mine[0].Kind)
	require.Empty(t, theirs, "node-1 does not see node-0's cancel")
	require.True(t, strings.HasPrefix(mine[0].Kind, "workflow."))
}

// Issue 31 item 2: a rolling deploy renamed a step (node-1) or added one
// (node-2). An instance started under the old definition on node-0 is
// run and advanced to its end by the new nodes alone, by the definition it
// was started with (read back from leasehold_workflow_definitions), never
// parked; every node recorded its own definition when it started.
func TestRollingDeployFollowsTheInstancesVersion(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	v1 := twoSteps("deployed", "publish")
	renamed := workflows.Definition{ID: "deployed", Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "deliver", Actor: "wf", Expectation: "publish", After: []string{"extract"}},
	}}
	added := workflows.Definition{ID: "deployed", Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"extract"}},
		{ID: "ship", Actor: "wf", Expectation: "ship", After: []string{"publish"}},
	}}
	defs := []workflows.Definition{v1, renamed, added}
	c := startEach(t, 3, s, func(i int) []workflows.Definition { return defs[i : i+1] })
	require.NoError(t, c.Nodes[0].SetMode(runner.ModeTriggerOnly)) // the old node runs nothing
	versions := make([]string, len(defs))
	for i, d := range defs {
		v, err := d.Version()
		require.NoError(t, err)
		versions[i] = v
		require.Equal(t, 1, countRows(t, c, `SELECT count(*) FROM leasehold_workflow_definitions
			WHERE workflow_id = 'deployed' AND version = $1 AND recorded_by = $2`, v, c.Nodes[i].ID()),
			"node %d recorded its definition when it started", i)
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(versions))), 3)

	ctx := context.Background()
	inst, _, err := c.engines[0].Start(ctx, "deployed", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	require.Equal(t, versions[0], inst.DefinitionVersion)
	ev := c.waitEnded(t)
	require.Equal(t, workflows.WorkflowCompleted, ev.Kind)
	require.Equal(t, inst.ID, ev.InstanceID)
	got, st := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.InstanceDone, got.Status)
	require.Empty(t, got.ParkedReason, "never parked")
	require.Len(t, st, 2, "the steps it was started with")
	require.Equal(t, workflows.StepDone, st["extract"].Status)
	require.Equal(t, workflows.StepDone, st["publish"].Status)
	require.Equal(t, 1, s.count("extract"))
	require.Equal(t, 1, s.count("publish"))
	require.Zero(t, s.count("ship"), "the added step is not the old instance's")
}

func countRows(t *testing.T, c cluster, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, c.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
