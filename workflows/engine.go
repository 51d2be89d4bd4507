package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// errConflict: the registered definition does not match the instance's
// step rows, or a conditional step update matched nothing under the
// instance lock, which only a definition changed under a running instance
// can cause. The advancing transaction is rolled back and the instance is
// parked (see park); the episode's finish is written on its own.
var errConflict = errors.New("workflows: the registered definition does not match the instance")

// DefaultEpisodeMaxAttempts is a step episode's max attempts when no node
// has recorded its expectation's: runner.Expectation.MaxAttempts's default.
const DefaultEpisodeMaxAttempts = 3

// EventReconcile is the telemetry event of each Reconcile: Counts found,
// advanced, skipped and stuck.
const EventReconcile = "workflows.reconcile"

// ErrUnknown: no workflow with that ID is registered on this engine.
var ErrUnknown = errors.New("workflows: unknown workflow")

// Event kinds delivered to subscribers.
const (
	EpisodeCompleted  = "episode.completed"
	EpisodeFailed     = "episode.failed"
	EpisodeCanceled   = "episode.canceled"
	WorkflowCompleted = "workflow.completed"
	WorkflowFailed    = "workflow.failed"
	WorkflowCanceled  = "workflow.canceled"
)

// Event is what subscribers receive, after the transaction that caused it
// committed. Episode events come for every episode this engine's node
// finishes; workflow events for every instance this engine's transactions
// ended (Start, an episode's end, Reconcile, Cancel). Events of other nodes
// are not delivered: read the database (Instance, List) for those.
type Event struct {
	Kind       string
	EpisodeID  int64  // episode events, and the step's episode for workflow events
	InstanceID int64  // 0 for an episode of no workflow
	WorkflowID string // "" for an episode of no workflow
	StepID     string
	Status     string // the episode's or the instance's status
}

// Engine starts workflow instances and advances them. It is the node's
// Finisher: an episode that belongs to a step is finished, its step ended
// and the next steps' episodes created in one transaction, so there is no
// event to miss; Reconcile drives through the same path any advance that
// did not happen (an episode finished by recovery, a definition that was
// not registered where the episode ended).
type Engine struct {
	store Store
	node  *runner.Node
	log   *slog.Logger
	obs   telemetry.Observer

	mu   sync.RWMutex
	defs map[string]*registered
	// stored caches the definitions read back by version
	// (GetWorkflowDefinition): a version's definition never changes, so
	// an entry is never stale. One entry per version an instance on this
	// node's advances was started with: a handful per workflow.
	stored map[versionKey]*Definition

	subsMu sync.Mutex
	subs   map[int]func(Event)
	next   int

	failAfterFinish   func() error // tests: fail the advancing transaction
	beforeReadRunning func()       // tests: between a start that lost to a running instance and its read

	// afterCallerTx: the events of finishes made in a caller's transaction
	// (Run.CompleteTx), published once the runner read that it committed.
	afterMu       sync.Mutex
	afterCallerTx map[int64][]Event
}

// registered is a definition registered on this engine, with its version
// and canonical JSON.
type registered struct {
	def     *Definition
	version string
	raw     json.RawMessage
	// recorded: a PutWorkflowDefinition of it committed (node Start, or
	// a Start's transaction); until then every Start records it too.
	recorded atomic.Bool
}

type versionKey struct{ workflowID, version string }

// New returns an Engine for node over store and makes it node's Finisher;
// call it before node.Start. logger may be nil.
func New(store Store, node *runner.Node, logger *slog.Logger) (*Engine, error) {
	if store == nil || node == nil {
		return nil, fmt.Errorf("%w: workflows.New needs a store and a node", ErrInvalid)
	}
	if logger == nil {
		logger = slog.Default()
	}
	e := &Engine{store: store, node: node, log: logger, obs: telemetry.Nop{}, defs: map[string]*registered{}, stored: map[versionKey]*Definition{}, subs: map[int]func(Event){}}
	if err := node.SetFinisher(e); err != nil {
		return nil, err
	}
	return e, nil
}

// SetObserver sends the engine's telemetry (EventReconcile) to obs; call it
// before the engine is used. The default discards.
func (e *Engine) SetObserver(obs telemetry.Observer) {
	if obs == nil {
		obs = telemetry.Nop{}
	}
	e.obs = obs
}

