package workflows_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/workflows"
)

// Issue 23 item 3: Register copies the definition; changing the caller's
// slices afterwards changes nothing registered.
func TestRegisterCopiesTheDefinition(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 1, s)
	d := twoSteps("copied", "publish")
	require.NoError(t, c.engines[0].Register(d))
	d.Steps[1].After[0] = "nowhere" // the step would wait for ever
	d.Steps[0].ID = "renamed"
	ctx := context.Background()
	inst, _, err := c.engines[0].Start(ctx, "copied", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	ev := c.waitEnded(t)
	require.Equal(t, workflows.WorkflowCompleted, ev.Kind)
	require.Equal(t, inst.ID, ev.InstanceID)
	_, st := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.StepDone, st["publish"].Status)
}

// Issue 23 item 4: what the database would refuse, or what no node could
// run, is ErrInvalid before the database, naming the field; nothing is
// written.
func TestBadInputIsRefusedUpFront(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 1, s, pipeline("report", nil))
	e := c.engines[0]
	for name, d := range map[string]workflows.Definition{
		"workflow":    {ID: "w\x00", Steps: []workflows.Step{{ID: "a", Actor: "wf", Expectation: "extract"}}},
		"step":        {ID: "w", Steps: []workflows.Step{{ID: "a\x00", Actor: "wf", Expectation: "extract"}}},
		"actor":       {ID: "w", Steps: []workflows.Step{{ID: "a", Actor: "wf\x00", Expectation: "extract"}}},
		"expectation": {ID: "w", Steps: []workflows.Step{{ID: "a", Actor: "wf", Expectation: "ex\x00"}}},
	} {
		err := e.Register(d)
		require.ErrorIs(t, err, workflows.ErrInvalid, name)
		require.Contains(t, err.Error(), name, "the field is named")
	}

	ctx := context.Background()
	env := func(v string) workflows.StartOptions { return workflows.StartOptions{Env: &v} }
	for name, tc := range map[string]struct {
		subject string
		payload any
		opts    workflows.StartOptions
		field   string
	}{
		"long subject":         {subject: strings.Repeat("s", 513), field: "subject"},
		"NUL subject":          {subject: "a\x00b", field: "subject"},
		"invalid UTF-8":        {subject: "a\xffb", field: "subject"},
		"NUL in payload":       {subject: "s", payload: map[string]string{"k": "a\x00b"}, field: "payload"},
		"bad UTF-8 in payload": {subject: "s", payload: map[string]string{"k": "a\xffb"}, field: "payload"},
		"long env":             {subject: "s", opts: env(strings.Repeat("e", 256)), field: "env"},
		"env with ':'":         {subject: "s", opts: env("a:b"), field: "env"},
		"NUL env":              {subject: "s", opts: env("a\x00"), field: "env"},
	} {
		_, _, err := e.Start(ctx, "report", tc.subject, tc.payload, tc.opts)
		require.ErrorIs(t, err, workflows.ErrInvalid, name)
		require.Contains(t, err.Error(), tc.field+":", name)
	}
	var n int
	require.NoError(t, c.Pool.QueryRow(ctx, `SELECT count(*) FROM leasehold_workflow_instances`).Scan(&n))
	require.Zero(t, n, "nothing reached the database")

	_, created, err := e.Start(ctx, "report", strings.Repeat("é", 512), map[string]string{"k": "ü"}, env(strings.Repeat("e", 255)))
	require.NoError(t, err, "the limits are characters, and they are inclusive")
	require.True(t, created)
}

