package claims

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/telemetry"
)

// HeartbeatConfig configures a Heartbeat. Zero values take the defaults.
type HeartbeatConfig struct {
	// Interval between renewals. Default lease/3; must be shorter than the
	// lease. Each renewal is one statement whatever the number of leases.
	Interval time.Duration
	// RetryInterval is the wait before retrying after a failed renewal.
	// Default Interval/4.
	RetryInterval time.Duration
	// Margin is how long before the lease could expire on the database that a
	// node stops its own work when it cannot renew: the local deadline is
	// (start of the last successful renewal) + lease - Margin, on the local
	// monotonic clock. Default lease/5; Interval + Margin must be shorter
	// than the lease, so that at least one renewal is tried in time.
	Margin time.Duration
	// Logger receives renewal failures. Default: slog.Default().
	Logger *slog.Logger
	// OnRenewal, when set, is called after every renewal statement with its
	// error (nil when it succeeded). Nothing is sent, and it is not called,
	// while no lease is held. The runner uses it for readiness.
	OnRenewal func(err error)
}

// Heartbeat keeps every lease a node holds alive with one RenewMany statement
// per tick, and cancels the work of any lease that is lost. One per node.
//
// A lease missing from the renewal result was taken over or finished: its
// context is cancelled at once with cause ErrLeaseLost. A database error is
// retried; if no renewal of a lease has succeeded by its local deadline, the
// node cancels that work itself (cause ErrLeaseLost), because past that point
// another node may legitimately steal it.
type Heartbeat struct {
	gate     *Gate
	interval time.Duration
	retry    time.Duration
	margin   time.Duration
	logger   *slog.Logger
	onRenew  func(error)
	now      func() time.Time // local monotonic clock; replaced in tests

	mu      sync.Mutex
	held    map[Held]*heldLease
	wake    chan struct{}
	failing atomic.Bool
}

type heldLease struct {
	deadline time.Time // local monotonic deadline
	cancel   context.CancelCauseFunc
}

