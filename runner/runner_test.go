package runner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/runner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type (
	signals      = nodetest.Signals
	cluster      = nodetest.Cluster
	funcStrategy = nodetest.Strategy
)

var (
	newSignals = nodetest.NewSignals
	waitEnded  = nodetest.WaitEnded
)

func setup(t *testing.T, n int, tune func(*runner.Config), actors ...runner.Actor) cluster {
	t.Helper()
	var each func(int, *runner.Config)
	if tune != nil {
		each = func(_ int, cfg *runner.Config) { tune(cfg) }
	}
	return nodetest.Start(t, n, each, actors...)
}

// oneStep journals one step and is done.
var oneStep = funcStrategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
	return runner.StepResult{Data: "only", Done: true, Result: map[string]bool{"ok": true}}, nil
}}

func eventActor(s runner.Strategy, maxConcurrent int) runner.Actor {
	return runner.Actor{ID: "monitor", MaxConcurrent: maxConcurrent, Expectations: []runner.Expectation{
		{ID: "check", Trigger: runner.Event{Name: "resource.updated"}, Strategy: s},
	}}
}

// fireAll fires the same event on every node at the same instant.
func fireAll(t *testing.T, c cluster, payload any) (created int) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		won   atomic.Int32
	)
	for _, node := range c.Nodes {
		wg.Go(func() {
			<-start
			out, err := node.Fire(t.Context(), "monitor", "resource.updated", payload, runner.FireOptions{})
			if !errors.Is(err, nil) {
				t.Errorf("fire: %v", err)
				return
			}
			for _, o := range out {
				if !o.Duplicate {
					won.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return int(won.Load())
}

func TestScheduleTickOnThreeNodesMakesOneEpisodePerWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		jitter time.Duration
	}{{"NoJitter", 0}, {"Jitter", 20 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			actor := runner.Actor{ID: "reporter", MaxConcurrent: 8, Expectations: []runner.Expectation{
				{ID: "hourly", Trigger: runner.Schedule{Cron: "0 * * * *"}, Strategy: oneStep},
			}}
			c := setup(t, 3, func(cfg *runner.Config) {
				cfg.NoJitter, cfg.Jitter = tc.jitter == 0, tc.jitter
			}, actor)
			base := time.Date(2026, 6, 5, 0, 0, 0, 0, time.UTC)
			wins := make([]int, len(c.Nodes))
			const windows = 100
			for w := range windows {
				var wg sync.WaitGroup
				for i, node := range c.Nodes {
					// Timers fire a few seconds apart on different nodes;
					// the window is the planned tick with seconds zeroed.
					at := base.Add(time.Duration(w)*time.Hour + time.Duration(i*7)*time.Second)
					wg.Go(func() {
						out, err := node.Tick(t.Context(), "reporter", "hourly", at)
						require.NoError(t, err)
						if !out.Duplicate {
							wins[i]++
						}
					})
				}
				wg.Wait()
			}
			waitEnded(t, windows, c.Sigs...)
			require.Equal(t, windows, wins[0]+wins[1]+wins[2])
			require.Equal(t, windows, c.Count(t, "status = 'done'"))
			require.Equal(t, windows, c.Count(t, "true"))
			require.Equal(t, 1, c.Count(t, "dedupe_key = 'schedule:reporter:hourly:2026-06-05T00:00:00Z'"))
			if tc.jitter > 0 {
				for i, n := range wins {
					require.GreaterOrEqual(t, n, windows*15/100, "node-%d won %d of %d windows: %v", i, n, windows, wins)
				}
			}
		})
	}
}

func TestEventOnThreeNodesMakesOneEpisode(t *testing.T) {
	t.Parallel()
	c := setup(t, 3, nil, eventActor(oneStep, 50))

	require.Equal(t, 1, fireAll(t, c, map[string]any{"resource": "db-1", "level": 3}))
	// The same payload built in another order is the same event.
	ordered := []byte(`{"level":3,"resource":"db-1"}`)
	require.Equal(t, 0, fireAll(t, c, jsonRaw(ordered)))
	waitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Count(t, "true"))

	const distinct = 1000
	created := 0
	for i := range distinct {
		created += fireAll(t, c, map[string]any{"resource": fmt.Sprintf("db-%d", i), "level": 3})
	}
	require.Equal(t, distinct-1, created, "db-1 at level 3 was already fired, the rest are new")
	waitEnded(t, distinct-1, c.Sigs...)
	require.Equal(t, distinct, c.Count(t, "status = 'done'"))
}

