package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/telemetry"
)

// Telemetry events the runner emits.
const (
	EventCreated    = "episode.created"     // this node's insert won the trigger
	EventDuplicate  = "episode.duplicate"   // another node's insert won; silent skip
	EventBusy       = "episode.busy"        // the episode's claim was held elsewhere
	EventStarted    = "episode.started"     // queued -> running under this node's grant
	EventCompleted  = "episode.completed"   // done
	EventFailed     = "episode.failed"      // failed (error, panic, budget)
	EventCanceled   = "episode.canceled"    // canceled
	EventLeaseLost  = "episode.lease_lost"  // a fenced write matched nothing; the run stopped
	EventReleased   = "episode.released"    // handed over on stop; still running for recovery
	EventNotStarted = "episode.not_started" // granted here, but StartEpisode did not land (finished, taken over, lease past its local deadline, database down): the grant was given back (Err says why)
	EventDeferred   = "episode.deferred"    // episode created available: trigger_only, delayed, or overflow
	EventOverflow   = "episode.overflow"    // no free slot here: the episode is created available to the cluster
	EventRetrying   = "episode.retrying"    // an attempt failed and may run again: available after its backoff (Attempt: the failed one)
	// The poller (full nodes). The names keep the trigger request's word
	// (schema 16 folded it into the episode row) so dashboards keep working.
	EventRequestDispatched = "trigger_request.dispatched" // an available episode taken, granted and started in a local run
	EventRequestSkipped    = "trigger_request.skipped"    // taken, but its claim was held live elsewhere: not ours to run
	EventRequestExpired    = "trigger_request.expired"    // Count: available episodes expired by this poller (TTL)
)

// Errors callers branch on.
var (
	ErrStopped   = errors.New("runner: node is not running")
	ErrUnknown   = errors.New("runner: unknown actor, expectation or event")
	ErrCanceled  = errors.New("runner: episode canceled")
	errStopping  = errors.New("runner: node stopping")
	errWallSpent = errors.New("runner: wall-time budget exceeded")
)

// Store is what the runner needs from a dialect adapter: the work-claim
// statements and the fenced episode statements.
type Store interface {
	claims.Store
	CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error)
	StartEpisode(ctx context.Context, id int64, t claims.Token) (nextStep int32, err error)
	AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error
	FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
	// RetryEpisode ends a failed attempt that may run again: fenced, it
	// keeps and journals the error, releases the claim and makes the
	// episode available after the backoff (database clock).
	RetryEpisode(ctx context.Context, id int64, t claims.Token, r episodes.Retry) (episodes.Retried, error)
	// FinishEpisodes is FinishEpisode for many runs of owner in one
	// statement, each fenced on its own grant; it returns the episodes
	// finished.
	FinishEpisodes(ctx context.Context, owner string, items []episodes.FinishItem) ([]int64, error)
	// Cluster-wide cancel and retry (Node.Cancel, Node.Retry): the
	// holder of a live episode reads its cancel requests once per
	// heartbeat interval.
	CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error)
	ListCancelRequests(ctx context.Context, owner string) ([]episodes.CancelRequest, error)
	RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error)
	GetEpisode(ctx context.Context, id int64) (episodes.Episode, error)

	// Available work (deferred, delayed, overflowing, retried, recovered
	// episodes): created by the trigger path, taken by the full nodes'
	// pollers.
	CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error)
	CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error)
	// ClaimAvailable is a poll: up to q.Limit due available episodes of
	// q's scope, each granted to q.Owner (fence + 1, lease q.Lease) and
	// started under that grant, in one statement. Each Dispatched's claim
	// is stamped (claims.Claim.SetLocalStart) with the instant before the
	// statement was sent.
	// With an error it returns the episodes it took before the error, if
	// any (an adapter that commits a poll in several transactions).
	ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error)
	// ExpireAvailable cancels (class trigger_expired) the available
	// episodes of q's scope due more than q.TTL ago, and returns their ids.
	ExpireAvailable(ctx context.Context, q episodes.ExpireQuery) ([]int64, error)
	// NextAvailableDue is how long until the next available episode of a
	// poller's scope (q's Env, Stack and Runnable pairs) falls due, on the
	// database clock; false when none waits. The poller sleeps until then
	// rather than until its next interval.
	NextAvailableDue(ctx context.Context, q episodes.AvailableQuery) (time.Duration, bool, error)

	// Membership (advisory): the node's row, refreshed with the heartbeat.
	membership.Store

	// PutAgentDefinition records an expectation's recovery policy and max
	// attempts; Start records every registered one, so sweepers on nodes
	// without the actor's code know what to do with its orphans.
	PutAgentDefinition(ctx context.Context, d episodes.Definition) error
}

