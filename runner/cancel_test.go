package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/runner"
)

// blocking runs until its context is cancelled, reporting each start.
func blocking(started chan<- int64) nodetest.Strategy {
	return nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		started <- r.EpisodeID()
		<-ctx.Done()
		return runner.StepResult{}, ctx.Err()
	}}
}

// A cancel asked on one node reaches the node that runs the episode
// through the database, within one heartbeat interval: its run's context
// is cancelled and the episode ends canceled by the owner's own fenced
// finish. A retry asked on the first node makes it available again as its
// next attempt, and a node with a free slot runs it.
func TestCancelAndRetryAcrossNodes(t *testing.T) {
	t.Parallel()
	started := make(chan int64, 4)
	var second atomic.Bool
	s := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		if second.Load() {
			return runner.StepResult{Done: true, Result: map[string]int32{"attempt": r.Attempt}}, nil
		}
		started <- r.EpisodeID()
		<-ctx.Done()
		return runner.StepResult{}, ctx.Err()
	}}
	// The holder must keep its lease while the cancel travels: with the
	// default interval (lease/3) and margin (lease/5), a renewal has
	// lease - lease/3 - lease/5 = 7/15 of the lease (2.8 s) to land after
	// its tick, more than the scheduling margin a loaded host needs.
	// Lease 3 s left 1.4 s, and under two CPU hogs a renewal missed it once:
	// the run ended lease lost, not canceled. Lease 6 s left 2.8 s, and
	// under make test-loaded (every package's tests beside the hogs) a
	// renewal missed that once too; 10 s leaves 4.7 s.
	const lease = 5 * testbound.Margin
	heartbeat := lease / 3 // the default interval (claims.HeartbeatConfig)
	c := nodetest.Start(t, 2, func(_ int, cfg *runner.Config) {
		cfg.Lease = lease
	}, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: s}}})
	owner, other := c.Nodes[1], c.Nodes[0]
	ctx := context.Background()

	out, err := owner.RunManual(ctx, "pay", "charge", nil)
	require.NoError(t, err)
	require.Equal(t, out.EpisodeID, <-started)

	asked := time.Now()
	res, err := other.Cancel(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.False(t, res.Ended, "held live by node-1: its holder is asked")
	require.Equal(t, episodes.StatusRunning, res.Status)
	ended := nodetest.WaitEnded(t, 1, c.Sigs[1])
	took := time.Since(asked)
	require.Equal(t, runner.EventCanceled, ended[0].Name, "the run must end by its cancel; the nodes reported: %s", nodetest.Seen(c.Sigs...))
	require.Less(t, took, heartbeat+testbound.Margin, "within one heartbeat interval (%v) and the finish", heartbeat)
	t.Logf("a cancel asked on node-0 ended node-1's run %v later", took.Round(time.Millisecond))
	ep, err := postgres.New(c.Pool).GetEpisode(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusCanceled, ep.Status)
	require.Equal(t, episodes.ClassCanceled, ep.ErrorClass)
	require.Equal(t, "node-1", ep.OwnerNode)
	require.Equal(t, 1, c.Sigs[1].Count(runner.EventCanceled))

	_, err = other.Cancel(ctx, out.EpisodeID)
	require.ErrorIs(t, err, episodes.ErrNotLive, "canceled already")
	_, err = other.Cancel(ctx, 987654321)
	require.ErrorIs(t, err, episodes.ErrNotFound)

	second.Store(true)
	retried, err := other.Retry(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, int32(1), retried.Attempts, "its next attempt")
	nodetest.WaitEnded(t, 1, c.Sigs...)
	ep, err = postgres.New(c.Pool).GetEpisode(ctx, out.EpisodeID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, ep.Status)
	require.Equal(t, int32(2), ep.Attempt())
	require.JSONEq(t, `{"attempt":2}`, string(ep.Result))
	_, err = other.Retry(ctx, out.EpisodeID)
	require.ErrorIs(t, err, episodes.ErrNotRetryable, "done is not retried")
}

// Cancelling available work (a delayed run, due in an hour) ends it at
// once, in the statement: nobody held it, and no poller takes it later.
func TestCancelAvailableEpisodeEndsAtOnce(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 1, nil, eventActor(oneStep, 1))
	node, ctx := c.Nodes[0], context.Background()
	out, err := node.Fire(ctx, "monitor", "resource.updated", map[string]int{"n": 1}, runner.FireOptions{Delay: time.Hour})
	require.NoError(t, err)
	require.True(t, out[0].Deferred)
	res, err := node.Cancel(ctx, out[0].EpisodeID)
	require.NoError(t, err)
	require.True(t, res.Ended)
	require.Equal(t, episodes.StatusCanceled, res.Status)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'canceled' AND error_class = 'canceled' AND finished_at IS NOT NULL", out[0].EpisodeID))
	require.Equal(t, 1, c.Count(t, "id = $1 AND run_after IS NULL", out[0].EpisodeID), "it left the available set")
	n, err := node.PollOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to take")

	// Retried, it is available again at once.
	_, err = node.Retry(ctx, out[0].EpisodeID)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done' AND attempts = 1", out[0].EpisodeID))
}

