package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/runner"
)

// execLog records which node ran each episode, and how often.
type execLog struct {
	mu   sync.Mutex
	runs map[int64][]string
}

func (l *execLog) actor(id, node string) runner.Actor {
	return runner.Actor{ID: id, MaxConcurrent: 4, Expectations: []runner.Expectation{{
		ID: "handle", Trigger: runner.Event{Name: "ping"},
		Strategy: funcStrategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.runs[r.EpisodeID()] = append(l.runs[r.EpisodeID()], node)
			return runner.StepResult{Done: true}, nil
		}},
	}}}
}

func TestModeTable(t *testing.T) {
	t.Parallel()
	log := &execLog{runs: map[int64][]string{}}
	c := nodetest.Start(t, 1, nil, log.actor("mon", "node-0"), log.actor("other", "node-0"))
	n, sig := c.Nodes[0], c.Sigs[0]
	ctx := context.Background()
	fire := func(actor string, i int) (runner.Outcome, error) {
		out, err := n.Fire(ctx, actor, "ping", map[string]int{"i": i}, runner.FireOptions{})
		if err != nil {
			return runner.Outcome{}, err
		}
		require.Len(t, out, 1)
		return out[0], nil
	}
	available := func() int { return c.Count(t, "run_after IS NOT NULL") }

	// full: runs here, directly, no request.
	o, err := fire("mon", 1)
	require.NoError(t, err)
	require.False(t, o.Deferred)
	waitEnded(t, 1, sig)
	require.Equal(t, []string{"node-0"}, log.runs[o.EpisodeID])
	require.Zero(t, available())
	require.Zero(t, sig.Count(runner.EventRequestDispatched))

	// trigger_only: the episode exists (queued, available), and nothing
	// runs here, even when polled.
	require.NoError(t, n.SetMode(runner.ModeTriggerOnly))
	o, err = fire("mon", 2)
	require.NoError(t, err)
	require.True(t, o.Deferred)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'queued' AND owner_node IS NULL", o.EpisodeID))
	require.Equal(t, 1, available())
	polled, err := n.PollOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, polled, "a trigger_only node does not poll")

	// disabled: the trigger is refused and writes nothing.
	require.NoError(t, n.SetMode(runner.ModeDisabled))
	_, err = fire("mon", 3)
	require.ErrorIs(t, err, runner.ErrDisabled)
	require.Equal(t, 2, c.Count(t, "true"))

	// Back to full: the next poll runs the deferred episode here.
	require.NoError(t, n.SetMode(runner.ModeFull))
	_, err = n.PollOnce(ctx) // or the poll the mode switch woke takes it
	require.NoError(t, err)
	waitEnded(t, 1, sig)
	require.Equal(t, 1, sig.Count(runner.EventRequestDispatched))
	require.Zero(t, available())
	require.Equal(t, 2, c.Count(t, "status = 'done'"))

	// Per-actor override: mon defers, other runs directly.
	require.NoError(t, n.SetActorMode("mon", runner.ModeTriggerOnly))
	st := n.Status()
	require.Equal(t, runner.ModeFull, st.Mode)
	require.Equal(t, map[string]runner.Mode{"mon": runner.ModeTriggerOnly}, st.Overrides)
	require.Equal(t, "node-0", st.Identity)
	o, err = fire("mon", 4)
	require.NoError(t, err)
	require.True(t, o.Deferred)
	o2, err := fire("other", 4)
	require.NoError(t, err)
	require.False(t, o2.Deferred)
	waitEnded(t, 1, sig)
	polled, err = n.PollOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, polled, "the poller skips actors that are not full here")
	require.Equal(t, 1, available())

	n.ClearActorMode("mon")
	require.Empty(t, n.Status().Overrides)
	_, err = n.PollOnce(ctx) // or the waker's poll
	require.NoError(t, err)
	waitEnded(t, 1, sig)
	require.Zero(t, available())
	require.Equal(t, 4, c.Count(t, "status = 'done'"))
	for id, nodes := range log.runs {
		require.Len(t, nodes, 1, "episode %d ran %v", id, nodes)
	}

	require.ErrorIs(t, n.SetMode("sometimes"), runner.ErrInvalid)
	require.ErrorIs(t, n.SetActorMode("nobody", runner.ModeFull), runner.ErrUnknown)
	require.NoError(t, n.SetActorMode("other", runner.ModeDisabled))
	_, err = fire("other", 5)
	require.ErrorIs(t, err, runner.ErrDisabled)
	n.ClearActorModes()
	require.Empty(t, n.Status().Overrides)
}