// TriggerWaker wakes the trigger-request poller as soon as a request is
// written (postgres.Notifier, over LISTEN/NOTIFY). WaitTriggerRequests calls
// wake for each notification until ctx is done.
type TriggerWaker interface {
	WaitTriggerRequests(ctx context.Context, wake func()) error
}

// DefaultJitter is the upper bound of the random wait before a schedule
// tick's episode insert, which spreads the windows' wins across nodes.
const DefaultJitter = 200 * time.Millisecond

// Config configures a Node.
type Config struct {
	// Store is the adapter, e.g. postgres.New(pool). Required.
	Store Store
	// Identity is this node's owner name in claims and episodes. When empty,
	// IdentityFunc is asked once; when both are empty a random per-process
	// identity nonode-<pid>-<hex> is used.
	Identity     string
	IdentityFunc func() (string, error)
	// Lease is the work-claim lease; default claims.DefaultLease (2 min).
	// A crashed node's episodes are recoverable this long after its last
	// renewal.
	Lease time.Duration
	// Heartbeat tunes lease renewal; see claims.HeartbeatConfig.
	Heartbeat claims.HeartbeatConfig
	// Jitter bounds the random wait before each schedule tick's episode
	// insert, default DefaultJitter: every node ticks at the same instant,
	// and without it the node with the lowest latency wins every window.
	// The scheduler waits, nobody else. NoJitter disables it (tests).
	Jitter   time.Duration
	NoJitter bool
	// EventJitter bounds the random wait inside Fire before the insert,
	// default 0: Fire returns as soon as the database decided. Set it to
	// spread the wins of events that every node fires at the same instant,
	// at the cost of that much latency in each Fire call (8 producers
	// firing back to back reach about 8/EventJitter*2 triggers a second).
	EventJitter time.Duration
	// StackSlug is this cluster's identity: stamped as source_stack on the
	// episodes and trigger requests this node creates, and the default scope
	// of its recovery sweep and poller. "" is the single-stack default.
	StackSlug string
	// Env is this node's dedupe world: folded into every dedupe key (so
	// into claims), stamped as source_env, and matched by strict equality
	// by recovery, the poller and findings. "" (unset) keeps keys
	// byte-identical to single-env operation. It may not contain ':'.
	Env string
	// Mode is the node-wide mode at start, default ModeFull; see Mode.
	Mode Mode
	// Poll tunes the trigger-request poller that full nodes run.
	Poll PollConfig
	// TriggerWaker, when set, wakes the poller as soon as a request is
	// written; the poll interval stays the fallback. On Postgres use
	// postgres.NewNotifier(pool).
	TriggerWaker TriggerWaker
	// WriteTimeout bounds each write, retries included. Default 30s. A write
	// on behalf of a lease is also bounded by the lease's remaining local
	// time (claims.Heartbeat.Remaining), and every write by a drain's hard
	// stop.
	WriteTimeout time.Duration
	// DrainGrace is how long Drain goes on after its context is done,
	// waiting for cancelled runs to return and for the writes that hand
	// their work over; Drain returns by its context's deadline plus this.
	// Default DefaultDrainGrace (1 s).
	DrainGrace time.Duration
	// Logger defaults to slog.Default(); Observer to discarding.
	Logger   *slog.Logger
	Observer telemetry.Observer
	// FinishBatch bounds how many runs' terminal writes go to the
	// database in one grouped statement (FinishEpisodes, each row fenced on
	// its own grant), default DefaultFinishBatch; 1 sends each on its own.
	// A group waits for nothing: it carries the finishes that queued while
	// the previous one was in flight. Runs finished by a Finisher of their
	// own (package workflows) or in the caller's transaction are not grouped.
	FinishBatch int
	// Tracer, when set, traces each episode attempt and step
	// (telemetry/oteltrace for OpenTelemetry): a trigger stores its
	// caller's trace context with the episode, and every attempt's span,
	// on any node, is a child of it. Default none.
	Tracer telemetry.Tracer
}

type lifecycle int

const (
	stateNew lifecycle = iota
	stateRunning
	stateDraining
	stateDrained
)