// A cancel that reaches an episode waiting in its holder's slot queue (a
// node without a poller queues what finds no slot) takes it out of the
// queue and ends it canceled, without running it.
func TestCancelReachesTheSlotQueue(t *testing.T) {
	t.Parallel()
	started := make(chan int64, 4)
	c := nodetest.Start(t, 2, func(i int, cfg *runner.Config) {
		cfg.Lease = 3 * time.Second
		cfg.Poll.Disabled = i == 1
	}, runner.Actor{ID: "pay", MaxConcurrent: 1, Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: blocking(started)}}})
	holder, ctx := c.Nodes[1], context.Background()
	first, err := holder.RunManual(ctx, "pay", "charge", nil)
	require.NoError(t, err)
	<-started
	queued, err := holder.RunManual(ctx, "pay", "charge", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holder.Readiness().Queued == 1 }, 10*time.Second, 5*time.Millisecond)

	res, err := c.Nodes[0].Cancel(ctx, queued.EpisodeID)
	require.NoError(t, err)
	require.False(t, res.Ended, "queued under node-1's live claim: asked")
	nodetest.WaitEnded(t, 1, c.Sigs[1])
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'canceled'", queued.EpisodeID))
	require.Zero(t, holder.Readiness().Queued)
	select {
	case id := <-started:
		t.Fatalf("episode %d started after its cancel", id)
	default:
	}
	_, err = c.Nodes[0].Cancel(ctx, first.EpisodeID)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs[1])
	require.Equal(t, 2, c.Count(t, "status = 'canceled'"))
}

// A cancel asked while an attempt runs wins over its retry: the attempt
// fails retryably before its holder reads the request, and RetryEpisode
// ends the episode canceled instead of making it available.
func TestCancelWinsOverARetry(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan int64, 1)
	fails := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		started <- r.EpisodeID()
		<-release
		return runner.StepResult{}, errors.New("gateway timeout")
	}}
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
		cfg.Lease = time.Minute // the holder reads cancel requests every 20 s: not before the attempt fails
	}, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: fails,
		MaxAttempts: 5, Retry: runner.RetryPolicy{Backoff: time.Second}}}})
	store := postgres.New(c.Pool)
	out, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
	require.NoError(t, err)
	<-started
	res, err := store.CancelEpisode(context.Background(), out.EpisodeID, nil) // not through the node: no local fast path
	require.NoError(t, err)
	require.False(t, res.Ended)
	close(release)
	nodetest.WaitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'canceled' AND attempts = 0", out.EpisodeID))
	require.Zero(t, c.Sigs[0].Count(runner.EventRetrying))
	require.Zero(t, c.Count(t, "id = $1 AND run_after IS NOT NULL", out.EpisodeID), "it was not made available")
}

// A duplicate trigger reports the live episode it duplicates, on the local
// path and on the available one; a trigger that starts at once costs two
// statements that commit (create, finish), StartEpisode never runs.
func TestDuplicatesReportTheirEpisodeAndLocalRunsSkipStart(t *testing.T) {
	t.Parallel()
	counting := &startCalls{}
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
		counting.Store = cfg.Store
		cfg.Store = counting
	}, eventActor(oneStep, 4))
	node, ctx := c.Nodes[0], context.Background()
	first, err := node.Fire(ctx, "monitor", "resource.updated", map[string]int{"n": 1}, runner.FireOptions{EventID: "e-1"})
	require.NoError(t, err)
	require.False(t, first[0].Duplicate)
	again, err := node.Fire(ctx, "monitor", "resource.updated", map[string]int{"n": 1}, runner.FireOptions{EventID: "e-1"})
	require.NoError(t, err)
	require.True(t, again[0].Duplicate)
	require.Equal(t, first[0].EpisodeID, again[0].EpisodeID, "the duplicate names the episode it duplicates")
	nodetest.WaitEnded(t, 1, c.Sigs...)
	require.Zero(t, counting.starts.Load(), "created running: no StartEpisode")
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done' AND started_at IS NOT NULL AND owner_node = 'node-0'", first[0].EpisodeID))

	delayed, err := node.Fire(ctx, "monitor", "resource.updated", nil, runner.FireOptions{EventID: "e-2", Delay: time.Hour})
	require.NoError(t, err)
	dup, err := node.Fire(ctx, "monitor", "resource.updated", nil, runner.FireOptions{EventID: "e-2", Delay: time.Hour})
	require.NoError(t, err)
	require.True(t, dup[0].Duplicate)
	require.Equal(t, delayed[0].EpisodeID, dup[0].EpisodeID)
	local, err := node.Fire(ctx, "monitor", "resource.updated", nil, runner.FireOptions{EventID: "e-2"})
	require.NoError(t, err)
	require.True(t, local[0].Duplicate, "the waiting episode holds the key")
	require.Equal(t, delayed[0].EpisodeID, local[0].EpisodeID)
}

