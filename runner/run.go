package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/telemetry"
)

// job is an episode this node created and claimed, waiting for or holding a
// slot of its actor. ctx is the heartbeat's: it is cancelled with cause
// claims.ErrLeaseLost when the claim is lost.
type job struct {
	ep     episodes.Episode
	exp    *Expectation
	claim  claims.Claim
	ctx    context.Context
	unhold func()
	run    *Run // once started
	// outcome: how the attempt ended, for its span.
	outcome struct {
		status, class string
		err           error
	}
	// started: the granting statement started the episode already
	// (CreateEpisode with a reserved slot, ClaimAvailable):
	// execute skips StartEpisode and begins at nextStep (0: step 1).
	started  bool
	nextStep int32
}

// executor runs one actor's episodes, at most max at once on this node, the
// rest in FIFO order. Waiting episodes are status queued in the database and
// keep their claim, renewed by the heartbeat, so no other node runs them;
// only work that reached this node anyway waits here (recovered, or with
// the poller off): a trigger that finds no free slot creates its episode
// available to the cluster instead (reserve), and a poll takes no more
// than the slots it reserved (reserveForPoll).
type executor struct {
	node   *Node
	max    int
	mu     sync.Mutex
	active int
	queue  []*job
	// polling counts the slots reserved by polls in flight (within
	// active); ended is signalled when a poll gives them up (endPoll).
	polling int
	ended   sync.Cond
}

func newExecutor(n *Node, max int) *executor {
	x := &executor{node: n, max: max}
	x.ended.L = &x.mu
	return x
}

func (x *executor) submit(j *job) {
	x.node.jobs.Add(1) // until execute returns, or the drain hands it over unstarted
	x.mu.Lock()
	if x.active >= x.max {
		x.queue = append(x.queue, j)
		x.mu.Unlock()
		return
	}
	x.active++
	x.mu.Unlock()
	x.node.runs.Go(func() { x.work(j) })
}

// reserve takes a free slot for an episode this node is about to create
// and run; false when none is free (or jobs already wait for one). While a
// poll holds slots it reserved, it waits for the poll to end (one
// statement) and looks again: a slot the poll leaves unused is the
// trigger's, so an empty poll never turns a local run into available work.
func (x *executor) reserve() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for {
		if len(x.queue) > 0 {
			return false
		}
		if x.active < x.max {
			x.active++
			return true
		}
		if x.polling == 0 {
			return false
		}
		x.ended.Wait()
	}
}

// reserveForPoll takes up to n free slots for a poll about to ask the
// database for that much work, and returns how many it took; none while
// jobs wait for a slot, as reserve. The poll ends with endPoll.
func (x *executor) reserveForPoll(n int) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.queue) > 0 {
		return 0
	}
	k := max(0, min(n, x.max-x.active))
	x.active += k
	x.polling += k
	return k
}

// endPoll ends a poll that reserved slots (reserveForPoll): the ones its
// runs took stay taken, the unused ones are given back (to waiting jobs
// first), and triggers waiting for the poll look again.
func (x *executor) endPoll(reserved, unused int) {
	x.mu.Lock()
	x.polling -= reserved
	x.mu.Unlock()
	x.giveBack(unused)
	x.ended.Broadcast()
}

// giveBack returns k reserved slots, to waiting jobs first, and reports
// how many it left free. It does not wake the poller (unreserve does): the
// poll that reserved slots it did not use has just looked for work.
func (x *executor) giveBack(k int) (freed int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for ; k > 0 && len(x.queue) > 0 && !x.node.stopping(); k-- {
		j := x.queue[0]
		x.queue = x.queue[1:]
		x.node.runs.Go(func() { x.work(j) })
	}
	x.active -= k
	return k
}

// startReserved runs j in the slot reserve took.
func (x *executor) startReserved(j *job) {
	x.node.jobs.Add(1)
	x.node.runs.Go(func() { x.work(j) })
}

// unreserve gives back a slot reserve took for nothing (a duplicate, an
// error, a busy claim), to a waiting job if there is one.
func (x *executor) unreserve() {
	if x.giveBack(1) > 0 {
		x.node.slotFreed() // the slot is free for the cluster's available work
	}
}

// free returns how many more episodes could start here now.
func (x *executor) free() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return max(0, x.max-x.active-len(x.queue))
}