// Node runs the registered actors: it turns triggers into episodes (one per
// trigger across the cluster), runs the episodes it wins under a work claim,
// and journals every step with a fenced write.
type Node struct {
	cfg    Config
	id     string
	store  Store
	gate   *claims.Gate
	hb     *claims.Heartbeat
	log    *slog.Logger
	obs    telemetry.Observer
	actors map[string]*actorState
	// afterPoll, set by tests only (export_test.go), runs between a poll
	// and its look-ahead (nextDue).
	afterPoll atomic.Pointer[func()]

	// intake guards the lifecycle: triggers hold it shared for their whole
	// create-and-submit path, Start and Stop hold it exclusively, so no
	// episode is submitted after Stop began.
	intake sync.RWMutex
	state  atomic.Int32 // a lifecycle; written under intake

	base         context.Context // cancelled when the node has drained
	cancelBase   context.CancelFunc
	cancelIntake context.CancelFunc // schedulers, poller, waker
	cancelLife   context.CancelFunc // lease heartbeat, membership heartbeat
	intakeBg     sync.WaitGroup
	lifeBg       sync.WaitGroup
	runs         sync.WaitGroup // episode goroutines

	// drainMu serializes Drain; drainCounts counts its hand-overs.
	drainMu     sync.Mutex
	drainCounts drainCounts
	lastDrain   atomic.Pointer[DrainSummary]

	// writes is the parent of every write's context; cancelled at the
	// drain's hard stop, so no write outlives Drain.
	writes       context.Context
	cancelWrites context.CancelFunc
	// dbFailing: the last statement that probes the database (a lease
	// renewal or the membership refresh) failed; readiness is degraded.
	dbFailing atomic.Bool
	// jobs counts the episodes this node holds: submitted to an executor
	// (queued for a slot, about to run, or running) and not yet ended.
	jobs atomic.Int32

	// running holds the cancel of every run in progress. Keyed by run, not
	// episode: a zombie run of an episode this node has re-acquired since is
	// a separate run and must stay cancellable.
	mu      sync.Mutex
	running map[*job]context.CancelCauseFunc

	finisher Finisher

	modes  atomic.Pointer[modes]
	pollCh chan struct{} // buffered 1: a pending wake-up for the poller
	// backlog: the last poll may have left due work behind (see slotFreed).
	backlog atomic.Bool
	// finishes groups the runs' terminal writes (FinishEpisodes).
	finishes finishGroup
	// keyVer is the database's dedupe key version as last read, 0 before
	// the first read and after the database refused a key (keyVersion).
	keyVer atomic.Int32
}

type actorState struct {
	actor Actor
	exps  map[string]*Expectation
	exec  *executor
	// runnable lists the actor's (actor, expectation) pairs, sorted: what
	// this node's poller asks work for, so that it never claims a request
	// of an expectation it has no code for (another version's). Set by
	// Register; read-only after.
	runnable []episodes.Runnable
}