// Two full nodes and one trigger_only node: every trigger runs exactly once,
// on a full node, never on the trigger_only one — whether it was fired on
// every node or only on the trigger_only node.
func TestTriggerOnlyNodeDefersToFullNodes(t *testing.T) {
	t.Parallel()
	log := &execLog{runs: map[int64][]string{}}
	// Every node registers the same strategy; owner_node and the telemetry
	// tell which node ran what.
	c := nodetest.Start(t, 3, func(i int, cfg *runner.Config) {
		if i == 2 {
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, log.actor("mon", "any"))
	ctx := context.Background()
	const everywhere, onlyTriggerNode = 30, 30
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		errs     []error
		deferred int
	)
	fire := func(n *runner.Node, payload map[string]int) {
		o, err := n.Fire(ctx, "mon", "ping", payload, runner.FireOptions{})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		if o[0].Deferred {
			deferred++
		}
	}
	for i := range everywhere {
		for _, n := range c.Nodes {
			wg.Go(func() { fire(n, map[string]int{"all": i}) })
		}
	}
	for i := range onlyTriggerNode {
		wg.Go(func() { fire(c.Nodes[2], map[string]int{"deferred": i}) })
	}
	wg.Wait()
	require.Empty(t, errs)
	require.GreaterOrEqual(t, deferred, onlyTriggerNode)
	waitEnded(t, everywhere+onlyTriggerNode, c.Sigs[0], c.Sigs[1])

	require.Equal(t, everywhere+onlyTriggerNode, c.Count(t, "status = 'done'"), "one episode per trigger")
	require.Zero(t, c.Count(t, "owner_node = 'node-2'"), "nothing ran on the trigger_only node")
	require.Zero(t, c.Sigs[2].Count(runner.EventStarted))
	require.Len(t, log.runs, everywhere+onlyTriggerNode)
	for id, runs := range log.runs {
		require.Len(t, runs, 1, "episode %d ran %d times", id, len(runs))
	}
	require.Zero(t, c.Count(t, "run_after IS NOT NULL"), "no available work is left")
	fmt.Fprintf(tWriter{t}, "deferred dispatched: node-0 %d, node-1 %d\n",
		c.Sigs[0].Count(runner.EventRequestDispatched), c.Sigs[1].Count(runner.EventRequestDispatched))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// Env "rc" and the unset env share one database as independent worlds: the
// same trigger makes one episode in each, and rc's trigger_only node feeds
// only rc's full node.
func TestEnvsAreIndependentWorlds(t *testing.T) {
	t.Parallel()
	log := &execLog{runs: map[int64][]string{}}
	envs := []string{"", "rc", "rc"}
	c := nodetest.Start(t, 3, func(i int, cfg *runner.Config) {
		cfg.Env = envs[i]
		if i == 2 {
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, log.actor("mon", "any"))
	ctx := context.Background()
	payload := map[string]string{"host": "db-1"}
	for _, n := range c.Nodes[:2] {
		o, err := n.Fire(ctx, "mon", "ping", payload, runner.FireOptions{})
		require.NoError(t, err)
		require.False(t, o[0].Duplicate, "%s: envs never dedupe each other", n.Env())
	}
	o, err := c.Nodes[2].Fire(ctx, "mon", "ping", map[string]string{"host": "db-2"}, runner.FireOptions{})
	require.NoError(t, err)
	require.True(t, o[0].Deferred)
	rc := "rc"
	_, err = c.Nodes[0].Fire(ctx, "mon", "ping", map[string]string{"host": "db-3"}, runner.FireOptions{Env: &rc})
	require.NoError(t, err, "an operator seeds another env from any node")
	waitEnded(t, 4, c.Sigs[0], c.Sigs[1])

	type row struct{ env, owner, key string }
	rows, err := c.Pool.Query(ctx, `SELECT source_env, owner_node, dedupe_key, payload->>'host' FROM leasehold_episodes WHERE status = 'done'`)
	require.NoError(t, err)
	got := map[string]row{}
	for rows.Next() {
		var r row
		var host string
		require.NoError(t, rows.Scan(&r.env, &r.owner, &r.key, &host))
		got[r.env+"/"+host] = r
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 4)
	require.Equal(t, "node-0", got["/db-1"].owner)
	require.NotContains(t, got["/db-1"].key, "env:", "the unset env keeps keys unchanged")
	require.Equal(t, "node-1", got["rc/db-1"].owner)
	require.Equal(t, "env:rc:"+got["/db-1"].key, got["rc/db-1"].key)
	require.Equal(t, "node-1", got["rc/db-2"].owner, "rc's deferred work runs on rc's full node only")
	require.Equal(t, "node-0", got["rc/db-3"].owner)
	require.Zero(t, c.Sigs[0].Count(runner.EventRequestDispatched), "the unset env never polls rc")

	_, err = runner.NewNode(runner.Config{Store: postgres.New(c.Pool), Env: "a:b"})
	require.ErrorIs(t, err, runner.ErrInvalid)
}
