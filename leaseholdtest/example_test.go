package leaseholdtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/runner"
)

// exampleT stands in for the *testing.T a test passes.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                           {}
func (*exampleT) Logf(format string, args ...any)   { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// Run one strategy against a real store, without a cluster, and read how
// the episode ended.
func ExampleRun() {
	t := &exampleT{}
	defer t.done()
	pool := leaseholdtest.Schema(t, "")

	declines := stepFunc(func(context.Context, *runner.Run) (runner.StepResult, error) {
		return runner.StepResult{}, runner.Permanent(errors.New("card declined"))
	})
	ep := leaseholdtest.Run(t, pool, declines, map[string]int{"cents": 1999}, runner.Expectation{})
	fmt.Println(ep.Status, ep.ErrorClass, ep.Attempt())
	// Output: failed error 1
}

// Require that firing an event created its episode, then make a delayed
// run due without sleeping.
func ExampleFired() {
	t := &exampleT{}
	defer t.done()
	pool := leaseholdtest.Schema(t, "")
	node, _ := runner.NewNode(runner.Config{Store: postgresStore(pool), Identity: "app"})
	_ = node.Register(runner.Actor{ID: "billing", Expectations: []runner.Expectation{{
		ID: "invoice", Trigger: runner.Event{Name: "order.placed"},
		Strategy: stepFunc(func(context.Context, *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{Done: true}, nil
		}),
	}}})
	_ = node.Start(context.Background())
	defer func() { _ = node.Stop(context.Background()) }()

	_, _ = node.Fire(context.Background(), "billing", "order.placed", map[string]int{"order": 42}, runner.FireOptions{Delay: 24 * 3600e9})
	eps := leaseholdtest.Fired(t, pool, leaseholdtest.Want{Actor: "billing", Expectation: "invoice", Payload: map[string]int{"order": 42}})
	fmt.Println(len(eps), eps[0].Status)
	leaseholdtest.MakeDue(t, pool, eps[0].ID) // due now, not tomorrow
	// Output: 1 queued
}

func postgresStore(pool *pgxpool.Pool) *postgres.Store { return postgres.New(pool) }

// stepFunc is a strategy of one function: Step; Init does nothing.
type stepFunc func(context.Context, *runner.Run) (runner.StepResult, error)

func (stepFunc) Init(context.Context, *runner.Run) error { return nil }

func (f stepFunc) Step(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
	return f(ctx, r)
}
