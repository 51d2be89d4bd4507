package runner

import (
	"context"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/telemetry"
)

// Drain telemetry.
const (
	EventDrainStarted   = "drain.started"   // Count: episodes tracked
	EventDrainCompleted = "drain.completed" // Counts: tracked, graceful, forced, released, unreleased_count
)

// DrainSummary is what a drain did.
type DrainSummary struct {
	// Tracked is every episode the node held when the drain began: running
	// and queued for a slot. Tracked = Graceful + Forced.
	Tracked int
	// Graceful ended without being interrupted: finished on this node,
	// stopped at a step boundary, or never started (queued).
	Graceful int
	// Forced had a step in progress at the drain's deadline and was
	// cancelled.
	Forced int
	// Released claims were fenced and released by one statement; another
	// node can take each at once, no lease to wait out.
	Released int
	// Unreleased claims were not released (lost meanwhile, or the
	// statement failed); they are recoverable once their lease expires.
	Unreleased int
	Duration   time.Duration
}

// Drain takes the node out of service:
//
//  1. readiness turns false (state draining) before anything else;
//  2. intake stops: triggers, schedulers and the trigger-request poller;
//  3. every held lease is renewed once, so the drain can use its whole
//     timeout;
//  4. queued episodes are handed over unstarted; running ones get until
//     ctx is done to finish their current step (a step boundary hands the
//     episode over, a Done step finishes it here); the rest are cancelled;
//  5. every claim still held is fenced and released in one statement
//     (ReleaseClaims), so another node's recovery takes it at once;
//  6. the node's membership row is removed.
//
// Drain is idempotent: later calls return the first drain's summary. The
// error is only a failure to release claims (they then expire with their
// lease); a deadline reached is reported as Forced, not as an error.
func (n *Node) Drain(ctx context.Context) (DrainSummary, error) {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	if s := n.lastDrain.Load(); s != nil {
		return *s, nil
	}
	n.intake.Lock()
	switch lifecycle(n.state.Load()) {
	case stateNew:
		n.state.Store(int32(stateDrained))
		n.intake.Unlock()
		sum := DrainSummary{}
		n.lastDrain.Store(&sum)
		return sum, nil
	}
	n.state.Store(int32(stateDraining))
	n.intake.Unlock()
	start := time.Now()

	n.mu.Lock()
	running := len(n.running)
	n.mu.Unlock()
	var queued []*job
	for _, as := range n.actors {
		queued = append(queued, as.exec.drain()...)
	}
	tracked := running + len(queued)
	n.emit(ctx, telemetry.Event{Name: EventDrainStarted, Owner: n.id, Count: tracked})
	n.log.InfoContext(ctx, "leasehold: draining", slog.Int("running", running), slog.Int("queued", len(queued)))

	n.cancelIntake()
	n.intakeBg.Wait()
	n.heartbeatMember(ctx, true)
	if err := n.hb.RenewOnce(ctx); err != nil {
		n.log.WarnContext(ctx, "leasehold: drain: renewing leases failed; continuing", slog.Any("error", err))
	}
	for _, j := range queued {
		n.handOver(j)
	}

	done := make(chan struct{})
	go func() { n.runs.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		n.mu.Lock()
		for _, cancel := range n.running {
			cancel(errStopping)
		}
		n.mu.Unlock()
		<-done
	}
	forced := int(n.forced.Load())

	n.handoffMu.Lock()
	handoff := n.handoff
	n.handoff = nil
	n.handoffMu.Unlock()
	sum := DrainSummary{Tracked: tracked, Graceful: tracked - forced, Forced: forced}
	err := n.releaseAll(handoff, &sum)

	n.cancelLife()
	n.lifeBg.Wait()
	n.deregister()
	n.cancelBase()
	sum.Duration = time.Since(start)
	n.intake.Lock()
	n.state.Store(int32(stateDrained))
	n.lastDrain.Store(&sum)
	n.intake.Unlock()
	n.emit(ctx, telemetry.Event{Name: EventDrainCompleted, Owner: n.id, Duration: sum.Duration, Err: err, Counts: map[string]int{
		"tracked": sum.Tracked, "graceful": sum.Graceful, "forced": sum.Forced,
		"released": sum.Released, "unreleased_count": sum.Unreleased,
	}})
	n.log.InfoContext(ctx, "leasehold: drained", slog.Int("tracked", sum.Tracked), slog.Int("graceful", sum.Graceful),
		slog.Int("forced", sum.Forced), slog.Int("released", sum.Released), slog.Int("unreleased", sum.Unreleased))
	return sum, err
}

