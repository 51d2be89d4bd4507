package leaseholdtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// The same strategy test as ExampleRun, on an SQLite file: no server.
func ExampleSQLite() {
	t := &exampleT{}
	defer t.done()
	db := leaseholdtest.SQLite(t)

	declines := stepFunc(func(context.Context, *runner.Run) (runner.StepResult, error) {
		return runner.StepResult{}, runner.Permanent(errors.New("card declined"))
	})
	ep := leaseholdtest.Run(t, db, declines, map[string]int{"cents": 1999}, runner.Expectation{})
	fmt.Println(ep.Status, ep.ErrorClass, ep.Attempt())
	// Output: failed error 1
}

// On SQLite every helper works as on Postgres: Fired finds a delayed
// episode, MakeDue makes it due without waiting a day, and ExpireLease
// hands a held episode to recovery at once.
func TestKitOnSQLite(t *testing.T) {
	t.Parallel()
	db := leaseholdtest.SQLite(t)
	ctx := context.Background()
	ran, holding := make(chan int64, 4), make(chan int64, 1)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	node, err := runner.NewNode(runner.Config{Store: sqlite.New(db), Identity: "app", NoJitter: true,
		Poll: runner.PollConfig{Interval: time.Hour}})
	require.NoError(t, err)
	// Two slots: the held episode finds one free whether or not the first
	// run has let go of its own, so it runs here at once.
	require.NoError(t, node.Register(runner.Actor{ID: "billing", MaxConcurrent: 2, Expectations: []runner.Expectation{{
		ID: "invoice", Trigger: runner.Event{Name: "order.placed"},
		Strategy: stepFunc(func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			ran <- r.Episode.ID
			return runner.StepResult{Done: true}, nil
		}),
	}, {
		ID: "hold", Trigger: runner.Event{Name: "order.held"}, Recovery: runner.RecoveryRestart,
		Strategy: stepFunc(func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			holding <- r.Episode.ID
			select {
			case <-block:
			case <-ctx.Done():
			}
			return runner.StepResult{}, ctx.Err()
		}),
	}}}))
	require.NoError(t, node.Start(ctx))
	t.Cleanup(func() {
		stop, cancel := context.WithCancel(context.Background())
		cancel()
		_ = node.Stop(stop)
	})

	_, err = node.Fire(ctx, "billing", "order.placed", map[string]int{"order": 42}, runner.FireOptions{Delay: 24 * time.Hour})
	require.NoError(t, err)
	eps := leaseholdtest.Fired(t, db, leaseholdtest.Want{Actor: "billing", Expectation: "invoice", Payload: map[string]int{"order": 42}})
	require.Len(t, eps, 1)
	require.Equal(t, episodes.StatusQueued, eps[0].Status)
	leaseholdtest.MakeDue(t, db, eps[0].ID)
	_, err = node.PollOnce(ctx)
	require.NoError(t, err)
	select {
	case id := <-ran:
		require.Equal(t, eps[0].ID, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the episode made due did not run")
	}

	out, err := node.Fire(ctx, "billing", "order.held", 7, runner.FireOptions{})
	require.NoError(t, err)
	held := leaseholdtest.Fired(t, db, leaseholdtest.Want{Actor: "billing", Expectation: "hold"})
	require.Len(t, held, 1)
	require.Equal(t, out[0].EpisodeID, held[0].ID)
	select {
	case id := <-holding:
		require.Equal(t, held[0].ID, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the held episode did not start")
	}
	leaseholdtest.ExpireLease(t, db, held[0].ClaimKey())
	orphans, err := sqlite.New(db).ListOrphans(ctx, episodes.OrphanQuery{StaleAfter: time.Hour, Limit: 10})
	require.NoError(t, err)
	require.Len(t, orphans, 1, "an expired lease is an orphan at once")
	require.Equal(t, held[0].ID, orphans[0].Episode.ID)
	var _ recovery.Store = sqlite.New(db)
}
