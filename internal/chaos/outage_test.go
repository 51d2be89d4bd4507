//go:build unix

package chaos_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/runner"
)

// TestServerRestartDoesNotRestartLiveWork restarts the server (pg_ctl
// restart -m fast: every session terminated, connections refused until it
// is back) while six long episodes journal step after step. Nothing the
// restart interrupts reached the server — a terminated session (57P01) or a
// refused connect — so the runner retries each journal and finish write
// within the lease's local time, and every episode carries on where it was:
// done, by its first run, with each of its steps journaled exactly once.
// (Before connect errors were retryable, every one of them was released
// and restarted from Init by recovery.)
func TestServerRestartDoesNotRestartLiveWork(t *testing.T) {
	const (
		episodes = 6
		steps    = 60
	)
	srv := startServer(t)
	ctx := t.Context()
	pool := newDatabase(t, ctx, srv)

	halfway := make(chan struct{}, episodes)
	var once sync.Map
	sigs := nodetest.NewSignals()
	node, err := runner.NewNode(runner.Config{Store: postgres.New(pool), Identity: "outage-1", NoJitter: true,
		Lease: 8 * time.Second, Poll: runner.PollConfig{Disabled: true}, Observer: sigs,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, node.Register(runner.Actor{ID: "long", MaxConcurrent: episodes, Expectations: []runner.Expectation{{
		ID: "run", Trigger: runner.Manual{}, Recovery: runner.RecoveryRestart, MaxAttempts: 5,
		Strategy: nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			if r.StepNo == steps/3 {
				if _, seen := once.LoadOrStore(r.EpisodeID(), true); !seen {
					halfway <- struct{}{}
				}
			}
			select {
			case <-ctx.Done():
				return runner.StepResult{}, ctx.Err()
			case <-time.After(25 * time.Millisecond): // a step's work
			}
			return runner.StepResult{Data: r.StepNo, Done: r.StepNo == steps}, nil
		}},
	}}}))
	require.NoError(t, node.Start(ctx))
	t.Cleanup(func() {
		now, cancel := context.WithCancel(context.Background())
		cancel()
		_ = node.Stop(now)
	})
	ids := make([]int64, episodes)
	for i := range ids {
		out, err := node.RunManual(ctx, "long", "run", map[string]int{"n": i})
		require.NoError(t, err)
		ids[i] = out.EpisodeID
	}
	for range episodes {
		<-halfway
	}
	took, err := srv.restart(ctx)
	require.NoError(t, err)
	t.Logf("server restarted in %v while %d episodes journaled", took.Round(time.Millisecond), episodes)
	nodetest.WaitEnded(t, episodes, sigs)

	require.Zero(t, sigs.Count(runner.EventReleased), "no episode was handed to recovery")
	require.Zero(t, sigs.Count(runner.EventLeaseLost))
	require.Equal(t, episodes, sigs.Count(runner.EventCompleted))
	require.Equal(t, episodes, sigs.Count(runner.EventStarted), "one run each")
	for _, id := range ids {
		var status string
		var attempts, journaled, distinct int
		require.NoError(t, pool.QueryRow(ctx, `SELECT e.status, e.attempts, count(s.*), count(DISTINCT s.step_no)
			FROM leasehold_episodes e LEFT JOIN leasehold_episode_steps s ON s.episode_id = e.id
			WHERE e.id = $1 GROUP BY e.status, e.attempts`, id).Scan(&status, &attempts, &journaled, &distinct))
		require.Equal(t, "done", status, "episode %d", id)
		require.Zero(t, attempts, "episode %d was recovered", id)
		require.Equal(t, steps, journaled, "episode %d: each step journaled once", id)
		require.Equal(t, steps, distinct)
	}
}
