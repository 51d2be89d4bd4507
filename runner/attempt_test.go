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
	"github.com/leasehold/leasehold/internal/testbound"
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
	const cfgLease = 3 * time.Second
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
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) { cfg.Lease = cfgLease }, actor) // lost within a renewal

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

	rcv, err := recovery.New(store, node, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	// awaitCall waits for the strategy's next call and returns its
	// Run.Attempt. A run whose lease passed its local deadline before the
	// strategy was called (a loaded host) gives its grant back, and only
	// recovery hands the episode out again: this test runs no sweeper, so
	// it sweeps itself, as the node's sweeper would, each lease plus the
	// margin without a call. It reports how many sweeps requeued the
	// episode meanwhile.
	awaitCall := func() (attempt int32, requeued int) {
		t.Helper()
		wait := cfgLease + testbound.Margin
		deadline := time.Now().Add(10 * wait)
		for {
			select {
			case a := <-seen:
				return a, requeued
			case <-time.After(wait):
				require.True(t, time.Now().Before(deadline), "the strategy was not called within %s, sweeping every %s", 10*wait, wait)
				rep, err := rcv.Sweep(ctx, recovery.Options{})
				require.NoError(t, err)
				requeued += rep.Restarted
			}
		}
	}

	out, err := node.RunManual(ctx, "work", "job", nil)
	require.NoError(t, err)
	first, gaveBack := awaitCall()
	require.Equal(t, int32(1), first, "Run.Attempt of the first run (a grant given back uncalled is no attempt)")
	<-started
	started1(1)
	ep, err := store.GetEpisode(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, int32(1), ep.Attempt())
	claimsList, err := store.ListClaims(ctx, claimsQuery())
	require.NoError(t, err)
	if gaveBack == 0 {
		require.EqualValues(t, 1, claimsList[0].Attempt, "claims ls")
	} else { // the claim counts grants, the given-back one too
		require.EqualValues(t, 1+gaveBack, claimsList[0].Attempt, "claims ls after %d given-back grant(s)", gaveBack)
	}
	grants := claimsList[0].Attempt

	// The node loses the lease; recovery restarts the episode as attempt 2.
	// The node's heartbeat renews a lease that expired unnoticed (no other
	// grant exists), so a renewal landing between the backdating and the
	// sweep leaves nothing to recover: backdate and sweep again.
	for tries := 0; ; tries++ {
		require.Less(t, tries, 5, "every sweep found the lease renewed")
		pgtest.ExpireClaim(t, c.Pool, ep.ClaimKey())
		rep, err := rcv.Sweep(ctx, recovery.Options{})
		require.NoError(t, err)
		if rep.Restarted == 1 {
			break
		}
		require.Zero(t, rep.Restarted)
	}
	second, _ := awaitCall()
	require.Equal(t, int32(2), second, "Run.Attempt of the restarted run")
	nodetest.WaitEnded(t, 2, c.Sigs[0]) // the first run's lease loss, then done
	started1(2)
	ep, err = store.GetEpisode(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, int32(2), ep.Attempt())
	claimsList, err = store.ListClaims(ctx, claimsQuery())
	require.NoError(t, err)
	require.GreaterOrEqual(t, claimsList[0].Attempt, grants+1, "claims ls")
	if gaveBack == 0 {
		require.EqualValues(t, 2, claimsList[0].Attempt, "claims ls")
	}
}

func claimsQuery() claims.ListQuery { return claims.ListQuery{Limit: 10} }
