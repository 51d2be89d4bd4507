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
// with RenewClaims, one statement whatever their number, the next renewal
// due an interval after the last one began (not ended). A renewal waits for
// the database until the nearest local deadline, not less: one queued behind
// other writes keeps its place rather than give up and start again at the
// back. A lease missing from the result is lost: its work's context is
// cancelled with cause ErrLeaseLost. A database error is retried; the node
// keeps a local deadline per lease on its monotonic clock and stops the work
// itself when the deadline passes without a renewal (cause ErrLeaseLost and
// ErrLeaseExpired), because after that another node may steal the lease.
// The local deadline only ever stops work early; it never grants anything.
// WithLease bounds a write made for a lease by that deadline as renewals
// move it.
//
// # Where the local lease clock starts
//
// The database starts a lease when it executes the granting statement, at
// an instant the node cannot observe; it can only know that this was after
// it sent the statement. So every grant's local clock starts at the instant
// just before the statement was sent, and a slow answer (a loaded server, a
// congested link, a proxy holding bytes) shortens the local lease instead of
// lengthening it:
//
//	grant                                     stamped by
//	----------------------------------------  ------------------------------------
//	AcquireClaim (fresh, steal, re-claim)      the adapter's Acquire
//	CreateEpisode (an episode born owned)      the adapter, via episodes.GrantedClaim
//	ClaimForRecovery (recovery)                the adapter, via episodes.GrantedClaim
//	ClaimAvailable (available work)            the adapter, via episodes.GrantedClaim
//	RenewClaims (each renewal)                 the Heartbeat, before RenewMany
//
// An adapter that knows a later instant at which the statement still had
// not run may stamp that instead: SQLite's stamps the instant its
// transaction (or the statement's own) held the write lock, after any wait
// behind other writers, since the grant runs after it on the same host's
// clock; so a grant that queued for most of a lease keeps its whole local
// time. RenewMany reports the same instant for a renewal (Renewed.Start).
// The stamp lives in the adapter because only the adapter knows when it
// sends the statement; episodes.GrantedClaim, which every adapter uses to
// build a granted episode claim, takes the instant as a required argument,
// so an adapter cannot build one without it. Heartbeat.Hold refuses a claim
// that carries no local start (Claim.LocalStart is zero): its context is
// returned already cancelled with ErrLeaseLost, so a forgotten stamp stops
// the work instead of letting it outlive its lease. The first local deadline
// is local start + lease - margin; after each successful renewal it is the
// start of that renewal's statement + lease - margin.
//
// # Server-side bounds
//
// A holder frozen inside a transaction (SIGSTOP, a GC pause, a hung VM)
// keeps its row locks while the server sees a healthy idle connection.
// TxBound(lease) = max(lease/10, 1s) bounds it on the server: every
// transaction an adapter opens starts with BoundTransaction (Postgres:
// idle_in_transaction_session_timeout and lock_timeout, LOCAL), and each
// takeover statement (AcquireClaim, ClaimForRecovery, RequeueOrphan,
// ClaimAvailable) is bounded too: on Postgres it sets its own
// lock_timeout, LOCAL, before it reaches a row (no second statement); on
// SQL Server BoundLockWait tops its batch. Callers put the bound on the context (WithTxBound); a frozen
// holder then delays a takeover by at most TxBound, and a takeover that met
// a lock longer than that fails retryable and is tried again. SQL Server has
// no idle-in-transaction timeout; see docs/sqlserver.md for its fallback.
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