// work runs j, then the queued jobs, until the queue is empty or the node
// stops (then Stop hands the queue over). A slot left free wakes the
// poller, so the cluster's available work flows to it.
func (x *executor) work(j *job) {
	for j != nil {
		x.node.execute(j)
		x.mu.Lock()
		j = nil
		if len(x.queue) > 0 && !x.node.stopping() {
			j, x.queue = x.queue[0], x.queue[1:]
		} else {
			x.active--
		}
		x.mu.Unlock()
	}
	x.node.slotFreed()
}

// remove takes the job of episodeID (under fence, any when 0) out of the
// queue, or returns nil when none waits.
func (x *executor) remove(episodeID, fence int64) *job {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, j := range x.queue {
		if j.ep.ID == episodeID && (fence == 0 || j.claim.Fence == fence) {
			x.queue = append(x.queue[:i:i], x.queue[i+1:]...)
			return j
		}
	}
	return nil
}

// waiting returns how many jobs wait for a slot.
func (x *executor) waiting() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.queue)
}

// drain removes and returns the jobs still waiting for a slot.
func (x *executor) drain() []*job {
	x.mu.Lock()
	defer x.mu.Unlock()
	q := x.queue
	x.queue = nil
	return q
}

// panicError carries a strategy panic to the terminal write.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("strategy panicked: %v", p.value) }

// execute runs one episode under its claim: start (queued -> running), Init,
// then Step until done, journaling every step. Every write is fenced by the
// claim's token; a write that matches nothing ends the run without another
// write, because the episode now belongs to someone else.
func (n *Node) execute(j *job) {
	defer n.jobs.Add(-1)
	defer j.unhold()
	ctx, cancel := context.WithCancelCause(j.ctx)
	defer cancel(nil)
	n.mu.Lock()
	n.running[j] = cancel
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.running, j)
		n.mu.Unlock()
	}()

	if n.stopping() {
		n.handOver(j)
		return
	}
	next, err := max(j.nextStep, 1), error(nil)
	if !j.started {
		err = n.retrying(j, func(ctx context.Context) (err error) {
			next, err = n.store.StartEpisode(ctx, j.ep.ID, j.claim.Token)
			return err
		})
	}
	if err != nil {
		// The episode was finished, archived or taken over meanwhile, or the
		// database failed: either way another grant decides what happens now.
		n.log.WarnContext(ctx, "leasehold: episode not started", slog.Int64("episode", j.ep.ID), slog.Any("error", err))
		_ = n.release(j) // logged
		n.emit(ctx, n.about(j, telemetry.Event{Name: EventNotStarted, Err: err}))
		return
	}
	n.emit(ctx, n.about(j, telemetry.Event{Name: EventStarted, Attempt: j.ep.Attempt()}))
	ctx, span := n.startSpan(ctx, j, 0)
	defer func() { span.End(j.outcome.status, j.outcome.class, j.outcome.err) }()

	run := &Run{Episode: j.ep, Attempt: j.ep.Attempt(), StepNo: next, token: j.claim.Token, node: n}
	j.run = run
	run.Episode.Status, run.Episode.OwnerNode = episodes.StatusRunning, n.id
	if w := j.exp.Budget.MaxWall; w > 0 {
		var cancelWall context.CancelFunc
		ctx, cancelWall = context.WithTimeoutCause(ctx, w, errWallSpent)
		defer cancelWall()
	}
	if err := n.leaseLive(j); err != nil {
		n.end(ctx, j, err)
		return
	}
	err = safely(func() error { return j.exp.Strategy.Init(ctx, run) })
	if f, ok := n.finishedInTx(j); ok {
		n.emitFinished(ctx, j, f)
		return
	}
	if err != nil {
		n.end(ctx, j, err)
		return
	}
	for steps := 1; ; steps++ {
		if n.stopping() {
			n.handOver(j)
			return
		}
		if err := n.leaseLive(j); err != nil {
			n.end(ctx, j, err)
			return
		}
		var res StepResult
		sctx, step := n.startSpan(ctx, j, run.StepNo)
		err := safely(func() (err error) { res, err = j.exp.Strategy.Step(sctx, run); return err })
		stepStatus := "ok"
		if err != nil {
			stepStatus = "error"
		}
		step.End(stepStatus, "", err)
		if f, ok := n.finishedInTx(j); ok {
			n.emitFinished(ctx, j, f)
			return
		}
		if err != nil {
			n.end(ctx, j, err)
			return
		}
		if res.Done {
			// The last step is journaled by the finish itself: one fenced
			// statement, one commit.
			n.finish(ctx, j, episodes.Finish{Status: episodes.StatusDone, Result: mustJSON(res.Result),
				StepNo: run.StepNo, StepData: mustJSON(res.Data)})
			return
		}
		// A finished step is journaled even if ctx was cancelled meanwhile:
		// the fence decides whether this run may still write.
		if err := n.appendStep(j, run, res.Data); err != nil {
			if errors.Is(err, claims.ErrLeaseLost) {
				n.end(ctx, j, err)
				return
			}
			if cause := context.Cause(ctx); ctx.Err() != nil && errors.Is(cause, claims.ErrLeaseLost) {
				// The write was still retrying when the lease's local
				// deadline passed: the run lost its lease (end gives the
				// grant back, fenced, if nobody has taken it over).
				n.end(ctx, j, cause)
				return
			}
			// The database failed the journal write, not the strategy:
			// never write failed for it. Hand the episode to recovery
			// (released, so at once), which reruns or fails it by policy.
			if n.stopping() {
				n.handOver(j) // the drain cut the write short; it counts the hand-over
				return
			}
			n.log.ErrorContext(ctx, "leasehold: journal write failed; releasing the episode for recovery",
				slog.Int64("episode", j.ep.ID), slog.Any("error", err))
			e := n.about(j, telemetry.Event{Name: EventReleased, Err: err})
			if rerr := n.release(j); rerr != nil {
				e.Name, e.Err = EventReleaseFailed, rerr
			}
			n.emit(ctx, e)
			return
		}
		switch {
		case j.exp.Budget.MaxSteps > 0 && steps >= j.exp.Budget.MaxSteps:
			n.finish(ctx, j, failure(episodes.ClassBudgetExceeded, fmt.Sprintf("max steps %d reached without done", j.exp.Budget.MaxSteps)))
			return
		case ctx.Err() != nil:
			n.end(ctx, j, ctx.Err())
			return
		}
	}
}

