package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// claimHook is a runner.Store whose ClaimTriggerRequests, once armed, runs
// before (ahead of the claim) and after (on the claimed requests) once, so
// a test can act at the exact point between a poller's claim and its
// hand-over. polled is closed by the first call (the poll every node makes
// when it starts), which tests wait for before they write requests.
type claimHook struct {
	runner.Store
	polled     chan struct{}
	polledOnce sync.Once
	armed      atomic.Bool
	before     func()
	after      func([]episodes.TriggerRequest)
	// nextDue, when set, runs before every NextTriggerRequestDue: the
	// poller's look at when its next request falls due, after a poll.
	nextDue func()
}

func (h *claimHook) NextTriggerRequestDue(ctx context.Context, q episodes.RequestQuery) (time.Duration, bool, error) {
	if h.nextDue != nil {
		h.nextDue()
	}
	return h.Store.NextTriggerRequestDue(ctx, q)
}

func newClaimHook() *claimHook { return &claimHook{polled: make(chan struct{})} }

func (h *claimHook) ClaimTriggerRequests(ctx context.Context, q episodes.RequestQuery) ([]episodes.TriggerRequest, error) {
	h.polledOnce.Do(func() { close(h.polled) })
	fire := h.armed.CompareAndSwap(true, false)
	if fire && h.before != nil {
		h.before()
	}
	reqs, err := h.Store.ClaimTriggerRequests(ctx, q)
	if fire && h.after != nil {
		h.after(reqs)
	}
	return reqs, err
}

// Due work starts at its due time, not on the poller's next interval: three
// nodes polling every 30 s with a notifier run delayed episodes and retried
// attempts within the measured scheduling margin of run_after. Lag is
// the request's hand-over (finished_at) minus its run_after, both on the
// database clock. Before pollers slept until the next due request, a 1 s
// backoff retried 3.6 s late and delays started up to 4.8 s late.
func TestDueWorkStartsAtItsDueTime(t *testing.T) {
	t.Parallel()
	const (
		delayed = 16
		retried = 6
	)
	var failedOnce sync.Map
	strategy := funcStrategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
		var p struct{ Retry bool }
		if err := r.Payload(&p); err != nil {
			return runner.StepResult{}, err
		}
		if _, again := failedOnce.LoadOrStore(r.EpisodeID(), true); p.Retry && !again {
			return runner.StepResult{}, errors.New("first attempt fails")
		}
		return runner.StepResult{Done: true}, nil
	}}
	actor := runner.Actor{ID: "monitor", MaxConcurrent: 8, Expectations: []runner.Expectation{{
		ID: "check", Trigger: runner.Event{Name: "resource.updated"}, Strategy: strategy,
		Retry: runner.RetryPolicy{Backoff: 500 * time.Millisecond},
	}}}
	interval := 30 * time.Second
	c := nodetest.Start(t, 3, func(_ int, cfg *runner.Config) { cfg.Poll.Interval = interval }, actor)
	ctx := context.Background()
	for i := range delayed {
		delay := 300*time.Millisecond + time.Duration(i)*75*time.Millisecond
		out, err := c.Nodes[i%3].Fire(ctx, "monitor", "resource.updated", map[string]any{"i": i}, runner.FireOptions{Delay: delay})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
	}
	for i := range retried {
		_, err := c.Nodes[i%3].Fire(ctx, "monitor", "resource.updated", map[string]any{"i": 100 + i, "Retry": true}, runner.FireOptions{})
		require.NoError(t, err)
	}
	nodetest.WaitEnded(t, delayed+retried, c.Sigs...)
	require.Equal(t, delayed+retried, c.Count(t, "status = 'done'"))

	// Each hand-over's lag, split at its claim: a late claim is a poller
	// that woke late; a late finish after a timely claim is a slow hand-over.
	rows, err := c.Pool.Query(ctx, `SELECT extract(epoch FROM (r.finished_at - r.run_after)) * 1000,
			format('request %s (episode %s, fence %s, %s): claimed %s ms after due by %s, handed over %s ms later',
				r.id, r.episode_id, r.fence, CASE WHEN r.opts IS NULL THEN 'no opts' ELSE 'opts' END,
				round(extract(epoch FROM (r.claimed_at - r.run_after)) * 1000), r.claimed_by,
				round(extract(epoch FROM (r.finished_at - r.claimed_at)) * 1000))
		FROM leasehold_trigger_requests AS r WHERE r.status = 'completed'`)
	require.NoError(t, err)
	var (
		lags    []float64
		details []string
	)
	for rows.Next() {
		var (
			ms     float64
			detail string
		)
		require.NoError(t, rows.Scan(&ms, &detail))
		lags = append(lags, ms)
		if ms >= float64(testbound.Margin.Milliseconds())/4 {
			details = append(details, detail)
		}
	}
	require.NoError(t, rows.Err())
	require.Len(t, lags, delayed+retried, "one hand-over per delayed episode and per retry")
	slices.Sort(lags)
	p50, p99 := lags[len(lags)/2], lags[(len(lags)*99)/100]
	t.Logf("due-to-start over %d hand-overs: p50 %.1f ms, p99 %.1f ms, max %.1f ms (poll interval %v)",
		len(lags), p50, p99, lags[len(lags)-1], interval)
	if len(details) > 0 {
		t.Logf("hand-overs later than a quarter of the margin: %v", details)
	}
	// On time is a timer, a claim and a hand-over: tens of milliseconds,
	// and the scheduling margin of a loaded host at most; waiting for a
	// tick of three nodes' 30 s intervals is seconds, most of them.
	require.Less(t, lags[len(lags)-1], float64(testbound.Margin.Milliseconds()),
		"a due request waited for the poll interval: lags %v; the late ones: %v", lags, details)
}