// Register adds a workflow definition: Start starts instances of it, and
// they follow it (its Version) to their end, on whichever node advances
// them. Every node that starts a workflow registers it; a node of a later
// deploy may register another version, and advances the instances of the
// earlier one by the definition recorded for them. The node records every
// registered definition when it starts (PutWorkflowDefinition), and Start
// records its own in its transaction until one did, so an instance's
// definition is always in the database. d is copied: changing it
// afterwards changes nothing registered.
func (e *Engine) Register(d Definition) error {
	d = d.clone()
	if err := d.validate(); err != nil {
		return err
	}
	version, raw := d.canonical()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.defs[d.ID]; dup {
		return fmt.Errorf("%w: workflow %q registered twice", ErrInvalid, d.ID)
	}
	e.defs[d.ID] = &registered{def: &d, version: version, raw: raw}
	e.stored[versionKey{d.ID, version}] = &d
	return nil
}

func (e *Engine) def(id string) (*registered, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	r, ok := e.defs[id]
	return r, ok
}

// RecordDefinitions implements runner.DefinitionRecorder: node Start calls
// it, under Start's ctx, to record every registered workflow definition
// under its version (PutWorkflowDefinition, which leaves a recorded version
// as it is).
func (e *Engine) RecordDefinitions(ctx context.Context) error {
	e.mu.RLock()
	regs := make([]*registered, 0, len(e.defs))
	for _, id := range slices.Sorted(maps.Keys(e.defs)) {
		regs = append(regs, e.defs[id])
	}
	e.mu.RUnlock()
	for _, r := range regs {
		if err := e.store.PutWorkflowDefinition(ctx, r.stored(e.node.ID())); err != nil {
			return fmt.Errorf("record workflow %q version %s: %w", r.def.ID, r.version, err)
		}
		r.recorded.Store(true)
	}
	return nil
}

func (r *registered) stored(node string) StoredDefinition {
	return StoredDefinition{WorkflowID: r.def.ID, Version: r.version, Definition: r.raw, RecordedBy: node}
}

// Subscribe calls fn with every event of this engine (see Event: only what
// this node committed, never another node's) until the returned func is
// called. fn runs on the goroutine that committed the change and must
// return quickly.
func (e *Engine) Subscribe(fn func(Event)) (unsubscribe func()) {
	e.subsMu.Lock()
	defer e.subsMu.Unlock()
	id := e.next
	e.next++
	e.subs[id] = fn
	return func() {
		e.subsMu.Lock()
		defer e.subsMu.Unlock()
		delete(e.subs, id)
	}
}

func (e *Engine) publish(evs ...Event) {
	e.subsMu.Lock()
	fns := make([]func(Event), 0, len(e.subs))
	for _, fn := range e.subs {
		fns = append(fns, fn)
	}
	e.subsMu.Unlock()
	for _, ev := range evs {
		for _, fn := range fns {
			fn(ev)
		}
	}
}

// StartOptions tunes Start.
type StartOptions struct {
	// Env starts the instance in another env than the node's ("" is the
	// unset env); its steps' episodes are run by that env's nodes.
	Env *string
}

