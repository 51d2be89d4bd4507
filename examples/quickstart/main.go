// Quickstart: one leasehold node with one actor. Run it on as many machines
// (or terminals) as you like against the same database; every event is
// handled exactly once across all of them.
//
//	go get github.com/leasehold/leasehold
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// checkLimits is the strategy: Init once per run, then Step until Done.
// Every step is journaled under the run's lease; a run whose lease was
// taken over writes nothing more.
type checkLimits struct{}

func (checkLimits) Init(context.Context, *runner.Run) error { return nil }

func (checkLimits) Step(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
	var in struct{ Host string }
	if err := r.Payload(&in); err != nil {
		return runner.StepResult{}, err
	}
	fmt.Printf("episode %d: checking %s (attempt %d)\n", r.EpisodeID(), in.Host, r.Attempt)
	return runner.StepResult{Data: map[string]string{"host": in.Host}, Done: true}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.Default()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, stdlib.OpenDBFromPool(pool)); err != nil {
		return err
	}
	store := postgres.New(pool)

	// One call: the node, its recovery sweeper (every node sweeps; each
	// orphan is taken over exactly once) and its maintenance (archiving,
	// which frees dedupe keys after the retention), with the defaults.
	node, err := leasehold.Start(ctx, leasehold.Config{
		Node: runner.Config{
			Store:        store,
			TriggerWaker: postgres.NewNotifier(pool),
			Logger:       logger,
			Observer:     telemetry.NewSlog(logger),
		},
		Recovery: recovery.SweeperConfig{InitialDelay: 10 * time.Second, Interval: 30 * time.Second},
	}, runner.Actor{ID: "resource_monitor", MaxConcurrent: 4, Expectations: []runner.Expectation{{
		ID:       "check_limits",
		Trigger:  runner.Event{Name: "resource.updated"},
		Strategy: checkLimits{},
		Recovery: runner.RecoveryRestart, // it is idempotent: a crashed run may be rerun
		Budget:   runner.Budget{MaxWall: time.Minute},
	}}})
	if err != nil {
		return err
	}

	// Every node fires the same events; the database keeps one episode each.
	for i := range 3 {
		out, err := node.Fire(ctx, "resource_monitor", "resource.updated", map[string]string{"host": fmt.Sprintf("db-%d", i)}, runner.FireOptions{})
		if err != nil {
			return err
		}
		fmt.Printf("db-%d: %+v\n", i, out)
	}

	<-ctx.Done() // Ctrl-C
	drainCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := node.Stop(drainCtx) // stops sweeping, then hands unfinished work to other nodes at once
	fmt.Printf("drained: %+v\n", sum)
	return err
}