// heldUntil is a strategy whose run calls called (when set) and sends its
// episode's id on started, then holds its slot until release is closed.
func heldUntil(started chan<- int64, release <-chan struct{}, called func(int64)) funcStrategy {
	return funcStrategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		if called != nil {
			called(r.EpisodeID())
		}
		started <- r.EpisodeID()
		select {
		case <-release:
		case <-ctx.Done():
			return runner.StepResult{}, ctx.Err()
		}
		return runner.StepResult{Done: true}, nil
	}}
}

// quietWaker is a TriggerWaker that never wakes: with it a node's poller
// polls on its timers, PollNow and freed slots only, as a node whose
// notifications are all lost does.
type quietWaker struct{}

func (quietWaker) WaitTriggerRequests(ctx context.Context, _ func()) error {
	<-ctx.Done()
	return ctx.Err()
}

// A slot that fills after a poll found it free, and frees after a request
// fell due, wakes the poller: the poll saw free slots (nothing left behind),
// a local trigger took the last one before the poller looked ahead, so the
// look-ahead left the full actor out, and the request that fell due
// meanwhile had no timer. Without the backlog flag that look-ahead sets,
// the freed slot woke nobody (with a waker configured, a freed slot polls
// only when work was left behind) and the request waited for the 30 s
// interval; make test-loaded caught it as five hand-overs 13 s late.
func TestASlotFreedAfterTheLookAheadWakesThePoller(t *testing.T) {
	t.Parallel()
	started, release := make(chan int64, 4), make(chan struct{})
	block := heldUntil(started, release, nil)
	// A second actor, never full, so that the look-ahead still reads the
	// next due time after leaving the full one out: the read is how the
	// test knows a look-ahead is over.
	idle := runner.Actor{ID: "zz-idle", MaxConcurrent: 1, Expectations: []runner.Expectation{
		{ID: "noop", Trigger: runner.Event{Name: "never.fired"}, Strategy: block},
	}}
	var (
		filled      = make(chan struct{})
		lookedAhead = make(chan string, 16)
	)
	hook := newClaimHook()
	hook.nextDue = func() {
		select {
		case <-filled:
			lookedAhead <- "after the slot filled"
		default:
			lookedAhead <- "before"
		}
	}
	interval := 30 * time.Second
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
		cfg.Poll.Interval = interval
		cfg.TriggerWaker = quietWaker{} // a waker is set: a freed slot polls only after work was left behind
		hook.Store = cfg.Store
		cfg.Store = hook
	}, eventActor(block, 1), idle)
	node, ctx := c.Nodes[0], context.Background()
	require.Equal(t, "before", <-lookedAhead, "the first poll and its look-ahead are over; the poller sleeps")

	out, err := node.Fire(ctx, "monitor", "resource.updated", map[string]string{"delayed": "yes"}, runner.FireOptions{Delay: time.Hour})
	require.NoError(t, err)
	require.True(t, out[0].Deferred)
	delayed := out[0].EpisodeID

	var local atomic.Int64
	hook.after = func([]episodes.TriggerRequest) {
		// Between the poll's claim (a free slot, nothing due) and its
		// look-ahead: a local trigger takes the slot.
		out, err := node.Fire(ctx, "monitor", "resource.updated", map[string]string{"local": "yes"}, runner.FireOptions{})
		if err == nil && !out[0].Deferred {
			local.Store(out[0].EpisodeID)
		}
		close(filled)
	}
	hook.armed.Store(true)
	node.PollNow()
	require.Equal(t, "after the slot filled", <-lookedAhead)
	require.NotZero(t, local.Load(), "the local trigger took the free slot")
	require.Equal(t, local.Load(), <-started)

	// The request falls due while the slot is taken (database time moved,
	// not slept for; an UPDATE notifies nobody), then the slot frees.
	tag, err := c.Pool.Exec(ctx, `UPDATE leasehold_trigger_requests SET run_after = now() WHERE episode_id = $1 AND status = 'pending'`, delayed)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	freed := time.Now()
	close(release)
	select {
	case id := <-started:
		require.Equal(t, delayed, id)
		t.Logf("the due request started %v after the slot freed (poll interval %v)", time.Since(freed).Round(time.Millisecond), interval)
	case <-time.After(testbound.Margin):
		t.Fatalf("the due request did not start within %v of the slot freeing: the poller slept for its %v interval", testbound.Margin, interval)
	}
	nodetest.WaitEnded(t, 2, c.Sigs[0])
}