func TestEventWithEventIDDedupesOnTheID(t *testing.T) {
	t.Parallel()
	c := setup(t, 1, nil, eventActor(oneStep, 1))
	for i := range 3 {
		out, err := c.Nodes[0].Fire(t.Context(), "monitor", "resource.updated", map[string]int{"try": i}, runner.FireOptions{EventID: "evt-42"})
		require.NoError(t, err)
		require.Equal(t, i > 0, out[0].Duplicate)
	}
	waitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Count(t, "dedupe_key = 'event:monitor:check:evt-42'"))
}

func TestMaxConcurrentQueuesInTheDatabase(t *testing.T) {
	t.Parallel()
	var (
		running, peak atomic.Int32
		started       = make(chan struct{}, 5)
		proceed       = make(chan struct{})
	)
	blocking := funcStrategy{StepFunc: func(ctx context.Context, _ *runner.Run) (runner.StepResult, error) {
		now := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if now <= p || peak.CompareAndSwap(p, now) {
				break
			}
		}
		started <- struct{}{}
		select {
		case <-proceed:
		case <-ctx.Done():
			return runner.StepResult{}, ctx.Err()
		}
		return runner.StepResult{Done: true}, nil
	}}
	c := setup(t, 1, nil, eventActor(blocking, 2))
	for i := range 5 {
		out, err := c.Nodes[0].Fire(t.Context(), "monitor", "resource.updated", map[string]int{"i": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.False(t, out[0].Duplicate)
	}
	<-started
	<-started
	require.Equal(t, 2, c.Count(t, "status = 'running'"))
	require.Equal(t, 3, c.Count(t, "status = 'queued'"), "waiting episodes are queued in the database, never running")
	close(proceed)
	waitEnded(t, 5, c.Sigs...)
	require.Equal(t, 5, c.Count(t, "status = 'done'"))
	require.LessOrEqual(t, peak.Load(), int32(2))
}

func TestTerminalStatuses(t *testing.T) {
	t.Parallel()
	blockUntilCancelled := func(ctx context.Context, _ *runner.Run) (runner.StepResult, error) {
		<-ctx.Done()
		return runner.StepResult{}, ctx.Err()
	}
	neverDone := func(context.Context, *runner.Run) (runner.StepResult, error) {
		return runner.StepResult{Data: "again"}, nil
	}
	cancelReady := make(chan struct{})
	for _, tc := range []struct {
		name      string
		exp       runner.Expectation
		cancel    bool
		status    episodes.Status
		class     string
		wantSteps int
	}{
		{name: "Done", exp: runner.Expectation{Strategy: oneStep}, status: episodes.StatusDone, wantSteps: 1},
		{name: "WallBudget", exp: runner.Expectation{Strategy: funcStrategy{StepFunc: blockUntilCancelled},
			Budget: runner.Budget{MaxWall: 50 * time.Millisecond}}, status: episodes.StatusFailed, class: episodes.ClassBudgetExceeded},
		{name: "StepBudget", exp: runner.Expectation{Strategy: funcStrategy{StepFunc: neverDone},
			Budget: runner.Budget{MaxSteps: 3}}, status: episodes.StatusFailed, class: episodes.ClassBudgetExceeded, wantSteps: 3},
		{name: "StepPanics", exp: runner.Expectation{Strategy: funcStrategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			panic("boom")
		}}}, status: episodes.StatusFailed, class: episodes.ClassPanic},
		{name: "InitPanics", exp: runner.Expectation{Strategy: funcStrategy{InitFunc: func(context.Context, *runner.Run) error {
			panic("boom")
		}, StepFunc: neverDone}}, status: episodes.StatusFailed, class: episodes.ClassPanic},
		{name: "StepErrors", exp: runner.Expectation{Strategy: funcStrategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{}, errors.New("upstream 503")
		}}}, status: episodes.StatusFailed, class: episodes.ClassError},
		{name: "Canceled", exp: runner.Expectation{Strategy: funcStrategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			close(cancelReady) // the run is registered and in its step: Cancel can reach it
			return blockUntilCancelled(ctx, r)
		}}}, cancel: true,
			status: episodes.StatusCanceled, class: episodes.ClassCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.exp.ID, tc.exp.Trigger = "job", runner.Manual{}
			c := setup(t, 1, nil, runner.Actor{ID: "a", Expectations: []runner.Expectation{tc.exp,
				{ID: "healthy", Trigger: runner.Manual{}, Strategy: oneStep}}})
			node := c.Nodes[0]
			out, err := node.RunManual(t.Context(), "a", "job", nil)
			require.NoError(t, err)
			if tc.cancel {
				<-cancelReady
				_, err := node.Cancel(t.Context(), out.EpisodeID)
				require.NoError(t, err)
			}
			waitEnded(t, 1, c.Sigs...)

			ep, err := postgres.New(c.Pool).GetEpisode(t.Context(), out.EpisodeID)
			require.NoError(t, err)
			require.Equal(t, tc.status, ep.Status)
			require.Equal(t, tc.class, ep.ErrorClass)
			require.NotNil(t, ep.FinishedAt)
			steps, err := postgres.New(c.Pool).ListSteps(t.Context(), out.EpisodeID)
			require.NoError(t, err)
			require.Len(t, steps, tc.wantSteps)

			// The claim ended with the episode, in the same statement.
			var state string
			require.NoError(t, c.Pool.QueryRow(t.Context(), `SELECT state FROM leasehold_work_claims WHERE dedupe_key = $1`,
				episodes.ClaimKey(out.EpisodeID, "")).Scan(&state))
			require.Equal(t, map[bool]string{true: "done", false: "failed"}[tc.status == episodes.StatusDone], state)

			// The node survives panics and keeps running episodes.
			_, err = node.RunManual(t.Context(), "a", "healthy", nil)
			require.NoError(t, err)
			waitEnded(t, 1, c.Sigs...)
		})
	}
}