// leaseLive is claims.ErrLeaseLost when j's lease is past its local
// deadline (or lost) now, checked before the strategy is called: the
// heartbeat cancels the run's context on its own schedule, and a process
// that was stopped (SIGSTOP, a long GC pause, a frozen VM) past the
// deadline must not begin Init or another Step on a lease the database
// may already have handed to another node.
func (n *Node) leaseLive(j *job) error {
	if j.claim.Passthrough {
		return nil
	}
	if _, held := n.hb.Remaining(j.claim); !held {
		return fmt.Errorf("%w: %s is past its local deadline", claims.ErrLeaseLost, j.claim.Token)
	}
	return nil
}

func (n *Node) appendStep(j *job, run *Run, data any) error {
	raw := mustJSON(data)
	if err := n.retrying(j, func(ctx context.Context) error {
		return n.store.AppendStep(ctx, j.ep.ID, j.claim.Token, run.StepNo, raw, n.gate.Lease())
	}); err != nil {
		return err
	}
	run.StepNo++
	return nil
}

// end decides the terminal write for a run stopped by err, by why it stopped.
func (n *Node) end(ctx context.Context, j *job, err error) {
	cause := context.Cause(ctx)
	if ctx.Err() == nil {
		cause = nil
	}
	var p *panicError
	switch {
	case errors.Is(err, claims.ErrLeaseLost) || errors.Is(cause, claims.ErrLeaseLost):
		n.giveBack(j, errors.Join(err, cause))
		n.emit(ctx, n.about(j, telemetry.Event{Name: EventLeaseLost, Err: err}))
		n.log.WarnContext(ctx, "leasehold: lease lost; run stopped", slog.Int64("episode", j.ep.ID), slog.Any("error", err))
	case errors.Is(cause, errStopping):
		n.drainCounts.forced.Add(1) // interrupted mid-step by the drain's deadline
		n.handOver(j)
	case errors.Is(cause, errWallSpent):
		n.finish(ctx, j, failure(episodes.ClassBudgetExceeded, fmt.Sprintf("max wall time %v exceeded", j.exp.Budget.MaxWall)))
	case errors.Is(cause, ErrCanceled):
		n.finish(ctx, j, canceled())
	case errors.As(err, &p):
		f := failure(episodes.ClassPanic, fmt.Sprint(p.value))
		f.ErrorDetail = mustJSON(map[string]string{"panic": fmt.Sprint(p.value), "stack": string(p.stack)})
		n.finish(ctx, j, f)
	case j.exp.Retry.Backoff > 0 && !IsPermanent(err) && j.ep.Attempt() < j.ep.MaxAttempts:
		n.retryAttempt(ctx, j, err)
	default:
		n.finish(ctx, j, failure(episodes.ClassError, err.Error()))
	}
}

