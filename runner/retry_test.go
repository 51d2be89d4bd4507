package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// retryCluster starts one node whose poller runs only when the test says
// (PollOnce), with an actor retrying after 10 s, 20 s, ... (so a retry is
// never due on its own during the test: run_after is backdated instead).
func retryCluster(t *testing.T, s runner.Strategy, maxAttempts int32) (nodetest.Cluster, chan telemetry.Event) {
	t.Helper()
	retrying := make(chan telemetry.Event, 10)
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
		cfg.Poll.Interval, cfg.TriggerWaker = time.Hour, nil
		cfg.Observer = watch{Observer: cfg.Observer, name: runner.EventRetrying, ch: retrying}
	}, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: s,
		MaxAttempts: maxAttempts, Retry: runner.RetryPolicy{Backoff: 10 * time.Second, MaxBackoff: time.Minute}}}})
	return c, retrying
}

// due makes the episode's retry due now (backdating run_after, no
// sleeping) and wakes the node's poller, which takes it (the caller waits
// for what the next attempt does).
func due(t *testing.T, c nodetest.Cluster, id int64) {
	t.Helper()
	pgExec(t, c, `UPDATE leasehold_episodes SET run_after = now() WHERE id = $1 AND run_after IS NOT NULL`, id)
	c.Nodes[0].PollNow()
}

// An error on attempts 1 and 2, success on 3: one episode, done, each
// failed attempt journaled with its error, and each backoff decided on the
// database clock (run_after = the retry's time + backoff, jittered ±20%,
// doubling).
func TestRetryWithBackoffUntilSuccess(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	flaky := nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
		calls.Add(1)
		if r.Attempt < 3 {
			return runner.StepResult{}, errors.New("gateway timeout")
		}
		return runner.StepResult{Done: true, Result: map[string]int32{"attempt": r.Attempt}}, nil
	}}
	c, retrying := retryCluster(t, flaky, 5)
	out, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
	require.NoError(t, err)
	id := out.EpisodeID
	for attempt, base := range []time.Duration{10 * time.Second, 20 * time.Second} {
		e := <-retrying
		require.EqualValues(t, attempt+1, e.Attempt)
		// The backoff, measured between the retry's commit and run_after,
		// both on the database clock.
		var wait time.Duration
		require.NoError(t, c.Pool.QueryRow(context.Background(), `SELECT (extract(epoch FROM e.run_after - c.finished_at) * 1000)::bigint * interval '1 millisecond'
			FROM leasehold_episodes e
			JOIN leasehold_work_claims c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
			WHERE e.id = $1 AND e.run_after IS NOT NULL`, id).Scan(&wait))
		require.InDelta(t, float64(base), float64(wait), float64(base)/5+float64(time.Millisecond), "attempt %d", attempt+1)
		ep, err := postgres.New(c.Pool).GetEpisode(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, episodes.StatusQueued, ep.Status, "available again, not failed")
		require.Equal(t, "retrying", ep.Phase)
		require.EqualValues(t, attempt+2, ep.Attempt())
		due(t, c, id)
	}
	nodetest.WaitEnded(t, 1, c.Sigs[0])
	ep, err := postgres.New(c.Pool).GetEpisode(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, ep.Status)
	require.Empty(t, ep.ErrorClass, "the success clears the last error")
	require.EqualValues(t, 3, ep.Attempt())
	require.EqualValues(t, 3, calls.Load())
	steps, err := postgres.New(c.Pool).ListSteps(context.Background(), id)
	require.NoError(t, err)
	var errs []int
	for _, s := range steps {
		var d struct {
			Attempt int
			Error   string
		}
		_ = json.Unmarshal(s.Data, &d)
		if d.Error != "" {
			require.Equal(t, "gateway timeout", d.Error)
			errs = append(errs, d.Attempt)
		}
	}
	require.Equal(t, []int{1, 2}, errs, "each failed attempt journaled with its error")
}

// A permanent error fails at once, whatever the retry policy; exhausted
// attempts fail with the last attempt's error.
func TestRetryStopsAtPermanentErrorsAndMaxAttempts(t *testing.T) {
	t.Parallel()
	t.Run("permanent", func(t *testing.T) {
		t.Parallel()
		declined := nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{}, runner.Permanent(errors.New("card declined"))
		}}
		c, _ := retryCluster(t, declined, 5)
		out, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
		require.NoError(t, err)
		nodetest.WaitEnded(t, 1, c.Sigs[0])
		require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'failed' AND attempts = 0 AND error_detail->>'reason' = 'card declined'", out.EpisodeID))
		require.Zero(t, c.Sigs[0].Count(runner.EventRetrying))
	})
	t.Run("exhausted", func(t *testing.T) {
		t.Parallel()
		always := nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{}, errors.New("timeout on attempt " + string(rune('0'+r.Attempt)))
		}}
		c, retrying := retryCluster(t, always, 2)
		out, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
		require.NoError(t, err)
		<-retrying
		due(t, c, out.EpisodeID)
		nodetest.WaitEnded(t, 1, c.Sigs[0])
		require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'failed' AND attempts = 1 AND error_detail->>'reason' = 'timeout on attempt 2'", out.EpisodeID))
	})
}

func TestRetryNeedsThePoller(t *testing.T) {
	t.Parallel()
	node, err := runner.NewNode(runner.Config{Store: postgres.New(nil), Identity: "n", Poll: runner.PollConfig{Disabled: true}})
	require.NoError(t, err)
	err = node.Register(runner.Actor{ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{},
		Strategy: oneStep, Retry: runner.RetryPolicy{Backoff: time.Second}}}})
	require.ErrorIs(t, err, runner.ErrInvalid)
	err = node.Register(runner.Actor{ID: "b", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{},
		Strategy: oneStep, Retry: runner.RetryPolicy{Backoff: time.Minute, MaxBackoff: time.Second}}}})
	require.ErrorIs(t, err, runner.ErrInvalid)
}
