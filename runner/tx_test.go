package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
)

// inTx runs fn in a transaction of pool and commits it, or rolls it back
// when fn (or commit is false) says so.
func inTx(t *testing.T, pool *pgxpool.Pool, commit bool, fn func(tx pgx.Tx)) {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	fn(tx)
	if commit {
		require.NoError(t, tx.Commit(context.Background()))
	}
}

// FireTx creates the episode in the caller's transaction: rolled back,
// nothing exists; committed, one node runs it once; a duplicate inside the
// transaction (or after it) names the episode.
func TestFireTxExistsExactlyWhenTheCallerCommits(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	count := nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
		runs.Add(1)
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.Start(t, 2, nil, eventActor(count, 4))
	pgExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY)`)
	node, ctx := c.Nodes[0], context.Background()
	order := map[string]int{"order": 7}

	inTx(t, c.Pool, false, func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES (7)`)
		require.NoError(t, err)
		out, err := node.FireTx(ctx, postgres.New(tx), "monitor", "resource.updated", order, runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
		require.Positive(t, out[0].EpisodeID)
	}) // rolled back
	require.Zero(t, c.Count(t, "true"), "rolled back: no episode")
	require.Zero(t, c.Count(t, "run_after IS NOT NULL"), "and no available work for any node to find")

	var id int64
	inTx(t, c.Pool, true, func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES (7)`)
		require.NoError(t, err)
		out, err := node.FireTx(ctx, postgres.New(tx), "monitor", "resource.updated", order, runner.FireOptions{})
		require.NoError(t, err)
		id = out[0].EpisodeID
		again, err := node.FireTx(ctx, postgres.New(tx), "monitor", "resource.updated", order, runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, again[0].Duplicate)
		require.Equal(t, id, again[0].EpisodeID, "a duplicate inside the transaction names its episode")
	})
	nodetest.WaitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done'", id))
	require.EqualValues(t, 1, runs.Load(), "committed: run once, on one node")
	after, err := c.Nodes[1].Fire(ctx, "monitor", "resource.updated", order, runner.FireOptions{})
	require.NoError(t, err)
	require.True(t, after[0].Duplicate)
	require.Equal(t, id, after[0].EpisodeID)

	_, err = node.FireTx(ctx, nil, "monitor", "resource.updated", order, runner.FireOptions{})
	require.ErrorIs(t, err, runner.ErrInvalid)
}

// A run that ends itself in its own transaction: the fence check, its
// side effect and the fenced finish commit together; the runner writes no
// second terminal status and reports episode.completed, not lease_lost.
func TestCompleteTxCommitsTheEffectWithTheFinish(t *testing.T) {
	t.Parallel()
	var pool *pgxpool.Pool
	charge := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return runner.StepResult{}, err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		store := postgres.New(tx)
		if err := r.Hold(ctx, store); err != nil {
			return runner.StepResult{}, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO charges (episode_id, fence) VALUES ($1, $2)`, r.EpisodeID(), r.Token().Fence); err != nil {
			return runner.StepResult{}, err
		}
		if err := r.CompleteTx(ctx, store, map[string]string{"charged": "yes"}); err != nil {
			return runner.StepResult{}, err
		}
		return runner.StepResult{}, tx.Commit(ctx) // any result: the run ended in tx
	}}
	c := nodetest.Start(t, 1, nil, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: charge}}})
	pool = c.Pool
	pgExec(t, c, `CREATE TABLE charges (episode_id bigint PRIMARY KEY, fence bigint NOT NULL)`)
	out, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs...)
	ep, err := postgres.New(c.Pool).GetEpisode(context.Background(), out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, ep.Status)
	require.JSONEq(t, `{"charged":"yes"}`, string(ep.Result))
	require.Equal(t, 1, c.Count(t, "id = $1 AND EXISTS (SELECT 1 FROM charges WHERE episode_id = leasehold_episodes.id)", out.EpisodeID))
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventCompleted))
	require.Zero(t, c.Sigs[0].Count(runner.EventLeaseLost), "no false lease_lost")
	require.Zero(t, c.Sigs[0].Count(runner.EventFailed))
}

