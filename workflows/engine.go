package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/runner"
)

// errConflict: a conditional step update matched nothing under the
// instance lock, which only a definition changed under a running instance
// can cause; the advancing transaction is rolled back.
var errConflict = errors.New("workflows: step state changed under the instance lock")

// ErrUnknown: no workflow with that ID is registered on this engine.
var ErrUnknown = errors.New("workflows: unknown workflow")

// Event kinds delivered to subscribers.
const (
	EpisodeCompleted  = "episode.completed"
	EpisodeFailed     = "episode.failed"
	EpisodeCanceled   = "episode.canceled"
	WorkflowCompleted = "workflow.completed"
	WorkflowFailed    = "workflow.failed"
)

// Event is what subscribers receive, after the transaction that caused it
// committed. Episode events come for every episode this node finishes;
// workflow events for every instance this node's transaction ended.
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

	mu   sync.RWMutex
	defs map[string]*Definition

	subsMu sync.Mutex
	subs   map[int]func(Event)
	next   int

	failAfterFinish func() error // tests: fail the advancing transaction
}

// New returns an Engine for node over store and makes it node's Finisher;
// call it before node.Start. logger may be nil.
func New(store Store, node *runner.Node, logger *slog.Logger) (*Engine, error) {
	if store == nil || node == nil {
		return nil, fmt.Errorf("%w: workflows.New needs a store and a node", ErrInvalid)
	}
	if logger == nil {
		logger = slog.Default()
	}
	e := &Engine{store: store, node: node, log: logger, defs: map[string]*Definition{}, subs: map[int]func(Event){}}
	if err := node.SetFinisher(e); err != nil {
		return nil, err
	}
	return e, nil
}

// Register adds a workflow definition. Every node that runs a workflow's
// steps or may reconcile it registers the same definition.
func (e *Engine) Register(d Definition) error {
	d.Steps = append([]Step(nil), d.Steps...)
	if err := d.validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.defs[d.ID]; dup {
		return fmt.Errorf("%w: workflow %q registered twice", ErrInvalid, d.ID)
	}
	e.defs[d.ID] = &d
	return nil
}

func (e *Engine) def(id string) (*Definition, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	d, ok := e.defs[id]
	return d, ok
}

// Subscribe calls fn with every event until the returned func is called.
// fn runs on the goroutine that committed the change and must return
// quickly.
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
// one transaction.
func (e *Engine) Start(ctx context.Context, workflowID, subject string, payload any, opts StartOptions) (inst Instance, created bool, err error) {
	d, ok := e.def(workflowID)
	if !ok {
		return Instance{}, false, fmt.Errorf("%w: %q", ErrUnknown, workflowID)
	}
	if subject == "" {
		return Instance{}, false, fmt.Errorf("%w: start %q: empty subject", ErrInvalid, workflowID)
	}
	env := e.node.Env()
	if opts.Env != nil {
		env = *opts.Env
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return Instance{}, false, fmt.Errorf("%w: start %q: payload: %v", ErrInvalid, workflowID, err)
	}
	var evs []Event
	err = e.store.InTx(ctx, func(tx Tx) error {
		evs, created = nil, false
		id, ok, err := tx.CreateWorkflowInstance(ctx, NewInstance{
			WorkflowID: workflowID, Subject: subject, Env: env, SourceStack: e.node.Stack(), Payload: raw,
		})
		if err != nil {
			return err
		}
		if !ok {
			inst, err = tx.GetRunningWorkflowInstance(ctx, workflowID, subject, env)
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
		evs, err = e.startReady(ctx, tx, &inst, d)
		return err
	})
	if err != nil {
		return Instance{}, false, fmt.Errorf("start workflow %q for %q: %w", workflowID, subject, err)
	}
	e.publish(evs...)
	if created {
		e.node.PollNow()
	}
	return inst, created, nil
}

// FinishEpisode implements runner.Finisher: the fenced terminal write of
// ep and, when ep is a step's episode, the step's end and the next steps'
// episodes, in one transaction.
func (e *Engine) FinishEpisode(ctx context.Context, ep episodes.Episode, t claims.Token, f episodes.Finish) error {
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
	if err != nil {
		return err
	}
	e.publish(append([]Event{episodeEvent(ep.ID, f.Status, &step)}, evs...)...)
	e.node.PollNow()
	return nil
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
	d, ok := e.def(inst.WorkflowID)
	if !ok {
		e.log.WarnContext(ctx, "leasehold: workflow not registered on this node; Reconcile on a node that has it advances it",
			slog.String("workflow", inst.WorkflowID), slog.Int64("instance", inst.ID))
		return nil, false, nil
	}
	step, found, err := tx.GetWorkflowStepByEpisode(ctx, episodeID)
	if err != nil || !found || step.Status != StepRunning || step.EpisodeID != episodeID {
		return nil, false, err
	}
	sd, ok := d.step(step.StepID)
	if !ok {
		return nil, false, fmt.Errorf("%w: workflow %q has no step %q any more", errConflict, d.ID, step.StepID)
	}
	evs, err = e.move(ctx, tx, &inst, d, sd, step, episodeID, status)
	return evs, err == nil, err
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
		if err := e.startStep(ctx, tx, inst, sd, step); err != nil {
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
	return e.startReady(ctx, tx, inst, d)
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
func (e *Engine) startReady(ctx context.Context, tx Tx, inst *Instance, d *Definition) ([]Event, error) {
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
				if err := e.startStep(ctx, tx, inst, sd, st); err != nil {
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
func (e *Engine) startStep(ctx context.Context, tx Tx, inst *Instance, sd *Step, st StepState) error {
	attempt := st.Attempts + 1
	ref, _ := json.Marshal(map[string]any{"workflow": inst.WorkflowID, "instance": inst.ID, "step": sd.ID, "attempt": attempt})
	res, err := tx.CreateDeferredEpisode(ctx, episodes.Deferred{
		New: episodes.New{
			ActorID: sd.Actor, ExpectationID: sd.Expectation, TriggerType: episodes.TriggerWorkflow, TriggerRef: ref,
			DedupeKey:   fmt.Sprintf("workflow:%d:%s:%d", inst.ID, sd.ID, attempt),
			MaxAttempts: 3, SourceStack: inst.SourceStack, SourceEnv: inst.Env, Payload: inst.Payload,
		},
		SourceNode: e.node.ID(),
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
	Skipped  int // workflow not registered here, or advanced meanwhile
}

// Reconcile finds running steps of running instances whose episode already
// ended (done, failed, partially failed or canceled) and advances each
// through the same transaction an ending episode runs. Run it after the
// recovery sweep, on nodes that register the workflows.
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
	for _, s := range stalled {
		var (
			evs      []Event
			advanced bool
		)
		err := e.store.InTx(ctx, func(tx Tx) (err error) {
			evs, advanced, err = e.advance(ctx, tx, s.InstanceID, s.EpisodeID, s.EpisodeStatus)
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("reconcile instance %d step %q: %w", s.InstanceID, s.StepID, err)
		}
		if !advanced {
			rep.Skipped++
			continue
		}
		rep.Advanced++
		e.publish(evs...)
	}
	if rep.Advanced > 0 {
		e.node.PollNow()
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