func TestZombieWritesAreRejectedAfterASteal(t *testing.T) {
	t.Parallel()
	var (
		inStep2 = make(chan struct{})
		resume  = make(chan struct{})
	)
	slow := funcStrategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		if r.StepNo == 1 {
			return runner.StepResult{Data: "a-step-1"}, nil
		}
		close(inStep2)
		<-resume // the node is paused (GC, partition) while its lease is stolen
		return runner.StepResult{Data: "a-step-2", Done: true, Result: "from A"}, nil
	}}
	c := setup(t, 1, nil, eventActor(slow, 1))
	out, err := c.Nodes[0].Fire(t.Context(), "monitor", "resource.updated", "x", runner.FireOptions{EventID: "e1"})
	require.NoError(t, err)
	<-inStep2

	// Node B steals the expired lease and finishes the episode itself.
	key := "event:monitor:check:e1"
	pgtest.ExpireClaim(t, c.Pool, key)
	b := postgres.New(c.Pool)
	gateB, err := claims.NewGate(b, claims.GateConfig{Owner: "node-b", Lease: time.Minute})
	require.NoError(t, err)
	claimB, err := gateB.Acquire(t.Context(), key, "episode")
	require.NoError(t, err)
	require.EqualValues(t, 2, claimB.Fence)
	next, err := b.StartEpisode(t.Context(), out[0].EpisodeID, claimB.Token)
	require.NoError(t, err)
	require.EqualValues(t, 2, next)
	require.NoError(t, b.AppendStep(t.Context(), out[0].EpisodeID, claimB.Token, next, []byte(`"b-step-2"`), time.Minute))
	require.NoError(t, b.FinishEpisode(t.Context(), out[0].EpisodeID, claimB.Token,
		episodes.Finish{Status: episodes.StatusDone, Result: []byte(`"from B"`)}))

	close(resume) // A wakes up and tries to journal step 2 and complete
	waitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventLeaseLost))
	require.Zero(t, c.Sigs[0].Count(runner.EventCompleted))

	ep, err := b.GetEpisode(t.Context(), out[0].EpisodeID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, ep.Status)
	require.JSONEq(t, `"from B"`, string(ep.Result))
	require.Equal(t, "node-b", ep.OwnerNode)
	steps, err := b.ListSteps(t.Context(), out[0].EpisodeID)
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, []string{`"a-step-1"`, `"b-step-2"`}, []string{string(steps[0].Data), string(steps[1].Data)})
	require.Equal(t, []int64{1, 2}, []int64{steps[0].Fence, steps[1].Fence})
}