// A finish in a transaction that is rolled back leaves the run as it was:
// the runner finishes it by what the strategy returns (here, done), and the
// rolled-back effect is gone.
func TestRolledBackCompleteTxLeavesTheRunToTheRunner(t *testing.T) {
	t.Parallel()
	var pool *pgxpool.Pool
	undecided := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return runner.StepResult{}, err
		}
		if err := r.CompleteTx(ctx, postgres.New(tx), "in tx"); err != nil {
			return runner.StepResult{}, err
		}
		if err := tx.Rollback(ctx); err != nil {
			return runner.StepResult{}, err
		}
		return runner.StepResult{Done: true, Result: "by the runner"}, nil
	}}
	c := nodetest.Start(t, 1, nil, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: undecided}}})
	pool = c.Pool
	out, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs...)
	ep, err := postgres.New(c.Pool).GetEpisode(context.Background(), out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, ep.Status)
	require.JSONEq(t, `"by the runner"`, string(ep.Result))
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventCompleted))
}

// A zombie (its lease taken over, A -> B -> A included) cannot commit an
// effect: Hold fails with ErrLeaseLost and aborts its transaction, and the
// SQL function refuses a stale fence with SQLSTATE LH001.
func TestHoldRefusesAStaleGrant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	store := postgres.New(pool)
	ctx := context.Background()
	pgtest.Exec(t, pool, `CREATE TABLE charges (episode_id bigint PRIMARY KEY, fence bigint NOT NULL)`)
	a, err := store.Acquire(ctx, claims.AcquireParams{Key: "pay:1", Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)

	hold := func(tok claims.Token, commit bool) error {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := postgres.New(tx).HoldClaim(ctx, tok); err != nil {
			_, insertErr := tx.Exec(ctx, `INSERT INTO charges VALUES (1, $1)`, tok.Fence)
			require.Error(t, insertErr, "the transaction is aborted: nothing more lands")
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO charges VALUES (1, $1)`, tok.Fence)
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		}
		return nil
	}
	require.NoError(t, hold(a.Token, false), "the current grant holds")

	pgtest.ExpireClaim(t, pool, "pay:1")
	b, err := store.Acquire(ctx, claims.AcquireParams{Key: "pay:1", Owner: "node-b", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	require.NoError(t, store.Release(ctx, b.Token))
	again, err := store.Acquire(ctx, claims.AcquireParams{Key: "pay:1", Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	require.Equal(t, a.Owner, again.Owner, "A -> B -> A")
	require.ErrorIs(t, hold(a.Token, true), claims.ErrLeaseLost, "the first grant of A is fenced out")
	require.ErrorIs(t, hold(b.Token, true), claims.ErrLeaseLost)
	var charges int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&charges))
	require.Zero(t, charges)
	require.NoError(t, hold(again.Token, true))

	// From the user's own SQL.
	_, err = pool.Exec(ctx, `SELECT leasehold_hold('pay:1', 'node-a', $1)`, a.Fence)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, postgres.HoldLostCode, pgErr.Code)
	var until time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT leasehold_hold('pay:1', 'node-a', $1)`, again.Fence).Scan(&until))
	require.True(t, until.After(time.Now().Add(-time.Minute)))

	// Outside a transaction the lock would guard nothing: refused unsent.
	_, err = store.HoldClaim(ctx, again.Token)
	require.ErrorIs(t, err, claims.ErrInvalid)
}

// FireBatch: 500 events of one name in one statement, each deduplicated on
// its own key as Fire would (a repeat in the batch, and an event fired
// before, are duplicates naming their episode); the episodes are available
// and run once each. FireBatchTx does the same in the caller's transaction.
func TestFireBatchCreatesEachEventOnce(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	count := nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
		runs.Add(1)
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.Start(t, 2, nil, eventActor(count, 32))
	node, ctx := c.Nodes[0], context.Background()
	before, err := node.Fire(ctx, "monitor", "resource.updated", map[string]int{"n": 0}, runner.FireOptions{})
	require.NoError(t, err)

	events := make([]runner.BatchEvent, 0, 501)
	for i := range 500 {
		events = append(events, runner.BatchEvent{Payload: map[string]int{"n": i}})
	}
	events = append(events, runner.BatchEvent{Payload: map[string]int{"n": 7}}) // a repeat within the batch
	out, err := node.FireBatch(ctx, "monitor", "resource.updated", events, runner.FireOptions{})
	require.NoError(t, err)
	require.Len(t, out, 501)
	require.True(t, out[0].Duplicate, "fired before the batch")
	require.Equal(t, before[0].EpisodeID, out[0].EpisodeID)
	require.True(t, out[500].Duplicate, "a repeat within the batch")
	require.Equal(t, out[7].EpisodeID, out[500].EpisodeID)
	created := 0
	for _, o := range out[1:500] {
		require.True(t, o.Deferred)
		require.Positive(t, o.EpisodeID)
		created++
	}
	nodetest.WaitEnded(t, 1+created, c.Sigs...)
	require.Equal(t, 500, c.Count(t, "status = 'done'"))
	require.EqualValues(t, 500, runs.Load(), "each once")

	inTx(t, c.Pool, false, func(tx pgx.Tx) {
		out, err := node.FireBatchTx(ctx, postgres.New(tx), "monitor", "resource.updated",
			[]runner.BatchEvent{{Payload: "a"}, {Payload: "b"}}, runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Deferred && out[1].Deferred)
	})
	require.Equal(t, 500, c.Count(t, "true"), "rolled back: none of the batch exists")
}

