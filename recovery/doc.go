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
//	  (the attempt it restarts is     out (released, fence + 1), the episode queued
//	  within max_attempts)            as its next attempt (attempts + 1), or as the
//	                                  same attempt when the grant was given back
//	                                  (below); phase recovering, no owner; its
//	                                  trigger request pending at once: AVAILABLE
//	                                  work, which any full node with a free slot for
//	                                  its actor takes (package runner), never past
//	                                  MaxConcurrent; a cancel requested meanwhile
//	                                  ends it canceled
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
// node, the operator CLI). Of two sweepers that listed the same orphan only
// the first requeues it, though the claim it leaves behind is released, not
// live: the second finds the first's open trigger request once the first
// committed, and while the first holds the claim row it waits for it (SQL
// Server) or, on Postgres, gives up at once (RequeueOrphanLock locks the
// row NOWAIT before RequeueOrphan's snapshot is taken; the orphan counts
// as skipped and the next sweep looks again, so sweepers never queue
// behind each other on the same orphans); the episode's attempts, compared
// with the count the sweep listed, catch the claim-less orphans, which
// have no claim row to lock.
//
// A sweep decides every orphan first and then requeues its restarts
// together: a Store that is a BatchRequeuer (SQLite, whose writes all
// queue for one lock) runs them in a few shared write transactions, each
// orphan still on its own conditions and with its own outcome; any other
// gets RequeueOrphan per orphan.
//
// # What an attempt is
//
// An attempt is a run that counts against max_attempts: Attempt() is the
// current run's number, attempts how many runs counted before it. A run
// counts when it ended because of the episode or of its node: the strategy
// failed (the runner's retry or finish), the budget ran out, or the node
// vanished without a word (crash, hang, SIGKILL: its grant expired while
// claimed after it started the episode). A run whose holder gave its grant
// back itself, fenced, does not count, nor does a grant that never started
// the episode (StartEpisode, which a run passes before its strategy is
// called, never landed: the episode is still queued); the restart is the
// same attempt again:
//
//	the claim when recovery requeues          the restart          given_back
//	released by its holder: a drain's          the same attempt     true
//	  hand-over, a journal write or start
//	  that failed, a lease past its local
//	  deadline (the host or the database was
//	  too slow; runner.Node gives it back
//	  once the run has stopped), a dispatch
//	  with no slot
//	any, while the episode is still queued     the same attempt     true
//	  (no grant started it since it was
//	  last queued: no strategy was called)
//	expired while claimed (crash, hang, a      the next attempt     false
//	  give-back that failed too)
//	done or failed by another grant; none      the next attempt     false
//
// So a loaded host whose runs keep losing their lease only slows an
// episode down; it does not walk it to failed. A poison episode that
// crashes its node expires its grant every time and runs out of attempts
// as before. One whose runs keep giving their grant back (a journal write
// that always fails) runs out too: a hand-back is free only while the key's
// grants, which the claim counts (its attempt column), are at most attempts
// + max_attempts, so at most max_attempts runs go uncounted and the
// episode fails after at most twice max_attempts runs. The listing reports
// the rule's answer (episodes.Orphan.GivenBack), so a sweep knows which
// attempt a restart would start; RequeueOrphan decides it again on the
// locked claim row.
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