// NewHeartbeat returns a Heartbeat renewing the leases acquired through g.
func NewHeartbeat(g *Gate, cfg HeartbeatConfig) (*Heartbeat, error) {
	if g == nil {
		return nil, fmt.Errorf("claims.NewHeartbeat: %w: nil gate", ErrInvalid)
	}
	lease := g.lease
	if cfg.Interval == 0 {
		cfg.Interval = lease / 3
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = cfg.Interval / 4
	}
	if cfg.Margin == 0 {
		cfg.Margin = lease / 5
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OnRenewal == nil {
		cfg.OnRenewal = func(error) {}
	}
	switch {
	case cfg.Interval <= 0 || cfg.Interval >= lease:
		return nil, fmt.Errorf("claims.NewHeartbeat: %w: interval %v must be positive and shorter than the lease %v", ErrInvalid, cfg.Interval, lease)
	case cfg.RetryInterval <= 0:
		return nil, fmt.Errorf("claims.NewHeartbeat: %w: retry interval %v must be positive", ErrInvalid, cfg.RetryInterval)
	case cfg.Margin < 0 || cfg.Interval+cfg.Margin >= lease:
		return nil, fmt.Errorf("claims.NewHeartbeat: %w: interval %v + margin %v must be shorter than the lease %v", ErrInvalid, cfg.Interval, cfg.Margin, lease)
	}
	return &Heartbeat{
		gate:     g,
		interval: cfg.Interval,
		retry:    cfg.RetryInterval,
		margin:   cfg.Margin,
		logger:   cfg.Logger,
		onRenew:  cfg.OnRenewal,
		now:      time.Now,
		held:     make(map[Held]*heldLease),
		wake:     make(chan struct{}, 1),
	}, nil
}

// Hold tracks c until the returned stop func is called, and returns a context
// derived from ctx that is cancelled with cause ErrLeaseLost when the lease is
// lost. The caller runs the lease's work under that context and calls stop
// once it has completed, failed or released the claim. Passthrough claims are
// not tracked. The context carries c's token (OnBehalfOf): the writes made
// under it are made on behalf of c.
//
// The first local deadline is c's local start (the instant before its
// granting statement was sent; see Claim.SetLocalStart) + lease - margin. A
// claim without a local start cannot be held safely: its grant may be older
// than anything this node can know, so its context is returned already
// cancelled (ErrLeaseLost) and the work never starts.
func (h *Heartbeat) Hold(ctx context.Context, c Claim) (context.Context, func()) {
	if c.Passthrough || !h.gate.Enabled() {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	if c.acquiredAt.IsZero() {
		err := fmt.Errorf("%w: %s has no local start: the adapter that granted it did not record when it sent the statement", ErrLeaseLost, c.Token)
		cancel(err)
		h.gate.emit(ctx, telemetry.Event{Name: EventLeaseLost, Key: c.Key, Owner: c.Owner, Fence: c.Fence, Err: err})
		h.logger.ErrorContext(ctx, "leasehold: refusing to hold a claim without a local start", slog.String("claim", c.Token.String()))
		return ctx, func() { cancel(context.Canceled) }
	}
	ctx = OnBehalfOf(ctx, c.Token)
	id := Held{Key: c.Key, Fence: c.Fence}
	h.mu.Lock()
	h.held[id] = &heldLease{deadline: c.acquiredAt.Add(h.gate.lease - h.margin), cancel: cancel}
	h.mu.Unlock()
	h.poke()
	return ctx, func() {
		h.mu.Lock()
		delete(h.held, id)
		h.mu.Unlock()
		cancel(context.Canceled)
	}
}

// Remaining returns how long c's work may still run on this node before its
// local deadline, and false when c is not held (never held, stopped, lost, or
// past its deadline). Writes made on behalf of c are retried only within it.
func (h *Heartbeat) Remaining(c Claim) (time.Duration, bool) {
	h.mu.Lock()
	l, ok := h.held[Held{Key: c.Key, Fence: c.Fence}]
	var deadline time.Time
	if ok {
		deadline = l.deadline // renewals move it under the lock
	}
	h.mu.Unlock()
	if !ok {
		return 0, false
	}
	d := deadline.Sub(h.now())
	return d, d > 0
}

// WithLease returns a copy of ctx that is cancelled once c is no longer
// held here: its local deadline passed without a renewal (a deadline that
// renewals move is followed), or it was lost or stopped. A write made on
// behalf of c that may wait for the database (a lock held by others) runs
// under it, so that it keeps its place as long as renewals keep the lease,
// and not past the point where the work must stop; it carries c's token
// (OnBehalfOf). Call cancel when the write is done.
func (h *Heartbeat) WithLease(ctx context.Context, c Claim) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(OnBehalfOf(ctx, c.Token))
	var (
		mu      sync.Mutex
		t       *time.Timer
		stopped bool
	)
	var check func()
	check = func() {
		left, held := h.Remaining(c)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case stopped:
		case !held:
			cancel()
		default:
			t = time.AfterFunc(left, check)
		}
	}
	check()
	return ctx, func() {
		mu.Lock()
		stopped = true
		if t != nil {
			t.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// Interval is the renewal period.
func (h *Heartbeat) Interval() time.Duration { return h.interval }

// RetryInterval is the wait before retrying a failed renewal.
func (h *Heartbeat) RetryInterval() time.Duration { return h.retry }

// Failing reports whether the last renewal attempt failed (the database
// erred or was unreachable); a success clears it.
func (h *Heartbeat) Failing() bool { return h.failing.Load() }

// Len returns the number of leases being held.
func (h *Heartbeat) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// Run renews until ctx is done. It returns ctx's error. Leases still held when
// Run returns are not cancelled; their owners release or finish them.
func (h *Heartbeat) Run(ctx context.Context) error {
	if !h.gate.Enabled() {
		<-ctx.Done()
		return ctx.Err()
	}
	timer := time.NewTimer(h.interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.wake:
			// A lease was added; its deadline may be the earliest.
		case <-timer.C:
			// The next renewal is due an interval after this one began, not
			// after it ended: a renewal that waited for a busy database
			// (SQLite's write lock on a loaded host) must not push the next
			// one towards the local deadline it was meant to move.
			start := h.now()
			wait := h.interval
			if err := h.RenewOnce(ctx); err != nil && ctx.Err() == nil {
				wait = h.retry
			} else {
				wait = max(0, wait-h.now().Sub(start))
			}
			timer.Reset(wait)
			continue
		}
		// Re-arm to whichever comes first: the next tick or a deadline check.
		if d := h.untilEarliestDeadline(); d < h.interval {
			timer.Reset(max(d, 0))
		}
	}
}

// RenewOnce renews every held lease in one statement and cancels the work of
// any lease that was lost or whose local deadline has passed. It returns the
// database error, if any, after acting on the deadlines.
func (h *Heartbeat) RenewOnce(ctx context.Context) error {
	h.expireLocal(ctx)
	start := h.now()
	h.mu.Lock()
	batch := make([]Held, 0, len(h.held))
	for id := range h.held {
		batch = append(batch, id)
	}
	h.mu.Unlock()
	if len(batch) == 0 {
		h.failing.Store(false) // nothing held, nothing at risk
		return nil
	}

	// Bound the statement by the nearest local deadline, so a hung connection
	// cannot keep work running past the point where it must stop; and by
	// nothing shorter: a renewal queued behind other writes (SQLite's one
	// write lock on a loaded host) keeps its place in the queue until the
	// lease is at stake, where giving up at the next interval and retrying
	// would start again at the back.
	callCtx, cancel := context.WithTimeout(ctx, max(h.untilEarliestDeadline(), time.Millisecond))
	renewed, err := h.gate.store.RenewMany(callCtx, h.gate.owner, batch, h.gate.lease)
	cancel()
	h.onRenew(err)
	g := h.gate
	if err != nil {
		g.emit(ctx, telemetry.Event{Name: EventRenewFailed, Owner: g.owner, Count: len(batch), Err: err, Duration: h.now().Sub(start)})
		h.logger.WarnContext(ctx, "leasehold: lease renewal failed; retrying",
			slog.String("owner", g.owner), slog.Int("leases", len(batch)), slog.Any("error", err))
		h.failing.Store(true)
		h.expireLocal(ctx)
		return err
	}
	h.failing.Store(false)
	kept := make(map[Held]time.Time, len(renewed))
	for _, r := range renewed {
		from := start
		if r.Start.After(start) {
			from = r.Start
		}
		kept[Held{Key: r.Key, Fence: r.Fence}] = from
	}
	lost := 0
	h.mu.Lock()
	for _, id := range batch {
		l, ok := h.held[id]
		if !ok {
			continue // released while the statement ran
		}
		if from, ok := kept[id]; ok {
			l.deadline = from.Add(g.lease - h.margin)
			continue
		}
		delete(h.held, id)
		l.cancel(fmt.Errorf("%w: %q fence %d was not renewed: taken over or finished", ErrLeaseLost, id.Key, id.Fence))
		g.emit(ctx, telemetry.Event{Name: EventLeaseLost, Key: id.Key, Owner: g.owner, Fence: id.Fence, Err: ErrNotOwner})
		lost++
	}
	h.mu.Unlock()
	g.emit(ctx, telemetry.Event{Name: EventRenewed, Owner: g.owner, Count: len(renewed), Duration: h.now().Sub(start)})
	h.expireLocal(ctx)
	return nil
}

// expireLocal cancels work whose local deadline has passed.
func (h *Heartbeat) expireLocal(ctx context.Context) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, l := range h.held {
		if now.Before(l.deadline) {
			continue
		}
		delete(h.held, id)
		err := fmt.Errorf("%w (%w): %q fence %d: no successful renewal before the local deadline", ErrLeaseLost, ErrLeaseExpired, id.Key, id.Fence)
		l.cancel(err)
		h.gate.emit(ctx, telemetry.Event{Name: EventLeaseLost, Key: id.Key, Owner: h.gate.owner, Fence: id.Fence, Err: err})
	}
}

func (h *Heartbeat) untilEarliestDeadline() time.Duration {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	earliest := time.Duration(1<<63 - 1)
	for _, l := range h.held {
		earliest = min(earliest, l.deadline.Sub(now))
	}
	return earliest
}

func (h *Heartbeat) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}
