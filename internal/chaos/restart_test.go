//go:build unix

package chaos_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// TestServerRestartDuringStep pins down what the chaos suite can hit by
// chance: the server restarts (pg_ctl restart -m fast) while a step runs,
// so the pooled connection the step's journal write (AppendStep) then uses
// was terminated (SQLSTATE 57P01). The step succeeded and the write
// certainly did not land (the server reports the error for the statement,
// which was rolled back), so the episode must still end done: the write
// retried, or the run handed to recovery; never failed. The restart hits
// the first of two steps: the last step is journaled by FinishEpisode
// itself.
//
// It pins two fixes: the Postgres adapter marks 57P01/57P02/57P03 as
// claims.ErrRetryable (the server reported that it did not run the
// statement), and the runner never fails an episode for a journal write the
// database failed; it releases the episode for recovery instead. One pooled
// connection makes it deterministic.
func TestServerRestartDuringStep(t *testing.T) {
	srv := startServer(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, srv.URL(""))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	cfg, err := pgxpool.ParseConfig(srv.URL(schema))
	require.NoError(t, err)
	cfg.MaxConns = 1 // the step's AppendStep gets the connection the restart killed
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	sqlDB := stdlib.OpenDBFromPool(pool)
	require.NoError(t, postgres.Migrate(ctx, sqlDB))
	require.NoError(t, sqlDB.Close())

	inStep, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	store := postgres.New(pool)
	// No renewal in the first 9 s, so nothing but the step's AppendStep
	// uses the connection after the restart.
	node, err := runner.NewNode(runner.Config{Store: store, Identity: "restart-1", NoJitter: true,
		Lease: 10 * time.Second, Heartbeat: claims.HeartbeatConfig{Interval: 9 * time.Second, Margin: 500 * time.Millisecond},
		Poll: runner.PollConfig{Disabled: true}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, node.Register(runner.Actor{ID: "a", Expectations: []runner.Expectation{{
		ID: "e", Trigger: runner.Manual{}, Recovery: runner.RecoveryRestart, MaxAttempts: 5,
		Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			if r.StepNo > 1 {
				return runner.StepResult{Done: true}, nil
			}
			if runs.Add(1) == 1 { // only the first run waits for the restart
				close(inStep)
				<-release
			}
			return runner.StepResult{Data: "first step"}, nil
		}},
	}}}))
	require.NoError(t, node.Start(ctx))
	t.Cleanup(func() {
		now, cancel := context.WithCancel(context.Background())
		cancel()
		_ = node.Stop(now)
	})
	// The sweeper and the test's reads have their own pool: they must not be
	// the ones to find the node's connection dead.
	other, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(other.Close)
	rec, err := recovery.New(postgres.New(other), node, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	sweeper, err := recovery.NewSweeper(rec, recovery.SweeperConfig{InitialDelay: 200 * time.Millisecond, Interval: 200 * time.Millisecond})
	require.NoError(t, err)
	sweepCtx, stopSweep := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() { _ = sweeper.Run(sweepCtx); close(swept) }()
	t.Cleanup(func() { stopSweep(); <-swept })

	out, err := node.RunManual(ctx, "a", "e", map[string]string{"case": "restart during step"})
	require.NoError(t, err)
	<-inStep
	_, err = srv.restart(ctx)
	require.NoError(t, err)
	close(release)

	// Terminal, on the database: polled, since a handed-over run ends twice.
	var status, class, detail string
	deadline := time.Now().Add(time.Minute)
	for tick := time.NewTicker(pollEvery); ; <-tick.C {
		err := other.QueryRow(ctx, `SELECT status, coalesce(error_class, ''), coalesce(error_detail::text, '')
			FROM leasehold_episodes WHERE id = $1`, out.EpisodeID).Scan(&status, &class, &detail)
		if err == nil && status != "queued" && status != "running" {
			tick.Stop()
			break
		}
		require.True(t, time.Now().Before(deadline), "episode %d still %s after a minute (%v)", out.EpisodeID, status, err)
	}
	require.Equal(t, "done", status, "class %s, detail %s", class, detail)
}
