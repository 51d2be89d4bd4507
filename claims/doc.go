// Package claims is leasehold's lease layer: a work claim grants one node the
// right to run the work named by a dedupe key, for a lease that the node keeps
// alive by renewing it, and fences every write made under it.
//
// # Which clock, which statement
//
// Every decision is one statement run by the database on its own clock
// (now() on Postgres, SYSUTCDATETIME() on SQL Server); callers pass lease
// durations, never timestamps. The statements live in
// sql/queries/<dialect>/claims.sql and are the audit surface:
//
//	transition                      statement          decided by
//	------------------------------  -----------------  ------------------------------------------
//	(none) -> claimed   fence 1     AcquireClaim       unique key: one insert wins
//	claimed(expired) -> claimed     AcquireClaim       ON CONFLICT ... WHERE lease_until <= now()
//	done|failed|released -> claimed AcquireClaim       ON CONFLICT ... WHERE state <> 'claimed'
//	claimed -> claimed (extended)   RenewClaim(s)      WHERE owner, fence, state = 'claimed'
//	claimed -> done                 CompleteClaim      WHERE owner, fence, state = 'claimed'
//	claimed -> failed               FailClaim          WHERE owner, fence, state = 'claimed'
//	claimed -> released             ReleaseClaim       WHERE owner, fence, state = 'claimed'
//
//	               acquire (fresh, fence 1)
//	    (none) ───────────────────────────────► claimed ◄──┐ renew (same fence)
//	                                            │  │  │  ───┘
//	       ┌──────── complete ──────────────────┘  │  └── lease_until <= now()
//	       ▼                   fail / release      │        acquire by anyone:
//	     done ◄─┐            ┌─────────────────────┘        steal, fence+1, attempt+1
//	       │    │            ▼
//	       │    │   failed | released
//	       └────┴─────── acquire: re-claim, fence+1
//	                     (attempt reset after done, +1 otherwise)
//
// # Fencing
//
// The fence grows on every grant. A Token (key, owner, fence) names one grant,
// and renew, complete, fail and release are conditioned on all three plus
// state = 'claimed'. Zero rows means ErrNotOwner and nothing changed: a node
// whose lease was stolen, or a stale task after this node lost and re-won the
// same key (A->B->A), can never renew, finish or release the current grant.
// Packages that write on behalf of a lease (the episode journal, status
// changes) carry the same Token in the same statement.
//
// Acquire is not re-entrant: a live lease is ErrBusy even for its own owner,
// so a restarted process cannot run the same work twice concurrently.
//
// # Heartbeat and local deadlines
//
// A node runs one Heartbeat. Every lease/3 it renews all the leases it holds
// with RenewClaims, one statement whatever their number. A lease missing from
// the result is lost: its work's context is cancelled with cause
// ErrLeaseLost. A database error is retried; the node keeps a local deadline
// per lease on its monotonic clock (start of the last successful renewal +
// lease - margin) and stops the work itself when the deadline passes without
// a renewal, because after that another node may steal the lease. The local
// deadline only ever stops work early; it never grants anything.
//
// # Without a store
//
// A Gate built with a nil Store is a passthrough: every call succeeds at once
// and writes nothing. Deployments that do not coordinate through claims pay
// nothing for the gate calls.
//
// # Testing
//
// claims/memory is an in-memory Store with the same semantics as Postgres
// (not an always-grant fake), with a clock that tests move instead of
// sleeping. The conformance package runs the same scenarios against every
// Store.
package claims
