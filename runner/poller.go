package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/telemetry"
)

// PollConfig tunes the trigger-request poller. Every node runs one; it only
// claims requests while the node is in mode full, and only for the actors
// that are full here.
type PollConfig struct {
	// Interval between polls, default 5s: the fallback for what nothing
	// wakes the poller for. The poller also wakes when a request is written
	// (a TriggerWaker's notification), when a slot frees here while due
	// work waits, and when the next request of its scope falls due: after
	// each poll it asks the database how long until then
	// (NextTriggerRequestDue) and sleeps no longer, so a delayed run, a
	// retry's backoff or a recovery requeue starts at its due time on the
	// database clock, not on the next interval.
	Interval time.Duration
	// Batch is how many requests one statement claims, default 16.
	Batch int
	// ClaimLease bounds the poller's claim on a request between claiming
	// and handing it over, default 30s: a poller that dies in between
	// leaves the request claimable again after it, so available work (a
	// deferred, overflowing or retried episode) it had claimed waits that
	// long; recovery leaves such an episode to the pollers. The hand-over
	// is fenced on the claim, so a shorter lease is always safe.
	ClaimLease time.Duration
	// TTL is opt-in. Zero (the default): requests never expire, and
	// deferred work waits for a full node however long an outage lasts.
	// Set: open requests of this poller's scope older than TTL are expired
	// and their still-unclaimed episodes canceled (status canceled, class
	// trigger_expired), so that work never runs unless triggered again.
	// Only for work that is worthless late; never for payments.
	TTL time.Duration
	// SourceStack selects whose requests this node runs; nil means the
	// node's own stack (plus unstamped rows), "" every stack.
	SourceStack *string
	// SourceEnv selects the env whose requests this node runs; nil means
	// the node's own env, by strict equality.
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
	if p.ClaimLease == 0 {
		p.ClaimLease = 30 * time.Second
	}
	switch {
	case p.Interval < 0, p.Batch < 0, p.ClaimLease < 0, p.TTL < 0:
		return fmt.Errorf("%w: poll interval, batch, claim lease and TTL must not be negative", ErrInvalid)
	case p.ClaimLease < time.Second:
		return fmt.Errorf("%w: poll claim lease %v is under 1s", ErrInvalid, p.ClaimLease)
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
	res, err := n.store.CreateDeferredEpisode(ctx, episodes.Deferred{New: ne, SourceNode: n.id, Delay: delay})
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
		wait, ok, err = n.store.NextTriggerRequestDue(wctx, episodes.RequestQuery{Env: env, Stack: stack, Runnable: runnable})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			n.log.WarnContext(ctx, "leasehold: reading the next due trigger request failed; polling on the interval", slog.Any("error", err))
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

// PollOnce claims and dispatches the due trigger requests this node may
// run now, for each actor that is full here at most as many as the actor
// has free slots, batch after batch until none is left or the slots are
// taken, and returns how many it dispatched to local runs. Before the
// hand-over it reserves a slot for each request claimed (slots): one
// whose slot a local trigger took during the claim is given back at once,
// fenced (ReleaseTriggerRequests), and every one handed over starts in its
// slot the moment it is, so available work goes to the nodes with capacity
// and never waits in a full node's memory with status running. The poller calls it on every wake-up (a
// request written, a slot freed here, a request falling due) and
// interval; tests and operators may.
func (n *Node) PollOnce(ctx context.Context) (int, error) {
	if n.Mode() != ModeFull {
		return 0, nil
	}
	actorIDs := n.pollActors()
	stack, env := n.pollScope()
	dispatched := 0
	// backlog: some actor's due work may not all have been taken (its slots
	// ran out first, or the poll failed), so a slot freeing here is worth a
	// poll even when no request was written since.
	backlog := false
	defer func() { n.backlog.Store(backlog) }()
	for _, id := range actorIDs {
		as := n.actors[id]
		for ctx.Err() == nil && !n.stopping() {
			limit := min(as.exec.free(), n.cfg.Poll.Batch)
			if limit == 0 {
				backlog = true
				break
			}
			var reqs []episodes.TriggerRequest
			err := n.retryingUntil(ctx, func(wctx context.Context) (err error) {
				reqs, err = n.store.ClaimTriggerRequests(wctx, episodes.RequestQuery{
					Owner: n.id, Lease: n.cfg.Poll.ClaimLease, Env: env, Stack: stack,
					Runnable: as.runnable, Limit: limit,
				})
				return err
			})
			if err != nil {
				backlog = true
				return dispatched, fmt.Errorf("claim trigger requests: %w", err)
			}
			// The slots are reserved before the hand-over: a local trigger
			// that took one meanwhile keeps it, and what has no slot now is
			// given back, fenced, for the nodes with capacity.
			sl := &slots{exec: as.exec}
			got := as.exec.reserveUpTo(len(reqs))
			sl.left.Store(int32(got))
			if got < len(reqs) {
				backlog = true
				n.giveBackRequests(ctx, reqs[got:])
			}
			dispatched += n.dispatchAll(ctx, reqs[:got], sl)
			sl.giveBack()
			if len(reqs) < limit || got < len(reqs) {
				break
			}
		}
	}
	return dispatched, nil
}

// slots are free slots of one actor that the poller reserved for the
// requests it claimed, before handing them over (executor.reserveUpTo): a
// hand-over's run starts in one of them at once. What the hand-overs did
// not use (a lapsed request claim, an episode not ours) is given back.
type slots struct {
	exec *executor
	left atomic.Int32
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

// giveBack returns the slots not used to the executor.
func (s *slots) giveBack() {
	s.exec.giveBack(int(s.left.Swap(0)))
}

// dispatchConcurrency bounds the hand-overs one poll sends at once when
// the adapter has no batch hand-over.
const dispatchConcurrency = 8

// batchDispatcher is an adapter that hands many claimed requests over in
// one statement (DispatchTriggerRequests on Postgres; on SQLite a few
// statements, committed in transactions of bounded length), each row
// fenced on its own request claim; the poller uses it when the store has
// it, else one DispatchTriggerRequest per request (SQL Server). With an
// error it returns the hand-overs it committed before the error, if any.
type batchDispatcher interface {
	DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error)
}

// dispatchBatchMax bounds the requests one batch hand-over carries: the
// statement joins its intermediate sets with each other, which stays cheap
// for a few dozen rows whatever plan the server picks.
const dispatchBatchMax = 64

// dispatchAll hands reqs over and returns how many became local runs: in
// one statement per dispatchBatchMax requests when the adapter batches,
// else one per request; up to dispatchConcurrency statements at a time
// (each row is fenced on its own request claim and the chunks are
// disjoint, so their order does not matter).
func (n *Node) dispatchAll(ctx context.Context, reqs []episodes.TriggerRequest, sl *slots) int {
	size, bd := 1, batchDispatcher(nil)
	if b, ok := n.store.(batchDispatcher); ok {
		size, bd = dispatchBatchMax, b
	}
	handOver := func(chunk []episodes.TriggerRequest) int {
		if len(chunk) > 1 {
			return n.dispatchBatch(ctx, bd, chunk, sl)
		}
		if n.dispatch(ctx, chunk[0], sl) {
			return 1
		}
		return 0
	}
	switch {
	case len(reqs) == 0:
		return 0
	case len(reqs) <= size:
		return handOver(reqs)
	}
	var (
		wg   sync.WaitGroup
		ok   atomic.Int32
		slot = make(chan struct{}, dispatchConcurrency)
	)
	for chunk := range slices.Chunk(reqs, size) {
		slot <- struct{}{}
		wg.Go(func() {
			defer func() { <-slot }()
			ok.Add(int32(handOver(chunk)))
		})
	}
	wg.Wait()
	return int(ok.Load())
}

// dispatchBatch is dispatch for all of reqs in one DispatchTriggerRequests
// statement; a request missing from its answer lapsed to another poller.
func (n *Node) dispatchBatch(ctx context.Context, bd batchDispatcher, reqs []episodes.TriggerRequest, sl *slots) int {
	n.intake.RLock()
	defer n.intake.RUnlock()
	if n.stopping() {
		n.giveBackRequests(ctx, reqs)
		return 0
	}
	var (
		ds   []episodes.Dispatched
		left = reqs
	)
	// As in dispatch: grants in flight are not abandoned when intake stops.
	// An adapter that commits a batch in several transactions returns what
	// it handed over before an error: those are runs of ours, and only the
	// rest is tried again (a request already handed over would come back
	// missing, as if it had lapsed, and its run would never start here).
	err := n.retrying(nil, func(wctx context.Context) error {
		got, err := bd.DispatchTriggerRequests(wctx, n.id, left, n.gate.Lease())
		ds = append(ds, got...)
		_, left = handedOver(left, got)
		return err
	})
	if err != nil {
		n.log.WarnContext(ctx, "leasehold: trigger request hand-over failed; giving the requests back",
			slog.Int("requests", len(left)), slog.Any("error", err))
		n.giveBackRequests(ctx, left)
		reqs, _ = handedOver(reqs, ds)
	}
	byRequest := make(map[int64]episodes.Dispatched, len(ds))
	for _, d := range ds {
		byRequest[d.RequestID] = d
	}
	runs := 0
	for _, r := range reqs {
		d, ours := byRequest[r.ID]
		err := error(nil)
		if !ours {
			err = claims.ErrLeaseLost
		}
		if n.accept(ctx, r, d, err, sl) {
			runs++
		}
	}
	return runs
}

// handedOver splits reqs into the requests ds answers and the others.
func handedOver(reqs []episodes.TriggerRequest, ds []episodes.Dispatched) (handed, rest []episodes.TriggerRequest) {
	in := make(map[int64]bool, len(ds))
	for _, d := range ds {
		in[d.RequestID] = true
	}
	for _, r := range reqs {
		if in[r.ID] {
			handed = append(handed, r)
		} else {
			rest = append(rest, r)
		}
	}
	return handed, rest
}

func (n *Node) pollOnce(ctx context.Context) {
	if _, err := n.PollOnce(ctx); err != nil && ctx.Err() == nil {
		n.log.WarnContext(ctx, "leasehold: trigger poll failed; retrying next interval", slog.Any("error", err))
	}
}

// dispatch hands one claimed request to a local run: DispatchTriggerRequest
// completes it, grants the episode's work claim to this node and starts the
// episode under that grant in one statement; the run then starts in a slot
// the poller reserved. A request this node cannot take any more (it is
// stopping) is given back, fenced, for another poller to take at once.
func (n *Node) dispatch(ctx context.Context, r episodes.TriggerRequest, sl *slots) bool {
	n.intake.RLock()
	defer n.intake.RUnlock()
	if n.stopping() {
		n.giveBackRequests(ctx, []episodes.TriggerRequest{r})
		return false
	}
	var d episodes.Dispatched
	// A grant in flight is not abandoned when intake stops: the drain's
	// hard stop bounds it.
	err := n.retrying(nil, func(wctx context.Context) (err error) {
		d, err = n.store.DispatchTriggerRequest(wctx, r, n.gate.Lease())
		return err
	})
	if err != nil && !errors.Is(err, claims.ErrLeaseLost) {
		// Perhaps applied, perhaps not: the give-back is fenced on the
		// claimed request, so it undoes only a hand-over that did not land.
		defer n.giveBackRequests(ctx, []episodes.TriggerRequest{r})
	}
	return n.accept(ctx, r, d, err, sl)
}

// giveBackRequests releases this poller's claims on reqs
// (ReleaseTriggerRequests, each fenced on its own request claim), so that
// another poller takes them now rather than after the claim lease. Bounded
// as every node-level write is (WriteTimeout, the drain's hard stop); a
// failure leaves the claims to lapse.
func (n *Node) giveBackRequests(ctx context.Context, reqs []episodes.TriggerRequest) {
	var released []int64
	err := n.retrying(nil, func(wctx context.Context) (err error) {
		released, err = n.store.ReleaseTriggerRequests(wctx, n.id, reqs)
		return err
	})
	if err != nil {
		n.log.WarnContext(ctx, "leasehold: giving trigger requests back failed; they are claimable again after their claim lease",
			slog.Int("requests", len(reqs)), slog.Any("error", err))
		return
	}
	if len(released) > 0 {
		n.emit(ctx, telemetry.Event{Name: EventRequestReleased, Owner: n.id, Count: len(released)})
	}
}

// accept acts on one hand-over's answer, under the intake lock: a started
// episode under this node's grant starts in one of the slots sl reserved;
// a grant it cannot run is given back. It reports whether a run was
// submitted.
func (n *Node) accept(ctx context.Context, r episodes.TriggerRequest, d episodes.Dispatched, err error, sl *slots) bool {
	switch {
	case errors.Is(err, claims.ErrLeaseLost):
		n.emit(ctx, telemetry.Event{Name: EventRequestLost, Key: requestKey(r), Owner: n.id, Fence: r.Fence})
		return false
	case err != nil:
		n.log.WarnContext(ctx, "leasehold: trigger request hand-over failed; it is claimable again after its claim lease",
			slog.Int64("request", r.ID), slog.Any("error", err))
		return false
	case d.Claim.Fence == 0:
		n.emit(ctx, telemetry.Event{Name: EventRequestSkipped, Key: requestKey(r), Owner: n.id, Fence: r.Fence})
		return false
	}
	claim := d.Claim // its local lease clock started before the statement was sent
	if !d.Started {
		// Granted, but the episode changed between the statement's read
		// and its write (a cancel): give the grant back at once.
		_ = n.release(&job{claim: claim}) // logged
		n.emit(ctx, telemetry.Event{Name: EventRequestSkipped, Key: requestKey(r), Owner: n.id, Fence: r.Fence})
		return false
	}
	ep := d.Episode
	as, e, err := n.lookup(ep.ActorID, ep.ExpectationID)
	if err != nil {
		// The episode runs under our fresh grant but its code is not here
		// (a definition changed since the request was claimed): release
		// it so the recovery sweep requeues it at once rather than after
		// the lease.
		n.log.WarnContext(ctx, "leasehold: cannot run a dispatched episode here; releasing it",
			slog.Int64("episode", d.EpisodeID), slog.Any("error", err))
		_ = n.release(&job{claim: claim}) // logged
		return false
	}
	runCtx, unhold := n.hb.Hold(n.base, claim)
	j := &job{ep: ep, exp: e, claim: claim, ctx: runCtx, unhold: unhold, started: true, nextStep: d.NextStep}
	if sl != nil && sl.exec == as.exec && sl.take() {
		as.exec.startReserved(j)
	} else {
		// Not reached: a poll claims no more than it reserved, for the
		// request's own actor. Kept so that a run is never dropped.
		as.exec.submit(j)
	}
	n.emit(ctx, n.about(j, telemetry.Event{Name: EventRequestDispatched}))
	return true
}

// expireRequests expires the open requests in this poller's scope older
// than the TTL, canceling their still-unclaimed episodes.
func (n *Node) expireRequests(ctx context.Context) {
	stack, env := n.pollScope()
	var expired []episodes.Expired
	err := n.retryingUntil(ctx, func(wctx context.Context) (err error) {
		expired, err = n.store.ExpireTriggerRequests(wctx, episodes.ExpireQuery{Env: env, Stack: stack, TTL: n.cfg.Poll.TTL})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			n.log.WarnContext(ctx, "leasehold: expiring trigger requests failed", slog.Any("error", err))
		}
		return
	}
	if len(expired) > 0 {
		n.emit(ctx, telemetry.Event{Name: EventRequestExpired, Owner: n.id, Count: len(expired)})
		n.log.WarnContext(ctx, "leasehold: trigger requests expired unclaimed", slog.Int("count", len(expired)))
	}
}

func requestKey(r episodes.TriggerRequest) string { return fmt.Sprintf("trigger_request:%d", r.ID) }
