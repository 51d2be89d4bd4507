package sqlite_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/runner"
)

// Without notifications (SQLite), a node still starts what it made due
// itself at its due time: a delayed run it fired and a retry of a run it
// ended wake its own poller, which sleeps until the episode falls due
// (NextAvailableDue), not until its interval (an hour here: the poller of
// old never started them). Lag is the poll that took the episode
// (ClaimAvailable clearing run_after) minus run_after, both on SQLite's
// clock, recorded by a trigger of the test's own on the episode table.
func TestDueWorkStartsAtItsDueTimeOnSQLite(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	sqlitetest.Exec(t, db, `CREATE TABLE test_due_lag (episode_id INTEGER NOT NULL, lag_ms INTEGER NOT NULL)`)
	// Only ClaimAvailable's pick clears run_after and leaves the episode
	// queued: a cancel or an expiry ends it in the same write.
	sqlitetest.Exec(t, db, `CREATE TRIGGER test_due_lag_taken
		AFTER UPDATE OF run_after ON leasehold_episodes
		WHEN OLD.run_after IS NOT NULL AND NEW.run_after IS NULL AND NEW.status = 'queued'
		BEGIN
			INSERT INTO test_due_lag (episode_id, lag_ms) VALUES (NEW.id, `+sqlitetest.Now+` - OLD.run_after);
		END`)
	var failedOnce sync.Map
	sig := nodetest.NewSignals()
	interval := time.Hour
	node, err := runner.NewNode(runner.Config{
		Store:    sqlite.New(sqlitetest.Another(t, db)),
		Identity: "node-0",
		NoJitter: true,
		Poll:     runner.PollConfig{Interval: interval},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: sig,
	})
	require.NoError(t, err)
	require.NoError(t, node.Register(runner.Actor{ID: "mon", MaxConcurrent: 4, Expectations: []runner.Expectation{{
		ID: "handle", Trigger: runner.Event{Name: "ping"}, MaxAttempts: 3,
		Retry: runner.RetryPolicy{Backoff: 400 * time.Millisecond},
		Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			var p struct{ Retry bool }
			if err := r.Payload(&p); err != nil {
				return runner.StepResult{}, err
			}
			if _, again := failedOnce.LoadOrStore(r.EpisodeID(), true); p.Retry && !again {
				return runner.StepResult{}, errors.New("first attempt fails")
			}
			return runner.StepResult{Done: true}, nil
		}},
	}}}))
	require.NoError(t, node.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = node.Stop(ctx)
	})
	ctx := context.Background()
	const delayed, retried = 6, 3
	for i := range delayed {
		out, err := node.Fire(ctx, "mon", "ping", map[string]any{"i": i}, runner.FireOptions{Delay: 300*time.Millisecond + time.Duration(i)*100*time.Millisecond})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
	}
	for i := range retried {
		_, err := node.Fire(ctx, "mon", "ping", map[string]any{"i": 100 + i, "Retry": true}, runner.FireOptions{})
		require.NoError(t, err)
	}
	nodetest.WaitEnded(t, delayed+retried, sig)

	rows, err := db.QueryContext(ctx, `SELECT lag_ms FROM test_due_lag`)
	require.NoError(t, err)
	defer rows.Close()
	var lags []int64
	for rows.Next() {
		var ms int64
		require.NoError(t, rows.Scan(&ms))
		lags = append(lags, ms)
	}
	require.NoError(t, rows.Err())
	// Every episode was taken from the available set at least once (a
	// trigger fired while the node's slots were reserved overflows, and is
	// taken again after its failed attempt), and every take was on time.
	var taken int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(DISTINCT episode_id) FROM test_due_lag`).Scan(&taken))
	require.Equal(t, delayed+retried, taken)
	slices.Sort(lags)
	t.Logf("due-to-take on SQLite over %d takes: p50 %d ms, max %d ms (poll interval %v)", len(lags), lags[len(lags)/2], lags[len(lags)-1], interval)
	// On time is milliseconds on a quiet host. A retry's take chains
	// writes through SQLite's one write lock (the retry, then the poll),
	// each of which may wait the scheduling margin on a loaded host while
	// lease writes still queue behind others (issue 29 item 1: seen up to
	// 3.5 s at load 20). The bound of the old model, four margins (retry,
	// claim, hand-over and the poll's wake-up), is kept.
	require.Less(t, lags[len(lags)-1], (4 * testbound.Margin).Milliseconds(), "a due episode waited for the poll interval: %v", lags)
}