// NewNode validates cfg and returns a Node ready for Register and Start.
func NewNode(cfg Config) (*Node, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: runner.Config.Store is nil", ErrInvalid)
	}
	if cfg.Jitter == 0 && !cfg.NoJitter {
		cfg.Jitter = DefaultJitter
	}
	if cfg.NoJitter {
		cfg.Jitter = 0
	}
	if cfg.Jitter < 0 || cfg.EventJitter < 0 {
		return nil, fmt.Errorf("%w: jitter %v / event jitter %v is negative", ErrInvalid, cfg.Jitter, cfg.EventJitter)
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout < 0 {
		return nil, fmt.Errorf("%w: write timeout %v is negative", ErrInvalid, cfg.WriteTimeout)
	}
	if cfg.DrainGrace == 0 {
		cfg.DrainGrace = DefaultDrainGrace
	}
	if cfg.FinishBatch == 0 {
		cfg.FinishBatch = DefaultFinishBatch
	}
	if cfg.FinishBatch < 0 {
		return nil, fmt.Errorf("%w: finish batch %d is negative", ErrInvalid, cfg.FinishBatch)
	}
	if cfg.DrainGrace < 0 {
		return nil, fmt.Errorf("%w: drain grace %v is negative", ErrInvalid, cfg.DrainGrace)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = telemetry.Nop{}
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeFull
	}
	if err := cfg.Mode.valid(); err != nil {
		return nil, err
	}
	if err := validScope(cfg.StackSlug, cfg.Env); err != nil {
		return nil, err
	}
	if err := cfg.Poll.defaults(); err != nil {
		return nil, err
	}
	if cfg.Heartbeat.Logger == nil {
		cfg.Heartbeat.Logger = cfg.Logger
	}
	id, err := resolveIdentity(cfg.Identity, cfg.IdentityFunc)
	if err != nil {
		return nil, err
	}
	gate, err := claims.NewGate(cfg.Store, claims.GateConfig{Owner: id, Lease: cfg.Lease, Observer: cfg.Observer})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	n := &Node{
		cfg: cfg, id: id, store: cfg.Store, gate: gate,
		log: cfg.Logger.With(slog.String("node", id)), obs: cfg.Observer,
		actors: map[string]*actorState{}, running: map[*job]context.CancelCauseFunc{},
		pollCh: make(chan struct{}, 1),
	}
	hbCfg, userHook := cfg.Heartbeat, cfg.Heartbeat.OnRenewal
	hbCfg.OnRenewal = func(err error) {
		n.dbFailing.Store(err != nil)
		if userHook != nil {
			userHook(err)
		}
	}
	if n.hb, err = claims.NewHeartbeat(gate, hbCfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	n.writes, n.cancelWrites = context.WithCancel(context.Background())
	n.modes.Store(&modes{node: cfg.Mode})
	n.finisher = storeFinisher{cfg.Store}
	return n, nil
}

// Finisher writes an episode's terminal status (and its claim's final
// state) with a fenced statement, and whatever must commit with it; it
// returns claims.ErrLeaseLost when the run's claim is gone. tx is the
// caller's transaction when the run finishes itself in one (Run.CompleteTx,
// Run.FailTx), else nil: the finisher runs its own statement or
// transaction. The default runs FinishEpisode; the workflow engine
// (package workflows) advances a step's workflow in the same transaction.
type Finisher interface {
	FinishEpisode(ctx context.Context, tx TxStore, ep episodes.Episode, t claims.Token, f episodes.Finish) error
}

type storeFinisher struct{ store Store }

func (s storeFinisher) FinishEpisode(ctx context.Context, tx TxStore, ep episodes.Episode, t claims.Token, f episodes.Finish) error {
	if tx != nil {
		return tx.FinishEpisode(ctx, ep.ID, t, f)
	}
	return s.store.FinishEpisode(ctx, ep.ID, t, f)
}

// SetFinisher sets the terminal write of every episode this node runs, for
// package workflows (workflows.New calls it); once. Call it before Start.
// A second finisher is refused: two engines on one node would each miss
// the other's workflows. Side effects that must commit with a run's finish
// need no finisher: finish the run in your transaction (Run.CompleteTx).
func (n *Node) SetFinisher(f Finisher) error {
	n.intake.Lock()
	defer n.intake.Unlock()
	if f == nil {
		return fmt.Errorf("%w: nil finisher", ErrInvalid)
	}
	if lifecycle(n.state.Load()) != stateNew {
		return fmt.Errorf("%w: set the finisher before Start", ErrInvalid)
	}
	if _, def := n.finisher.(storeFinisher); !def {
		return fmt.Errorf("%w: node %s has a finisher already (one workflow engine per node)", ErrInvalid, n.id)
	}
	n.finisher = f
	return nil
}

// PollNow wakes the trigger-request poller (work may have been deferred to
// the cluster, e.g. a workflow's next steps); it never blocks.
func (n *Node) PollNow() { n.pollWake() }

// validScope checks a stack slug and env: both are stamped on rows (255
// characters), and env is part of dedupe keys, whose parts ':' separates.
func validScope(stack, env string) error {
	for what, v := range map[string]string{"stack slug": stack, "env": env} {
		if utf8.RuneCountInString(v) > 255 || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: %s %q is not valid text of at most 255 characters without NUL", ErrInvalid, what, v)
		}
	}
	if strings.Contains(env, ":") {
		return fmt.Errorf("%w: env %q contains ':', the dedupe key separator", ErrInvalid, env)
	}
	return nil
}

// ID returns the node identity.
func (n *Node) ID() string { return n.id }

// Lease returns the work-claim lease of this node's grants.
func (n *Node) Lease() time.Duration { return n.gate.Lease() }

// Stack returns the stack slug stamped on this node's episodes.
func (n *Node) Stack() string { return n.cfg.StackSlug }

// Env returns the env stamped on this node's episodes.
func (n *Node) Env() string { return n.cfg.Env }

// RecoveryPolicy returns the policy of a registered expectation.
func (n *Node) RecoveryPolicy(actorID, expectationID string) (string, bool) {
	as, ok := n.actors[actorID]
	if !ok {
		return "", false
	}
	e, ok := as.exps[expectationID]
	if !ok {
		return "", false
	}
	return string(e.Recovery), true
}

