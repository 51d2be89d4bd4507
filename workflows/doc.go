// Package workflows runs multi-step workflows whose steps are episodes.
//
// A Definition lists steps (an actor's expectation each) with dependencies:
// steps without After start with the instance (fan-out), a step starts when
// every step it names is done or skipped (fan-in). Instances are keyed by
// workflow, subject and env; at most one runs per key.
//
// # Which statement decides, and which clock
//
//	node Start       PutWorkflowDefinition of every registered definition (insert once)
//	Start            CreateWorkflowInstance (filtered unique index on the running key)
//	                 with the definition's version, InsertWorkflowStep, the first
//	                 steps' CreateDeferredEpisode: one transaction
//	                 (with PutWorkflowDefinition until one committed)
//	episode ends     FinishEpisode (fenced on the run's claim), then under
//	                 LockWorkflowInstance (FOR UPDATE / UPDLOCK, HOLDLOCK):
//	                 EndWorkflowStep or StartWorkflowStep (a retry), the next
//	                 steps' CreateDeferredEpisode + StartWorkflowStep,
//	                 FinishWorkflowInstance: the same transaction, following the
//	                 instance's definition (GetWorkflowDefinition, see Versions)
//	Reconcile        ListStalledWorkflowSteps, then the same transaction per step
//	Cancel           LockWorkflowInstance, SkipPendingWorkflowSteps,
//	                 FinishWorkflowInstance (canceled): one transaction
//	Migrate          LockWorkflowInstance, MoveWorkflowStep / DeleteWorkflowStep /
//	                 InsertWorkflowStep, SetWorkflowDefinitionVersion, the ready
//	                 steps' CreateDeferredEpisode: one transaction
//
// All statements are in sql/queries/<dialect>/workflows.sql; every time is
// the database's. Because an episode's terminal write and its workflow's
// advance commit together, no event can be missed between them. Step rows
// change only by conditional updates on the status and episode the writer
// saw (never a whole-map read-modify-write), and the instance lock orders
// two steps ending at once, so a fan-in is never missed and a duplicate end
// (the same episode reported twice, a reconciliation racing the normal path)
// advances nothing.
//
// Each step attempt is a deferred episode (trigger type workflow, dedupe key
// workflow:{instance}:{step}:{attempt}) with a trigger request, so any full
// node of the instance's env runs it through its poller, and a node that dies
// after the commit loses nothing: the request waits for another poller.
//
// # Versions
//
// A definition's version (Definition.Version) is a hash of its canonical
// JSON: the first 16 hex characters of the SHA-256 of its steps sorted by
// ID, each with actor, expectation, After sorted, MaxAttempts and OnError
// with their defaults applied. Every node records each definition it
// registers under its version in leasehold_workflow_definitions when it
// starts (runner.DefinitionRecorder), and Start records it with the
// instance until one such write committed, so the definition of every
// instance is in the database. An instance stores the version it was
// started with (definition_version), and every advance follows that
// definition: the one registered on the advancing node when the versions
// are equal, else the one recorded under the instance's version, read once
// per engine and cached. During a rolling deploy that renamed, added or
// removed a step, a node of the new version therefore advances instances
// of the old one by their own graph, to their end, and starts new ones on
// its own. Running a step needs only its actor and expectation: its
// episode goes to a node that registered that pair (the pollers claim by
// pairs), and one no live node runs waits, shown as waiting
// (membership.ListWaitingForNode), without using up its attempts.
//
// Advancing from the recorded definition is as safe as from the registered
// one. The instance lock still orders every advance of an instance, and
// each advance re-reads the step rows under it; the definition only says
// which step comes after which, and the recorded one cannot change under
// the instance: a version's row is inserted once and never updated
// (PutWorkflowDefinition does nothing when it is there), its key is the
// hash of its content, and a row that does not hash to its version is
// refused, never followed. Two engines advancing one instance by
// different registered definitions both read the same recorded one, so
// they agree.
//
// Instances started before versions were recorded (an empty version),
// and any whose recorded definition is missing or refused, are advanced as
// before: with the definition registered where they advance, and parked
// when it does not match their steps (see below). Migrate moves such an
// instance (or any running one) to a recorded version, with an explicit
// mapping of its steps, under the instance lock.
//
// # Failures
//
// A step's episode that ends failed, partially_failed or canceled is retried
// until the step's MaxAttempts; then OnError decides: Skip (the step counts as
// satisfied for its dependents) or Abort (the instance fails, steps not yet
// started are skipped). An episode ended outside the engine (recovery failing
// an orphan, an operator) leaves its step running: Reconcile, run after the
// recovery sweep, advances it through the normal path; partially failed
// episodes included, so no workflow hangs.
//
// # What Reconcile cannot advance
//
// Each stalled step is advanced in its own transaction, and one that fails
// holds up no other: Reconcile goes on, and reports the step in
// ReconcileReport.Stuck and StuckSteps (with the reason), logs it, and
// counts it in the workflows.reconcile telemetry event. Its error is only
// for the listing failing or ctx ending. Two kinds of stuck step:
//
//   - a transient failure (a lock timeout, a lost connection): the next
//     Reconcile tries again;
//   - a definition that does not match the instance, which only an
//     instance without a recorded definition can meet (see Versions): the
//     instance runs the steps it was started with, and a node whose
//     registered definition renamed, added or removed one (a rolling
//     deploy) cannot advance it.
//     The instance is parked: it stays running, Instance.ParkedReason (and
//     `leasehold workflows ls`, -parked) says why, and parked instances are
//     listed after the others so they never fill Reconcile's Limit. A node
//     with the instance's steps advances it (and clears the reason), or an
//     operator cancels it (Cancel, `leasehold workflows cancel`).
//
// An episode's own finish is never undone by such a definition: when the
// advance cannot apply, the finish is written in a transaction of its own
// and the instance is parked, so the step's work is neither lost nor run
// again.
//
// # Attempts
//
// Two counts, both bounded: a step runs at most its Step.MaxAttempts
// episodes (a retry is a new episode), and each of those episodes gets the
// max attempts of its expectation (runs across recovery restarts), exactly
// as a manual, scheduled or event episode of that expectation does: the
// value the nodes that register it recorded (leasehold_agent_definitions),
// else DefaultEpisodeMaxAttempts, the runner's default.
//
// # Steps learn who they are
//
// A step episode's trigger_ref names its workflow, instance, step and
// attempt; every path that hands a run its episode (creation, the poller's
// dispatch, recovery) carries it, and StepOf(run) decodes it.
//
// # Events
//
// Subscribe receives episode.completed / failed / canceled for every episode
// this node finishes and workflow.completed / failed / canceled for every
// instance this node's transactions end, after commit. It never sees
// another node's events: a workflow started here may end on another node,
// so wait on the database (Instance, List), not on Subscribe, for that.
//
// # Wiring
//
//	engine, _ := workflows.New(store, node, logger) // before node.Start: it becomes the node's Finisher
//	engine.Register(definition)                      // on every node that starts it; node.Start records it
//	node.Start(ctx)
//	engine.Start(ctx, "report", "customer-42", input, workflows.StartOptions{})
//	recovery.NewSweeper(recoverer, recovery.SweeperConfig{  // Reconcile after each recovery sweep
//		AfterSweep: func(ctx context.Context) { engine.Reconcile(ctx, workflows.ReconcileOptions{}) },
//	})
package workflows