// retryAttempt ends j's failed attempt with one fenced statement (RetryEpisode):
// its error kept and journaled, the claim released, the episode available
// again after the backoff, as its next attempt, to any node with a slot.
func (n *Node) retryAttempt(ctx context.Context, j *job, cause error) {
	attempt, backoff := j.ep.Attempt(), j.exp.Retry.wait(j.ep.Attempt())
	r := episodes.Retry{ErrorClass: episodes.ClassError, Backoff: backoff,
		ErrorDetail: mustJSON(map[string]any{"reason": cause.Error(), "attempt": attempt})}
	if j.run != nil {
		r.StepNo = j.run.StepNo
		r.StepData = mustJSON(map[string]any{"attempt": attempt, "error": cause.Error(), "retry_in_ms": backoff.Milliseconds()})
	}
	var res episodes.Retried
	err := n.retrying(j, func(ctx context.Context) (err error) {
		res, err = n.store.RetryEpisode(ctx, j.ep.ID, j.claim.Token, r)
		return err
	})
	switch {
	case errors.Is(err, claims.ErrLeaseLost):
		n.emit(ctx, n.about(j, telemetry.Event{Name: EventLeaseLost, Err: err}))
	case err != nil:
		// The claim stays claimed and expires; recovery resolves the episode.
		n.log.ErrorContext(ctx, "leasehold: retry write failed", slog.Int64("episode", j.ep.ID), slog.Any("error", err))
	case res.Canceled: // a cancel was requested while the attempt ran
		n.emit(ctx, n.about(j, telemetry.Event{Name: EventCanceled, Attempt: attempt, ErrorClass: episodes.ClassCanceled}))
	default:
		n.emit(ctx, n.about(j, telemetry.Event{Name: EventRetrying, ErrorClass: r.ErrorClass,
			Attempt: attempt, Err: cause, Counts: map[string]int{"retry_in_ms": int(backoff.Milliseconds())}}))
		n.log.InfoContext(ctx, "leasehold: attempt failed; retrying", slog.Int64("episode", j.ep.ID),
			slog.Int("attempt", int(attempt)), slog.Int("next_attempt", int(res.Attempts)+1),
			slog.Time("due", res.RunAfter), slog.Any("error", cause))
	}
}

// finish writes the episode's terminal status and the claim's final state
// in one fenced statement.
func (n *Node) finish(ctx context.Context, j *job, f episodes.Finish) {
	var err error
	if _, plain := n.finisher.(storeFinisher); plain {
		err = n.groupFinish(j, f)
	} else {
		err = n.retrying(j, func(ctx context.Context) error { return n.finisher.FinishEpisode(ctx, nil, j.ep, j.claim.Token, f) })
	}
	switch {
	case errors.Is(err, claims.ErrLeaseLost):
		n.emit(ctx, n.about(j, telemetry.Event{Name: EventLeaseLost, Err: err}))
		return
	case err != nil:
		// The claim stays claimed and expires; recovery resolves the episode.
		n.log.ErrorContext(ctx, "leasehold: terminal write failed", slog.Int64("episode", j.ep.ID), slog.Any("error", err))
		return
	}
	n.emitFinished(ctx, j, f)
}

// emitFinished emits the event of j's terminal write f, once it landed.
func (n *Node) emitFinished(ctx context.Context, j *job, f episodes.Finish) {
	j.ended(string(f.Status), f.ErrorClass, nil)
	name := EventFailed
	switch f.Status {
	case episodes.StatusDone:
		name = EventCompleted
	case episodes.StatusCanceled:
		name = EventCanceled
	}
	n.emit(ctx, n.about(j, telemetry.Event{Name: name, ErrorClass: f.ErrorClass}))
}

// handOver gives j's episode up so that any node can take it at once; the
// episode keeps its status (running or queued) for recovery. It only
// happens while the node drains, as soon as the run reaches a step boundary
// (or, queued, at once): the claim is fenced and released right away, not
// behind the slowest run, so another node's recovery need not wait out the
// lease.
func (n *Node) handOver(j *job) { n.handOverAll([]*job{j}) }

