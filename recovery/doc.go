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
// the cluster) and calls ClaimForRecovery for each. That one statement
// locks the claim row, then the episode row, re-checks the orphan condition
// on their latest versions (an episode finished meanwhile is never
// reopened), and grants the
// episode's work claim to the sweeper (fence + 1), marking the episode queued
// for recovery with attempts + 1. Only one node's grant can succeed; an
// episode that journaled a step since it was listed has extended its lease
// and is skipped; an episode already being recovered holds a live lease and
// is skipped the same way. The sweeper now holds the claim, so the restarted
// run is never "busy with itself".
//
// # What happens next
//
//	attempt > max_attempts       -> failed, error_class recovery_exhausted
//	  (the attempt this recovery would start: the first run is attempt 1,
//	  each restart the next; episodes.Episode.Attempt)
//	policy restart               -> queued on the local actor (its max concurrency
//	                                applies; never dropped), holding the claim
//	policy fail                  -> failed, error_class orphaned, with the reason
//
// The policy is resolved before anything is claimed: by the caller's
// resolver, else the compiled actor registry of the node, else
// leasehold_agent_definitions, which every node fills with the policy and
// max attempts of each expectation it registers when it starts. When none
// knows (SourceUnknown), the orphan is not claimed: it is skipped, with the
// reason, for a node that runs the actor, so a rolling deploy that adds an
// actor never fails that actor's restartable work on the old nodes. A
// restart whose actor is not registered on this node releases the claim at
// once so a node that has it can take over; each such round counts as an
// attempt. Exhausted work is failed whatever the policy.
//
// The claim is a takeover: the sweep's context carries claims.TxBound of the
// node's lease, so a holder frozen inside a transaction on the claim or
// episode row makes it fail fast (retryable) rather than hang the sweep.
//
// Every terminal write uses the sweeper's claim token (FinishEpisode) and is
// fenced like any run's: the old owner, if it is in fact alive, can no
// longer write.
//
// A Sweeper runs Sweep periodically after an initial delay; Sweep with
// DryRun reports what it would do and why without claiming anything.
package recovery
