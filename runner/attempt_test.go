package runner_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// One definition of "attempt" everywhere: the first run is attempt 1, a
// run restarted by recovery is attempt 2; the strategy's Run.Attempt, the
// telemetry (and so the log line's attempt=), the episode row
// (Episode.Attempt, what `episodes ls` prints as attempt/max) and the
// episode's claim agree at each step.
func TestAttemptIsOneDefinitionEverywhere(t *testing.T) {
	t.Parallel()
	seen := make(chan int32, 2)
	started := make(chan struct{}, 2)
	stuck := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		seen <- r.Attempt
		if r.Attempt == 1 {
			started <- struct{}{}
			<-ctx.Done() // the first run's node "dies" here
			return runner.StepResult{}, ctx.Err()
		}
		return runner.StepResult{Done: true}, nil
	}}
	actor := runner.Actor{ID: "work", Expectations: []runner.Expectation{{ID: "job", Trigger: runner.Manual{},
		Strategy: stuck, Recovery: runner.RecoveryRestart, MaxAttempts: 3}}}
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) { cfg.Lease = 3 * time.Second }, actor) // lost within a renewal

	node, store, ctx := c.Nodes[0], postgres.New(c.Pool), context.Background()
	started1 := func(want int32) {
		t.Helper()
		var last telemetry.Event
		for _, e := range c.Sigs[0].Events() {
			if e.Name == runner.EventStarted {
				last = e
			}
		}
		require.Equal(t, want, last.Attempt, "telemetry attempt")
	}

	out, err := node.RunManual(ctx, "work", "job", nil)
	require.NoError(t, err)
	<-started
	require.Equal(t, int32(1), <-seen, "Run.Attempt of the first run")
	started1(1)
	ep, err := store.GetEpisode(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, int32(1), ep.Attempt())
	claimsList, err := store.ListClaims(ctx, claimsQuery())
	require.NoError(t, err)
	require.EqualValues(t, 1, claimsList[0].Attempt, "claims ls")

	// The node loses the lease; recovery restarts the episode as attempt 2.
	pgtest.ExpireClaim(t, c.Pool, ep.ClaimKey())
	rcv, err := recovery.New(store, node, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	rep, err := rcv.Sweep(ctx, recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Restarted)
	require.Equal(t, int32(2), <-seen, "Run.Attempt of the restarted run")
	nodetest.WaitEnded(t, 2, c.Sigs[0]) // the first run's lease loss, then done
	started1(2)
	ep, err = store.GetEpisode(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, int32(2), ep.Attempt())
	claimsList, err = store.ListClaims(ctx, claimsQuery())
	require.NoError(t, err)
	require.EqualValues(t, 2, claimsList[0].Attempt, "claims ls")
}

func claimsQuery() claims.ListQuery { return claims.ListQuery{Limit: 10} }