// handOverAll releases the claims of jobs in one statement (ReleaseClaims)
// and counts each in the drain's summary: released, lost (the grant was gone
// already: taken over or finished elsewhere), or unreleased (the statement
// failed or ran out of time; the lease expires instead). The write ends by
// the drain's hard stop.
func (n *Node) handOverAll(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	cs := make([]claims.Claim, len(jobs))
	for i, j := range jobs {
		cs[i] = j.claim
	}
	var released []claims.Claim
	err := n.retrying(nil, func(ctx context.Context) (err error) {
		released, err = n.gate.ReleaseMany(ctx, cs)
		return err
	})
	ok := make(map[claims.Token]bool, len(released))
	for _, c := range released {
		ok[c.Token] = true
	}
	if err != nil {
		n.log.Warn("leasehold: drain: releasing claims failed; they will expire with their lease",
			slog.Int("claims", len(cs)), slog.Any("error", err))
	}
	for _, j := range jobs {
		e := n.about(j, telemetry.Event{})
		switch {
		case ok[j.claim.Token] || j.claim.Passthrough:
			n.drainCounts.released.Add(1)
			e.Name = EventReleased
		case err == nil:
			n.drainCounts.lost.Add(1)
			e.Name, e.Err = EventLeaseLost, claims.ErrNotOwner
		default:
			n.drainCounts.unreleased.Add(1)
			e.Name, e.Err = EventReleaseFailed, err
		}
		n.emit(context.Background(), e)
		j.unhold()
	}
}

// release ends j's lease so that recovery can take its episode at once; a
// grant already gone (ErrNotOwner) needs no release.
func (n *Node) release(j *job) error {
	err := n.retrying(j, func(ctx context.Context) error { return n.gate.Release(ctx, j.claim) })
	if err != nil && !errors.Is(err, claims.ErrNotOwner) {
		n.log.Warn("leasehold: release failed; the lease will expire instead",
			slog.String("key", j.claim.Key), slog.Any("error", err))
		return err
	}
	return nil
}

// retrying runs one write, sending it again (with jittered backoff) after
// errors the adapter marked claims.ErrRetryable (nothing reached the
// server, or it rolled the statement back: a failed connect, a restart, a
// deadlock, a lock timeout).
//
// What bounds it, whichever ends first:
//   - WriteTimeout;
//   - for a write on behalf of j's lease, the lease's local deadline, as
//     renewals move it (Heartbeat.WithLease): past it the run must stop
//     anyway, and the fence decides whether a write that was already sent
//     lands; before it, a write that waits for a busy database (SQLite's
//     write lock on a loaded host) keeps waiting rather than fail and
//     hand a healthy run to recovery; a lease no longer held locally gets
//     one attempt of at most a lease (a release, giving it back);
//   - the drain's hard stop (half of DrainGrace after its context's
//     deadline), which cancels every write of the node;
//   - for retryingUntil, its ctx (the poller's intake context).
//
// The write's context does not inherit the run's: a run cancelled for its
// budget or by an operator still records why. It carries claims.TxBound of
// the lease, the server-side bound on the transactions and takeover
// statements the adapter runs for it.
func (n *Node) retrying(j *job, write func(context.Context) error) error {
	return n.retry(context.Background(), j, write)
}

// retryingUntil is retrying for a node-level write (no lease) that is also
// abandoned when ctx is done.
func (n *Node) retryingUntil(ctx context.Context, write func(context.Context) error) error {
	return n.retry(ctx, nil, write)
}

func (n *Node) retry(parent context.Context, j *job, write func(context.Context) error) error {
	limit, once, held := n.cfg.WriteTimeout, false, false
	if j != nil && !j.claim.Passthrough {
		if _, held = n.hb.Remaining(j.claim); !held {
			// Only a release is made for a lease no longer held (giving it
			// back): fenced, it is safe whenever it lands, and the sooner
			// the better, so it may wait as long as a lease.
			limit, once = min(limit, max(claims.TxBound(n.gate.Lease()), n.gate.Lease())), true
		}
	}
	ctx, cancel := context.WithTimeout(claims.WithTxBound(n.writes, claims.TxBound(n.gate.Lease())), limit)
	defer cancel()
	if held {
		var stop context.CancelFunc
		ctx, stop = n.hb.WithLease(ctx, j.claim)
		defer stop()
	}
	defer context.AfterFunc(parent, cancel)()
	backoff := 10 * time.Millisecond
	for {
		err := write(ctx)
		if err == nil || once || !errors.Is(err, claims.ErrRetryable) {
			return err
		}
		if !backOff(ctx, &backoff) {
			return err
		}
	}
}