// Register adds an actor. Actors are registered before Start.
func (n *Node) Register(a Actor) error {
	if err := a.validate(); err != nil {
		return err
	}
	if a.MaxConcurrent == 0 {
		a.MaxConcurrent = 1
	}
	n.intake.Lock()
	defer n.intake.Unlock()
	if lifecycle(n.state.Load()) != stateNew {
		return fmt.Errorf("%w: register actor %q before Start", ErrInvalid, a.ID)
	}
	if _, dup := n.actors[a.ID]; dup {
		return fmt.Errorf("%w: actor %q registered twice", ErrInvalid, a.ID)
	}
	a.Expectations = slices.Clone(a.Expectations) // the defaults below never touch the caller's
	as := &actorState{actor: a, exps: map[string]*Expectation{}}
	for i := range a.Expectations {
		e := &a.Expectations[i]
		if e.Recovery == "" {
			e.Recovery = RecoveryFail
		}
		if e.MaxAttempts == 0 {
			e.MaxAttempts = 3
		}
		if e.Retry.Backoff > 0 && e.Retry.MaxBackoff == 0 {
			e.Retry.MaxBackoff = time.Hour
		}
		if e.Retry.Backoff > 0 && n.cfg.Poll.Disabled {
			return fmt.Errorf("%w: actor %q: expectation %q retries, which needs the trigger-request poller "+
				"(a retried episode is available to any polling node); this node's Poll.Disabled is set", ErrInvalid, a.ID, e.ID)
		}
		as.exps[e.ID] = e
	}
	for _, id := range slices.Sorted(maps.Keys(as.exps)) {
		as.runnable = append(as.runnable, episodes.Runnable{ActorID: a.ID, ExpectationID: id})
	}
	as.exec = newExecutor(n, a.MaxConcurrent)
	n.actors[a.ID] = as
	return nil
}

// Start checks the schema, announces the node (its membership row) and
// records its definitions, then begins renewing leases, polling and firing
// schedules. The node runs until Stop; ctx bounds Start itself: each of
// those database calls runs under ctx and is retried until it succeeds or
// ctx ends (WriteTimeout bounds them all when ctx has no deadline). If one
// has not succeeded by then, Start returns an error that names it, with
// its last error, and the node is not started (Start may be called again).
// A schema that is missing or older than this binary's fails at once
// (ErrSchema).
func (n *Node) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.intake.Lock()
	defer n.intake.Unlock()
	if lifecycle(n.state.Load()) != stateNew {
		return fmt.Errorf("%w: Start called twice", ErrInvalid)
	}
	if err := n.reachDatabase(ctx); err != nil {
		return fmt.Errorf("runner: start %s: %w", n.id, err)
	}
	n.base, n.cancelBase = context.WithCancel(context.Background())
	life, cancelLife := context.WithCancel(n.base)
	intake, cancelIntake := context.WithCancel(n.base)
	n.cancelLife, n.cancelIntake = cancelLife, cancelIntake
	n.state.Store(int32(stateRunning))
	n.lifeBg.Go(func() { _ = n.hb.Run(life) })
	n.lifeBg.Go(func() { n.refreshMembership(life) })
	n.lifeBg.Go(func() { n.watchCancels(life) })
	for _, as := range n.actors {
		for _, e := range as.exps {
			if s, ok := e.Trigger.(Schedule); ok {
				n.intakeBg.Go(func() { n.schedule(intake, as, e, s) })
			}
		}
	}
	if !n.cfg.Poll.Disabled {
		n.intakeBg.Go(func() { n.poll(intake) })
		if w := n.cfg.TriggerWaker; w != nil {
			n.intakeBg.Go(func() { _ = w.WaitTriggerRequests(intake, n.pollWake) })
		}
	}
	return nil
}

// Outcome is what one trigger did on this node.
type Outcome struct {
	ExpectationID string
	// EpisodeID is the episode this trigger created or, when Duplicate,
	// the live episode that holds its dedupe key (0 only if that one was
	// archived before it could be read).
	EpisodeID int64
	// Duplicate: another node (or an earlier trigger) already created the
	// live episode for this dedupe key; nothing was done here.
	Duplicate bool
	// Deferred: the episode was created available to the cluster, with a
	// trigger request that any full node with a free slot for the actor
	// takes, instead of running here: the actor is trigger_only here, the
	// trigger asked for a delay (FireOptions.Delay), or the actor had no
	// free slot on this node (episode.overflow).
	Deferred bool
}