// Issue 23 item 5: node-1's Start loses to node-0's running instance, which
// node-0 ends before node-1 reads it: node-1 starts a new instance instead
// of failing with "no such workflow instance".
func TestStartRacingTheEndOfTheRunningInstance(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 2, s, pipeline("report", nil))
	triggerOnly(t, c)
	ctx := context.Background()
	first, _, err := c.engines[0].Start(ctx, "report", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	var once sync.Once
	workflows.BeforeReadRunning(c.engines[1], func() {
		once.Do(func() {
			_, canceled, err := c.engines[0].Cancel(ctx, first.ID, "ended meanwhile")
			require.NoError(t, err)
			require.True(t, canceled)
		})
	})
	second, created, err := c.engines[1].Start(ctx, "report", "s", nil, workflows.StartOptions{})
	require.NoError(t, err, "a normal race is not an error")
	require.True(t, created, "the key was free by then: a new instance")
	require.NotEqual(t, first.ID, second.ID)
	require.Equal(t, workflows.InstanceRunning, second.Status)

	again, created, err := c.engines[1].Start(ctx, "report", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	require.False(t, created, "a retry while it runs returns it")
	require.Equal(t, second.ID, again.ID)
}

// Issue 23 item 6: a step's episode gets its expectation's MaxAttempts, as
// every other episode of the expectation does (recorded by the nodes that
// register it); the default is the runner's, 3.
func TestStepEpisodesUseTheExpectationsMaxAttempts(t *testing.T) {
	t.Parallel()
	s := &steps{runs: map[string]int{}}
	c := start(t, 2, s, workflows.Definition{ID: "w", Steps: []workflows.Step{
		{ID: "a", Actor: "wf", Expectation: "seven"},
		{ID: "b", Actor: "wf", Expectation: "extract"},
		{ID: "c", Actor: "elsewhere", Expectation: "unknown"},
	}})
	triggerOnly(t, c)
	ctx := context.Background()
	manual, err := c.Nodes[0].RunManual(ctx, "wf", "seven", nil)
	require.NoError(t, err)
	inst, _, err := c.engines[1].Start(ctx, "w", "s", nil, workflows.StartOptions{})
	require.NoError(t, err)
	_, st := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, 1, c.Count(t, "id = $1 AND max_attempts = 7", manual.EpisodeID), "the manual episode gets 7")
	require.Equal(t, 1, c.Count(t, "id = $1 AND max_attempts = 7", st["a"].EpisodeID), "and so does the step's")
	require.Equal(t, 1, c.Count(t, "id = $1 AND max_attempts = 3", st["b"].EpisodeID), "the default of a registered expectation")
	require.Equal(t, 1, c.Count(t, "id = $1 AND max_attempts = $2", st["c"].EpisodeID, workflows.DefaultEpisodeMaxAttempts),
		"an expectation no node recorded")
}

// Issue 23 item 2: the run that recovery restarts on another node sees the
// same trigger ref as the first run, so its strategy learns its workflow,
// instance and step (workflows.StepOf) the same way.
func TestRecoveredStepKnowsItsStep(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []workflows.StepRef
		miss int
	)
	s := &steps{runs: map[string]int{}, onRun: func(r *runner.Run) {
		mu.Lock()
		defer mu.Unlock()
		ref, ok := workflows.StepOf(r)
		if !ok {
			miss++
			return
		}
		seen = append(seen, ref)
	}}
	c := start(t, 2, s, twoSteps("two", "publish"))
	ctx := context.Background()
	inst := crashAfterFirstStep(t, c)
	require.NoError(t, c.Nodes[0].Stop(ctx))
	require.NoError(t, c.Nodes[1].SetMode(runner.ModeFull))
	pgtest.ExpireClaim(t, c.Pool, "workflow:"+strconv.FormatInt(inst.ID, 10)+":extract:1")
	rcv, err := recovery.New(postgres.New(c.Pool), c.Nodes[1], slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	rep, err := rcv.Sweep(ctx, recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Restarted)
	require.Equal(t, workflows.WorkflowCompleted, c.waitEnded(t).Kind)

	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, miss, "every run knew its step")
	want := workflows.StepRef{WorkflowID: "two", InstanceID: inst.ID, StepID: "extract", Attempt: 1}
	require.GreaterOrEqual(t, len(seen), 3, "the first run, the recovered run, publish")
	require.Equal(t, want, seen[0], "the first run")
	require.Equal(t, want, seen[1], "the recovered run: the same step attempt")
	require.Equal(t, "publish", seen[len(seen)-1].StepID)
}
