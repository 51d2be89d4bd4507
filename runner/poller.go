package runner

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/telemetry"
)

// PollConfig tunes the trigger-request poller. Every node runs one; it only
// claims requests while the node is in mode full, and only for the actors
// that are full here.
type PollConfig struct {
	// Interval between polls, default 5s: the fallback for what nothing
	// wakes the poller for. The poller also wakes when an episode is made
	// available (a TriggerWaker's notification), when a slot frees here
	// while due work waits, and when the next available episode of its
	// scope falls due: after each poll it asks the database how long until
	// then (NextAvailableDue) and sleeps no longer, so a delayed run, a
	// retry's backoff or a recovery requeue starts at its due time on the
	// database clock, not on the next interval.
	Interval time.Duration
	// Batch is how many episodes one poll statement takes at most (never
	// more than the actor's free slots, nor 64), default 16.
	Batch int
	// TTL is opt-in. Zero (the default): available work never expires,
	// and deferred work waits for a full node however long an outage
	// lasts. Set: available episodes of this poller's scope due more than
	// TTL ago are canceled (status canceled, class trigger_expired), so
	// that work never runs unless triggered again. Only for work that is
	// worthless late; never for payments.
	TTL time.Duration
	// SourceStack selects whose available work this node runs; nil means
	// the node's own stack (plus unstamped rows), "" every stack.
	SourceStack *string
	// SourceEnv selects the env whose available work this node runs; nil
	// means the node's own env, by strict equality.
	SourceEnv *string
	// Disabled turns the poller off.
	Disabled bool
}

func (p *PollConfig) defaults() error {
	if p.Interval == 0 {
		p.Interval = 5 * time.Second
	}
	if p.Batch == 0 {
		p.Batch = 16
	}
	if p.Interval < 0 || p.Batch < 0 || p.TTL < 0 {
		return fmt.Errorf("%w: poll interval, batch and TTL must not be negative", ErrInvalid)
	}
	if p.SourceEnv != nil {
		if err := validScope("", *p.SourceEnv); err != nil {
			return err
		}
	}
	return nil
}

// deferTrigger writes the episode and its trigger request in one statement
// (CreateDeferredEpisode), due delay after its creation on the database
// clock, for a full node with a free slot to run. Callers hold intake.
func (n *Node) deferTrigger(ctx context.Context, ne episodes.New, delay time.Duration) (Outcome, error) {
	res, err := n.store.CreateDeferredEpisode(ctx, episodes.Deferred{New: ne, Delay: delay})
	if err != nil {
		return Outcome{}, fmt.Errorf("create deferred episode %s/%s: %w", ne.ActorID, ne.ExpectationID, err)
	}
	if !res.Created {
		n.emit(ctx, n.aboutNew(ne, res.ExistingID, telemetry.Event{Name: EventDuplicate}))
		return Outcome{ExpectationID: ne.ExpectationID, EpisodeID: res.ExistingID, Duplicate: true}, nil
	}
	n.emit(ctx, n.aboutNew(ne, res.Episode.ID, telemetry.Event{Name: EventDeferred, Key: res.Episode.ClaimKey(), Attempt: 1}))
	if delay > 0 && n.cfg.TriggerWaker == nil {
		// Nothing notifies this node's poller of a request it wrote: let it
		// learn the new due time now rather than on its next interval.
		n.pollWake()
	}
	return Outcome{ExpectationID: ne.ExpectationID, EpisodeID: res.Episode.ID, Deferred: true}, nil
}

// slotFreed wakes the poller for a slot that freed here, when that can
// find work: always without a TriggerWaker (the poll is then how new
// requests are seen between intervals), else only while the last poll may
// have left due work behind for lack of slots. An idle cluster's busy node
// thus sends no empty claim per finished run; new requests wake it through
// NOTIFY, and the interval catches delayed work falling due.
func (n *Node) slotFreed() {
	if n.cfg.TriggerWaker == nil || n.backlog.Load() {
		n.pollWake()
	}
}