// FireOptions tunes Fire.
type FireOptions struct {
	// EventID identifies the event for deduplication. When empty, the
	// SHA-256 of the payload's canonical JSON does.
	EventID string
	// Env, when set, creates the episode in that env instead of the
	// node's (an operator seeding another env's work: "" is the unset
	// env). The key, the claim and the episode's source_env follow it.
	Env *string
	// Delay, when positive, creates the episode available to the cluster
	// and due Delay after its creation on the database clock (the trigger
	// request's run_after): no node runs it earlier, whatever the nodes'
	// clocks say; then whichever full node has a free slot for the actor
	// does. Millisecond precision. The dedupe key is taken at once, so the
	// same trigger fired again while the episode waits is a duplicate.
	Delay time.Duration
}

// Fire delivers event to actorID: every expectation of the actor triggered
// by that event name gets one episode per distinct event across the cluster.
// Every node may (and should) call Fire for the same event.
func (n *Node) Fire(ctx context.Context, actorID, event string, payload any, opts FireOptions) ([]Outcome, error) {
	n.intake.RLock()
	defer n.intake.RUnlock()
	as, fired, err := n.eventEpisodes(ctx, n.store, actorID, event, payload, opts)
	if err != nil {
		return nil, err
	}
	var out []Outcome
	rehashed := false
	for i := 0; i < len(fired); i++ {
		f := fired[i]
		if f.existing != 0 {
			out = append(out, n.duplicateOfV1(ctx, f))
			continue
		}
		o, err := n.trigger(ctx, as, as.exps[f.ne.ExpectationID], f.ne, n.cfg.EventJitter, opts.Delay)
		if err != nil && n.forgetKeyVersion(err) && !rehashed {
			// The database moved to a newer key version since this node
			// read it, and refused the key (nothing was written): hash
			// this and the remaining expectations' episodes again.
			rehashed = true
			if _, fired, err = n.eventEpisodes(ctx, n.store, actorID, event, payload, opts); err != nil {
				return out, err
			}
			i--
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, o)
	}
	return out, nil
}

// keyedEpisode is the episode an event creates for one expectation, keyed
// under the database's dedupe key version; or, when existing is set, the
// live episode the same trigger created under its version 1 key before the
// database moved to version 2 (keyFor), which it duplicates.
type keyedEpisode struct {
	ne       episodes.New
	existing int64
}

// duplicateOfV1 is the outcome of f, a duplicate of the episode its trigger
// created under its version 1 key.
func (n *Node) duplicateOfV1(ctx context.Context, f keyedEpisode) Outcome {
	n.emit(ctx, n.aboutNew(f.ne, f.existing, telemetry.Event{Name: EventDuplicate}))
	return Outcome{ExpectationID: f.ne.ExpectationID, EpisodeID: f.existing, Duplicate: true}
}

// eventEpisodes validates an event for actorID and returns the episode each
// of its expectations triggered by event gets, in the actor's order of
// expectations: the dedupe key (folded into the env, under the database's
// key version: keyFor, which reads through finder), trigger ref and
// payload Fire and FireTx create. Callers hold intake.
func (n *Node) eventEpisodes(ctx context.Context, finder any, actorID, event string, payload any, opts FireOptions) (*actorState, []keyedEpisode, error) {
	as, env, exps, err := n.eventTarget(actorID, event, opts)
	if err != nil {
		return nil, nil, err
	}
	raw, err := canonicalPayload(fmt.Sprintf("fire %s/%s", actorID, event), payload)
	if err != nil {
		return nil, nil, err
	}
	keys := make([]dedupe.EventKeys, len(exps))
	refs := make([]json.RawMessage, len(exps))
	for i, e := range exps {
		if keys[i], refs[i], err = eventKeys(as, e, env, event, opts.EventID, raw); err != nil {
			return nil, nil, err
		}
	}
	out := make([]keyedEpisode, 0, len(exps))
	for i, e := range exps {
		key, version, existing, err := n.keyFor(ctx, finder, keys[i])
		if err != nil {
			return nil, nil, err
		}
		ne := n.newEpisode(as, e, env, key, refs[i], raw)
		ne.KeyVersion = version
		out = append(out, keyedEpisode{ne: ne, existing: existing})
	}
	return as, out, nil
}

