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
	FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
	Release(ctx context.Context, t claims.Token) error
	AgentRecoveryPolicy(ctx context.Context, actorID, expectationID string) (policy string, found bool, err error)
}

// Node is the local node that restarts recovered episodes (a *runner.Node).
type Node interface {
	ID() string
	Lease() time.Duration
	Stack() string
	Env() string
	// RecoveryPolicy is the compiled policy of a registered expectation.
	RecoveryPolicy(actorID, expectationID string) (policy string, ok bool)
	// Resume queues a recovered episode on its actor, holding c, under the
	// actor's max concurrency. It fails when the actor is not registered.
	Resume(ep episodes.Episode, c claims.Claim) error
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
	// registry, then the agent-definitions table, then fail.
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
)

// Decision is one orphan's outcome.
type Decision struct {
	EpisodeID     int64
	ActorID       string
	ExpectationID string
	Action        Action
	Policy        Policy
	PolicySource  string // resolver, registry, table, default
	Reason        string
}

// Report counts a sweep's outcomes.
type Report struct {
	Found, Claimed, Restarted, Failed, Skipped int
	Decisions                                  []Decision
}

// Recoverer sweeps orphaned episodes on behalf of one node.
type Recoverer struct {
	store Store
	node  Node
	log   *slog.Logger
	obs   telemetry.Observer
}

// New returns a Recoverer; logger and observer may be nil.
func New(store Store, node Node, logger *slog.Logger, obs telemetry.Observer) (*Recoverer, error) {
	if store == nil || node == nil {
		return nil, fmt.Errorf("recovery.New: store and node are required")
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
		return Report{}, fmt.Errorf("recovery: stale after %v and limit %d must not be negative", opts.StaleAfter, opts.Limit)
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
	for _, o := range orphans {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		d := r.recoverOne(ctx, o, opts, &rep)
		rep.Decisions = append(rep.Decisions, d)
	}
	r.obs.Observe(ctx, telemetry.Event{Name: EventSweep, Owner: r.node.ID(), Count: rep.Found, Counts: map[string]int{
		"found": rep.Found, "claimed": rep.Claimed, "restarted": rep.Restarted, "failed": rep.Failed, "skipped": rep.Skipped,
	}})
	r.log.InfoContext(ctx, "leasehold: recovery sweep", slog.Bool("dry_run", opts.DryRun), slog.Int("found", rep.Found),
		slog.Int("claimed", rep.Claimed), slog.Int("restarted", rep.Restarted), slog.Int("failed", rep.Failed), slog.Int("skipped", rep.Skipped))
	return rep, nil
}

func (r *Recoverer) recoverOne(ctx context.Context, o episodes.Orphan, opts Options, rep *Report) Decision {
	ep := o.Episode
	d := Decision{EpisodeID: ep.ID, ActorID: ep.ActorID, ExpectationID: ep.ExpectationID}
	why := orphanReason(o)
	if opts.DryRun {
		d.Policy, d.PolicySource = r.policy(ctx, ep, opts)
		d.Action, d.Reason = ActionFail, why
		switch {
		case ep.Attempts+1 > ep.MaxAttempts:
			d.Action, d.Reason = ActionExhausted, fmt.Sprintf("%s; would be recovery %d of at most %d", why, ep.Attempts+1, ep.MaxAttempts)
		case d.Policy == PolicyRestart:
			d.Action = ActionRestart
		}
		return d
	}

	ep, claim, err := r.store.ClaimForRecovery(ctx, ep.ID, r.node.ID(), r.node.Lease(), opts.StaleAfter)
	if err != nil {
		rep.Skipped++
		d.Action, d.Reason = ActionSkip, "not claimed: "+err.Error()
		if errors.Is(err, claims.ErrBusy) {
			d.Reason = "not claimed: recovered by another node, or alive again"
		}
		return d
	}
	rep.Claimed++
	if ep.Attempts > ep.MaxAttempts {
		d.Action, d.Reason = ActionExhausted, fmt.Sprintf("%s; recovery %d exceeds max attempts %d", why, ep.Attempts, ep.MaxAttempts)
		r.fail(ctx, ep, claim, episodes.ClassRecoveryExhausted, d.Reason, rep)
		return d
	}
	d.Policy, d.PolicySource = r.policy(ctx, ep, opts)
	if d.Policy == PolicyRestart {
		if err := r.node.Resume(ep, claim); err != nil {
			// No code for this actor here: let a node that has it take over.
			if rerr := r.store.Release(ctx, claim.Token); rerr != nil {
				r.log.WarnContext(ctx, "leasehold: release after failed resume", slog.Int64("episode", ep.ID), slog.Any("error", rerr))
			}
			rep.Skipped++
			d.Action, d.Reason = ActionSkip, "restart not possible on this node: "+err.Error()
			return d
		}
		rep.Restarted++
		d.Action, d.Reason = ActionRestart, why
		return d
	}
	d.Action, d.Reason = ActionFail, why
	r.fail(ctx, ep, claim, episodes.ClassOrphaned, fmt.Sprintf("%s; recovered by %s with policy fail", why, r.node.ID()), rep)
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
// the agent-definitions table, then fail.
func (r *Recoverer) policy(ctx context.Context, ep episodes.Episode, opts Options) (Policy, string) {
	if opts.Resolve != nil {
		if p, ok := opts.Resolve(ep); ok {
			return p, "resolver"
		}
	}
	if p, ok := r.node.RecoveryPolicy(ep.ActorID, ep.ExpectationID); ok {
		return Policy(p), "registry"
	}
	p, found, err := r.store.AgentRecoveryPolicy(ctx, ep.ActorID, ep.ExpectationID)
	if err != nil {
		r.log.WarnContext(ctx, "leasehold: agent definition lookup failed; using fail", slog.Int64("episode", ep.ID), slog.Any("error", err))
	}
	if found && err == nil {
		return Policy(p), "table"
	}
	return PolicyFail, "default"
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
