package runner_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
)

// claimHook is a runner.Store whose ClaimAvailable, once armed, runs
// before (ahead of the poll's statement, its slots reserved) and after (on
// the episodes it took) once, so a test can act at the exact point of a
// poll. polled is closed by the first call (the poll every node makes when
// it starts), which tests wait for before they make work available.
type claimHook struct {
	runner.Store
	polled     chan struct{}
	polledOnce sync.Once
	armed      atomic.Bool
	before     func()
	after      func([]episodes.Dispatched)
	// nextDue, when set, runs before every NextAvailableDue: the poller's
	// look at when its next episode falls due, after a poll.
	nextDue func()
}

func (h *claimHook) NextAvailableDue(ctx context.Context, q episodes.AvailableQuery) (time.Duration, bool, error) {
	if h.nextDue != nil {
		h.nextDue()
	}
	return h.Store.NextAvailableDue(ctx, q)
}

func newClaimHook() *claimHook { return &claimHook{polled: make(chan struct{})} }

func (h *claimHook) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	h.polledOnce.Do(func() { close(h.polled) })
	fire := h.armed.CompareAndSwap(true, false)
	if fire && h.before != nil {
		h.before()
	}
	ds, err := h.Store.ClaimAvailable(ctx, q)
	if fire && h.after != nil {
		h.after(ds)
	}
	return ds, err
}

// dueHook is a runner.Store that records, on the database clock, when each
// retried episode falls due (RetryEpisode's run_after) and when each poll
// granted an episode (its claim's claimed_at).
type dueHook struct {
	runner.Store
	mu      sync.Mutex
	due     map[int64]time.Time
	granted map[int64][]time.Time
}

func (h *dueHook) RetryEpisode(ctx context.Context, id int64, tok claims.Token, r episodes.Retry) (episodes.Retried, error) {
	res, err := h.Store.RetryEpisode(ctx, id, tok, r)
	if err == nil && !res.Canceled {
		h.mu.Lock()
		h.due[id] = res.RunAfter
		h.mu.Unlock()
	}
	return res, err
}

func (h *dueHook) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	ds, err := h.Store.ClaimAvailable(ctx, q)
	h.mu.Lock()
	for _, d := range ds {
		if d.Started {
			h.granted[d.EpisodeID] = append(h.granted[d.EpisodeID], d.Claim.ClaimedAt)
		}
	}
	h.mu.Unlock()
	return ds, err
}