// eventTarget validates a trigger of event for actorID under opts and
// returns the actor, the env its episodes belong to, and the expectations
// the event triggers (at least one). Callers hold intake.
func (n *Node) eventTarget(actorID, event string, opts FireOptions) (*actorState, string, []*Expectation, error) {
	as, err := n.lookupActor(actorID)
	if err != nil {
		return nil, "", nil, err
	}
	if err := checkEventName(event); err != nil {
		return nil, "", nil, invalid("fire "+actorID, err)
	}
	env := n.cfg.Env
	if opts.Env != nil {
		if err := validScope("", *opts.Env); err != nil {
			return nil, "", nil, err
		}
		env = *opts.Env
	}
	if opts.Delay < 0 {
		return nil, "", nil, fmt.Errorf("%w: fire %s/%s: delay %v is negative", ErrInvalid, actorID, event, opts.Delay)
	}
	var exps []*Expectation
	for _, e := range as.actor.Expectations {
		if t, ok := e.Trigger.(Event); ok && t.Name == event {
			exps = append(exps, as.exps[e.ID])
		}
	}
	if len(exps) == 0 {
		return nil, "", nil, fmt.Errorf("%w: actor %q has no expectation for event %q", ErrUnknown, actorID, event)
	}
	return as, env, exps, nil
}

// newEpisode is the episode one trigger of e creates in env.
func (n *Node) newEpisode(as *actorState, e *Expectation, env, key string, ref, payload json.RawMessage) episodes.New {
	budget, _ := json.Marshal(map[string]any{"max_wall_ms": e.Budget.MaxWall.Milliseconds(), "max_steps": e.Budget.MaxSteps})
	return episodes.New{
		ActorID: as.actor.ID, ExpectationID: e.ID, TriggerType: e.Trigger.triggerType(), TriggerRef: ref,
		DedupeKey: key, MaxAttempts: e.MaxAttempts, Budget: budget,
		SourceStack: n.cfg.StackSlug, SourceEnv: env, Payload: payload,
	}
}

// Tick fires the schedule of actorID's expectation for the tick planned at
// at: one episode per schedule window across the cluster. The node's
// scheduler calls it; operators may call it to backfill a window.
func (n *Node) Tick(ctx context.Context, actorID, expectationID string, at time.Time) (Outcome, error) {
	n.intake.RLock()
	defer n.intake.RUnlock()
	as, e, err := n.lookup(actorID, expectationID)
	if err != nil {
		return Outcome{}, err
	}
	s, ok := e.Trigger.(Schedule)
	if !ok {
		return Outcome{}, fmt.Errorf("%w: %s/%s is not scheduled", ErrUnknown, actorID, expectationID)
	}
	window := dedupe.CronWindow(at)
	if s.Every > 0 {
		window = dedupe.IntervalWindow(at, s.Every)
	}
	key, err := dedupe.ScheduleKey(actorID, expectationID, window)
	if err == nil {
		key, err = dedupe.InEnv(n.cfg.Env, key)
	}
	if err != nil {
		return Outcome{}, invalid(fmt.Sprintf("tick %s/%s", actorID, expectationID), err)
	}
	ref, _ := json.Marshal(map[string]time.Time{"window": window})
	return n.trigger(ctx, as, e, n.newEpisode(as, e, n.cfg.Env, key, ref, nil), n.cfg.Jitter, 0)
}

// RunManual creates and runs a new episode of actorID's expectation, whatever
// its trigger, for an operator. It is never deduplicated.
func (n *Node) RunManual(ctx context.Context, actorID, expectationID string, payload any) (Outcome, error) {
	n.intake.RLock()
	defer n.intake.RUnlock()
	as, e, err := n.lookup(actorID, expectationID)
	if err != nil {
		return Outcome{}, err
	}
	raw, err := canonicalPayload(fmt.Sprintf("run %s/%s", actorID, expectationID), payload)
	if err != nil {
		return Outcome{}, err
	}
	ref, _ := json.Marshal(map[string]string{"manual": n.id})
	return n.trigger(ctx, as, e, n.newEpisode(as, e, n.cfg.Env, "", ref, raw), 0, 0)
}

// Stop drains the node (see Drain) and returns ctx's error if running steps
// had to be cancelled at its deadline.
func (n *Node) Stop(ctx context.Context) error {
	sum, err := n.Drain(ctx)
	if err == nil && sum.Forced > 0 {
		err = ctx.Err()
	}
	return err
}

func (n *Node) stopping() bool { return lifecycle(n.state.Load()) != stateRunning }

