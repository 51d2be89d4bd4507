package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/telemetry"
)

// EventSweep is emitted once per sweep (dry runs included) with the counts
// found, claimed, restarted, failed and skipped.
const EventSweep = "recovery.sweep"

// Defaults.
const (
	DefaultStaleAfter = 2 * time.Minute
	DefaultLimit      = 1000
)

// Policy says what happens to a recovered episode.
type Policy string

const (
	PolicyRestart Policy = "restart"
	PolicyFail    Policy = "fail"
)

// Store is what recovery needs from a dialect adapter.
type Store interface {
	ListOrphans(ctx context.Context, q episodes.OrphanQuery) ([]episodes.Orphan, error)
	// ClaimForRecovery returns claims.ErrBusy when the episode is not (or
	// no longer) an orphan, or another node took it first.
	ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error)
	// RequeueOrphan makes an orphan whose policy is restart available work
	// again, as its next attempt (or ends it canceled when a cancel was
	// requested), if its attempts are still those listed; claims.ErrBusy
	// as ClaimForRecovery, and when it has no attempt left.
	RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error)
	FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
	Release(ctx context.Context, t claims.Token) error
	AgentRecoveryPolicy(ctx context.Context, actorID, expectationID string) (policy string, found bool, err error)
}

// BatchRequeuer is a Store whose requeues are cheaper together: a sweep
// hands it every orphan it restarts at once instead of one RequeueOrphan
// each. Each item keeps its own conditions and its own outcome
// (RequeueOrphan's, orphan by orphan). SQLite's adapter shares one write
// transaction among several requeues, because there every write
// transaction queues for the file's one write lock and commits with an
// fsync, and on a loaded host that wait, not the statements, is most of a
// requeue's time. The adapters with row locks (Postgres, SQL Server) run a
// few requeues at once, because each is a round trip (slow on a loaded
// host) and may wait for a row lock (up to claims.TxBound; Postgres skips
// a locked claim row at once), and one at a time those add up.
type BatchRequeuer interface {
	RequeueOrphans(ctx context.Context, items []episodes.RequeueItem, owner string, staleAfter time.Duration) []episodes.RequeueResult
}

// Node is the node on whose behalf a sweep runs (a *runner.Node): its
// identity, scope, lease and registered policies. Recovered episodes are
// not run by it: a restart makes the orphan available to every node.
type Node interface {
	ID() string
	Lease() time.Duration
	Stack() string
	Env() string
	// RecoveryPolicy is the compiled policy of a registered expectation.
	RecoveryPolicy(actorID, expectationID string) (policy string, ok bool)
}

// Options tunes one sweep. The zero value sweeps the node's own stack and env.
type Options struct {
	// Stack and Env override the node's scope for this call (an operator
	// sweeping another stack or env). Stack "" means every stack.
	Stack *string
	Env   *string
	// StaleAfter is how long an episode with no claim at all must have shown
	// no sign of life. Default DefaultStaleAfter.
	StaleAfter time.Duration
	// Limit bounds the orphans handled by one sweep. Default DefaultLimit.
	Limit int
	// Resolve, when set, decides the policy first; ok false defers to the
	// registry, then to the definitions the nodes recorded
	// (leasehold_agent_definitions). When none knows, the orphan is left
	// alone (skipped, not claimed) for a node that does.
	Resolve func(ep episodes.Episode) (p Policy, ok bool)
	// DryRun lists what the sweep would do and why, claiming nothing.
	DryRun bool
}

// Action is what a sweep did, or would do, with one orphan.
type Action string

const (
	ActionRestart   Action = "restart"
	ActionFail      Action = "fail"
	ActionExhausted Action = "fail_exhausted"
	ActionSkip      Action = "skip"
	// ActionCancel: a cancel had been requested (CancelEpisode) while the
	// orphan's holder was alive; recovery ended it canceled. Counted as
	// failed in the Report.
	ActionCancel Action = "cancel"
)

// Decision is one orphan's outcome.
type Decision struct {
	EpisodeID     int64
	ActorID       string
	ExpectationID string
	Action        Action
	// Policy is empty when PolicySource is SourceUnknown.
	Policy       Policy
	PolicySource string // resolver, registry, table, unknown
	Reason       string
}