// pollWake asks the poller to poll now; it never blocks.
func (n *Node) pollWake() {
	select {
	case n.pollCh <- struct{}{}:
	default:
	}
}

// poll runs until ctx is done: on every wake-up it claims the requests
// this node may run and hands each to a local run, then sleeps until the
// next request of its scope falls due (the database says how long), its
// interval at most, or a wake-up.
func (n *Node) poll(ctx context.Context) {
	t := time.NewTimer(n.cfg.Poll.Interval)
	defer t.Stop()
	var lastExpiry time.Time
	for {
		wait := n.cfg.Poll.Interval
		if n.Mode() == ModeFull {
			if n.cfg.Poll.TTL > 0 && time.Since(lastExpiry) >= min(n.cfg.Poll.TTL/4, time.Minute) {
				n.expireRequests(ctx)
				lastExpiry = time.Now()
			}
			n.pollOnce(ctx)
			if f := n.afterPoll.Load(); f != nil {
				(*f)()
			}
			if due, ok := n.nextDue(ctx); ok {
				wait = min(wait, due)
			}
		}
		t.Reset(wait) // no stale tick survives Reset (Go 1.23 timers)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.pollCh:
		}
	}
}

// nextDue is how long until the next request falls due that this poller
// could run now: for the actors that are full here and have a free slot
// (an actor whose slots are taken is polled again when one frees). False
// when there is none, or the read failed (the interval then bounds the
// wait).
func (n *Node) nextDue(ctx context.Context) (time.Duration, bool) {
	var (
		runnable []episodes.Runnable
		full     []string
	)
	for _, id := range n.pollActors() {
		if n.actors[id].exec.free() > 0 {
			runnable = append(runnable, n.actors[id].runnable...)
		} else {
			full = append(full, id)
		}
	}
	if len(full) > 0 {
		// The full actors' due work is not looked at here, so a slot
		// freeing must poll again (slotFreed), or a request falling due
		// meanwhile waits for the interval. A slot that freed before the
		// flag was set did not see it: look again.
		n.backlog.Store(true)
		for _, id := range full {
			if n.actors[id].exec.free() > 0 {
				return 0, true
			}
		}
	}
	if len(runnable) == 0 {
		return 0, false
	}
	stack, env := n.pollScope()
	var (
		wait time.Duration
		ok   bool
	)
	err := n.retryingUntil(ctx, func(wctx context.Context) (err error) {
		wait, ok, err = n.store.NextAvailableDue(wctx, episodes.AvailableQuery{Env: env, Stack: stack, Runnable: runnable})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			n.log.WarnContext(ctx, "leasehold: reading when available work next falls due failed; polling on the interval", slog.Any("error", err))
		}
		return 0, false
	}
	return wait, ok
}

// pollActors lists, sorted, the actors this node runs in mode full now.
func (n *Node) pollActors() []string {
	m := n.modes.Load()
	var actorIDs []string
	for id := range n.actors {
		if m.of(id) == ModeFull {
			actorIDs = append(actorIDs, id)
		}
	}
	slices.Sort(actorIDs)
	return actorIDs
}

func (n *Node) pollScope() (stack, env string) {
	stack, env = n.cfg.StackSlug, n.cfg.Env
	if p := n.cfg.Poll.SourceStack; p != nil {
		stack = *p
	}
	if p := n.cfg.Poll.SourceEnv; p != nil {
		env = *p
	}
	return stack, env
}