// Due work starts at its due time, not on the poller's next interval: three
// nodes polling every 30 s with a notifier run delayed episodes and retried
// attempts within the measured scheduling margin of run_after. Lag is the
// poll's grant (the claim's claimed_at) minus the instant the episode fell
// due (a delayed episode's creation plus its delay; a retry's run_after),
// both on the database clock. Before pollers slept until the next due
// episode, a 1 s backoff retried 3.6 s late and delays started up to 4.8 s
// late.
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
	hooks := make([]*dueHook, 3)
	c := nodetest.Start(t, 3, func(i int, cfg *runner.Config) {
		cfg.Poll.Interval = interval
		hooks[i] = &dueHook{Store: cfg.Store, due: map[int64]time.Time{}, granted: map[int64][]time.Time{}}
		cfg.Store = hooks[i]
	}, actor)
	ctx := context.Background()
	delays := map[int64]time.Duration{}
	for i := range delayed {
		delay := 300*time.Millisecond + time.Duration(i)*75*time.Millisecond
		out, err := c.Nodes[i%3].Fire(ctx, "monitor", "resource.updated", map[string]any{"i": i}, runner.FireOptions{Delay: delay})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
		delays[out[0].EpisodeID] = delay
	}
	for i := range retried {
		_, err := c.Nodes[i%3].Fire(ctx, "monitor", "resource.updated", map[string]any{"i": 100 + i, "Retry": true}, runner.FireOptions{})
		require.NoError(t, err)
	}
	nodetest.WaitEnded(t, delayed+retried, c.Sigs...)
	require.Equal(t, delayed+retried, c.Count(t, "status = 'done'"))

	due := map[int64]time.Time{}
	for id, d := range delays {
		var created time.Time
		require.NoError(t, c.Pool.QueryRow(ctx, `SELECT created_at FROM leasehold_episodes WHERE id = $1`, id).Scan(&created))
		due[id] = created.Add(d)
	}
	granted := map[int64][]time.Time{}
	for _, h := range hooks {
		h.mu.Lock()
		for id, at := range h.due {
			due[id] = at
		}
		for id, at := range h.granted {
			granted[id] = append(granted[id], at...)
		}
		h.mu.Unlock()
	}
	var (
		lags    []float64
		details []string
	)
	for id, at := range due {
		var after *time.Time // the first grant at or after the due time
		for _, g := range granted[id] {
			if !g.Before(at) && (after == nil || g.Before(*after)) {
				after = &g
			}
		}
		require.NotNil(t, after, "episode %d (due %v) was never granted by a poll after it fell due: %v", id, at, granted[id])
		ms := float64(after.Sub(at).Microseconds()) / 1000
		lags = append(lags, ms)
		if ms >= float64(testbound.Margin.Milliseconds())/4 {
			details = append(details, fmt.Sprintf("episode %d granted %.0f ms after due", id, ms))
		}
	}
	require.Len(t, lags, delayed+retried, "one due time per delayed episode and per retry")
	slices.Sort(lags)
	p50, p99 := lags[len(lags)/2], lags[(len(lags)*99)/100]
	t.Logf("due-to-grant over %d polls: p50 %.1f ms, p99 %.1f ms, max %.1f ms (poll interval %v)",
		len(lags), p50, p99, lags[len(lags)-1], interval)
	if len(details) > 0 {
		t.Logf("grants later than a quarter of the margin: %v", details)
	}
	// On time is a timer and a poll: tens of milliseconds, and the
	// scheduling margin of a loaded host at most; waiting for a tick of
	// three nodes' 30 s intervals is seconds, most of them.
	require.Less(t, lags[len(lags)-1], float64(testbound.Margin.Milliseconds()),
		"a due episode waited for the poll interval: lags %v; the late ones: %v", lags, details)
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

// A slot that fills after a poll found it free, and frees after an episode
// fell due, wakes the poller: the poll saw free slots (nothing left behind),
// a local trigger took the last one before the poller looked ahead, so the
// look-ahead left the full actor out, and the episode that fell due
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

	var (
		local atomic.Int64
		armed atomic.Bool
	)
	runner.SetAfterPoll(node, func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		// Between the poll (its slot reserved and given back, nothing
		// due) and its look-ahead: a local trigger takes the slot.
		out, err := node.Fire(ctx, "monitor", "resource.updated", map[string]string{"local": "yes"}, runner.FireOptions{})
		if err == nil && !out[0].Deferred {
			local.Store(out[0].EpisodeID)
		}
		close(filled)
	})
	armed.Store(true)
	node.PollNow()
	require.Equal(t, "after the slot filled", <-lookedAhead)
	require.NotZero(t, local.Load(), "the local trigger took the free slot")
	require.Equal(t, local.Load(), <-started)

	// The episode falls due while the slot is taken (database time moved,
	// not slept for; the waker hears nothing), then the slot frees.
	tag, err := c.Pool.Exec(ctx, `UPDATE leasehold_episodes SET run_after = now() WHERE id = $1 AND run_after IS NOT NULL`, delayed)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	freed := time.Now()
	close(release)
	select {
	case id := <-started:
		require.Equal(t, delayed, id)
		t.Logf("the due episode started %v after the slot freed (poll interval %v)", time.Since(freed).Round(time.Millisecond), interval)
	case <-time.After(testbound.Margin):
		t.Fatalf("the due episode did not start within %v of the slot freeing: the poller slept for its %v interval", testbound.Margin, interval)
	}
	nodetest.WaitEnded(t, 2, c.Sigs[0])
}