// backOff waits a jittered *backoff (half of it to all of it), then
// doubles it up to a second; false when ctx ended first.
func backOff(ctx context.Context, backoff *time.Duration) bool {
	t := time.NewTimer(*backoff/2 + rand.N(*backoff/2+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*backoff = min(2**backoff, time.Second)
	return true
}

func safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return f()
}

func failure(class, reason string) episodes.Finish {
	return episodes.Finish{Status: episodes.StatusFailed, ErrorClass: class, ErrorDetail: mustJSON(map[string]string{"reason": reason})}
}

// mustJSON encodes v for a jsonb column; a value that cannot be encoded is
// recorded as a string saying so rather than losing the write.
func mustJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"unencodable": fmt.Sprintf("%T: %v", v, err)})
	}
	return b
}

// about fills e with what it says of j's episode and grant (actor,
// expectation, episode, env, stack, key, owner, fence, attempt), keeping
// the fields e sets itself.
func (n *Node) about(j *job, e telemetry.Event) telemetry.Event {
	switch e.Name { // how the attempt ended, for its span
	case EventLeaseLost:
		j.ended("lease_lost", "", e.Err)
	case EventReleased, EventReleaseFailed:
		j.ended("released", "", e.Err)
	case EventRetrying:
		j.ended("retrying", e.ErrorClass, e.Err)
	}
	e.Actor, e.Expectation, e.EpisodeID = j.ep.ActorID, j.ep.ExpectationID, j.ep.ID
	e.Env, e.Stack = j.ep.SourceEnv, j.ep.SourceStack
	e.Key, e.Owner, e.Fence = j.claim.Key, n.id, j.claim.Fence
	if e.Attempt == 0 {
		e.Attempt = j.ep.Attempt()
	}
	return e
}

// aboutNew fills e with what it says of the episode ne a trigger creates
// (id, 0 when none was created).
func (n *Node) aboutNew(ne episodes.New, id int64, e telemetry.Event) telemetry.Event {
	e.Actor, e.Expectation, e.EpisodeID = ne.ActorID, ne.ExpectationID, id
	e.Env, e.Stack, e.Owner = ne.SourceEnv, ne.SourceStack, n.id
	if e.Key == "" {
		e.Key = ne.DedupeKey
	}
	return e
}

// ended records how j's attempt ended, for its span; the first word wins.
func (j *job) ended(status, class string, err error) {
	if j.outcome.status == "" {
		j.outcome.status, j.outcome.class, j.outcome.err = status, class, err
	}
}

// inject is the trace context of ctx's span for a trigger to store with
// its episode, "" without a Tracer.
func (n *Node) inject(ctx context.Context) string {
	if n.cfg.Tracer == nil {
		return ""
	}
	tc := n.cfg.Tracer.Inject(ctx)
	if len(tc) > maxTraceContext {
		// The column holds 1024 characters (SQL Server): keep the
		// traceparent, drop an oversized tracestate.
		tc, _, _ = strings.Cut(tc, ";")
	}
	if len(tc) > maxTraceContext {
		return ""
	}
	return tc
}

// maxTraceContext bounds a stored trace context (trace_parent).
const maxTraceContext = 1024

// startSpan starts the span of j's attempt (step 0), a child of the trace
// context stored with the episode, or of one of its steps, a child of the
// attempt's span in ctx.
func (n *Node) startSpan(ctx context.Context, j *job, step int32) (context.Context, telemetry.Span) {
	if n.cfg.Tracer == nil {
		return ctx, telemetry.NoSpan{}
	}
	attrs := telemetry.SpanAttrs{Actor: j.ep.ActorID, Expectation: j.ep.ExpectationID, Key: j.claim.Key, Node: n.id,
		Env: j.ep.SourceEnv, EpisodeID: j.ep.ID, Attempt: j.ep.Attempt(), Fence: j.claim.Fence, Step: step}
	if step > 0 {
		return n.cfg.Tracer.Start(ctx, "leasehold.step "+j.ep.ActorID+"/"+j.ep.ExpectationID, "", attrs)
	}
	return n.cfg.Tracer.Start(ctx, "leasehold.episode "+j.ep.ActorID+"/"+j.ep.ExpectationID, j.ep.TraceParent, attrs)
}
