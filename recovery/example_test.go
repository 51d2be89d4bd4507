package recovery_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// A node died holding an episode: its lease expires on the database clock,
// a sweep finds the orphan and, its policy being restart, makes it
// available again as its next attempt; a node with a free slot runs it.
func ExampleRecoverer_Sweep() {
	ctx := context.Background()
	pool, drop, err := pgtest.NewSchema(ctx) // your pool, on a migrated schema
	if err != nil {
		panic(err)
	}
	defer func() { _ = drop() }()
	store := postgres.New(pool)

	sig := nodetest.NewSignals()
	node, _ := runner.NewNode(runner.Config{Store: store, TriggerWaker: postgres.NewNotifier(pool), Identity: "node-2",
		Logger: slog.New(slog.DiscardHandler), Observer: sig})
	_ = node.Register(runner.Actor{ID: "reports", Expectations: []runner.Expectation{{
		ID: "daily", Trigger: runner.Manual{}, Recovery: runner.RecoveryRestart,
		Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{Done: true, Result: map[string]int32{"attempt": r.Attempt}}, nil
		}},
	}}})
	_ = node.Start(ctx)
	defer func() { _ = node.Stop(ctx) }()

	// node-1 started the episode and died; its lease ran out.
	c, _ := store.CreateEpisode(ctx, episodes.New{ActorID: "reports", ExpectationID: "daily", TriggerType: episodes.TriggerManual,
		DedupeKey: "reports:2026-12-01", MaxAttempts: 3, Owner: "node-1", Lease: time.Minute, Start: true})
	_, _ = pool.Exec(ctx, `UPDATE leasehold_work_claims SET lease_until = now() - interval '1 second' WHERE dedupe_key = $1`, "reports:2026-12-01")

	rec, _ := recovery.New(store, node, nil, nil)
	rep, _ := rec.Sweep(ctx, recovery.Options{})
	fmt.Println(rep.Decisions[0].Action, "-", rep.Restarted, "restarted")
	select { // the run's end
	case <-sig.Ended():
	case <-time.After(time.Minute):
	}
	ep, _ := store.GetEpisode(ctx, c.Episode.ID)
	fmt.Println(ep.Status, "by", ep.OwnerNode, string(ep.Result))
	// Output:
	// restart - 1 restarted
	// done by node-2 {"attempt": 2}
}