// A poll takes no more than the slots it reserved before it asked: a local
// trigger that comes while the poll is in flight waits for it, finds the
// slot used and overflows into available work for the nodes with capacity,
// instead of the poll starting an episode that then waits in this node's
// slot queue with the database already showing it running. Every episode
// the database shows running here has had its strategy called.
func TestAPollTakesOnlyTheSlotsItReserved(t *testing.T) {
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
	localOut := make(chan runner.Outcome, 1)
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
		go func() {
			out, err := full.Fire(ctx, "monitor", "resource.updated", map[string]string{"local": "yes"}, runner.FireOptions{})
			if err != nil {
				t.Error(err)
				close(localOut)
				return
			}
			localOut <- out[0]
		}()
	}
	<-hook.polled // its poller's first poll is over; it sleeps for the interval
	out, err := writer.Fire(ctx, "monitor", "resource.updated", map[string]string{"available": "yes"}, runner.FireOptions{})
	require.NoError(t, err)
	require.True(t, out[0].Deferred)
	available := out[0].EpisodeID

	hook.armed.Store(true)
	n := pollUntil(t, full, hook.armed.Load)
	require.Equal(t, 1, n, "the poll took one episode, for its one reserved slot")
	local, ok := <-localOut
	require.True(t, ok)
	require.True(t, local.Deferred, "the local trigger found the slot used by the poll and overflowed")
	require.Equal(t, available, <-started, "the poll took the episode due first")

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
	require.Equal(t, []int64{available}, running, "one slot, one running episode")
	require.Equal(t, 1, c.Count(t, fmt.Sprintf("id = %d AND status = 'queued' AND run_after IS NOT NULL", local.EpisodeID)),
		"the overflow is available work")

	close(release) // the slot frees; the poller takes the overflow
	require.Equal(t, local.EpisodeID, <-started)
	nodetest.WaitEnded(t, 2, c.Sigs[0])
}

