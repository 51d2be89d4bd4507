package runner_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/health"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// watch forwards one event name to a channel, after the node's own Signals.
type watch struct {
	telemetry.Observer
	name string
	ch   chan telemetry.Event
}

func (w watch) Observe(ctx context.Context, e telemetry.Event) {
	w.Observer.Observe(ctx, e)
	if e.Name == w.name {
		w.ch <- e
	}
}

// Node A drains with 6 episodes: 2 fast and 3 slow running, 1 queued. The
// fast finish on A; the slow are cancelled at the drain's deadline and,
// with the queued one, released in one statement; node B's next sweep takes
// all four at once (no lease to wait out) and completes them.
func TestDrainHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	started := make(chan int64, 10)
	fastGate := make(chan struct{})
	work := runner.Actor{ID: "work", MaxConcurrent: 5, Expectations: []runner.Expectation{{
		ID: "job", Trigger: runner.Manual{}, Recovery: runner.RecoveryRestart,
		Strategy: funcStrategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			// Restarted on node B, as the same attempt: a hand-over is not
			// an attempt (recovery/doc.go).
			if r.Token().Owner == "node-1" {
				return runner.StepResult{Done: true}, nil
			}
			started <- r.EpisodeID()
			var p struct{ Slow bool }
			if err := r.Payload(&p); err != nil {
				return runner.StepResult{}, err
			}
			if p.Slow {
				<-ctx.Done()
				return runner.StepResult{}, ctx.Err()
			}
			<-fastGate
			return runner.StepResult{Done: true}, nil
		}},
	}}}
	drainStarted := make(chan telemetry.Event, 1)
	c := nodetest.Start(t, 2, func(i int, cfg *runner.Config) {
		// No poller on A: the sixth episode waits in A's slot queue instead
		// of flowing to B, and the drain hands that queue over. B polls:
		// what recovery restarts is available work, run by pollers.
		if i == 0 {
			// The forced runs' releases have half of DrainGrace after the
			// deadline: the default (1 s) once left two unsent on a loaded
			// host (make test-loaded), as in
			// TestStopDeadlineCancelsStepsAndReleasesClaims.
			cfg.DrainGrace = 2 * testbound.Margin
			cfg.Poll.Disabled = true
			cfg.Observer = watch{Observer: cfg.Observer, name: runner.EventDrainStarted, ch: drainStarted}
		}
	}, work)
	a, b := c.Nodes[0], c.Nodes[1]
	ctx := context.Background()
	for _, slow := range []bool{false, false, true, true, true, true} {
		_, err := a.RunManual(ctx, "work", "job", map[string]bool{"slow": slow})
		require.NoError(t, err)
	}
	for range 5 {
		<-started
	}
	require.Equal(t, runner.Readiness{State: runner.StateReady, Active: 5, Queued: 1, HeldLeases: 6}, a.Readiness())
	rows, err := postgres.New(c.Pool).ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, rows, 2, "both nodes registered")

	drainCtx, deadline := context.WithCancel(ctx)
	type result struct {
		sum runner.DrainSummary
		err error
	}
	drained := make(chan result, 1)
	go func() {
		sum, err := a.Drain(drainCtx)
		drained <- result{sum, err}
	}()
	<-drainStarted
	require.False(t, a.Ready(), "readiness flips before anything else")
	require.Equal(t, runner.StateDraining, a.Readiness().State)
	rec := httptest.NewRecorder()
	health.Readiness(a).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), `"state":"draining"`)
	_, err = a.RunManual(ctx, "work", "job", nil)
	require.ErrorIs(t, err, runner.ErrStopped, "intake is closed")

	close(fastGate)
	nodetest.WaitEnded(t, 2, c.Sigs[0]) // the two fast ones finish on A
	deadline()                          // the drain timeout: slow steps are cancelled
	res := <-drained
	require.NoError(t, res.err)
	sum := res.sum
	sum.Duration = 0
	require.Equal(t, runner.DrainSummary{Tracked: 6, Graceful: 3, Forced: 3, Released: 4}, sum)
	require.True(t, a.Drained())
	require.Equal(t, runner.StateDrained, a.Readiness().State)
	require.NotNil(t, a.Readiness().LastDrain)
	again, err := a.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, res.sum, again, "Drain is idempotent")
	require.Equal(t, 2, c.Count(t, "status = 'done' AND owner_node = 'node-0'"))
	require.Zero(t, c.Count(t, "status = 'running'")+c.Count(t, "status = 'queued'")-4)

	rows, err = postgres.New(c.Pool).ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, rows, 1, "a drained node removes its membership row")
	require.Equal(t, "node-1", rows[0].ID)

	// One sweep on B makes all four released episodes available at once,
	// and B's poller runs them.
	rcv, err := recovery.New(postgres.New(c.Pool), b, slog.New(slog.DiscardHandler), c.Sigs[1])
	require.NoError(t, err)
	rep, err := rcv.Sweep(ctx, recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 4, rep.Restarted)
	nodetest.WaitEnded(t, 4, c.Sigs[1])
	require.Equal(t, 4, c.Count(t, "status = 'done' AND owner_node = 'node-1'"))
	require.Equal(t, 6, c.Count(t, "status = 'done'"))
	require.Equal(t, 6, c.Count(t, "status = 'done' AND attempts = 0"), "the drain used up no attempt")
}

func TestDrainBeforeStartAndStopAfterDrain(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 1, nil, eventActor(oneStep, 1))
	n, err := runner.NewNode(runner.Config{Store: postgres.New(c.Pool), Identity: "never-started"})
	require.NoError(t, err)
	require.Equal(t, runner.StateStarting, n.Readiness().State)
	sum, err := n.Drain(context.Background())
	require.NoError(t, err)
	require.Zero(t, sum)
	require.True(t, n.Drained())
	require.ErrorIs(t, n.Start(context.Background()), runner.ErrInvalid)

	require.NoError(t, c.Nodes[0].Stop(context.Background()))
	require.NoError(t, c.Nodes[0].Stop(context.Background()), "Stop after a drain is a no-op")
	require.True(t, c.Nodes[0].Drained())
}