// A hand-over that finds no free slot gives the work back: a local trigger
// that comes between a poll's look at the free slots and its hand-over
// keeps the slot, and the claimed request is released at once, fenced,
// for the nodes with capacity, instead of being handed over into this
// node's slot queue with the database already showing it running. Every
// episode the database shows running here has had its strategy called.
func TestHandOverWithoutASlotGivesTheWorkBack(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		called  = map[int64]bool{}
		started = make(chan int64, 8)
		release = make(chan struct{})
	)
	block := heldUntil(started, release, func(id int64) {
		mu.Lock()
		called[id] = true
		mu.Unlock()
	})
	hook := newClaimHook()
	var localOut atomic.Pointer[runner.Outcome]
	c := nodetest.Start(t, 2, func(i int, cfg *runner.Config) {
		cfg.TriggerWaker = nil
		cfg.Poll.Interval = time.Hour
		if i == 0 {
			hook.Store = cfg.Store
			cfg.Store = hook
		} else {
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, eventActor(block, 1))
	full, writer, ctx := c.Nodes[0], c.Nodes[1], context.Background()

	hook.before = func() {
		out, err := full.Fire(ctx, "monitor", "resource.updated", map[string]string{"local": "yes"}, runner.FireOptions{})
		if err == nil {
			localOut.Store(&out[0])
		}
	}
	<-hook.polled // its poller's first poll is over; it sleeps for the interval
	out, err := writer.Fire(ctx, "monitor", "resource.updated", map[string]string{"available": "yes"}, runner.FireOptions{})
	require.NoError(t, err)
	require.True(t, out[0].Deferred)
	available := out[0].EpisodeID

	hook.armed.Store(true)
	n, err := full.PollOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "no slot was left for the claimed request")
	local := localOut.Load()
	require.NotNil(t, local)
	require.False(t, local.Deferred, "the local trigger kept the slot it took")
	require.Equal(t, local.EpisodeID, <-started)

	var status, claimedBy string
	require.NoError(t, c.Pool.QueryRow(ctx, `SELECT status, coalesce(claimed_by, '') FROM leasehold_trigger_requests
		WHERE episode_id = $1`, available).Scan(&status, &claimedBy))
	require.Equal(t, "pending", status, "the claim was given back at once, not kept for the claim lease")
	require.Empty(t, claimedBy)
	rows, err := c.Pool.Query(ctx, `SELECT id FROM leasehold_episodes WHERE status = 'running' AND owner_node = 'node-0'`)
	require.NoError(t, err)
	var running []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		running = append(running, id)
	}
	require.NoError(t, rows.Err())
	mu.Lock()
	for _, id := range running {
		require.True(t, called[id], "episode %d is running in the database but its strategy was never called", id)
	}
	mu.Unlock()
	require.Equal(t, []int64{local.EpisodeID}, running, "one slot, one running episode")

	close(release) // the slot frees; the poller takes the work it gave back
	require.Equal(t, available, <-started)
	nodetest.WaitEnded(t, 2, c.Sigs[0])
}