// releaseAll fences and releases the hand-off's claims in one statement,
// retried while the error is retryable, then reports each episode released.
func (n *Node) releaseAll(handoff []*job, sum *DrainSummary) error {
	if len(handoff) == 0 {
		return nil
	}
	cs := make([]claims.Claim, len(handoff))
	for i, j := range handoff {
		cs[i] = j.claim
	}
	var released []claims.Claim
	err := n.retrying(func(ctx context.Context) (err error) {
		released, err = n.gate.ReleaseMany(ctx, cs)
		return err
	})
	if err != nil {
		n.log.Warn("leasehold: drain: releasing claims failed; they will expire with their lease",
			slog.Int("claims", len(cs)), slog.Any("error", err))
	}
	ok := make(map[claims.Token]bool, len(released))
	for _, c := range released {
		ok[c.Token] = true
	}
	for _, j := range handoff {
		if ok[j.claim.Token] {
			sum.Released++
			n.emit(context.Background(), telemetry.Event{Name: EventReleased, Key: j.claim.Key, Owner: n.id, Fence: j.claim.Fence})
		} else {
			sum.Unreleased++
			n.emit(context.Background(), telemetry.Event{Name: EventLeaseLost, Key: j.claim.Key, Owner: n.id, Fence: j.claim.Fence})
		}
	}
	return err
}

// ReadinessState is where a node is in its life.
type ReadinessState string

const (
	StateStarting ReadinessState = "starting" // before Start
	StateReady    ReadinessState = "ready"    // taking work
	StateDraining ReadinessState = "draining" // Drain in progress: no new work
	StateDrained  ReadinessState = "drained"  // out of service
	// StateDegraded: running, but lease renewals are failing (the database
	// is unreachable or erroring); not ready for new work.
	StateDegraded ReadinessState = "degraded"
)

// Readiness is a node's state for probes and operators.
type Readiness struct {
	State      ReadinessState `json:"state"`
	Active     int            `json:"active"`      // episodes running here
	Queued     int            `json:"queued"`      // waiting for a slot here
	HeldLeases int            `json:"held_leases"` // leases the heartbeat renews
	// LastDrain is the drain's summary once the node drained.
	LastDrain *DrainSummary `json:"last_drain,omitempty"`
}

// Readiness reports the node's state and load.
func (n *Node) Readiness() Readiness {
	r := Readiness{HeldLeases: n.hb.Len(), LastDrain: n.lastDrain.Load()}
	switch lifecycle(n.state.Load()) {
	case stateNew:
		r.State = StateStarting
	case stateRunning:
		r.State = StateReady
		if n.hb.Failing() {
			r.State = StateDegraded
		}
	case stateDraining:
		r.State = StateDraining
	case stateDrained:
		r.State = StateDrained
	}
	n.mu.Lock()
	r.Active = len(n.running)
	n.mu.Unlock()
	for _, as := range n.actors {
		r.Queued += as.exec.waiting()
	}
	return r
}

// ReadinessDetail is Readiness for the health package's JSON body.
func (n *Node) ReadinessDetail() any { return n.Readiness() }

// Ready reports whether the node takes work: started, not draining, and
// renewing its leases. Readiness probes (package health) report it.
func (n *Node) Ready() bool { return n.Readiness().State == StateReady }

// Drained reports whether the node has drained.
func (n *Node) Drained() bool { return lifecycle(n.state.Load()) == stateDrained }

// member is this node's membership row.
func (n *Node) member(draining bool) membership.Member {
	return membership.Member{ID: n.id, Stack: n.cfg.StackSlug, Env: n.cfg.Env, Mode: string(n.Mode()), Draining: draining}
}

// register announces the node (advisory; a failure is logged and the
// membership heartbeat retries).
func (n *Node) register(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.WriteTimeout)
	defer cancel()
	if err := n.store.RegisterNode(ctx, n.member(false)); err != nil {
		n.log.WarnContext(ctx, "leasehold: membership: register failed; will retry", slog.Any("error", err))
	}
}

// refreshMembership refreshes the node's row at the heartbeat interval
// until ctx is done.
func (n *Node) refreshMembership(ctx context.Context) {
	t := time.NewTicker(n.hb.Interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.heartbeatMember(ctx, n.stopping())
		}
	}
}

func (n *Node) heartbeatMember(ctx context.Context, draining bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.hb.Interval())
	defer cancel()
	if err := n.store.HeartbeatNode(ctx, n.member(draining)); err != nil {
		n.log.DebugContext(ctx, "leasehold: membership heartbeat failed", slog.Any("error", err))
	}
}

func (n *Node) deregister() {
	err := n.retrying(func(ctx context.Context) error { return n.store.DeregisterNode(ctx, n.id) })
	if err != nil {
		n.log.Warn("leasehold: membership: deregister failed; maintenance removes the row later", slog.Any("error", err))
	}
}
