package leasehold_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var done = nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
	return runner.StepResult{Done: true}, nil
}}

// One call starts the node, its sweeper and its maintenance: a crashed
// node's episode is recovered and run, and Stop ends all three.
func TestStartRunsTheSweeperAndMaintenance(t *testing.T) {
	pool := pgtest.Schema(t)
	store := postgres.New(pool)
	sig := nodetest.NewSignals()
	ctx := context.Background()

	// The orphan a crashed node left: running under a lease that expired.
	c, err := store.CreateEpisode(ctx, episodes.New{ActorID: "jobs", ExpectationID: "run", TriggerType: episodes.TriggerManual,
		DedupeKey: "orphan:1", MaxAttempts: 3, Owner: "crashed", Lease: time.Minute, Start: true})
	require.NoError(t, err)
	pgtest.ExpireClaim(t, pool, "orphan:1")

	node, err := leasehold.Start(ctx, leasehold.Config{
		Node:        runner.Config{Store: store, TriggerWaker: postgres.NewNotifier(pool), Identity: "node-1", Observer: sig},
		Recovery:    recovery.SweeperConfig{InitialDelay: time.Millisecond, Interval: time.Hour},
		Maintenance: maintenance.Config{Interval: time.Hour},
	}, runner.Actor{ID: "jobs", Expectations: []runner.Expectation{{ID: "run", Trigger: runner.Manual{}, Strategy: done, Recovery: runner.RecoveryRestart}}})
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, sig)
	got, err := store.GetEpisode(ctx, c.Episode.ID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, got.Status, "recovered by the sweeper Start started, and run")
	require.Equal(t, "node-1", got.OwnerNode)

	sum, err := node.Stop(ctx)
	require.NoError(t, err)
	require.Zero(t, sum.Forced)
	require.True(t, node.Drained())
}

func TestStartRefusesAStoreWithoutRecovery(t *testing.T) {
	_, err := leasehold.Start(context.Background(), leasehold.Config{Node: runner.Config{Store: claimsOnly{}}})
	require.ErrorIs(t, err, leasehold.ErrInvalid)
}

// claimsOnly is a runner.Store that is not a recovery.Store.
type claimsOnly struct{ runner.Store }