func TestStopFinishesTheCurrentStepAndHandsOver(t *testing.T) {
	t.Parallel()
	var (
		inStep  = make(chan struct{})
		proceed = make(chan struct{})
		steps   atomic.Int32
	)
	slow := funcStrategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		steps.Add(1)
		close(inStep)
		<-proceed
		return runner.StepResult{Data: "step"}, nil
	}}
	c := setup(t, 1, nil, eventActor(slow, 1))
	out, err := c.Nodes[0].Fire(t.Context(), "monitor", "resource.updated", "x", runner.FireOptions{EventID: "e1"})
	require.NoError(t, err)
	<-inStep

	stopped := make(chan error, 1)
	go func() { stopped <- c.Nodes[0].Stop(context.Background()) }()
	// Stop runs on another goroutine and exposes no signal; intake closing
	// is what the test waits for.
	require.Eventually(t, func() bool {
		_, err = c.Nodes[0].Fire(t.Context(), "monitor", "resource.updated", "y", runner.FireOptions{EventID: "e2"})
		return errors.Is(err, runner.ErrStopped)
	}, 10*time.Second, time.Millisecond, "intake stops")
	close(proceed)
	require.NoError(t, <-stopped)
	require.EqualValues(t, 1, steps.Load(), "no new step starts after Stop")

	b := postgres.New(c.Pool)
	stepsDone, err := b.ListSteps(t.Context(), out[0].EpisodeID)
	require.NoError(t, err)
	require.Len(t, stepsDone, 1, "the step in flight completed and was journaled")
	ep, err := b.GetEpisode(t.Context(), out[0].EpisodeID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusRunning, ep.Status, "left running for recovery")

	// Released: another node acquires at once, no lease to wait out.
	gateB, err := claims.NewGate(b, claims.GateConfig{Owner: "node-b"})
	require.NoError(t, err)
	claimB, err := gateB.Acquire(t.Context(), "event:monitor:check:e1", "episode")
	require.NoError(t, err)
	require.EqualValues(t, 2, claimB.Fence)
}