// startCalls counts the StartEpisode statements a node sends.
type startCalls struct {
	runner.Store
	starts atomic.Int32
}

func (s *startCalls) StartEpisode(ctx context.Context, id int64, t claims.Token) (int32, error) {
	s.starts.Add(1)
	return s.Store.StartEpisode(ctx, id, t)
}

// Episode events say which episode they concern: actor, expectation,
// episode, env, stack and attempt; a failure its error class.
func TestEpisodeEventsCarryTheEpisode(t *testing.T) {
	t.Parallel()
	fails := nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
		return runner.StepResult{}, errors.New("declined")
	}}
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) { cfg.Env, cfg.StackSlug = "rc", "eu" },
		runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: fails}}})
	out, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs...)
	seen := map[string]bool{}
	for _, e := range c.Sigs[0].Events() {
		switch e.Name {
		case runner.EventCreated, runner.EventFailed:
			seen[e.Name] = true
			require.Equal(t, "pay", e.Actor, e.Name)
			require.Equal(t, "charge", e.Expectation, e.Name)
			require.Equal(t, out.EpisodeID, e.EpisodeID, e.Name)
			require.Equal(t, "rc", e.Env, e.Name)
			require.Equal(t, "eu", e.Stack, e.Name)
			require.Equal(t, int32(1), e.Attempt, e.Name)
		}
		if e.Name == runner.EventFailed {
			require.Equal(t, episodes.ClassError, e.ErrorClass)
		}
	}
	require.Len(t, seen, 2)
}

// finishCalls counts the terminal-write statements a node sends.
type finishCalls struct {
	runner.Store
	single, grouped, rows atomic.Int32
}

func (s *finishCalls) FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	s.single.Add(1)
	return s.Store.FinishEpisode(ctx, id, t, f)
}

func (s *finishCalls) FinishEpisodes(ctx context.Context, owner string, items []episodes.FinishItem) ([]int64, error) {
	s.grouped.Add(1)
	s.rows.Add(int32(len(items)))
	return s.Store.FinishEpisodes(ctx, owner, items)
}

// Grouped finishing: 64 runs that end at once reach the database in fewer
// statements than runs, every one finished once; with FinishBatch 1 each
// is sent alone.
func TestRunsThatEndTogetherFinishInGroups(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 1} {
		release := make(chan struct{})
		wait := nodetest.Strategy{StepFunc: func(ctx context.Context, _ *runner.Run) (runner.StepResult, error) {
			<-release
			return runner.StepResult{Done: true}, nil
		}}
		calls := &finishCalls{}
		c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
			calls.Store, cfg.Store, cfg.FinishBatch = cfg.Store, calls, batch
		}, runner.Actor{ID: "m", MaxConcurrent: 64, Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Manual{}, Strategy: wait}}})
		for range 64 {
			_, err := c.Nodes[0].RunManual(context.Background(), "m", "e", nil)
			require.NoError(t, err)
		}
		close(release)
		nodetest.WaitEnded(t, 64, c.Sigs...)
		require.Equal(t, 64, c.Count(t, "status = 'done'"))
		require.Equal(t, 64, c.Sigs[0].Count(runner.EventCompleted))
		statements := calls.single.Load() + calls.grouped.Load()
		t.Logf("FinishBatch %d: 64 finishes in %d statements (%d grouped, carrying %d rows)", batch, statements, calls.grouped.Load(), calls.rows.Load())
		if batch == 1 {
			require.EqualValues(t, 64, calls.single.Load())
			require.Zero(t, calls.grouped.Load())
		} else {
			require.Less(t, statements, int32(64), "grouped")
			require.EqualValues(t, 64, calls.single.Load()+calls.rows.Load(), "each run's finish sent once")
		}
	}
}