// PollOnce takes the due available episodes this node may run now and
// starts each in a local run: for each actor that is full here, it
// reserves up to its free slots (PollConfig.Batch at most), asks the
// database for that many (ClaimAvailable: picked, granted to this node and
// started, in one statement) and starts every one it got in a reserved
// slot, batch after batch until none is left or the slots are taken. It
// returns how many runs it started. Slots are reserved before the
// statement, so every episode the database starts here has a slot the
// moment it is running, and a local trigger that finds the slots reserved
// overflows into available work for the nodes with capacity. The poller
// calls it on every wake-up (an episode made available, a slot freed
// here, one falling due) and interval; tests and operators may.
func (n *Node) PollOnce(ctx context.Context) (int, error) {
	if n.Mode() != ModeFull {
		return 0, nil
	}
	actorIDs := n.pollActors()
	stack, env := n.pollScope()
	started := 0
	// backlog: some actor's due work may not all have been taken (its slots
	// ran out first, or the poll failed), so a slot freeing here is worth a
	// poll even when nothing was made available since.
	backlog := false
	defer func() { n.backlog.Store(backlog) }()
	for _, id := range actorIDs {
		as := n.actors[id]
		for ctx.Err() == nil && !n.stopping() {
			got, taken, runs, err := n.take(ctx, as, episodes.AvailableQuery{
				Owner: n.id, Lease: n.gate.Lease(), Env: env, Stack: stack, Runnable: as.runnable,
			})
			started += runs
			if err != nil {
				backlog = true
				return started, fmt.Errorf("claim available work: %w", err)
			}
			if got == 0 {
				backlog = true
				break
			}
			if taken < got {
				break
			}
		}
	}
	return started, nil
}

// pollBatchMax bounds the episodes one poll statement takes: the statement
// joins its intermediate sets (picked, granted, started) with each other,
// which stays cheap for a few dozen rows whatever plan the server picks.
const pollBatchMax = 64

// slots are free slots of one actor that the poller reserved before it
// asked for work (executor.reserveForPoll): a taken episode's run starts
// in one of them at once. What the poll did not use is given back.
type slots struct {
	exec     *executor
	reserved int
	left     atomic.Int32
}

