package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/workflows"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// steps runs every step of the test workflows: it counts runs per step and
// fails as told.
type steps struct {
	mu    sync.Mutex
	runs  map[string]int
	fail  func(step string, attempt int) error
	onRun func(r *runner.Run) // sees every run, before fail
}

func (s *steps) actor() runner.Actor {
	a := runner.Actor{ID: "wf", MaxConcurrent: 8}
	for _, id := range []string{"extract", "enrich", "score", "publish", "flaky", "bad", "ship", "seven"} {
		var maxAttempts int32
		if id == "seven" {
			maxAttempts = 7
		}
		a.Expectations = append(a.Expectations, runner.Expectation{
			ID: id, Trigger: runner.Manual{}, Recovery: runner.RecoveryRestart, MaxAttempts: maxAttempts,
			Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
				s.mu.Lock()
				s.runs[id]++
				n := s.runs[id]
				onRun := s.onRun
				s.mu.Unlock()
				if onRun != nil {
					onRun(r)
				}
				if s.fail != nil {
					if err := s.fail(id, n); err != nil {
						return runner.StepResult{}, err
					}
				}
				return runner.StepResult{Done: true}, nil
			}},
		})
	}
	return a
}

func (s *steps) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

// pipeline: extract, then enrich and score in parallel, then publish.
func pipeline(id string, tune func(*workflows.Step)) workflows.Definition {
	d := workflows.Definition{ID: id, Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "enrich", Actor: "wf", Expectation: "enrich", After: []string{"extract"}},
		{ID: "score", Actor: "wf", Expectation: "score", After: []string{"extract"}},
		{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"enrich", "score"}},
	}}
	if tune != nil {
		for i := range d.Steps {
			tune(&d.Steps[i])
		}
	}
	return d
}

type cluster struct {
	nodetest.Cluster
	engines []*workflows.Engine
	ended   chan workflows.Event // workflow.completed, failed and canceled, from every engine
}

// start runs n nodes, each with an engine registering defs.
func start(t *testing.T, n int, s *steps, defs ...workflows.Definition) cluster {
	t.Helper()
	return startEach(t, n, s, func(int) []workflows.Definition { return defs })
}