// A drain that begins while a poll is in flight waits for it (both take
// the node's intake): every episode the poll took starts here, and the
// drain hands what has not ended back at its next step boundary (the first
// is before the strategy's first step). Nothing is left running in the
// database under the departed node's live grant.
func TestDrainDuringAPollStartsWhatItTook(t *testing.T) {
	t.Parallel()
	hook := newClaimHook()
	pool := pgtest.Schema(t)
	var calls atomic.Int32
	step := funcStrategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
		calls.Add(1)
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.StartOn(t, pool, 2, func(i int, cfg *runner.Config) {
		cfg.TriggerWaker = nil
		cfg.Poll.Interval = time.Hour
		switch i {
		case 0:
			hook.Store = cfg.Store
			cfg.Store = hook
		case 1:
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, nil, eventActor(step, 4))
	leaving, writer, ctx := c.Nodes[0], c.Nodes[1], context.Background()

	<-hook.polled // the first poll is over; it sleeps
	const available = 3
	for i := range available {
		out, err := writer.Fire(ctx, "monitor", "resource.updated", map[string]int{"i": i}, runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
	}
	var (
		took    atomic.Int32
		drained = make(chan error, 1)
	)
	hook.after = func(ds []episodes.Dispatched) {
		took.Store(int32(len(ds)))
		go func() {
			_, err := leaving.Drain(ctx)
			drained <- err
		}()
	}
	hook.armed.Store(true)
	leaving.PollNow()
	require.NoError(t, <-drained)
	require.EqualValues(t, available, took.Load(), "the leaving node's poll took them all")
	require.Equal(t, available, c.Sigs[0].Count(runner.EventRequestDispatched), "and started each")
	handedBack := c.Count(t, `status = 'running' AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
		WHERE c.dedupe_key = coalesce(leasehold_episodes.dedupe_key, 'episode:' || leasehold_episodes.id) AND c.state = 'released')`)
	require.EqualValues(t, c.Count(t, "status = 'done'"), calls.Load(), "what ran to its end is what its strategy ran")
	require.Equal(t, available, c.Count(t, "status = 'done'")+handedBack,
		"each ran to its end or was handed back by the drain, for recovery")
	var live int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM leasehold_work_claims
		WHERE owner_node = 'node-0' AND state = 'claimed'`).Scan(&live))
	require.Zero(t, live, "no grant of the departed node is left live")
}

// cutPoll is a runner.Store whose poll, once armed, takes the first
// episode only and then fails retryably, as an adapter that commits a poll
// in several transactions does when a later one cannot get the write
// lock: the episodes taken before the error come back with it.
type cutPoll struct {
	runner.Store
	armed atomic.Bool
}

func (c *cutPoll) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	if q.Limit > 1 && c.armed.CompareAndSwap(true, false) {
		one := q
		one.Limit = 1
		ds, err := c.Store.ClaimAvailable(ctx, one)
		if err != nil {
			return ds, err
		}
		return ds, fmt.Errorf("cut short after %d of %d: %w", len(ds), q.Limit, claims.ErrRetryable)
	}
	return c.Store.ClaimAvailable(ctx, q)
}

// A poll cut short by an error starts the runs it took and asks only for
// the rest again. Before, a retry sent the whole batch again: the episodes
// already taken were not returned a second time, and stayed running under
// this node's grant with no strategy called until the lease ran out.
func TestAPollCutShortStartsWhatItTook(t *testing.T) {
	t.Parallel()
	started, release := make(chan int64, 4), make(chan struct{})
	block := heldUntil(started, release, nil)
	hook, cut := newClaimHook(), &cutPoll{}
	c := nodetest.Start(t, 2, func(i int, cfg *runner.Config) {
		cfg.TriggerWaker = nil
		cfg.Poll.Interval = time.Hour
		if i == 0 {
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
	n := pollUntil(t, full, cut.armed.Load)
	require.False(t, cut.armed.Load(), "the poll was cut short")
	require.Equal(t, 2, n, "both episodes became local runs")
	got := map[int64]bool{}
	for range 2 {
		select {
		case id := <-started:
			got[id] = true
		case <-time.After(testbound.Margin):
			t.Fatalf("a taken episode's strategy was never called (started: %v of %v)", got, want)
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, 2, c.Count(t, "status = 'running' AND owner_node = 'node-0'"), "running in the database: exactly the two runs whose strategies run")
	close(release)
	nodetest.WaitEnded(t, 2, c.Sigs[0])
}

// A poll that finds nothing due gives its reserved slots back, and a local
// trigger that came while it was in flight runs here in one of them: an
// empty poll never turns a local run into available work.
func TestALocalTriggerDuringAnEmptyPollRunsHere(t *testing.T) {
	t.Parallel()
	started, release := make(chan int64, 2), make(chan struct{})
	hook := newClaimHook()
	localOut := make(chan runner.Outcome, 1)
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
		cfg.TriggerWaker = nil
		cfg.Poll.Interval = time.Hour
		hook.Store = cfg.Store
		cfg.Store = hook
	}, eventActor(heldUntil(started, release, nil), 1))
	node, ctx := c.Nodes[0], context.Background()
	<-hook.polled

	hook.before = func() {
		go func() {
			out, err := node.Fire(ctx, "monitor", "resource.updated", map[string]string{"local": "yes"}, runner.FireOptions{})
			if err != nil {
				t.Error(err)
				close(localOut)
				return
			}
			localOut <- out[0]
		}()
	}
	hook.armed.Store(true)
	n := pollUntil(t, node, hook.armed.Load)
	require.Zero(t, n, "nothing was due")
	local, ok := <-localOut
	require.True(t, ok)
	require.False(t, local.Deferred, "an empty poll made the local trigger overflow")
	require.Equal(t, local.EpisodeID, <-started)
	close(release)
	nodetest.WaitEnded(t, 1, c.Sigs[0])
}

// pollUntil polls node until armed reports false (a hook fired in the
// poll's statement) and returns that poll's count. The node's own poller's
// first poll may still be in flight when a test starts: it holds the free
// slots, and a poll that finds none asks the store nothing, so the test
// polls again (no sleep: each attempt is a lock and a look at the slots).
func pollUntil(t *testing.T, node *runner.Node, armed func() bool) int {
	t.Helper()
	deadline := time.Now().Add(testbound.Margin)
	for time.Now().Before(deadline) {
		n, err := node.PollOnce(context.Background())
		require.NoError(t, err)
		if !armed() {
			return n
		}
		runtime.Gosched()
	}
	t.Fatalf("no poll reached the store within %v", testbound.Margin)
	return 0
}