// Where a policy came from (Decision.PolicySource).
const (
	SourceResolver = "resolver" // Options.Resolve
	SourceRegistry = "registry" // the expectation registered on this node
	SourceTable    = "table"    // leasehold_agent_definitions: recorded by the nodes that run it
	// SourceUnknown: nobody here knows the policy. The orphan is left
	// alone (not claimed), for a node that registers the actor or once a
	// node has recorded its definition; it counts as skipped.
	SourceUnknown = "unknown"
)

// Report counts a sweep's outcomes.
type Report struct {
	Found, Claimed, Restarted, Failed, Skipped int
	// Locked counts the skipped orphans whose rows another transaction
	// held (claims.ErrLocked: another sweeper's requeue, the holder's
	// finish): the next sweep looks at them again.
	Locked    int
	Decisions []Decision
}

// Recoverer sweeps orphaned episodes on behalf of one node.
type Recoverer struct {
	store Store
	node  Node
	log   *slog.Logger
	obs   telemetry.Observer
}

// ErrInvalid: a constructor or sweep argument was rejected.
var ErrInvalid = errors.New("recovery: invalid")

// New returns a Recoverer; logger and observer may be nil. A nil store or
// node is ErrInvalid.
func New(store Store, node Node, logger *slog.Logger, obs telemetry.Observer) (*Recoverer, error) {
	if store == nil || node == nil {
		return nil, fmt.Errorf("%w: recovery.New: store and node are required", ErrInvalid)
	}
	if logger == nil {
		logger = slog.Default()
	}
	if obs == nil {
		obs = telemetry.Nop{}
	}
	return &Recoverer{store: store, node: node, log: logger, obs: obs}, nil
}

// Sweep finds the orphans in scope, claims each one it can (exactly one node
// wins each), and restarts or fails it by its policy.
func (r *Recoverer) Sweep(ctx context.Context, opts Options) (Report, error) {
	if opts.StaleAfter == 0 {
		opts.StaleAfter = DefaultStaleAfter
	}
	if opts.Limit == 0 {
		opts.Limit = DefaultLimit
	}
	if opts.StaleAfter < 0 || opts.Limit < 0 {
		return Report{}, fmt.Errorf("%w: stale after %v and limit %d must not be negative", ErrInvalid, opts.StaleAfter, opts.Limit)
	}
	// The recovery claim is a takeover: the server bounds how long it waits
	// for a holder frozen inside a transaction (claims.TxBound).
	ctx = claims.WithTxBound(ctx, claims.TxBound(r.node.Lease()))
	q := episodes.OrphanQuery{Stack: r.node.Stack(), Env: r.node.Env(), StaleAfter: opts.StaleAfter, Limit: opts.Limit}
	if opts.Stack != nil {
		q.Stack = *opts.Stack
	}
	if opts.Env != nil {
		q.Env = *opts.Env
	}
	orphans, err := r.store.ListOrphans(ctx, q)
	if err != nil {
		return Report{}, fmt.Errorf("recovery: list orphans: %w", err)
	}
	// Every node lists the same orphans; a per-node order spreads the wins
	// across the cluster instead of letting the fastest node take them all.
	rand.Shuffle(len(orphans), func(i, j int) { orphans[i], orphans[j] = orphans[j], orphans[i] })

	rep := Report{Found: len(orphans)}
	var restart []int // the Decisions whose orphan is requeued, after the loop
	for _, o := range orphans {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		d, requeue := r.recoverOne(ctx, o, opts, &rep)
		if requeue {
			restart = append(restart, len(rep.Decisions))
		}
		rep.Decisions = append(rep.Decisions, d)
	}
	if err := r.requeue(ctx, orphans, restart, opts, &rep); err != nil {
		return rep, err
	}
	r.obs.Observe(ctx, telemetry.Event{Name: EventSweep, Owner: r.node.ID(), Count: rep.Found, Counts: map[string]int{
		"found": rep.Found, "claimed": rep.Claimed, "restarted": rep.Restarted, "failed": rep.Failed, "skipped": rep.Skipped,
	}})
	r.log.InfoContext(ctx, "leasehold: recovery sweep", slog.Bool("dry_run", opts.DryRun), slog.Int("found", rep.Found),
		slog.Int("claimed", rep.Claimed), slog.Int("restarted", rep.Restarted), slog.Int("failed", rep.Failed), slog.Int("skipped", rep.Skipped),
		slog.Int("locked", rep.Locked))
	return rep, nil
}