// startEach runs n nodes, node i's engine registering defs(i): nodes in
// the middle of a rolling deploy.
func startEach(t *testing.T, n int, s *steps, defs func(i int) []workflows.Definition) cluster {
	t.Helper()
	c := cluster{ended: make(chan workflows.Event, 100)}
	var engines []*workflows.Engine
	pool := pgtest.Schema(t)
	c.Cluster = nodetest.StartOn(t, pool, n, func(_ int, cfg *runner.Config) {
		cfg.Poll.Interval = 100 * time.Millisecond
	}, func(i int, node *runner.Node) {
		e, err := workflows.New(postgres.New(pool), node, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		for _, d := range defs(i) {
			require.NoError(t, e.Register(d))
		}
		e.Subscribe(func(ev workflows.Event) {
			if ev.Kind == workflows.WorkflowCompleted || ev.Kind == workflows.WorkflowFailed || ev.Kind == workflows.WorkflowCanceled {
				c.ended <- ev
			}
		})
		engines = append(engines, e)
	}, s.actor())
	c.engines = engines
	return c
}

func (c cluster) waitEnded(t *testing.T) workflows.Event {
	t.Helper()
	select {
	case ev := <-c.ended:
		return ev
	case <-time.After(time.Minute):
		t.Fatal("workflow did not end within a minute")
		return workflows.Event{}
	}
}

func stepStates(t *testing.T, e *workflows.Engine, id int64) (workflows.Instance, map[string]workflows.StepState) {
	t.Helper()
	inst, rows, err := e.Instance(context.Background(), id)
	require.NoError(t, err)
	out := map[string]workflows.StepState{}
	for _, r := range rows {
		out[r.StepID] = r
	}
	return inst, out
}

// A 3-step workflow with a fan-out completes on 3 nodes with each step run
// once; two nodes starting the same workflow and subject make one instance.
// crashAfterFirstStep starts workflow "two" (steps extract, publish) on
// node-0 of a two-node cluster, node-1 trigger_only so node-0 takes the
// first step, and returns once node-0 finished that step and "died" in the
// transaction that advances the workflow (the advance rolled back).
func crashAfterFirstStep(t *testing.T, c cluster) workflows.Instance {
	t.Helper()
	require.NoError(t, c.Nodes[1].SetMode(runner.ModeTriggerOnly))
	crashed := make(chan struct{}, 1)
	workflows.FailAfterFinish(c.engines[0], func() error {
		select {
		case crashed <- struct{}{}:
		default:
		}
		return errors.New("node died")
	})
	inst, _, err := c.engines[0].Start(context.Background(), "two", "x", nil, workflows.StartOptions{})
	require.NoError(t, err)
	select {
	case <-crashed:
	case <-time.After(time.Minute):
		t.Fatal("the first step never finished")
	}
	return inst
}

func TestFanOutFanInOnThreeNodes(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 3, s, pipeline("report", nil))
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		created atomic.Int32
		ids     sync.Map
	)
	for _, e := range c.engines {
		wg.Go(func() {
			inst, ok, err := e.Start(ctx, "report", "customer-42", map[string]int{"customer": 42}, workflows.StartOptions{})
			if err == nil {
				ids.Store(inst.ID, true)
				if ok {
					created.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, created.Load(), "one instance per workflow and subject")
	var id int64
	n := 0
	ids.Range(func(k, _ any) bool { id = k.(int64); n++; return true })
	require.Equal(t, 1, n, "every caller got the same instance")

	ev := c.waitEnded(t)
	require.Equal(t, workflows.WorkflowCompleted, ev.Kind)
	require.Equal(t, id, ev.InstanceID)
	inst, st := stepStates(t, c.engines[0], id)
	require.Equal(t, workflows.InstanceDone, inst.Status)
	for _, step := range []string{"extract", "enrich", "score", "publish"} {
		require.Equal(t, workflows.StepDone, st[step].Status, step)
		require.EqualValues(t, 1, st[step].Attempts, step)
		require.Equal(t, 1, s.count(step), "%s ran once", step)
	}
	require.Equal(t, 4, c.Count(t, "trigger_type = 'workflow' AND status = 'done'"))

	// The key is free once the instance ended.
	_, ok, err := c.engines[1].Start(ctx, "report", "customer-42", nil, workflows.StartOptions{})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, workflows.WorkflowCompleted, c.waitEnded(t).Kind)

	rep, err := c.engines[2].Reconcile(ctx, workflows.ReconcileOptions{})
	require.NoError(t, err)
	require.Zero(t, rep.Found, "nothing left to reconcile")
}

// The node dies between a step's completion and the next step's start:
// the advancing transaction fails after the episode's terminal write, so
// that write rolls back with it; the claim expires and recovery reruns the
// step on another node, whose transaction advances the workflow.
func TestFailureBetweenStepAndNextIsRecovered(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	one := workflows.Definition{ID: "two", Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"extract"}},
	}}
	c := start(t, 2, s, one)
	ctx := context.Background()
	inst := crashAfterFirstStep(t, c)
	_, st := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.StepRunning, st["extract"].Status, "the rolled-back advance left the step running")
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'running'", st["extract"].EpisodeID), "and its episode running")

	// node-0 is gone; its claim expires; node-1 (full again) recovers.
	require.NoError(t, c.Nodes[0].Stop(ctx))
	require.NoError(t, c.Nodes[1].SetMode(runner.ModeFull))
	pgtest.ExpireClaim(t, c.Pool, "workflow:"+strconv.FormatInt(inst.ID, 10)+":extract:1")
	rcv, err := recovery.New(postgres.New(c.Pool), c.Nodes[1], slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	rep, err := rcv.Sweep(ctx, recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Restarted)
	require.Equal(t, workflows.WorkflowCompleted, c.waitEnded(t).Kind)
	_, st = stepStates(t, c.engines[1], inst.ID)
	require.Equal(t, workflows.StepDone, st["publish"].Status)
}