// A poller that begins to drain between claiming requests and handing them
// over gives every claim back, fenced, before it exits: another node takes
// the work at once rather than after Poll.ClaimLease (30 s).
func TestDrainGivesBackUnhandedRequestClaims(t *testing.T) {
	t.Parallel()
	drainStarted := make(chan telemetry.Event, 1)
	hook, otherHook := newClaimHook(), newClaimHook()
	pool := pgtest.Schema(t)
	c := nodetest.StartOn(t, pool, 3, func(i int, cfg *runner.Config) {
		cfg.TriggerWaker = nil
		cfg.Poll.Interval = time.Hour
		switch i {
		case 0:
			hook.Store = cfg.Store
			cfg.Store = hook
			cfg.Observer = watch{Observer: cfg.Observer, name: runner.EventDrainStarted, ch: drainStarted}
		case 1:
			otherHook.Store = cfg.Store
			cfg.Store = otherHook
		case 2:
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, nil, eventActor(oneStep, 4))
	leaving, other, writer, ctx := c.Nodes[0], c.Nodes[1], c.Nodes[2], context.Background()

	<-hook.polled // both full nodes' first polls are over; they sleep
	<-otherHook.polled
	const requests = 3
	for i := range requests {
		out, err := writer.Fire(ctx, "monitor", "resource.updated", map[string]int{"i": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
	}
	var (
		claimed atomic.Int32
		drained = make(chan error, 1)
	)
	// The leaving node's own poller claims; the drain begins before it
	// hands over (Drain waits for the poller to return).
	hook.after = func(reqs []episodes.TriggerRequest) {
		claimed.Store(int32(len(reqs)))
		go func() {
			_, err := leaving.Drain(ctx)
			drained <- err
		}()
		<-drainStarted
	}
	hook.armed.Store(true)
	leaving.PollNow()
	require.NoError(t, <-drained)
	require.EqualValues(t, requests, claimed.Load(), "the leaving node had claimed them all")
	require.Zero(t, c.Sigs[0].Count(runner.EventRequestDispatched), "a draining node hands nothing over")

	var stillClaimed, pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'claimed'),
		count(*) FILTER (WHERE status = 'pending' AND claimed_by IS NULL) FROM leasehold_trigger_requests`).Scan(&stillClaimed, &pending))
	require.Zero(t, stillClaimed, "no request is left claimed by the departed node")
	require.Equal(t, requests, pending, "every claim was given back")

	n, err := other.PollOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, requests, n, "another node takes the work at once, not after the claim lease")
	nodetest.WaitEnded(t, requests, c.Sigs[1])
}

// cutDispatch is a runner.Store whose batch hand-over, once armed, hands
// over the first request only and then fails retryably, as SQLite's does
// when a later transaction of a batch cannot get the write lock: the
// hand-overs committed before the error come back with it.
type cutDispatch struct {
	runner.Store
	bd    batchDispatcher // the adapter's own batch hand-over
	armed atomic.Bool
}

type batchDispatcher interface {
	DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error)
}

func (c *cutDispatch) DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error) {
	bd := c.bd
	if len(reqs) > 1 && c.armed.CompareAndSwap(true, false) {
		ds, err := bd.DispatchTriggerRequests(ctx, owner, reqs[:1], lease)
		if err != nil {
			return ds, err
		}
		return ds, fmt.Errorf("cut short after %d of %d: %w", len(ds), len(reqs), claims.ErrRetryable)
	}
	return bd.DispatchTriggerRequests(ctx, owner, reqs, lease)
}

// A batch hand-over cut short by an error starts the runs it handed over
// and tries only the rest again. Before, the retry sent the whole batch:
// the requests already handed over came back missing, were taken for
// lapsed, and their episodes stayed running under this node's grant with
// no strategy called until the lease ran out.
func TestABatchHandOverCutShortStartsWhatItHandedOver(t *testing.T) {
	t.Parallel()
	started, release := make(chan int64, 4), make(chan struct{})
	block := heldUntil(started, release, nil)
	hook, cut := newClaimHook(), &cutDispatch{}
	c := nodetest.Start(t, 2, func(i int, cfg *runner.Config) {
		cfg.TriggerWaker = nil
		cfg.Poll.Interval = time.Hour
		if i == 0 {
			cut.bd = cfg.Store.(batchDispatcher)
			hook.Store = cfg.Store
			cut.Store = hook
			cfg.Store = cut
		} else {
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, eventActor(block, 4))
	full, writer, ctx := c.Nodes[0], c.Nodes[1], context.Background()
	<-hook.polled

	want := map[int64]bool{}
	for i := range 2 {
		out, err := writer.Fire(ctx, "monitor", "resource.updated", map[string]int{"i": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
		want[out[0].EpisodeID] = true
	}
	cut.armed.Store(true)
	n, err := full.PollOnce(ctx)
	require.NoError(t, err)
	require.False(t, cut.armed.Load(), "the batch hand-over was cut short")
	require.Equal(t, 2, n, "both requests became local runs")
	got := map[int64]bool{}
	for range 2 {
		select {
		case id := <-started:
			got[id] = true
		case <-time.After(testbound.Margin):
			t.Fatalf("a handed-over episode's strategy was never called (started: %v of %v)", got, want)
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, 2, c.Count(t, "status = 'running' AND owner_node = 'node-0'"), "running in the database: exactly the two runs whose strategies run")
	close(release)
	nodetest.WaitEnded(t, 2, c.Sigs[0])
}
