// Package recovery finds orphaned episodes — work whose node crashed, was
// killed, or stopped without finishing — and takes each over exactly once,
// cluster-wide, on the database clock.
//
// # What is an orphan, and who decides
//
// ListOrphanedEpisodes (sql/queries/<dialect>/recovery.sql) lists, in the
// sweeping node's stack and env:
//
//	running, claim expired or released                 -> orphan
//	running, no claim at all, last sign of life older  -> orphan
//	  than stale_after (last_step_at, else started_at)
//	queued, claim expired or released                  -> orphan (its node is gone)
//	running or queued, claim done or failed            -> orphan: another grant of the key
//	  (no open trigger request)                           finished the claim, not the episode
//	queued, claim live                                 -> waiting for a slot; never touched
//	any, with an open trigger request                  -> available work (deferred, overflowing,
//	                                                      or a retry waiting out its backoff):
//	                                                      the pollers'; never touched
//	running, claim live (however old its last step)    -> alive; never touched
//
// Every node lists the same orphans, shuffles them (so the wins spread over
// the cluster) and takes each over with one statement, which locks the
// claim row, then the episode row, and re-checks the orphan condition on
// their latest versions (an episode finished meanwhile is never reopened;
// one that journaled a step since it was listed has extended its lease and
// is skipped). Which statement depends on what happens next:
//
//	policy restart, attempts left  -> RequeueOrphan: the orphan's grant is fenced
//	  (the next attempt is within     out (released, fence + 1), the episode queued
//	  max_attempts)                   as its next attempt (attempts + 1, phase
//	                                  recovering, no owner) and its trigger request
//	                                  pending at once: AVAILABLE work, which any full
//	                                  node with a free slot for its actor takes
//	                                  (package runner), never past MaxConcurrent; a
//	                                  cancel requested meanwhile ends it canceled
//	policy fail                    -> ClaimForRecovery (grants the sweeper the claim,
//	                                  fence + 1), then FinishEpisode failed,
//	                                  error_class orphaned, with the reason
//	attempt > max_attempts         -> ClaimForRecovery, then FinishEpisode failed,
//	  (the attempt this recovery      error_class recovery_exhausted
//	  would start: the first run is
//	  attempt 1, each restart the
//	  next; episodes.Episode.Attempt)
//
// The sweeper never runs what it restarts: recovered work flows to free
// capacity across the cluster like any available work, so a burst of
// orphans found by the first node to sweep is still spread over every node
// (1,000 orphans, three nodes sweeping 300 ms apart: each ran 31-35%). A
// restart needs no code for the actor on the sweeping node (a trigger_only
// node, the operator CLI). RequeueOrphan also compares the episode's
// attempts with the count the sweep listed, so of two sweepers that listed
// the same orphan only the first requeues it: the claim it leaves behind is
// released, not live, and the second would otherwise take it again.
//
// The policy is resolved before anything is claimed: by the caller's
// resolver, else the compiled actor registry of the node, else
// leasehold_agent_definitions, which every node fills with the policy and
// max attempts of each expectation it registers when it starts. When none
// knows (SourceUnknown), the orphan is not claimed: it is skipped, with the
// reason, for a node that runs the actor, so a rolling deploy that adds an
// actor never fails that actor's restartable work on the old nodes.
// Exhausted work is failed whatever the policy.
//
// Both statements are takeovers: the sweep's context carries claims.TxBound
// of the node's lease, so a holder frozen inside a transaction on the claim
// or episode row makes them fail fast (retryable) rather than hang the
// sweep.
//
// Every terminal write uses the sweeper's claim token (FinishEpisode) and is
// fenced like any run's: the old owner, if it is in fact alive, can no
// longer write.
//
// A Sweeper runs Sweep periodically after an initial delay; Sweep with
// DryRun reports what it would do and why without claiming anything.
package recovery
