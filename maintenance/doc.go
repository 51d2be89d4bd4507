// Package maintenance keeps a leasehold database small without touching live
// work. One run archives terminal episodes past a retention (freeing their
// dedupe keys), deletes the journals of archived episodes in bounded
// batches, expires stale trigger requests of every env (canceling their
// never-started episodes), deletes spent claim rows past a horizon far
// beyond any lease, deletes the membership rows of nodes that vanished
// without draining, and raises or clears the waiting-for-node findings.
//
// # Which lock decides
//
// Every node runs a Runner; nothing is elected. A run is one transaction
// whose first statement, TryMaintenanceLock, takes the database's
// maintenance lock without waiting: pg_try_advisory_xact_lock keyed on
// 'leasehold.maintenance:' || current_schema() on Postgres, sp_getapplock
// with @LockOwner='Transaction', @LockTimeout=0 on SQL Server.
//
//	node A: BEGIN; TryMaintenanceLock -> true;  the statements; COMMIT   maintenance.ran
//	node B: BEGIN; TryMaintenanceLock -> false; ROLLBACK                 maintenance.skipped
//	any:    BEGIN; ... error ...;               ROLLBACK                 maintenance.failed
//
// The lock belongs to the transaction: commit, rollback, or the server
// closing a dead node's session releases it. No lock outlives its holder,
// so there is no lease to expire and no stuck singleton to rescue. A run
// that fails anywhere rolls back whole; the next interval tries again.
//
// # Which clock decides
//
// The database's. Each cut-off is computed inside its statement as now()
// (SYSUTCDATETIME()) minus a duration of the Plan; node clocks never decide
// what is old. On Postgres now() is the transaction's start, so all the
// statements of a run share one instant. A node's clock only spaces its own
// runs (Interval, with a random first delay).
//
// # Which statement decides
//
// Each change is decided by one statement of
// sql/queries/<dialect>/maintenance.sql (ExpireAvailable lives in
// available.sql, shared with the pollers):
//
//	statement              changes                   only when
//	---------------------  ------------------------  -------------------------------------------
//	ArchiveEpisodes        episode archived_at       done|failed|partially_failed|canceled and
//	                                                 finished_at < now() - Retention; rows locked
//	                                                 by a writer are skipped
//	PurgeArchivedSteps     journal rows deleted      episode archived, journal not yet purged
//	MarkJournalsPurged     episode journal_purged    archived and no journal row left
//	ExpireAvailable        episode canceled,         available (queued, run_after set) and
//	                       class trigger_expired     run_after < now() - RequestTTL, its work
//	                                                 claim not live
//	DeleteSpentClaims      claim row deleted         done|failed|released, lease ended before
//	                                                 now() - ClaimHorizon (both re-checked on the
//	                                                 locked row), and no unarchived
//	                                                 queued|running|blocked episode under its key
//	DeleteStaleNodes       node row deleted          heartbeat_at < now() - NodeStaleAfter
//	RaiseWaitingFor-       waiting-for-node finding  ListWaitingForNode (nodes.sql, a read) says
//	NodeFinding            raised or refreshed       the pair's due queued work has no live node
//	                                                 of its env to run it, and its oldest request
//	                                                 fell due before now() - WaitingForNodeAfter
//	ClearWaitingFor-       that finding cleared      the same read lists none of its pair's work
//	NodeFindings                                     (run, canceled, or a capable node is live)
//
// What no statement touches: a claim in state claimed, live or expired
// however long ago (recovery owns it); a queued, running or blocked episode
// or its journal; a request a poller holds live. Batch bounds the first
// three and DeleteSpentClaims; the rest waits for the next run.
//
// # The claim horizon
//
// A claim row is the memory of its key's fence. Deleting it restarts the
// fence at 1, so a grant issued after the deletion could carry a (key,
// owner, fence) that some much older grant carried too; a zombie of that
// old grant, if still writing, would match it. Two rules make that
// impossible:
//
//   - Only finished rows go (done, failed, released), and only once their
//     lease ended more than ClaimHorizon ago. A holder stops its own work at
//     its local lease deadline (see package claims), so every task of that
//     grant, and of every earlier grant of the key, stopped about
//     ClaimHorizon ago or earlier.
//   - Config.Validate requires ClaimHorizon >= 24h and >= 100 x Lease (the
//     longest lease any node grants): far beyond any pause (GC, VM suspend,
//     network partition) after which a process could wake up still holding
//     its token. Plan, which the Store runs as given, carries no such check;
//     only the Runner's Config does.
//
// A released row whose episode is still queued, running or blocked is kept
// whatever its age: a released claim is how recovery hands the episode over.
//
// # Running it
//
// NewRunner applies Config's defaults and validates it; Run calls RunOnce
// every Interval after a random first delay of up to Interval/2. Each run
// emits one event: maintenance.ran with Counts (archived, steps_purged,
// journals_marked, requests_expired, episodes_canceled, claims_deleted,
// nodes_deleted, waiting_raised, waiting_cleared) and logged at Info;
// maintenance.skipped, logged at Debug; or maintenance.failed with Err,
// logged at Warn and retried next interval.
//
// # Work no live node can run
//
// During a rolling deploy, queued work of an (actor, expectation) that no
// live node runs waits without spending attempts (see package membership),
// so nothing fails and nothing else reports it. Each run reads it
// (ListWaitingForNode, with membership.DefaultSilentAfter as the bound on a
// live node's heartbeat and WaitingForNodeAfter as the bound on the wait,
// both on the database clock) and raises, per pair and env, the finding
// WaitingKey(env, actor, expectation) of class ClassWaitingForNode: how
// many episodes wait, since when, which node last listed the pair; its
// raised_by_episode is the oldest waiting episode. Later runs refresh it
// while the work waits, and clear it on the first run that finds none of
// the pair waiting. Findings decide nothing; an operator cancels the work
// (leasehold episodes cancel) or deploys a node that runs it.
//
// # Retention is the dedupe window
//
// Archiving takes an episode out of the dedupe index, so a trigger with the
// same dedupe key creates a new episode after Retention (re-claiming the
// old claim row with fence + 1 while the row exists, or fence 1 after
// ClaimHorizon).
package maintenance