// Retries: a step that fails once succeeds on its second attempt; a step
// that always fails is skipped (on error skip) and its dependents run, or
// aborts the instance (on error abort): pending steps are skipped.
func TestRetriesSkipAndAbort(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}, fail: func(step string, n int) error {
		switch {
		case step == "flaky" && n == 1, step == "bad":
			return errors.New("step failed")
		}
		return nil
	}}
	def := func(id string, onError workflows.OnError) workflows.Definition {
		return workflows.Definition{ID: id, Steps: []workflows.Step{
			{ID: "flaky", Actor: "wf", Expectation: "flaky", MaxAttempts: 2},
			{ID: "bad", Actor: "wf", Expectation: "bad", After: []string{"flaky"}, MaxAttempts: 2, OnError: onError},
			{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"bad"}},
		}}
	}
	c := start(t, 2, s, def("skipping", workflows.Skip), def("aborting", workflows.Abort))
	ctx := context.Background()

	inst, _, err := c.engines[0].Start(ctx, "skipping", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	require.Equal(t, workflows.WorkflowCompleted, c.waitEnded(t).Kind)
	got, st := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.InstanceDone, got.Status)
	require.Equal(t, workflows.StepDone, st["flaky"].Status)
	require.EqualValues(t, 2, st["flaky"].Attempts, "retried once")
	require.Equal(t, workflows.StepSkipped, st["bad"].Status)
	require.EqualValues(t, 2, st["bad"].Attempts)
	require.Equal(t, workflows.StepDone, st["publish"].Status, "a skipped step satisfies its dependents")

	inst, _, err = c.engines[1].Start(ctx, "aborting", "a", nil, workflows.StartOptions{})
	require.NoError(t, err)
	ev := c.waitEnded(t)
	require.Equal(t, workflows.WorkflowFailed, ev.Kind)
	require.Equal(t, "bad", ev.StepID)
	got, st = stepStates(t, c.engines[1], inst.ID)
	require.Equal(t, workflows.InstanceFailed, got.Status)
	require.Contains(t, string(got.ErrorDetail), `"step": "bad"`)
	require.Equal(t, workflows.StepFailed, st["bad"].Status)
	require.Equal(t, workflows.StepSkipped, st["publish"].Status, "an aborted instance starts nothing more")
	require.Equal(t, 1, s.count("publish"), "publish ran only for the skipping workflow")
}

// An episode that ended without advancing its workflow (failed by recovery,
// partially failed by hand) leaves a running step behind: Reconcile finds
// it and drives it through the normal path, so the workflow never hangs.
func TestReconcileAdvancesEndedEpisodes(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	s := &steps{runs: map[string]int{}, fail: func(step string, n int) error {
		if step == "extract" && n == 1 {
			<-block // the first attempt hangs until the test releases it
		}
		return nil
	}}
	c := start(t, 1, s, pipeline("report", func(st *workflows.Step) {
		if st.ID == "extract" {
			st.MaxAttempts, st.OnError = 1, workflows.Skip
		}
	}))
	t.Cleanup(func() { close(block) })
	ctx := context.Background()
	inst, _, err := c.engines[0].Start(ctx, "report", "p", nil, workflows.StartOptions{})
	require.NoError(t, err)
	_, st := stepStates(t, c.engines[0], inst.ID)
	// End the hanging episode behind the engine's back, as an operator or
	// a foreign writer would: partially failed.
	pgtest.Exec(t, c.Pool, `UPDATE leasehold_episodes SET status = 'partially_failed', finished_at = now() WHERE id = $1`,
		st["extract"].EpisodeID)

	rep, err := c.engines[0].Reconcile(ctx, workflows.ReconcileOptions{})
	require.NoError(t, err)
	require.Equal(t, workflows.ReconcileReport{Found: 1, Advanced: 1}, rep)
	require.Equal(t, workflows.WorkflowCompleted, c.waitEnded(t).Kind)
	_, st = stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.StepSkipped, st["extract"].Status, "a partially failed step is a failure, never a hang")
	require.Equal(t, workflows.StepDone, st["publish"].Status)

	rep, err = c.engines[0].Reconcile(ctx, workflows.ReconcileOptions{})
	require.NoError(t, err)
	require.Zero(t, rep.Found, "reconciling twice advances nothing twice")
}

func TestDefinitionsAreValidated(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 1, s)
	e := c.engines[0]
	for name, d := range map[string]workflows.Definition{
		"no steps":    {ID: "w"},
		"no id":       {Steps: []workflows.Step{{ID: "a", Actor: "wf", Expectation: "extract"}}},
		"unknown dep": {ID: "w", Steps: []workflows.Step{{ID: "a", Actor: "wf", Expectation: "extract", After: []string{"z"}}}},
		"cycle": {ID: "w", Steps: []workflows.Step{
			{ID: "a", Actor: "wf", Expectation: "extract", After: []string{"b"}},
			{ID: "b", Actor: "wf", Expectation: "extract", After: []string{"a"}},
		}},
		"bad on error": {ID: "w", Steps: []workflows.Step{{ID: "a", Actor: "wf", Expectation: "extract", OnError: "retry"}}},
		"duplicate":    {ID: "w", Steps: []workflows.Step{{ID: "a", Actor: "wf", Expectation: "x"}, {ID: "a", Actor: "wf", Expectation: "y"}}},
	} {
		require.ErrorIs(t, e.Register(d), workflows.ErrInvalid, name)
	}
	_, _, err := e.Start(context.Background(), "nope", "s", nil, workflows.StartOptions{})
	require.ErrorIs(t, err, workflows.ErrUnknown)
}
