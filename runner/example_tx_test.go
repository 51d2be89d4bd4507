package runner_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
)

// exampleNode starts one node on a fresh schema (the examples' setup; a
// real node takes postgres.New(pool) on the application's pool), with
// actor registered, and returns it, its pool, its events and a stop func.
func exampleNode(actor runner.Actor) (*runner.Node, *pgxpool.Pool, *nodetest.Signals, func()) {
	pool, drop, err := pgtest.NewSchema(context.Background())
	if err != nil {
		panic(err)
	}
	sig := nodetest.NewSignals()
	node, err := runner.NewNode(runner.Config{Store: postgres.New(pool), TriggerWaker: postgres.NewNotifier(pool),
		Identity: "node-1", Logger: slog.New(slog.DiscardHandler), Observer: sig})
	if err != nil {
		panic(err)
	}
	if err := node.Register(actor); err != nil {
		panic(err)
	}
	if err := node.Start(context.Background()); err != nil {
		panic(err)
	}
	return node, pool, sig, func() { _ = node.Stop(context.Background()); _ = drop() }
}

// waitFor waits (a minute at most) for n episode endings on sig.
func waitFor(sig *nodetest.Signals, n int) {
	for range n {
		select {
		case <-sig.Ended():
		case <-time.After(time.Minute):
			return
		}
	}
}

// An order and its billing job commit together or not at all: FireTx
// creates the episode inside the caller's transaction, with the dedupe key
// Fire would compute.
func ExampleNode_FireTx() {
	billing := runner.Actor{ID: "billing", Expectations: []runner.Expectation{{
		ID: "invoice", Trigger: runner.Event{Name: "order.placed"},
		Strategy: nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{Done: true}, nil
		}},
	}}}
	node, pool, sig, stop := exampleNode(billing)
	defer stop()
	ctx := context.Background()
	_, _ = pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY)`)

	placeOrder := func(commit bool) runner.Outcome {
		tx, _ := pool.Begin(ctx)
		defer func() { _ = tx.Rollback(ctx) }()
		_, _ = tx.Exec(ctx, `INSERT INTO orders VALUES (42)`)
		out, err := node.FireTx(ctx, postgres.New(tx), "billing", "order.placed", map[string]int{"order": 42},
			runner.FireOptions{EventID: "order-42"})
		if err != nil {
			panic(err)
		}
		if commit {
			_ = tx.Commit(ctx)
		}
		return out[0]
	}

	placeOrder(false) // rolled back: no order, no episode
	var episodes int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM leasehold_episodes`).Scan(&episodes)
	fmt.Println("after a rollback, episodes:", episodes)

	first := placeOrder(true)
	waitFor(sig, 1)
	var status string
	_ = pool.QueryRow(ctx, `SELECT status FROM leasehold_episodes WHERE id = $1`, first.EpisodeID).Scan(&status)
	fmt.Println("after the commit, the episode is", status)

	again, _ := node.Fire(ctx, "billing", "order.placed", map[string]int{"order": 42}, runner.FireOptions{EventID: "order-42"})
	fmt.Println("the same event again is a duplicate of it:", again[0].Duplicate && again[0].EpisodeID == first.EpisodeID)
	// Output:
	// after a rollback, episodes: 0
	// after the commit, the episode is done
	// the same event again is a duplicate of it: true
}

// A charge and the run's completion commit together: Run.Hold keeps the
// run's grant current until the transaction ends, Run.CompleteTx writes
// the fenced finish in it. A run whose lease was taken over gets
// claims.ErrLeaseLost from either, and its transaction commits nothing:
// the error has doomed it, so even a commit that ignored the error fails.
func ExampleRun_CompleteTx() {
	var pool *pgxpool.Pool
	charge := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return runner.StepResult{}, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		store := postgres.New(tx)
		if err := r.Hold(ctx, store); err != nil {
			return runner.StepResult{}, err // lease lost: nothing below commits
		}
		if _, err := tx.Exec(ctx, `INSERT INTO charges (episode_id, cents) VALUES ($1, 1999)`, r.EpisodeID()); err != nil {
			return runner.StepResult{}, err
		}
		if err := r.CompleteTx(ctx, store, map[string]int{"charged_cents": 1999}); err != nil {
			return runner.StepResult{}, err
		}
		return runner.StepResult{}, tx.Commit(ctx) // the run ended in tx; the runner writes no second finish
	}}
	node, p, sig, stop := exampleNode(runner.Actor{ID: "pay", Expectations: []runner.Expectation{{
		ID: "charge", Trigger: runner.Manual{}, Strategy: charge}}})
	defer stop()
	pool = p
	ctx := context.Background()
	_, _ = pool.Exec(ctx, `CREATE TABLE charges (episode_id bigint PRIMARY KEY, cents bigint NOT NULL)`)

	out, _ := node.RunManual(ctx, "pay", "charge", nil)
	waitFor(sig, 1)
	var status, result string
	var charges int
	_ = pool.QueryRow(ctx, `SELECT status, result::text FROM leasehold_episodes WHERE id = $1`, out.EpisodeID).Scan(&status, &result)
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE episode_id = $1`, out.EpisodeID).Scan(&charges)
	fmt.Println(status, result, "charges:", charges)
	fmt.Println("events:", sig.Count(runner.EventCompleted), runner.EventCompleted, sig.Count(runner.EventLeaseLost), runner.EventLeaseLost)
	// Output:
	// done {"charged_cents": 1999} charges: 1
	// events: 1 episode.completed 0 episode.lease_lost
}
