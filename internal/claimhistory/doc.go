// Package claimhistory records every claims operation a test issues and
// checks the history for linearizability with porcupine
// (github.com/anishathalye/porcupine), as etcd's robustness tests do: an
// independent checker, not an invariant the project wrote for itself. It
// is test support: only tests import it (internal/chaos, its own tests), so
// the library's users never depend on porcupine.
//
// # What is recorded
//
// A Recorder (one per process) writes each operation as JSON lines: the
// invocation before the statement is sent, the response when it returns,
// each with one Write, so a SIGKILLed process leaves its in-flight
// operations behind as invocations without an answer. Store wraps a
// claims.Store and records Acquire, Renew, RenewMany (one operation per
// lease), Complete, Fail, Release and ReleaseMany (one per lease); the
// chaos suite records the statements that grant or change a claim with
// their own work the same way (CreateEpisode, ClaimForRecovery and
// ClaimAvailable as acquires (a poll as an acquire of any key until its
// answer names them), RequeueOrphan as a fence-out,
// AppendStep as an extension, StartEpisode and its ledger write as checks,
// FinishEpisode as complete or fail, RetryEpisode as a release). Outcomes:
//
//	outcome     meaning                                        in the model
//	----------  ---------------------------------------------  -----------------------------------
//	granted     fence and lease_until as returned              judged: next fence, old lease over
//	ok          the statement matched (renew: its lease_until) judged: the grant held the claim
//	busy        a live lease refused the acquire               judged: a lease may have been live
//	not-owner   fenced statement matched nothing (claim only)  judged: the grant did not hold it
//	lease-lost  matched nothing, but also read the episode     applied or not, before the answer
//	refused     no grant, for a reason outside the claim       nothing changed, nothing learnt
//	no-effect   error after which it surely did not apply      nothing changed, nothing learnt
//	unknown     any other error, or no answer (process died)   applied or not, at any later time
//
// no-effect is the adapters' claims.ErrRetryable taken at its word: were
// it wrong (a statement reported not applied that did apply), the next
// grant's fence would not follow and the check would fail.
//
// # The model: one lease per key, on the database clock
//
// The state of a key is what the claim row holds for the decisions of
// sql/queries/postgres/claims.sql: the fence (0: no row yet), the state
// (claimed, done, failed, released), the owner, and, while claimed, bounds
// [lo, hi] on lease_until (database time). The history is partitioned by
// key: claims are independent, and each key's history is checked alone. A
// batched statement is split into one operation per lease with the same
// call and response, which checks less than its atomicity guarantees and
// never rejects a correct history.
//
//	           acquire granted: fence + 1 (1 on a fresh key)
//	(no row) ─────────────────────────────────────────────► claimed(owner, fence, lease_until)
//	                                                         │  ▲
//	   complete / fail / release ok, by the grant            │  │ acquire granted: fence + 1;
//	   that holds the claim                                  │  │ from claimed only once
//	                    ┌────────────────────────────────────┘  │ lease_until <= its now()
//	                    ▼                                       │
//	         done | failed | released ──────────────────────────┘
//
// While claimed, renew ok sets lease_until as returned, extend ok only
// grows it, and check ok needs the grant holding it with a live lease.
// fence-out ok moves the fence on (+1) and leaves the claim released,
// wherever an acquire could have granted.
//
// Every decision in those statements is taken on the database clock, so
// the model decides each operation's effect by the database instant s at
// which it executed, and takes s from what the statement returned where it
// returns it:
//
//   - A grant or a renewal returns lease_until = now() + lease, with lease
//     the whole milliseconds recorded in the operation, so it executed at
//     exactly s = lease_until - lease. A grant of a claimed row is legal
//     only if the old lease may have ended by then (lo <= s), and its fence
//     must be the previous one + 1: two overlapping grants, a reused fence
//     or a grant while a returned lease_until still ran are rejected.
//   - An operation that returns no timestamp (busy, not-owner, complete,
//     fail, release, extend, check, fence-out) is placed by its call: it
//     executed at
//     some s in [call - skew, response + skew] (Options.Skew bounds the
//     difference between the recorders' clocks and the database's; on one
//     machine it is timestamp truncation only). It is judged against the
//     lease_until bounds: busy is legal if the lease may still have been
//     live at some such s (hi > call - skew); an extension moves the bounds
//     to at least [call - skew, response + skew] + lease; a check that
//     found the lease gone is legal if it may have ended by then; a
//     fence-out of a claimed row is legal if its lease may have ended by
//     the response. Renew,
//     complete, fail, release and extend do not read the time at all in
//     SQL, so neither does the model: only (owner, fence, claimed) decide.
//   - An unknown operation may have taken effect at any instant after its
//     call, even after its error returned (a statement held by a cut
//     network, a cancelled call the server still ran): porcupine gets it
//     with no response (Return = MaxInt64) and the model returns both
//     states, applied (at some s >= call - skew) and not. An unknown
//     renewal or extension yields one state whose bounds cover both.
//   - A lease-lost answer of a write that also reads the episode
//     (FinishEpisode, RetryEpisode, AppendStep) may still have changed the
//     claim, before the answer: both states, within its call.
//
// The model is conservative: with bounds instead of instants it accepts
// every history a correct database could have produced (no false
// positives) and still rejects the clear violations above. porcupine
// orders operations by the recorders' wall clocks, so the processes of one
// history must share one clock (one machine, as in the chaos suite).
// Check first verifies that every exactly-known database instant lies
// within its call, widened by the skew; if one does not, the clocks
// disagree and the history is reported unjudged rather than judged on
// wrong bounds.
//
// Postgres' now() is the start of the statement's transaction: an
// operation inside a caller's transaction must be recorded from before
// BEGIN to after COMMIT (the chaos suite's transactional finisher is).
//
// # Not checked
//
// The trigger-request claims of the poller (their own table and fence),
// ListExpired and the operator listings (reads with no coordination role),
// CancelEpisode (an operator's statement, which fences out an expired
// grant; the chaos suite never issues it), and rows changed by statements
// no recorder saw. A history must contain every writer of its keys, from
// the key's first grant on (a test that backdates a lease records it as an
// expire): a writer left out shows as a grant whose fence does not follow,
// as RequeueOrphan did in the first chaos run that checked its history,
// before the suite recorded it. Episode-level properties
// (one run between consecutive grants of an episode's claim) are the chaos
// suite's own invariants; this package judges the claims alone.
//
// # Failures
//
// Check returns ErrNotLinearizable with the failing keys, after writing
// porcupine's HTML visualization of their histories (at most
// Options.MaxShown keys) to a file in Options.Dir whose path is in the
// Report and the error: open it in a browser to see the partial
// linearizations and where each one got stuck.
package claimhistory