// recoverOne decides what becomes of orphan o and does it, except a
// restart: requeue true leaves that to requeue, which makes all of a
// sweep's restarts at once.
func (r *Recoverer) recoverOne(ctx context.Context, o episodes.Orphan, opts Options, rep *Report) (d Decision, requeue bool) {
	ep := o.Episode
	d = Decision{EpisodeID: ep.ID, ActorID: ep.ActorID, ExpectationID: ep.ExpectationID}
	why := orphanReason(o)
	// The policy is resolved before anything is claimed: a sweeper that
	// cannot tell what the nodes would do leaves the orphan alone rather
	// than failing restartable work (a rolling deploy that adds an actor,
	// two services sharing a database). Exhausted work fails whatever the
	// policy.
	d.Policy, d.PolicySource = r.policy(ctx, ep, opts)
	// The attempt a recovery would start: one more than the current, or the
	// current again when its holder gave the grant back (see doc.go).
	next := ep.Attempt() + 1
	if o.GivenBack {
		next = ep.Attempt()
	}
	exhausted := next > ep.MaxAttempts
	unknown := func() Decision {
		d.Action = ActionSkip
		d.Reason = fmt.Sprintf("%s; no recovery policy for %s/%s is known here (not registered on this node, none recorded "+
			"in leasehold_agent_definitions): left for a node that runs it", why, ep.ActorID, ep.ExpectationID)
		return d
	}
	if opts.DryRun {
		d.Action, d.Reason = ActionFail, why
		switch {
		case exhausted:
			d.Action, d.Reason = ActionExhausted, fmt.Sprintf("%s; would be attempt %d of at most %d", why, next, ep.MaxAttempts)
		case d.PolicySource == SourceUnknown:
			return unknown(), false
		case d.Policy == PolicyRestart:
			d.Action = ActionRestart
		}
		return d, false
	}
	if d.PolicySource == SourceUnknown && !exhausted {
		rep.Skipped++
		return unknown(), false
	}
	if d.Policy == PolicyRestart && !exhausted {
		return d, true
	}

	ep, claim, err := r.store.ClaimForRecovery(ctx, ep.ID, r.node.ID(), r.node.Lease(), opts.StaleAfter)
	if err != nil {
		rep.Skipped++
		d.Action, d.Reason = ActionSkip, "not claimed: "+err.Error()
		if errors.Is(err, claims.ErrBusy) {
			d.Reason = "not claimed: recovered by another node, or alive again"
		}
		return d, false
	}
	rep.Claimed++
	if ep.Attempt() > ep.MaxAttempts { // the claim counted this recovery
		d.Action, d.Reason = ActionExhausted, fmt.Sprintf("%s; attempt %d exceeds max attempts %d", why, ep.Attempt(), ep.MaxAttempts)
		r.fail(ctx, ep, claim, episodes.ClassRecoveryExhausted, d.Reason, rep)
		return d, false
	}
	if d.PolicySource == SourceUnknown {
		// Listed as exhausted, but its attempts changed meanwhile: hand it
		// back at once for a node that knows its policy.
		if rerr := r.store.Release(ctx, claim.Token); rerr != nil {
			r.log.WarnContext(ctx, "leasehold: release of an orphan with no known policy", slog.Int64("episode", ep.ID), slog.Any("error", rerr))
		}
		rep.Skipped++
		return unknown(), false
	}
	if d.Policy == PolicyRestart {
		// Listed as exhausted, but its attempts changed meanwhile (an
		// operator's retry): hand it back at once, for the next sweep.
		if rerr := r.store.Release(ctx, claim.Token); rerr != nil {
			r.log.WarnContext(ctx, "leasehold: release of an orphan no longer exhausted", slog.Int64("episode", ep.ID), slog.Any("error", rerr))
		}
		rep.Skipped++
		d.Action, d.Reason = ActionSkip, fmt.Sprintf("%s; attempt %d is within max attempts %d again: left for the next sweep", why, ep.Attempt(), ep.MaxAttempts)
		return d, false
	}
	d.Action, d.Reason = ActionFail, why
	r.fail(ctx, ep, claim, episodes.ClassOrphaned, fmt.Sprintf("%s; recovered by %s with policy fail", why, r.node.ID()), rep)
	return d, false
}

