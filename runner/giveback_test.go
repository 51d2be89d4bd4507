package runner_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// A run whose lease passes its local deadline because no renewal got
// through (a slow host, a busy database) gives its grant back, fenced, once
// it has stopped: recovery then takes the episode at once, before the lease
// would have expired on the database, and restarts it as the same attempt,
// which completes as attempt 1.
func TestRunPastItsLocalDeadlineGivesItsGrantBack(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	stopped := make(chan claims.Token, 1)
	renewing := make(chan struct{})
	actor := runner.Actor{ID: "slow", Expectations: []runner.Expectation{{
		ID: "job", Trigger: runner.Manual{}, Recovery: runner.RecoveryRestart, MaxAttempts: 2,
		Strategy: nodetest.Strategy{
			InitFunc: func(ctx context.Context, r *runner.Run) error {
				select {
				case <-renewing: // the restart: renewals work again
					return nil
				default:
				}
				<-ctx.Done()
				stopped <- r.Token()
				return ctx.Err()
			},
			StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
				return runner.StepResult{Done: true}, nil
			},
		},
	}}}
	c, fs := startFaulty(t, lease, func(cfg *runner.Config) { cfg.Poll.Disabled, cfg.TriggerWaker = true, nil }, actor)
	fs.renewFails.Store(true)
	node, ctx := c.Nodes[0], context.Background()
	out, err := node.RunManual(ctx, "slow", "job", nil)
	require.NoError(t, err)
	tok := <-stopped
	nodetest.WaitEnded(t, 1, c.Sigs[0]) // lease lost, given back first
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventLeaseLost))

	var state, owner string
	require.NoError(t, c.Pool.QueryRow(ctx, `SELECT state, owner_node FROM leasehold_work_claims
		WHERE dedupe_key = $1 AND fence = $2`, tok.Key, tok.Fence).Scan(&state, &owner))
	require.Equal(t, "released", state, "the run gave its grant back")
	require.Equal(t, tok.Owner, owner)

	fs.renewFails.Store(false)
	close(renewing)
	rcv, err := recovery.New(fs, node, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	rep, err := rcv.Sweep(ctx, recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Restarted, "recoverable at once: no lease to wait out")
	require.Contains(t, rep.Decisions[0].Reason, "as attempt 1 of 2")
	n, err := node.PollOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	nodetest.WaitEnded(t, 1, c.Sigs[0])
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done' AND attempts = 0", out.EpisodeID),
		"done as attempt 1: the run given back did not count")
}

// A journal write that the database keeps refusing while the node's
// renewals still land (SQLite's write lock serving lease writes first on a
// loaded host: the renewals get through, the journal write waits) keeps
// its place as long as the lease is renewed, rather than give up at the
// local deadline it had when it began and hand a healthy run to recovery:
// here the journal is refused for 1.5 leases (the write began with 0.8 of
// a lease of local time), and the run carries on: one run, attempt 1, a
// contiguous journal.
func TestJournalWriteWaitsWhileTheLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	// A renewal has lease - interval - margin (lease × (1 - 1/3 - 1/5))
	// to land before the local deadline; that slack must cover the
	// scheduling margin of a loaded host, and so must the grant's answer
	// before the run starts. At a 2 s lease it was 0.93 s, and make
	// test-loaded once released the run; at 2.5 margins (2.33 s) a loaded
	// run once saw no ending at all in a minute (before the runner reported
	// a run that never started). Four margins leave 3.7 s.
	const lease = testbound.Margin * 4
	var fs *faultyStore
	var once sync.Once
	outage := make(chan struct{})
	actor := runner.Actor{ID: "work", Expectations: []runner.Expectation{{ID: "job", Trigger: runner.Manual{},
		Recovery: runner.RecoveryRestart,
		Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			if r.StepNo == 2 {
				once.Do(func() {
					fs.journalFails.Store(true)
					time.AfterFunc(lease*3/2, func() { fs.journalFails.Store(false); close(outage) })
				})
			}
			return runner.StepResult{Data: r.StepNo, Done: r.StepNo == 4}, nil
		}}}}}
	c, fs := startFaulty(t, lease, nil, actor)
	out, err := c.Nodes[0].RunManual(context.Background(), "work", "job", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs[0])
	<-outage
	require.Zero(t, c.Sigs[0].Count(runner.EventReleased), "not handed to recovery")
	require.Zero(t, c.Sigs[0].Count(runner.EventLeaseLost))
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done' AND attempts = 0", out.EpisodeID))
	steps, err := postgres.New(c.Pool).ListSteps(context.Background(), out.EpisodeID)
	require.NoError(t, err)
	require.Len(t, steps, 4, "one run, a contiguous journal")
}
