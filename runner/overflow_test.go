package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/runner"
)

// Work flows to free capacity: three nodes, one slot each, twelve slow
// events fired on one node only. The firing node runs what fits in its slot
// and creates the rest available; every node takes available work as its
// slot frees (woken by NOTIFY), so each runs a share, and none twice.
//
// Each run lasts twice testbound.Wakeup: a node whose poller wakes up late
// on a loaded host (at most Wakeup) then still runs 3 of its 4 even if it
// is that late every time (cycles of 3 Wakeups against the others' 2).
// With 150 ms runs a node woken 350 ms late ran 2 in `make test-loaded`.
func TestOverflowFlowsToNodesWithFreeSlots(t *testing.T) {
	t.Parallel()
	const work = 2 * testbound.Wakeup
	var (
		mu    sync.Mutex
		runs  = map[int64][]string{}
		fired = make(chan struct{}) // no run ends before every event is fired
	)
	slow := func(node string) nodetest.Strategy {
		return nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			mu.Lock()
			runs[r.EpisodeID()] = append(runs[r.EpisodeID()], node)
			mu.Unlock()
			<-fired
			select {
			case <-ctx.Done():
				return runner.StepResult{}, ctx.Err()
			case <-time.After(work):
			}
			return runner.StepResult{Done: true}, nil
		}}
	}
	const events = 12
	var c nodetest.Cluster
	pool := pgtest.Schema(t)
	for _, name := range []string{"node-0", "node-1", "node-2"} {
		one := nodetest.StartOn(t, pool, 1, func(_ int, cfg *runner.Config) { cfg.Identity = name }, nil,
			runner.Actor{ID: "monitor", MaxConcurrent: 1, Expectations: []runner.Expectation{
				{ID: "check", Trigger: runner.Event{Name: "resource.updated"}, Strategy: slow(name)}}})
		c.Pool = one.Pool
		c.Nodes = append(c.Nodes, one.Nodes...)
		c.Sigs = append(c.Sigs, one.Sigs...)
	}
	overflowed := 0
	for i := range events {
		out, err := c.Nodes[0].Fire(context.Background(), "monitor", "resource.updated", map[string]int{"i": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.NotZero(t, out[0].EpisodeID)
		if out[0].Deferred {
			overflowed++
		}
	}
	close(fired)
	require.Equal(t, events-1, overflowed, "no free slot: created available, not queued in node-0's memory")
	nodetest.WaitEnded(t, events, c.Sigs...)
	require.Equal(t, events, c.Count(t, "status = 'done'"))
	mu.Lock()
	defer mu.Unlock()
	share := map[string]int{}
	for id, nodes := range runs {
		require.Len(t, nodes, 1, "episode %d ran more than once: %v", id, nodes)
		share[nodes[0]]++
	}
	t.Logf("shares of %d events fired on node-0: %v", events, share)
	for _, name := range []string{"node-0", "node-1", "node-2"} {
		require.GreaterOrEqual(t, share[name], 3, "%s ran too few: %v", name, share)
	}
}

// A delayed run is created available and due later on the database clock:
// no poll takes it before its time; once due (run_after backdated, no
// sleeping), a node with a free slot runs it.
func TestDelayedRunWaitsForItsTime(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) { cfg.Poll.Interval = time.Hour; cfg.TriggerWaker = nil },
		eventActor(oneStep, 4))
	node, ctx := c.Nodes[0], context.Background()
	out, err := node.Fire(ctx, "monitor", "resource.updated", map[string]string{"later": "yes"}, runner.FireOptions{Delay: time.Hour})
	require.NoError(t, err)
	require.True(t, out[0].Deferred)
	again, err := node.Fire(ctx, "monitor", "resource.updated", map[string]string{"later": "yes"}, runner.FireOptions{Delay: time.Hour})
	require.NoError(t, err)
	require.True(t, again[0].Duplicate, "the dedupe key is taken at once")

	n, err := node.PollOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "not due for an hour")
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'queued'", out[0].EpisodeID))

	pgExec(t, c, `UPDATE leasehold_episodes SET run_after = now() - interval '1 second' WHERE id = $1 AND run_after IS NOT NULL`, out[0].EpisodeID)
	node.PollNow() // its poller (or one already under way) takes it now
	nodetest.WaitEnded(t, 1, c.Sigs[0])
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done'", out[0].EpisodeID))

	_, err = node.Fire(ctx, "monitor", "resource.updated", nil, runner.FireOptions{Delay: -time.Second})
	require.ErrorIs(t, err, runner.ErrInvalid)
}

func pgExec(t *testing.T, c nodetest.Cluster, sql string, args ...any) {
	t.Helper()
	pgtest.Exec(t, c.Pool, sql, args...)
}

// SKIP LOCKED pickers: 1,000 available episodes (written by a trigger_only
// node) and three full nodes polling at once: each episode runs exactly
// once, and the work is shared.
func TestThreeNodesTakeAvailableWorkOnce(t *testing.T) {
	t.Parallel()
	const available = 1000
	var (
		mu   sync.Mutex
		runs = map[int64][]string{}
	)
	record := nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
		mu.Lock()
		runs[r.EpisodeID()] = append(runs[r.EpisodeID()], r.Episode.OwnerNode)
		mu.Unlock()
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.Start(t, 4, func(i int, cfg *runner.Config) {
		if i == 3 {
			cfg.Mode = runner.ModeTriggerOnly
		}
		cfg.Poll.Interval = 200 * time.Millisecond
	}, eventActor(record, 8))
	ctx := context.Background()
	for i := range available {
		out, err := c.Nodes[3].Fire(ctx, "monitor", "resource.updated", map[string]int{"i": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
	}
	nodetest.WaitEnded(t, available, c.Sigs[:3]...)
	require.Equal(t, available, c.Count(t, "status = 'done'"))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, available)
	share := map[string]int{}
	for id, nodes := range runs {
		require.Len(t, nodes, 1, "episode %d ran more than once: %v", id, nodes)
		share[nodes[0]]++
	}
	t.Logf("shares of %d available episodes: %v", available, share)
	require.Len(t, share, 3, "every full node took some: %v", share)
}
