package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// The Store is everything the runner, the recovery sweep and the caller's
// transactions (FireTx, Run.Hold, Run.CompleteTx) need.
var (
	_ runner.Store   = (*sqlite.Store)(nil)
	_ runner.TxStore = (*sqlite.Store)(nil)
	_ recovery.Store = (*sqlite.Store)(nil)
)

// startNode starts a node on its own pool of db's file, as another process
// would have, with a poller that polls every 20ms (SQLite has no
// notifications).
func startNode(t *testing.T, db *sql.DB, id string, mode runner.Mode, actors ...runner.Actor) (*runner.Node, *nodetest.Signals) {
	t.Helper()
	sig := nodetest.NewSignals()
	node, err := runner.NewNode(runner.Config{
		Store:    sqlite.New(sqlitetest.Another(t, db)),
		Identity: id,
		Mode:     mode,
		NoJitter: true,
		Poll:     runner.PollConfig{Interval: 20 * time.Millisecond},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: sig,
	})
	require.NoError(t, err)
	for _, a := range actors {
		require.NoError(t, node.Register(a))
	}
	require.NoError(t, node.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // no grace: hung steps are cancelled at once
		_ = node.Stop(ctx)
	})
	return node, sig
}

// Nodes on one SQLite file run every trigger exactly once: events fired on
// a full node run there directly; events fired on a trigger_only node are
// created available (one episode row), which the full node's poller takes
// (granted and started in one poll) and runs; a failing first attempt is
// retried as available work and succeeds.
func TestRunnerOnSQLite(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	var (
		mu   sync.Mutex
		runs = map[int64][]string{}
		fail atomic.Bool
	)
	actor := func(node string) runner.Actor {
		return runner.Actor{ID: "mon", MaxConcurrent: 4, Expectations: []runner.Expectation{{
			ID: "handle", Trigger: runner.Event{Name: "ping"}, MaxAttempts: 3,
			Retry: runner.RetryPolicy{Backoff: time.Millisecond, MaxBackoff: time.Millisecond},
			Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
				if r.Attempt == 1 && fail.CompareAndSwap(true, false) {
					return runner.StepResult{}, errors.New("flaky once")
				}
				mu.Lock()
				defer mu.Unlock()
				runs[r.EpisodeID()] = append(runs[r.EpisodeID()], node)
				return runner.StepResult{Done: true, Result: map[string]string{"by": node}}, nil
			}},
		}}}
	}
	full, sig := startNode(t, db, "full", runner.ModeFull, actor("full"))
	trigger, tsig := startNode(t, db, "trigger", runner.ModeTriggerOnly, actor("trigger"))
	ctx := context.Background()

	const direct, deferred = 6, 6
	fail.Store(true) // the first run to start fails once and is retried
	var ids []int64
	for i := range direct {
		out, err := full.Fire(ctx, "mon", "ping", map[string]int{"direct": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.Len(t, out, 1) // run here, or deferred when the actor's slots are full
		ids = append(ids, out[0].EpisodeID)
	}
	for i := range deferred {
		out, err := trigger.Fire(ctx, "mon", "ping", map[string]int{"deferred": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.True(t, out[0].Deferred, "a trigger_only node creates available work")
		ids = append(ids, out[0].EpisodeID)
	}
	dup, err := trigger.Fire(ctx, "mon", "ping", map[string]int{"deferred": 0}, runner.FireOptions{})
	require.NoError(t, err)
	require.True(t, dup[0].Duplicate, "the same event is the same trigger")
	require.Equal(t, ids[direct], dup[0].EpisodeID, "a duplicate names the live episode")

	// Every episode ends done (the retried one after its failed attempt).
	nodetest.WaitEnded(t, direct+deferred, sig)
	store := sqlite.New(db)
	for _, id := range ids {
		require.Eventually(t, func() bool {
			ep, err := store.GetEpisode(ctx, id)
			require.NoError(t, err)
			return ep.Status == episodes.StatusDone
		}, 10*time.Second, 10*time.Millisecond, "episode %d", id)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, direct+deferred)
	for id, by := range runs {
		require.Equal(t, []string{"full"}, by, "episode %d ran once, on the full node", id)
	}
	require.False(t, fail.Load(), "one attempt failed and was retried")
	var open, retried int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_episodes WHERE run_after IS NOT NULL`).Scan(&open))
	require.Zero(t, open, "every available episode taken")
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_episodes WHERE attempts = 1 AND status = 'done'`).Scan(&retried))
	require.Equal(t, 1, retried, "the failed attempt ran again as the episode's second attempt")
	require.Zero(t, tsig.Count(runner.EventStarted), "nothing ran on the trigger_only node")
	var claimed int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_work_claims WHERE state = 'claimed'`).Scan(&claimed))
	require.Zero(t, claimed, "every finish ended its claim")
	t.Logf("dispatched by the poller: %d", sig.Count(runner.EventRequestDispatched))
}

// What FireTx and the fenced writes of a caller's transaction write through
// Store.WithTx commits or rolls back with the caller's own writes; a finish
// that matches nothing there (a stale grant) writes nothing and dooms the
// caller's transaction: its commit fails, and nothing of it lands.
func TestTxStoreOnSQLite(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	ran := make(chan int64, 10)
	node, sig := startNode(t, db, "full", runner.ModeFull, runner.Actor{ID: "mon", Expectations: []runner.Expectation{{
		ID: "handle", Trigger: runner.Event{Name: "ping"},
		Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			ran <- r.EpisodeID()
			return runner.StepResult{Done: true}, nil
		}},
	}}})
	ctx := context.Background()
	store := sqlite.New(db)
	count := func() int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_episodes`).Scan(&n))
		return n
	}

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	out, err := node.FireTx(ctx, store.WithTx(tx), "mon", "ping", map[string]int{"n": 1}, runner.FireOptions{})
	require.NoError(t, err)
	require.True(t, out[0].Deferred)
	again, err := node.FireTx(ctx, store.WithTx(tx), "mon", "ping", map[string]int{"n": 1}, runner.FireOptions{})
	require.NoError(t, err)
	require.True(t, again[0].Duplicate, "a duplicate of an episode created earlier in the same transaction")
	require.Equal(t, out[0].EpisodeID, again[0].EpisodeID)
	require.NoError(t, tx.Rollback())
	require.Zero(t, count(), "rolled back: no episode, no request")

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	out, err = node.FireTx(ctx, store.WithTx(tx), "mon", "ping", map[string]int{"n": 2}, runner.FireOptions{})
	require.NoError(t, err)
	// A finish under a grant that does not exist matches nothing, and
	// the transaction cannot commit.
	stale := claims.Token{Key: "event:mon:ping:nobody", Owner: "full", Fence: 7}
	require.ErrorIs(t, store.WithTx(tx).FinishEpisode(ctx, out[0].EpisodeID, stale, episodes.Finish{Status: episodes.StatusDone}), claims.ErrLeaseLost)
	require.Error(t, tx.Commit())
	require.Zero(t, count(), "the doomed transaction's episode did not land")

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	out, err = node.FireTx(ctx, store.WithTx(tx), "mon", "ping", map[string]int{"n": 2}, runner.FireOptions{})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, 1, count())
	node.PollNow()
	nodetest.WaitEnded(t, 1, sig)
	require.Equal(t, out[0].EpisodeID, <-ran, "committed: the full node runs it")
}
