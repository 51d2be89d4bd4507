// Package workflows runs multi-step workflows whose steps are episodes.
//
// A Definition lists steps (an actor's expectation each) with dependencies:
// steps without After start with the instance (fan-out), a step starts when
// every step it names is done or skipped (fan-in). Instances are keyed by
// workflow, subject and env; at most one runs per key.
//
// # Which statement decides, and which clock
//
//	Start            CreateWorkflowInstance (filtered unique index on the running key),
//	                 InsertWorkflowStep, the first steps' CreateDeferredEpisode: one transaction
//	episode ends     FinishEpisode (fenced on the run's claim), then under
//	                 LockWorkflowInstance (FOR UPDATE / UPDLOCK, HOLDLOCK):
//	                 EndWorkflowStep or StartWorkflowStep (a retry), the next
//	                 steps' CreateDeferredEpisode + StartWorkflowStep,
//	                 FinishWorkflowInstance: the same transaction
//	Reconcile        ListStalledWorkflowSteps, then the same transaction per step
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
// # Events
//
// Subscribe receives episode.completed / failed / canceled for every episode
// the node finishes and workflow.completed / failed for every instance its
// transactions end, after commit.
//
// # Wiring
//
//	engine, _ := workflows.New(store, node, logger) // before node.Start: it becomes the node's Finisher
//	engine.Register(definition)                      // on every node that runs or reconciles it
//	node.Start(ctx)
//	engine.Start(ctx, "report", "customer-42", input, workflows.StartOptions{})
//	engine.Reconcile(ctx, workflows.ReconcileOptions{}) // after each recovery sweep
package workflows