// A zombie that ignores CompleteTx's (or FailTx's) claims.ErrLeaseLost and
// commits anyway lands nothing: the fenced finish that matched no row
// aborted the caller's transaction (LH001), so the commit fails, the
// caller's rows (written before and after the finish) are gone, the
// zombie did not finish the episode, and the thief's grant is untouched.
func TestFinishTxOnAStolenLeaseDoomsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	for name, finish := range map[string]func(ctx context.Context, r *runner.Run, tx runner.TxStore) error{
		"CompleteTx": func(ctx context.Context, r *runner.Run, tx runner.TxStore) error {
			return r.CompleteTx(ctx, tx, "by the zombie")
		},
		"FailTx": func(ctx context.Context, r *runner.Run, tx runner.TxStore) error {
			return r.FailTx(ctx, tx, "", errors.New("by the zombie"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var pool *pgxpool.Pool
			started := make(chan claims.Token, 1)
			stolen := make(chan struct{})
			type outcome struct{ finish, after, commit error }
			ended := make(chan outcome, 1)
			zombie := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
				started <- r.Token()
				select {
				case <-stolen:
				case <-ctx.Done():
					return runner.StepResult{}, ctx.Err()
				}
				// A zombie does not look at its run's context (the
				// heartbeat may cancel it at any time): neither does
				// this one, so only the finish decides the commit.
				ctx = context.WithoutCancel(ctx)
				tx, err := pool.Begin(ctx)
				if err != nil {
					return runner.StepResult{}, err
				}
				defer func() { _ = tx.Rollback(ctx) }()
				if _, err := tx.Exec(ctx, `INSERT INTO charges (episode_id, at) VALUES ($1, 'before')`, r.EpisodeID()); err != nil {
					return runner.StepResult{}, err
				}
				var o outcome
				o.finish = finish(ctx, r, postgres.New(tx))
				_, o.after = tx.Exec(ctx, `INSERT INTO charges (episode_id, at) VALUES ($1, 'after')`, r.EpisodeID())
				o.commit = tx.Commit(ctx)
				ended <- o
				return runner.StepResult{Done: true}, nil
			}}
			c := nodetest.Start(t, 1, nil, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: zombie}}})
			pool = c.Pool
			pgExec(t, c, `CREATE TABLE charges (episode_id bigint NOT NULL, at text NOT NULL)`)
			ctx := context.Background()
			out, err := c.Nodes[0].RunManual(ctx, "pay", "charge", nil)
			require.NoError(t, err)

			tok := <-started
			pgtest.ExpireClaim(t, pool, tok.Key)
			thief, err := postgres.New(pool).Acquire(ctx, claims.AcquireParams{Key: tok.Key, Owner: "thief", Lease: time.Minute, WorkType: "episode"})
			require.NoError(t, err)
			require.Equal(t, tok.Fence+1, thief.Fence)
			close(stolen)

			o := <-ended
			require.ErrorIs(t, o.finish, claims.ErrLeaseLost)
			require.Error(t, o.after, "the transaction is aborted: nothing more is written in it")
			require.Error(t, o.commit, "a commit after ignoring ErrLeaseLost fails")
			nodetest.WaitEnded(t, 1, c.Sigs...)
			require.Equal(t, 1, c.Sigs[0].Count(runner.EventLeaseLost))
			var charges int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&charges))
			require.Zero(t, charges, "none of the zombie's transaction landed")
			ep, err := postgres.New(pool).GetEpisode(ctx, out.EpisodeID)
			require.NoError(t, err)
			require.Equal(t, episodes.StatusRunning, ep.Status, "not finished by the zombie")
			cl, err := postgres.New(pool).ListClaims(ctx, claims.ListQuery{Owner: "thief", Limit: 10})
			require.NoError(t, err)
			require.Len(t, cl, 1)
			require.Equal(t, thief.Token, cl[0].Token)
			require.Equal(t, claims.StateClaimed, cl[0].State, "the live grant is untouched")
		})
	}
}