// requeue restarts the orphans whose Decisions are at the indexes restart
// by making each available work again (RequeueOrphan): whichever full node
// has a free slot for its actor runs it, under the actor's MaxConcurrent,
// this node included. An orphan with a cancel request ends canceled
// instead. A BatchRequeuer gets them all in one call.
func (r *Recoverer) requeue(ctx context.Context, orphans []episodes.Orphan, restart []int, opts Options, rep *Report) error {
	if len(restart) == 0 {
		return nil
	}
	items := make([]episodes.RequeueItem, len(restart))
	for k, i := range restart {
		items[k] = episodes.RequeueItem{ID: orphans[i].Episode.ID, Attempts: orphans[i].Episode.Attempts}
	}
	var results []episodes.RequeueResult
	if b, ok := r.store.(BatchRequeuer); ok {
		results = b.RequeueOrphans(ctx, items, r.node.ID(), opts.StaleAfter)
	} else {
		results = make([]episodes.RequeueResult, len(items))
		for k, it := range items {
			if err := ctx.Err(); err != nil {
				return err
			}
			results[k].Requeued, results[k].Err = r.store.RequeueOrphan(ctx, it.ID, it.Attempts, r.node.ID(), opts.StaleAfter)
		}
	}
	for k, i := range restart {
		rep.Decisions[i] = requeued(orphans[i], rep.Decisions[i], results[k], rep)
	}
	return ctx.Err()
}

// requeued records one requeue's outcome in d and rep.
func requeued(o episodes.Orphan, d Decision, res episodes.RequeueResult, rep *Report) Decision {
	if err := res.Err; err != nil {
		rep.Skipped++
		d.Action, d.Reason = ActionSkip, "not requeued: "+err.Error()
		switch {
		case errors.Is(err, claims.ErrLocked):
			rep.Locked++
			d.Reason = "not requeued: another transaction holds its rows (another sweeper's requeue, its holder's finish): the next sweep looks again"
		case errors.Is(err, claims.ErrBusy):
			d.Reason = "not requeued: recovered by another node, alive again, or out of attempts (the next sweep fails it)"
		}
		return d
	}
	why := orphanReason(o)
	rep.Claimed++
	if res.Status == episodes.StatusCanceled {
		rep.Failed++
		d.Action, d.Reason = ActionCancel, why+"; a cancel was requested: ended canceled"
		return d
	}
	rep.Restarted++
	d.Action = ActionRestart
	d.Reason = fmt.Sprintf("%s; available again as attempt %d of %d", why, res.Attempts+1, res.MaxAttempts)
	return d
}

func (r *Recoverer) fail(ctx context.Context, ep episodes.Episode, c claims.Claim, class, reason string, rep *Report) {
	detail, _ := json.Marshal(map[string]string{"reason": "recovery: " + reason})
	err := r.store.FinishEpisode(ctx, ep.ID, c.Token, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: class, ErrorDetail: detail})
	if err != nil {
		// The claim is ours and will expire; the next sweep tries again.
		r.log.WarnContext(ctx, "leasehold: recovery could not fail the episode", slog.Int64("episode", ep.ID), slog.Any("error", err))
		return
	}
	rep.Failed++
}

// policy resolves in order: the caller's resolver, the compiled registry,
// the definitions the nodes recorded (leasehold_agent_definitions); else
// SourceUnknown, and the orphan is left for a node that knows.
func (r *Recoverer) policy(ctx context.Context, ep episodes.Episode, opts Options) (Policy, string) {
	if opts.Resolve != nil {
		if p, ok := opts.Resolve(ep); ok {
			return p, SourceResolver
		}
	}
	if p, ok := r.node.RecoveryPolicy(ep.ActorID, ep.ExpectationID); ok {
		return Policy(p), SourceRegistry
	}
	p, found, err := r.store.AgentRecoveryPolicy(ctx, ep.ActorID, ep.ExpectationID)
	if err != nil {
		r.log.WarnContext(ctx, "leasehold: definition lookup failed; leaving the orphan alone", slog.Int64("episode", ep.ID), slog.Any("error", err))
	}
	if found && err == nil {
		return Policy(p), SourceTable
	}
	return "", SourceUnknown
}

func orphanReason(o episodes.Orphan) string {
	switch o.ClaimState {
	case "":
		return fmt.Sprintf("%s with no claim, last seen %s", o.Episode.Status, o.LastSeenAt.UTC().Format(time.RFC3339))
	case string(claims.StateClaimed):
		until := ""
		if o.ClaimLeaseUntil != nil {
			until = " at " + o.ClaimLeaseUntil.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("%s; lease of %s expired%s", o.Episode.Status, o.ClaimOwner, until)
	default:
		return fmt.Sprintf("%s; claim %s by %s", o.Episode.Status, o.ClaimState, o.ClaimOwner)
	}
}
