package workflows_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/workflows"
)

// A two-step workflow: ship runs after charge, each step one episode on
// whichever node has a slot, and the instance ends done once both are.
func ExampleEngine_Start() {
	ctx := context.Background()
	pool, drop, err := pgtest.NewSchema(ctx) // your pool, on a migrated schema
	if err != nil {
		panic(err)
	}
	defer func() { _ = drop() }()

	done := nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
		return runner.StepResult{Done: true}, nil
	}}
	node, _ := runner.NewNode(runner.Config{Store: postgres.New(pool), TriggerWaker: postgres.NewNotifier(pool),
		Identity: "node-1", Logger: slog.New(slog.DiscardHandler)})
	_ = node.Register(runner.Actor{ID: "orders", Expectations: []runner.Expectation{
		{ID: "charge", Trigger: runner.Manual{}, Strategy: done},
		{ID: "ship", Trigger: runner.Manual{}, Strategy: done},
	}})
	engine, _ := workflows.New(postgres.New(pool), node, slog.New(slog.DiscardHandler))
	_ = engine.Register(workflows.Definition{ID: "fulfil", Steps: []workflows.Step{
		{ID: "charge", Actor: "orders", Expectation: "charge"},
		{ID: "ship", Actor: "orders", Expectation: "ship", After: []string{"charge"}},
	}})
	ended := make(chan workflows.Event, 1)
	engine.Subscribe(func(ev workflows.Event) {
		if ev.Kind == workflows.WorkflowCompleted {
			ended <- ev
		}
	})
	_ = node.Start(ctx)
	defer func() { _ = node.Stop(ctx) }()

	inst, created, _ := engine.Start(ctx, "fulfil", "order-42", map[string]int{"cents": 1999}, workflows.StartOptions{})
	fmt.Println("started:", created)
	select {
	case <-ended:
	case <-time.After(time.Minute):
	}
	got, steps, _ := engine.Instance(ctx, inst.ID)
	fmt.Println(got.Status)
	for _, s := range steps {
		fmt.Println(s.StepID, s.Status)
	}
	// Output:
	// started: true
	// done
	// charge done
	// ship done
}
