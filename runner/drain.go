package runner

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/telemetry"
)

// Drain telemetry.
const (
	EventDrainStarted   = "drain.started"   // Count: episodes tracked
	EventDrainCompleted = "drain.completed" // Counts: tracked, graceful, forced, abandoned, released, lost, unreleased_count
	// EventReleaseFailed: a drain could not release an episode's claim (the
	// statement failed or ran out of time); the lease expires instead.
	EventReleaseFailed = "episode.release_failed"
)

// DefaultDrainGrace is Config.DrainGrace when it is zero.
const DefaultDrainGrace = time.Second

// DrainSummary is what a drain did. Every episode the node held when the
// drain began is counted once in Graceful, Forced or Abandoned; every one
// it handed over (stopped at a step boundary, interrupted, or still queued)
// is counted once in Released, Lost or Unreleased.
type DrainSummary struct {
	// Tracked is every episode the node held when the drain began: running
	// and queued for a slot. Tracked = Graceful + Forced + Abandoned.
	Tracked int
	// Graceful ended without being interrupted: finished on this node,
	// stopped at a step boundary, or never started (queued).
	Graceful int
	// Forced had a step in progress at the drain's deadline, was cancelled,
	// and returned within DrainGrace.
	Forced int
	// Abandoned were still running when Drain returned: cancelled, but the
	// strategy (or a write) did not return within DrainGrace. Their
	// contexts are cancelled and every write they attempt is fenced; their
	// claims expire with their lease.
	Abandoned int
	// Released claims were fenced and released, each as soon as its episode
	// was handed over; another node can take each at once, no lease to wait
	// out.
	Released int
	// Lost claims were found already gone when released: taken over or
	// finished by another grant (claims.lease_lost is emitted for these
	// only).
	Lost int
	// Unreleased claims could not be released: the statement failed or ran
	// past the drain's hard stop. They are recoverable once their lease
	// expires.
	Unreleased int
	Duration   time.Duration
}

// drainCounts are the hand-over outcomes, counted as they happen.
type drainCounts struct {
	forced, released, lost, unreleased atomic.Int32
}

// Drain takes the node out of service:
//
//  1. readiness turns false (state draining) before anything else;
//  2. intake stops: triggers, schedulers and the trigger-request poller;
//  3. every held lease is renewed once, so the drain can use its whole
//     timeout;
//  4. queued episodes are handed over unstarted, their claims released in
//     one statement;
//  5. running ones get until ctx is done to finish their current step: a
//     Done step finishes here, any other step boundary hands the episode
//     over and releases its claim at once (ReleaseClaims), so another
//     node's recovery takes it without waiting for the slowest run; at
//     ctx's deadline the rest are cancelled, and handed over as they return;
//  6. the node's membership row is removed.
//
// Drain returns by ctx's deadline plus Config.DrainGrace (default 1 s),
// whatever the database does: every write it makes or waits for (renewal,
// releases, the runs' own journal and finish writes, deregistration) is
// cancelled at that hard stop, and runs that have not returned by then are
// reported Abandoned. Without a deadline on ctx, each write is bounded by
// WriteTimeout instead.
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
		n.cancelWrites()
		sum := DrainSummary{}
		n.lastDrain.Store(&sum)
		return sum, nil
	}
	n.state.Store(int32(stateDraining))
	n.intake.Unlock()
	start := time.Now()

	// After ctx is done, writes may go on for half of DrainGrace (then
	// every write of this node is cancelled: n.writes), and Drain waits for
	// cancelled runs until hard, the whole DrainGrace.
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()
	go func() {
		defer n.cancelWrites()
		select {
		case <-ctx.Done():
		case <-hard.Done():
			return
		}
		for _, d := range []time.Duration{n.cfg.DrainGrace / 2, n.cfg.DrainGrace - n.cfg.DrainGrace/2} {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-hard.Done():
			}
			t.Stop()
			n.cancelWrites()
		}
		stopHard()
	}()

	// No job is submitted from here on (intake is closed), so every episode
	// held now is counted: queued, running, or between the two.
	tracked := int(n.jobs.Load())
	var queued []*job
	for _, as := range n.actors {
		queued = append(queued, as.exec.drain()...)
	}
	running := tracked - len(queued)
	n.emit(ctx, telemetry.Event{Name: EventDrainStarted, Owner: n.id, Count: tracked})
	n.log.InfoContext(ctx, "leasehold: draining", slog.Int("running", running), slog.Int("queued", len(queued)))

	n.cancelIntake()
	waitFor(hard, &n.intakeBg)
	n.heartbeatMember(n.writes, true)
	if err := n.hb.RenewOnce(n.writes); err != nil {
		n.log.WarnContext(ctx, "leasehold: drain: renewing leases failed; continuing", slog.Any("error", err))
	}
	n.handOverAll(queued)
	n.jobs.Add(-int32(len(queued)))

	if !waitFor(ctx, &n.runs) {
		n.mu.Lock()
		for _, cancel := range n.running {
			cancel(errStopping)
		}
		n.mu.Unlock()
		waitFor(hard, &n.runs)
	}
	abandoned := int(n.jobs.Load())
	forced := int(n.drainCounts.forced.Load())
	sum := DrainSummary{
		Tracked: tracked, Graceful: tracked - forced - abandoned, Forced: forced, Abandoned: abandoned,
		Released: int(n.drainCounts.released.Load()), Lost: int(n.drainCounts.lost.Load()),
		Unreleased: int(n.drainCounts.unreleased.Load()),
	}
	var err error
	if sum.Unreleased > 0 {
		err = fmt.Errorf("runner: drain: %d claims not released; they expire with their lease", sum.Unreleased)
	}

	n.cancelLife()
	waitFor(hard, &n.lifeBg)
	n.deregister(hard)
	stopHard() // and n.writes: every write still in progress (abandoned runs') ends
	n.cancelBase()
	sum.Duration = time.Since(start)
	n.intake.Lock()
	n.state.Store(int32(stateDrained))
	n.lastDrain.Store(&sum)
	n.intake.Unlock()
	n.emit(ctx, telemetry.Event{Name: EventDrainCompleted, Owner: n.id, Duration: sum.Duration, Err: err, Counts: map[string]int{
		"tracked": sum.Tracked, "graceful": sum.Graceful, "forced": sum.Forced, "abandoned": sum.Abandoned,
		"released": sum.Released, "lost": sum.Lost, "unreleased_count": sum.Unreleased,
	}})
	n.log.InfoContext(ctx, "leasehold: drained", slog.Int("tracked", sum.Tracked), slog.Int("graceful", sum.Graceful),
		slog.Int("forced", sum.Forced), slog.Int("abandoned", sum.Abandoned), slog.Int("released", sum.Released),
		slog.Int("lost", sum.Lost), slog.Int("unreleased", sum.Unreleased))
	return sum, err
}