// Start starts workflowID for subject with payload (JSON-encoded and given
// to every step's episode), unless an instance for the same workflow,
// subject and env is running: then it returns that one with created false.
// The instance, its step rows and the first steps' episodes are written in
// one transaction. A running instance that ends while Start looks at it is
// not an error: Start tries again and starts a new one.
//
// Refused with ErrInvalid before the database, naming the field: an empty
// subject, a subject over 512 characters, an env over 255 or containing
// ':', NUL or invalid UTF-8 in either, and a payload that dedupe.Canonical
// refuses (NUL, invalid UTF-8, not JSON-encodable). The payload is stored
// as its canonical JSON.
//
// Retries: an error from Start may come after its transaction committed
// (the connection dropped during COMMIT). Calling Start again with the same
// arguments is safe while the instance runs: it returns that instance with
// created false. Once that instance has ended, the same call starts a
// second one, as any later Start does: Start does not remember callers. A
// caller that must not run a workflow twice for one subject checks List
// (WorkflowID and Subject) before retrying.
func (e *Engine) Start(ctx context.Context, workflowID, subject string, payload any, opts StartOptions) (inst Instance, created bool, err error) {
	reg, ok := e.def(workflowID)
	if !ok {
		return Instance{}, false, fmt.Errorf("%w: %q", ErrUnknown, workflowID)
	}
	d := reg.def
	record := !reg.recorded.Load()
	env := e.node.Env()
	if opts.Env != nil {
		env = *opts.Env
	}
	raw, err := checkStart(workflowID, subject, env, payload)
	if err != nil {
		return Instance{}, false, err
	}
	var evs []Event
	err = e.store.InTx(ctx, func(tx Tx) error {
		evs, created = nil, false
		if record {
			// Registered after the node started (or on an engine whose
			// node recorded nothing): the instance's definition is
			// recorded with it.
			if err := tx.PutWorkflowDefinition(ctx, reg.stored(e.node.ID())); err != nil {
				return err
			}
		}
		n := NewInstance{WorkflowID: workflowID, Subject: subject, Env: env, SourceStack: e.node.Stack(), Payload: raw,
			DefinitionVersion: reg.version}
		id, err := e.createOrRunning(ctx, tx, n, &inst)
		if err != nil || id == 0 {
			return err
		}
		created = true
		for _, s := range d.Steps {
			if err := tx.InsertWorkflowStep(ctx, id, s.ID, s.MaxAttempts); err != nil {
				return err
			}
		}
		if inst, err = tx.LockWorkflowInstance(ctx, id); err != nil {
			return err
		}
		evs, err = startReady(ctx, tx, &inst, d)
		return err
	})
	if err != nil {
		return Instance{}, false, fmt.Errorf("start workflow %q for %q: %w", workflowID, subject, err)
	}
	if record {
		reg.recorded.Store(true)
	}
	e.publish(evs...)
	if created {
		e.node.PollNow()
	}
	return inst, created, nil
}

// maxStartRaces bounds how often one Start may find a running instance
// that has ended by the time it reads it; each round needs another
// instance to start and end in between.
const maxStartRaces = 100