func (n *Node) lookupActor(actorID string) (*actorState, error) {
	if n.stopping() {
		return nil, ErrStopped
	}
	as, ok := n.actors[actorID]
	if !ok {
		return nil, fmt.Errorf("%w: actor %q", ErrUnknown, actorID)
	}
	return as, nil
}

func (n *Node) lookup(actorID, expectationID string) (*actorState, *Expectation, error) {
	as, err := n.lookupActor(actorID)
	if err != nil {
		return nil, nil, err
	}
	e, ok := as.exps[expectationID]
	if !ok {
		return nil, nil, fmt.Errorf("%w: expectation %s/%s", ErrUnknown, actorID, expectationID)
	}
	return as, e, nil
}

// trigger creates ne, the episode of one trigger of e, and, if this
// node's insert won, claims it and runs it in a slot it reserved (or
// queues it on the actor's executor); with no free slot here, in
// trigger_only, or delayed, it writes the episode available instead.
// Callers hold intake.
func (n *Node) trigger(ctx context.Context, as *actorState, e *Expectation, ne episodes.New, jitter, delay time.Duration) (Outcome, error) {
	key := ne.DedupeKey
	if ne.TraceParent == "" {
		ne.TraceParent = n.inject(ctx)
	}
	reserved := false
	mode := n.ActorMode(as.actor.ID)
	if mode == ModeDisabled {
		return Outcome{}, fmt.Errorf("%w: actor %q on node %s", ErrDisabled, as.actor.ID, n.id)
	}
	if err := wait(ctx, jitter); err != nil {
		return Outcome{}, err
	}
	switch {
	case mode == ModeTriggerOnly:
		return n.deferTrigger(ctx, ne, delay)
	case delay > 0:
		return n.deferTrigger(ctx, ne, delay) // due later, on whichever node has a slot then
	case n.cfg.Poll.Disabled:
		// No poller here to take the work back from the cluster: queue it
		// in this node's slot queue, under its claim (the seed's behaviour).
	case !as.exec.reserve():
		// No free slot here: the episode is created available, and the
		// nodes that have a slot take it (woken by NOTIFY; their poll
		// interval is the fallback), this one included once a slot frees.
		n.emit(ctx, n.aboutNew(ne, 0, telemetry.Event{Name: EventOverflow}))
		return n.deferTrigger(ctx, ne, 0)
	default:
		reserved = true
	}
	defer func() {
		if reserved {
			as.exec.unreserve()
		}
	}()
	// With a reserved slot the creating statement starts the episode too:
	// two commits for a run that starts at once (create, finish).
	ne.Owner, ne.Lease, ne.Start = n.id, n.gate.Lease(), reserved
	res, err := n.store.CreateEpisode(ctx, ne)
	if err != nil {
		return Outcome{}, fmt.Errorf("create episode %s/%s: %w", as.actor.ID, e.ID, err)
	}
	if !res.Created {
		n.emit(ctx, n.aboutNew(ne, res.ExistingID, telemetry.Event{Name: EventDuplicate}))
		n.log.DebugContext(ctx, "leasehold: dedupe skip", slog.String("key", key), slog.Int64("episode", res.ExistingID))
		return Outcome{ExpectationID: e.ID, EpisodeID: res.ExistingID, Duplicate: true}, nil
	}
	ep, claim := res.Episode, res.Claim
	n.emit(ctx, n.aboutNew(ne, ep.ID, telemetry.Event{Name: EventCreated, Key: ep.ClaimKey(), Attempt: 1}))
	if claim.Fence == 0 {
		// The key's claim is held live elsewhere (a run of an archived
		// episode with the same key): that holder decides; recovery takes
		// this episode once the claim expires or is released.
		n.emit(ctx, n.aboutNew(ne, ep.ID, telemetry.Event{Name: EventBusy, Key: ep.ClaimKey()}))
		return Outcome{ExpectationID: e.ID, EpisodeID: ep.ID}, nil
	}
	runCtx, unhold := n.hb.Hold(n.base, claim)
	j := &job{ep: ep, exp: e, claim: claim, ctx: runCtx, unhold: unhold, started: res.Started}
	if reserved {
		reserved = false
		as.exec.startReserved(j)
	} else {
		as.exec.submit(j)
	}
	return Outcome{ExpectationID: e.ID, EpisodeID: ep.ID}, nil
}

// wait sleeps a random duration in [0, max], or until ctx is done.
func wait(ctx context.Context, max time.Duration) error {
	if max <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(rand.Int64N(int64(max) + 1)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (n *Node) emit(ctx context.Context, e telemetry.Event) { n.obs.Observe(ctx, e) }