// take uses one reserved slot; false when none is left.
func (s *slots) take() bool {
	for {
		v := s.left.Load()
		if v <= 0 {
			return false
		}
		if s.left.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// giveBack ends the poll: the slots not used go back to the executor.
func (s *slots) giveBack() {
	s.exec.endPoll(s.reserved, int(s.left.Swap(0)))
}

// take reserves up to the actor's free slots (PollConfig.Batch and
// pollBatchMax at most), runs one ClaimAvailable for that many under the
// intake lock, and starts a local run for every episode it granted and
// started here. It returns how many slots it reserved, how many episodes
// the statement picked and how many runs it started. The slots are
// reserved under the intake lock, never before it: a local trigger that
// waits for this poll's slots (executor.reserve) holds the lock too, and
// a drain waiting for the lock would otherwise block this poll behind it.
func (n *Node) take(ctx context.Context, as *actorState, q episodes.AvailableQuery) (got, picked, runs int, err error) {
	n.intake.RLock()
	defer n.intake.RUnlock()
	if n.stopping() {
		return 0, 0, 0, nil
	}
	got = as.exec.reserveForPoll(min(as.exec.free(), n.cfg.Poll.Batch, pollBatchMax))
	if got == 0 {
		return 0, 0, 0, nil
	}
	sl := &slots{exec: as.exec, reserved: got}
	sl.left.Store(int32(got))
	defer sl.giveBack()
	q.Limit = got
	var ds []episodes.Dispatched
	// A grant in flight is not abandoned when intake stops: the drain's
	// hard stop bounds it. A drain waits for this (it takes intake), so
	// everything granted here starts here, and the drain hands it back at
	// its first step boundary. An adapter that commits a poll in several
	// transactions returns what it took before an error: those are runs of
	// ours, and only the rest is asked for again.
	err = n.retrying(nil, func(wctx context.Context) error {
		got, err := n.store.ClaimAvailable(wctx, q)
		ds = append(ds, got...)
		q.Limit -= len(got)
		if err == nil || q.Limit <= 0 {
			return nil
		}
		return err
	})
	for _, d := range ds {
		if n.accept(ctx, d, sl) {
			runs++
		}
	}
	// An error: not applied (the loop sends again only what the server
	// rolled back or never saw), or unknown, and a grant that committed
	// unseen ends with its lease; recovery then takes the episode.
	return got, len(ds), runs, err
}

func (n *Node) pollOnce(ctx context.Context) {
	if _, err := n.PollOnce(ctx); err != nil && ctx.Err() == nil {
		n.log.WarnContext(ctx, "leasehold: poll failed; retrying next interval", slog.Any("error", err))
	}
}

// accept acts on one taken episode, under the intake lock: a started
// episode under this node's grant starts in one of the slots sl reserved;
// a grant it cannot run is given back. It reports whether a run was
// submitted.
func (n *Node) accept(ctx context.Context, d episodes.Dispatched, sl *slots) bool {
	if d.Claim.Fence == 0 {
		n.emit(ctx, telemetry.Event{Name: EventRequestSkipped, Key: availableKey(d), Owner: n.id,
			Actor: d.ActorID, Expectation: d.ExpectationID, EpisodeID: d.EpisodeID})
		return false
	}
	claim := d.Claim // its local lease clock started before the statement was sent
	if !d.Started {
		// Not reached: the statement starts every episode it grants. Kept
		// so that a grant is never held without a run.
		_ = n.release(&job{claim: claim}) // logged
		n.emit(ctx, telemetry.Event{Name: EventRequestSkipped, Key: claim.Key, Owner: n.id, Fence: claim.Fence,
			Actor: d.ActorID, Expectation: d.ExpectationID, EpisodeID: d.EpisodeID})
		return false
	}
	ep := d.Episode
	as, e, err := n.lookup(ep.ActorID, ep.ExpectationID)
	if err != nil {
		// The episode runs under our fresh grant but its code is not here
		// (a definition changed since the poll asked): release it so that
		// the recovery sweep requeues it at once rather than after the
		// lease.
		n.log.WarnContext(ctx, "leasehold: cannot run a taken episode here; releasing it",
			slog.Int64("episode", d.EpisodeID), slog.Any("error", err))
		_ = n.release(&job{claim: claim}) // logged
		return false
	}
	runCtx, unhold := n.hb.Hold(n.base, claim)
	j := &job{ep: ep, exp: e, claim: claim, ctx: runCtx, unhold: unhold, started: true, nextStep: d.NextStep}
	if sl != nil && sl.exec == as.exec && sl.take() {
		as.exec.startReserved(j)
	} else {
		// Not reached: a poll takes no more than it reserved, for the
		// episode's own actor. Kept so that a run is never dropped.
		as.exec.submit(j)
	}
	n.emit(ctx, n.about(j, telemetry.Event{Name: EventRequestDispatched}))
	return true
}

// expireRequests expires the available episodes in this poller's scope due
// more than the TTL ago: they end canceled, class trigger_expired.
func (n *Node) expireRequests(ctx context.Context) {
	stack, env := n.pollScope()
	var expired []int64
	err := n.retryingUntil(ctx, func(wctx context.Context) (err error) {
		expired, err = n.store.ExpireAvailable(wctx, episodes.ExpireQuery{Env: env, Stack: stack, TTL: n.cfg.Poll.TTL})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			n.log.WarnContext(ctx, "leasehold: expiring available work failed", slog.Any("error", err))
		}
		return
	}
	if len(expired) > 0 {
		n.emit(ctx, telemetry.Event{Name: EventRequestExpired, Owner: n.id, Count: len(expired)})
		n.log.WarnContext(ctx, "leasehold: available work expired untaken", slog.Int("count", len(expired)))
	}
}

// availableKey names a taken episode in an event: its claim key when the
// poll granted it, else episode:{id}.
func availableKey(d episodes.Dispatched) string {
	if d.Claim.Key != "" {
		return d.Claim.Key
	}
	return fmt.Sprintf("episode:%d", d.EpisodeID)
}