// waitFor waits for wg until ctx is done and reports whether wg finished.
func waitFor(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
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
		if n.hb.Failing() || n.dbFailing.Load() {
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
// reaching its database. Readiness probes (package health) report it.
func (n *Node) Ready() bool { return n.Readiness().State == StateReady }

// Drained reports whether the node has drained.
func (n *Node) Drained() bool { return lifecycle(n.state.Load()) == stateDrained }

// member is this node's membership row. Its Runnable is what the poller
// asks work for (pollActors: the actors in mode full here, with their
// overrides), so that operators and maintenance can tell which queued work
// no live node runs; it follows mode changes at the next refresh.
func (n *Node) member(draining bool) membership.Member {
	var runnable []episodes.Runnable
	for _, id := range n.pollActors() {
		runnable = append(runnable, n.actors[id].runnable...)
	}
	return membership.Member{ID: n.id, Stack: n.cfg.StackSlug, Env: n.cfg.Env, Mode: string(n.Mode()), Draining: draining,
		Runnable: runnable, KeyVersion: int(dedupe.LatestKeyVersion)}
}

// memberPeriod is how often the membership row is refreshed, and the
// timeout of each refresh: the heartbeat interval, at most 5 s. The refresh
// is also the node's probe of its database while it holds no lease, so a
// node that cannot reach the database reports degraded within two periods
// of losing it, whatever it holds.
func (n *Node) memberPeriod() time.Duration { return min(n.hb.Interval(), 5*time.Second) }

// refreshMembership refreshes the node's row every memberPeriod until ctx
// is done, and every RetryInterval while the database is unreachable, so
// readiness returns promptly once it is back.
func (n *Node) refreshMembership(ctx context.Context) {
	t := time.NewTimer(n.memberPeriod())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.heartbeatMember(ctx, n.stopping())
		wait := n.memberPeriod()
		if n.dbFailing.Load() {
			wait = min(wait, n.hb.RetryInterval())
		}
		t.Reset(wait)
	}
}

// heartbeatMember refreshes the membership row; its outcome, like every
// lease renewal's (Config.Heartbeat.OnRenewal), tells readiness whether the
// database is reachable.
func (n *Node) heartbeatMember(parent context.Context, draining bool) {
	ctx, cancel := context.WithTimeout(parent, n.memberPeriod())
	defer cancel()
	err := n.store.HeartbeatNode(ctx, n.member(draining))
	if parent.Err() == nil { // not cut short by the node stopping
		n.dbFailing.Store(err != nil)
	}
	if err != nil {
		n.log.DebugContext(ctx, "leasehold: membership heartbeat failed", slog.Any("error", err))
	}
}

func (n *Node) deregister(ctx context.Context) {
	err := n.retryingUntil(ctx, func(ctx context.Context) error { return n.store.DeregisterNode(ctx, n.id) })
	if err != nil {
		n.log.Warn("leasehold: membership: deregister failed; maintenance removes the row later", slog.Any("error", err))
	}
}