func TestStopDeadlineCancelsStepsAndReleasesClaims(t *testing.T) {
	t.Parallel()
	inStep := make(chan struct{}, 2)
	stuck := funcStrategy{StepFunc: func(ctx context.Context, _ *runner.Run) (runner.StepResult, error) {
		inStep <- struct{}{}
		<-ctx.Done()
		return runner.StepResult{}, ctx.Err()
	}}
	// The cancelled steps' hand-over writes have half of DrainGrace after
	// the deadline: on a loaded host the default (1 s) left one release
	// unsent (make test-loaded), so the grace here is the scheduling margin
	// twice over.
	c := setup(t, 1, func(cfg *runner.Config) { cfg.DrainGrace = 2 * testbound.Margin }, eventActor(stuck, 1))
	for i := range 2 { // one running; the other finds no free slot and is created available
		_, err := c.Nodes[0].Fire(t.Context(), "monitor", "resource.updated", i, runner.FireOptions{})
		require.NoError(t, err)
	}
	<-inStep
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace at all
	require.ErrorIs(t, c.Nodes[0].Stop(ctx), context.Canceled)

	var released, claimed int
	require.NoError(t, c.Pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE state = 'released'),
		count(*) FILTER (WHERE state = 'claimed') FROM leasehold_work_claims`).Scan(&released, &claimed))
	pending := c.Count(t, "run_after IS NOT NULL")
	require.Equal(t, 1, released, "the running one, handed over")
	require.Zero(t, claimed)
	require.Equal(t, 1, pending, "the other holds no claim: it is available to any node")
	require.Equal(t, 1, c.Count(t, "status = 'running'"))
	require.Equal(t, 1, c.Count(t, "status = 'queued'"))
}

func TestRegisterRejectsBadActors(t *testing.T) {
	t.Parallel()
	node, err := runner.NewNode(runner.Config{Store: postgres.New(nil), Identity: "n"})
	require.NoError(t, err)
	for name, a := range map[string]runner.Actor{
		"no id":           {Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{}, Strategy: oneStep}}},
		"no expectations": {ID: "a"},
		"colon in id":     {ID: "a:b", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{}, Strategy: oneStep}}},
		"no strategy":     {ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{}}}},
		"no trigger":      {ID: "a", Expectations: []runner.Expectation{{ID: "e", Strategy: oneStep}}},
		"bad cron":        {ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Schedule{Cron: "61 * * * *"}, Strategy: oneStep}}},
		"cron and every":  {ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Schedule{Cron: "* * * * *", Every: time.Minute}, Strategy: oneStep}}},
		"sub-second":      {ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Schedule{Every: 1500 * time.Millisecond}, Strategy: oneStep}}},
		"unnamed event":   {ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Event{}, Strategy: oneStep}}},
		"bad policy":      {ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{}, Strategy: oneStep, Recovery: "retry"}}},
		"duplicate exp": {ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{}, Strategy: oneStep},
			{ID: "e", Trigger: runner.Manual{}, Strategy: oneStep}}},
	} {
		require.ErrorIs(t, node.Register(a), runner.ErrInvalid, name)
	}
	_, err = runner.NewNode(runner.Config{})
	require.ErrorIs(t, err, runner.ErrInvalid)
	_, err = runner.NewNode(runner.Config{Store: postgres.New(nil), Jitter: -time.Second})
	require.ErrorIs(t, err, runner.ErrInvalid)
	_, err = runner.NewNode(runner.Config{Store: postgres.New(nil), IdentityFunc: func() (string, error) { return "", errors.New("no hostname") }})
	require.ErrorIs(t, err, runner.ErrInvalid)
	rc, bad := "rc", "a:b"
	for name, cfg := range map[string]runner.Config{
		"event jitter":   {EventJitter: -time.Second},
		"mode":           {Mode: "sometimes"},
		"env with colon": {Env: "a:b"},
		"long stack":     {StackSlug: strings.Repeat("s", 256)},
		"NUL in stack":   {StackSlug: "a\x00b"},
		"NUL in env":     {Env: "a\x00b"},
		"drain grace":    {DrainGrace: -time.Second},
		"write timeout":  {WriteTimeout: -time.Second},
		"poll interval":  {Poll: runner.PollConfig{Interval: -time.Second}},
		"poll TTL":       {Poll: runner.PollConfig{TTL: -time.Second}},
		"poll env":       {Poll: runner.PollConfig{SourceEnv: &bad, SourceStack: &rc}},
		"lease":          {Lease: -time.Second},
	} {
		cfg.Store = postgres.New(nil)
		_, err := runner.NewNode(cfg)
		require.ErrorIs(t, err, runner.ErrInvalid, name)
		require.NotEmpty(t, err.Error(), name)
	}
}

func TestNodeIdentity(t *testing.T) {
	t.Parallel()
	n1, err := runner.NewNode(runner.Config{Store: postgres.New(nil)})
	require.NoError(t, err)
	n2, err := runner.NewNode(runner.Config{Store: postgres.New(nil)})
	require.NoError(t, err)
	require.Regexp(t, `^nonode-\d+-[0-9a-f]{12}$`, n1.ID())
	require.NotEqual(t, n1.ID(), n2.ID(), "two nodes in one process must not share leases")
	n3, err := runner.NewNode(runner.Config{Store: postgres.New(nil), IdentityFunc: func() (string, error) { return "host-7", nil }})
	require.NoError(t, err)
	require.Equal(t, "host-7", n3.ID())
}

type jsonRaw []byte

func (j jsonRaw) MarshalJSON() ([]byte, error) { return j, nil }