// createOrRunning creates n's instance and returns its id, or reads the
// running one into inst and returns 0. The instance that made the insert
// lose may end before the read (on Postgres the read is a new statement,
// READ COMMITTED): then the insert is tried again, in the same transaction.
func (e *Engine) createOrRunning(ctx context.Context, tx Tx, n NewInstance, inst *Instance) (int64, error) {
	for range maxStartRaces {
		id, created, err := tx.CreateWorkflowInstance(ctx, n)
		if err != nil || created {
			return id, err
		}
		if e.beforeReadRunning != nil {
			e.beforeReadRunning()
		}
		*inst, err = tx.GetRunningWorkflowInstance(ctx, n.WorkflowID, n.Subject, n.Env)
		if !errors.Is(err, ErrNoInstance) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("the running instance ended under %d starts in a row; try again", maxStartRaces)
}

// checkStart refuses what the database would (or what no node could run)
// and returns the payload's canonical JSON.
func checkStart(workflowID, subject, env string, payload any) (json.RawMessage, error) {
	invalid := func(field string, err error) error {
		return fmt.Errorf("%w: start %q: %s: %v", ErrInvalid, workflowID, field, err)
	}
	if subject == "" {
		return nil, invalid("subject", errors.New("empty"))
	}
	if err := checkText("subject", subject, maxSubjectLen); err != nil {
		return nil, invalid("subject", err)
	}
	if err := checkText("env", env, maxEnvLen); err != nil {
		return nil, invalid("env", err)
	}
	if strings.Contains(env, ":") {
		return nil, invalid("env", fmt.Errorf("env %q contains ':', the dedupe key separator", env))
	}
	raw, err := dedupe.Canonical(payload)
	if err != nil {
		return nil, invalid("payload", err)
	}
	return raw, nil
}

// FinishEpisode implements runner.Finisher: the fenced terminal write of
// ep and, when ep is a step's episode, the step's end and the next steps'
// episodes, in one transaction: the caller's tx when the run finishes
// itself in one (Run.CompleteTx), else one of the engine's own.
func (e *Engine) FinishEpisode(ctx context.Context, tx runner.TxStore, ep episodes.Episode, t claims.Token, f episodes.Finish) error {
	if tx != nil {
		return e.finishInCallerTx(ctx, tx, ep, t, f)
	}
	if ep.TriggerType != episodes.TriggerWorkflow {
		if err := e.store.FinishEpisode(ctx, ep.ID, t, f); err != nil {
			return err
		}
		e.publish(episodeEvent(ep.ID, f.Status, nil))
		return nil
	}
	var (
		evs  []Event
		step StepState
	)
	err := e.store.InTx(ctx, func(tx Tx) error {
		evs = nil
		if err := tx.FinishEpisode(ctx, ep.ID, t, f); err != nil {
			return err
		}
		if e.failAfterFinish != nil {
			if err := e.failAfterFinish(); err != nil {
				return err
			}
		}
		var found bool
		var err error
		if step, found, err = tx.GetWorkflowStepByEpisode(ctx, ep.ID); err != nil || !found {
			return err
		}
		evs, _, err = e.advance(ctx, tx, step.InstanceID, ep.ID, f.Status)
		return err
	})
	if errors.Is(err, errConflict) {
		// A definition change must not undo the episode's finish: write it
		// on its own and park the instance, for Reconcile to report.
		reason := err.Error()
		evs = nil
		err = e.store.InTx(ctx, func(tx Tx) error {
			if err := tx.FinishEpisode(ctx, ep.ID, t, f); err != nil {
				return err
			}
			return park(ctx, tx, step.InstanceID, reason)
		})
		if err == nil {
			e.log.WarnContext(ctx, "leasehold: workflow instance parked", slog.Int64("instance", step.InstanceID),
				slog.String("step", step.StepID), slog.Int64("episode", ep.ID), slog.String("reason", reason))
		}
	}
	if err != nil {
		return err
	}
	e.publish(append([]Event{episodeEvent(ep.ID, f.Status, &step)}, evs...)...)
	e.node.PollNow()
	return nil
}

// finishInCallerTx is FinishEpisode inside the caller's transaction tx,
// which must be a store bound to it that runs the workflow statements too
// (postgres.New(tx), sqlserver's or sqlite's Store.WithTx(tx)). The step's
// end and the workflow's advance are written in tx with the episode's
// finish. A definition change found while advancing parks the instance
// instead, in tx, when the store can roll the advance back to a savepoint
// (Postgres, SQLite);
// on SQL Server, which has none for a caller's transaction, the finish
// fails with the conflict, tx must be rolled back, and the run's own
// finish (return Done from the strategy) parks it as usual.
func (e *Engine) finishInCallerTx(ctx context.Context, tx runner.TxStore, ep episodes.Episode, t claims.Token, f episodes.Finish) error {
	if ep.TriggerType != episodes.TriggerWorkflow {
		if err := tx.FinishEpisode(ctx, ep.ID, t, f); err != nil {
			return err
		}
		e.holdEvents(ep.ID, []Event{episodeEvent(ep.ID, f.Status, nil)})
		return nil
	}
	wtx, ok := tx.(Tx)
	if !ok {
		return fmt.Errorf("%w: a workflow step's episode finished in the caller's transaction needs a store that runs the workflow statements in it, not %T", ErrInvalid, tx)
	}
	if err := wtx.FinishEpisode(ctx, ep.ID, t, f); err != nil {
		return err
	}
	step, found, err := wtx.GetWorkflowStepByEpisode(ctx, ep.ID)
	if err != nil {
		return err
	}
	if !found {
		e.holdEvents(ep.ID, []Event{episodeEvent(ep.ID, f.Status, nil)})
		return nil
	}
	var evs []Event
	advance := func(tx Tx) (err error) {
		evs, _, err = e.advance(ctx, tx, step.InstanceID, ep.ID, f.Status)
		return err
	}
	savepoint, ok := tx.(interface {
		InTx(ctx context.Context, fn func(Tx) error) error
	})
	if ok && supportsSavepoint(tx) {
		err = savepoint.InTx(ctx, advance)
		if errors.Is(err, errConflict) {
			reason := err.Error()
			evs = nil
			if err = park(ctx, wtx, step.InstanceID, reason); err == nil {
				e.log.WarnContext(ctx, "leasehold: workflow instance parked", slog.Int64("instance", step.InstanceID),
					slog.String("step", step.StepID), slog.Int64("episode", ep.ID), slog.String("reason", reason))
			}
		}
	} else {
		err = advance(wtx)
	}
	if err != nil {
		return err
	}
	e.holdEvents(ep.ID, append([]Event{episodeEvent(ep.ID, f.Status, &step)}, evs...))
	return nil
}

// supportsSavepoint: the store begins a nested transaction inside the
// caller's (a savepoint of a pgx.Tx, or of SQLite's *sql.Tx), rather than
// refusing.
func supportsSavepoint(tx runner.TxStore) bool {
	s, ok := tx.(interface{ Savepoints() bool })
	return ok && s.Savepoints()
}

func (e *Engine) holdEvents(episodeID int64, evs []Event) {
	e.afterMu.Lock()
	defer e.afterMu.Unlock()
	if e.afterCallerTx == nil {
		e.afterCallerTx = map[int64][]Event{}
	}
	e.afterCallerTx[episodeID] = evs
}

// AfterTx implements runner.TxFinisher: the events of a finish made in the
// caller's transaction are published once it committed, dropped otherwise.
func (e *Engine) AfterTx(episodeID int64, committed bool) {
	e.afterMu.Lock()
	evs := e.afterCallerTx[episodeID]
	delete(e.afterCallerTx, episodeID)
	e.afterMu.Unlock()
	if committed && len(evs) > 0 {
		e.publish(evs...)
		e.node.PollNow()
	}
}

func episodeEvent(id int64, status episodes.Status, step *StepState) Event {
	ev := Event{Kind: EpisodeFailed, EpisodeID: id, Status: string(status)}
	switch status {
	case episodes.StatusDone:
		ev.Kind = EpisodeCompleted
	case episodes.StatusCanceled:
		ev.Kind = EpisodeCanceled
	}
	if step != nil {
		ev.InstanceID, ev.StepID = step.InstanceID, step.StepID
	}
	return ev
}

// advance applies the end of episodeID (with status) to its step, under the
// instance lock: done ends the step; a failure retries it while attempts
// remain, else skips it or aborts the instance by its OnError; then the
// steps whose dependencies are all done or skipped start, and an instance
// with every step ended is done. A step that no longer runs episodeID was
// advanced already: nothing happens, so a duplicate end never advances
// twice. advanced reports whether the step moved.
func (e *Engine) advance(ctx context.Context, tx Tx, instanceID, episodeID int64, status episodes.Status) (evs []Event, advanced bool, err error) {
	inst, err := tx.LockWorkflowInstance(ctx, instanceID)
	if err != nil {
		return nil, false, err
	}
	d, unrecorded, err := e.definitionOf(ctx, tx, &inst)
	if err != nil {
		return nil, false, err
	}
	if d == nil {
		e.log.WarnContext(ctx, "leasehold: workflow not registered on this node and its instance's version not recorded; "+
			"Reconcile on a node that has it advances it",
			slog.String("workflow", inst.WorkflowID), slog.Int64("instance", inst.ID))
		return nil, false, nil
	}
	step, found, err := tx.GetWorkflowStepByEpisode(ctx, episodeID)
	if err != nil || !found || step.Status != StepRunning || step.EpisodeID != episodeID {
		return nil, false, err
	}
	rows, err := tx.ListWorkflowSteps(ctx, inst.ID)
	if err != nil {
		return nil, false, err
	}
	if err := matches(d, &inst, rows); err != nil {
		if unrecorded != "" {
			err = fmt.Errorf("%w (%s)", err, unrecorded)
		}
		return nil, false, err
	}
	sd, _ := d.step(step.StepID)
	if inst.ParkedReason != "" {
		if _, err := tx.ParkWorkflowInstance(ctx, inst.ID, ""); err != nil {
			return nil, false, err
		}
	}
	evs, err = e.move(ctx, tx, &inst, d, sd, step, episodeID, status)
	return evs, err == nil, err
}

// definitionOf returns the definition inst follows: the one registered
// here when it is the instance's version, else the one recorded under the
// instance's version (GetWorkflowDefinition, cached: it never changes).
// When neither applies (an instance started before versions were recorded,
// version "", or a version whose row is missing or refused) it returns the
// one registered here, which advance checks against the instance's steps
// and parks the instance on a mismatch, as before versions; unrecorded
// then says why the instance's own was not used. nil when nothing is
// known here.
func (e *Engine) definitionOf(ctx context.Context, tx Tx, inst *Instance) (d *Definition, unrecorded string, err error) {
	reg, registered := e.def(inst.WorkflowID)
	if registered && (inst.DefinitionVersion == "" || reg.version == inst.DefinitionVersion) {
		return reg.def, "", nil
	}
	if inst.DefinitionVersion == "" {
		return nil, "", nil
	}
	key := versionKey{inst.WorkflowID, inst.DefinitionVersion}
	e.mu.RLock()
	d = e.stored[key]
	e.mu.RUnlock()
	if d != nil {
		return d, "", nil
	}
	raw, found, err := tx.GetWorkflowDefinition(ctx, inst.WorkflowID, inst.DefinitionVersion)
	if err != nil {
		return nil, "", err
	}
	unrecorded = fmt.Sprintf("its definition version %s is not recorded", inst.DefinitionVersion)
	if found {
		if d, err = parseStored(inst.WorkflowID, inst.DefinitionVersion, raw); err == nil {
			e.mu.Lock()
			e.stored[key] = d
			e.mu.Unlock()
			return d, "", nil
		}
		unrecorded = err.Error()
		e.log.WarnContext(ctx, "leasehold: recorded workflow definition refused", slog.String("workflow", inst.WorkflowID),
			slog.Int64("instance", inst.ID), slog.String("reason", unrecorded))
	}
	if !registered {
		return nil, "", nil
	}
	return reg.def, unrecorded, nil
}

// matches checks that d has exactly the steps inst was started with: an
// instance runs the steps it has rows for, and a definition that renamed,
// added or removed one (a rolling deploy) cannot advance it.
func matches(d *Definition, inst *Instance, rows []StepState) error {
	have := make(map[string]bool, len(rows))
	for _, r := range rows {
		have[r.StepID] = true
	}
	var missing, extra []string
	for _, s := range d.Steps {
		if !have[s.ID] {
			missing = append(missing, s.ID)
		}
		delete(have, s.ID)
	}
	for id := range have {
		extra = append(extra, id)
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	slices.Sort(extra)
	return fmt.Errorf("%w: workflow %q as registered here has steps %q that instance %d was not started with "+
		"and lacks its steps %q (the definition changed while it ran); the instance is parked until a node "+
		"registering its steps advances it, or it is canceled", errConflict, d.ID, missing, inst.ID, extra)
}

// park records reason on the instance, under its lock.
func park(ctx context.Context, tx Tx, instanceID int64, reason string) error {
	if _, err := tx.LockWorkflowInstance(ctx, instanceID); err != nil {
		return err
	}
	_, err := tx.ParkWorkflowInstance(ctx, instanceID, reason)
	return err
}

// move applies the end of the step's current episode, under the lock.
func (e *Engine) move(ctx context.Context, tx Tx, inst *Instance, d *Definition, sd *Step, step StepState,
	episodeID int64, status episodes.Status) ([]Event, error) {
	var evs []Event
	switch {
	case status == episodes.StatusDone:
		if err := e.end(ctx, tx, step, StepDone); err != nil {
			return nil, err
		}
	case inst.Status == InstanceRunning && step.Attempts < step.MaxAttempts:
		if err := startStep(ctx, tx, inst, sd, step); err != nil {
			return nil, err
		}
		return nil, nil
	case sd.OnError == Skip:
		if err := e.end(ctx, tx, step, StepSkipped); err != nil {
			return nil, err
		}
	default:
		if err := e.end(ctx, tx, step, StepFailed); err != nil {
			return nil, err
		}
		if inst.Status != InstanceRunning {
			return nil, nil
		}
		if _, err := tx.SkipPendingWorkflowSteps(ctx, inst.ID); err != nil {
			return nil, err
		}
		detail, _ := json.Marshal(map[string]any{"step": step.StepID, "episode": episodeID, "episode_status": status,
			"attempts": step.Attempts, "reason": "step failed and its on-error rule is abort"})
		if _, err := tx.FinishWorkflowInstance(ctx, inst.ID, InstanceFailed, detail); err != nil {
			return nil, err
		}
		return []Event{{Kind: WorkflowFailed, EpisodeID: episodeID, InstanceID: inst.ID, WorkflowID: inst.WorkflowID,
			StepID: step.StepID, Status: InstanceFailed}}, nil
	}
	if inst.Status != InstanceRunning {
		return evs, nil
	}
	return startReady(ctx, tx, inst, d)
}

func (e *Engine) end(ctx context.Context, tx Tx, step StepState, status string) error {
	ok, err := tx.EndWorkflowStep(ctx, step.InstanceID, step.StepID, step.EpisodeID, status)
	if err == nil && !ok {
		err = errConflict
	}
	return err
}

// startReady starts every pending step whose dependencies are all done or
// skipped, and ends the instance when no step is pending or running.
func startReady(ctx context.Context, tx Tx, inst *Instance, d *Definition) ([]Event, error) {
	rows, err := tx.ListWorkflowSteps(ctx, inst.ID)
	if err != nil {
		return nil, err
	}
	state := make(map[string]StepState, len(rows))
	for _, r := range rows {
		state[r.StepID] = r
	}
	open, failed := false, false
	for i := range d.Steps {
		sd := &d.Steps[i]
		st, ok := state[sd.ID]
		if !ok {
			return nil, fmt.Errorf("%w: instance %d has no row for step %q", errConflict, inst.ID, sd.ID)
		}
		switch st.Status {
		case StepRunning:
			open = true
		case StepFailed:
			failed = true
		case StepPending:
			open = true
			ready := true
			for _, dep := range sd.After {
				if s := state[dep].Status; s != StepDone && s != StepSkipped {
					ready = false
				}
			}
			if ready {
				if err := startStep(ctx, tx, inst, sd, st); err != nil {
					return nil, err
				}
			}
		}
	}
	if open {
		return nil, nil
	}
	status, kind := InstanceDone, WorkflowCompleted
	if failed {
		status, kind = InstanceFailed, WorkflowFailed
	}
	if _, err := tx.FinishWorkflowInstance(ctx, inst.ID, status, nil); err != nil {
		return nil, err
	}
	inst.Status = status
	return []Event{{Kind: kind, InstanceID: inst.ID, WorkflowID: inst.WorkflowID, Status: status}}, nil
}

// startStep creates the step's next attempt as a deferred episode (any
// full node of the instance's env polls it) and points the step at it.
func startStep(ctx context.Context, tx Tx, inst *Instance, sd *Step, st StepState) error {
	attempt := st.Attempts + 1
	ref, _ := json.Marshal(StepRef{WorkflowID: inst.WorkflowID, InstanceID: inst.ID, StepID: sd.ID, Attempt: attempt})
	maxAttempts, found, err := tx.GetAgentMaxAttempts(ctx, sd.Actor, sd.Expectation)
	if err != nil {
		return err
	}
	if !found || maxAttempts <= 0 {
		maxAttempts = DefaultEpisodeMaxAttempts
	}
	res, err := tx.CreateDeferredEpisode(ctx, episodes.Deferred{
		New: episodes.New{
			ActorID: sd.Actor, ExpectationID: sd.Expectation, TriggerType: episodes.TriggerWorkflow, TriggerRef: ref,
			DedupeKey:   fmt.Sprintf("workflow:%d:%s:%d", inst.ID, sd.ID, attempt),
			MaxAttempts: maxAttempts, SourceStack: inst.SourceStack, SourceEnv: inst.Env, Payload: inst.Payload,
		},
	})
	if err != nil {
		return err
	}
	if !res.Created {
		return fmt.Errorf("%w: episode of step %q attempt %d exists already", errConflict, sd.ID, attempt)
	}
	ok, err := tx.StartWorkflowStep(ctx, inst.ID, sd.ID, st.Status, st.EpisodeID, res.Episode.ID)
	if err == nil && !ok {
		err = errConflict
	}
	return err
}

// ReconcileOptions scopes Reconcile; the zero value reconciles the node's
// env and stack.
type ReconcileOptions struct {
	Env   *string
	Stack *string // "" every stack
	Limit int     // default 1000
}

// ReconcileReport is what Reconcile did.
type ReconcileReport struct {
	Found    int // running steps whose episode had ended
	Advanced int // advanced through the normal path
	Skipped  int // definition unknown here (see advance), or advanced meanwhile
	// Stuck counts the steps Reconcile could not advance, StuckSteps says
	// which and why; Reconcile went on with the others.
	Stuck      int
	StuckSteps []StuckStep
}

// StuckStep is a step Reconcile could not advance.
type StuckStep struct {
	InstanceID int64
	StepID     string
	EpisodeID  int64
	// Parked: the registered definition does not match the instance (see
	// Instance.ParkedReason); otherwise the advancing transaction failed
	// (a lock timeout, a lost connection) and the next Reconcile retries.
	Parked bool
	Reason string
}

// Reconcile finds running steps of running instances whose episode already
// ended (done, failed, partially failed or canceled) and advances each
// through the same transaction an ending episode runs, each in its own
// transaction. A step it cannot advance holds up nothing else: a definition
// that does not match the instance parks the instance (its reason stored,
// reported by List and `leasehold workflows ls`), any other failure is
// retried on the next call; both are counted in the report (Stuck,
// StuckSteps), logged and counted in the EventReconcile telemetry event,
// and the error is nil. The error is only for the listing failing or ctx
// ending. Parked instances are listed after the others, so they never crowd
// the Limit. Run it after the recovery sweep (recovery.SweeperConfig's
// AfterSweep), on nodes that register the workflows.
func (e *Engine) Reconcile(ctx context.Context, opts ReconcileOptions) (ReconcileReport, error) {
	q := StalledQuery{Env: e.node.Env(), Stack: e.node.Stack(), Limit: opts.Limit}
	if opts.Env != nil {
		q.Env = *opts.Env
	}
	if opts.Stack != nil {
		q.Stack = *opts.Stack
	}
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	stalled, err := e.store.ListStalledWorkflowSteps(ctx, q)
	if err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile: %w", err)
	}
	rep := ReconcileReport{Found: len(stalled)}
	defer func() {
		e.obs.Observe(ctx, telemetry.Event{Name: EventReconcile, Owner: e.node.ID(), Count: rep.Found, Counts: map[string]int{
			"found": rep.Found, "advanced": rep.Advanced, "skipped": rep.Skipped, "stuck": rep.Stuck,
		}})
		if rep.Advanced > 0 {
			e.node.PollNow()
		}
	}()
	for _, s := range stalled {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("reconcile: %w", err)
		}
		var (
			evs      []Event
			advanced bool
		)
		err := e.store.InTx(ctx, func(tx Tx) (err error) {
			evs, advanced, err = e.advance(ctx, tx, s.InstanceID, s.EpisodeID, s.EpisodeStatus)
			return err
		})
		switch {
		case err == nil && advanced:
			rep.Advanced++
			e.publish(evs...)
			continue
		case err == nil:
			rep.Skipped++
			continue
		case ctx.Err() != nil:
			return rep, fmt.Errorf("reconcile: %w", ctx.Err())
		}
		stuck := StuckStep{InstanceID: s.InstanceID, StepID: s.StepID, EpisodeID: s.EpisodeID, Reason: err.Error()}
		if errors.Is(err, errConflict) {
			stuck.Parked = true
			if perr := e.store.InTx(ctx, func(tx Tx) error { return park(ctx, tx, s.InstanceID, stuck.Reason) }); perr != nil {
				stuck.Reason += "; recording the reason failed: " + perr.Error()
			}
		}
		rep.Stuck++
		rep.StuckSteps = append(rep.StuckSteps, stuck)
		e.log.WarnContext(ctx, "leasehold: reconcile could not advance a workflow step", slog.Int64("instance", s.InstanceID),
			slog.String("step", s.StepID), slog.Int64("episode", s.EpisodeID), slog.Bool("parked", stuck.Parked),
			slog.String("reason", stuck.Reason))
	}
	return rep, nil
}

// Instance returns an instance and its steps.
func (e *Engine) Instance(ctx context.Context, id int64) (Instance, []StepState, error) {
	inst, err := e.store.GetWorkflowInstance(ctx, id)
	if err != nil {
		return Instance{}, nil, err
	}
	steps, err := e.store.ListWorkflowSteps(ctx, id)
	return inst, steps, err
}
