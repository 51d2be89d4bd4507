package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// failingJournal fails the first AppendStep with a database error that is
// not retryable (the statement's fate is unknown).
type failingJournal struct {
	*postgres.Store
	failed atomic.Bool
}

func (f *failingJournal) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error {
	if f.failed.CompareAndSwap(false, true) {
		return errors.New("postgres: AppendStep: unexpected EOF")
	}
	return f.Store.AppendStep(ctx, id, t, stepNo, data, lease)
}

// A journal write the database failed is not the strategy's failure: the
// episode is released for recovery, never written failed, and the next
// sweep reruns it.
func TestDatabaseFailureHandsTheEpisodeToRecovery(t *testing.T) {
	t.Parallel()
	twoSteps := funcStrategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
		return runner.StepResult{Done: r.StepNo >= 2}, nil
	}}
	actor := runner.Actor{ID: "work", Expectations: []runner.Expectation{
		{ID: "job", Trigger: runner.Manual{}, Strategy: twoSteps, Recovery: runner.RecoveryRestart},
	}}
	var store *failingJournal
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
		store = &failingJournal{Store: cfg.Store.(*postgres.Store)}
		cfg.Store = store
	}, actor)
	out, err := c.Nodes[0].RunManual(context.Background(), "work", "job", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs[0]) // released
	require.True(t, store.failed.Load())
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'running'", out.EpisodeID), "not failed")
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventReleased))

	rcv, err := recovery.New(postgres.New(c.Pool), c.Nodes[0], slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	rep, err := rcv.Sweep(context.Background(), recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Restarted, "released, so recoverable at once")
	nodetest.WaitEnded(t, 1, c.Sigs[0])
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done'", out.EpisodeID))
}
