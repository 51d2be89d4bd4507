-- Server-side bounds on waiting for a frozen holder.
--
-- A node that stops (SIGSTOP, a long GC pause, a hung VM) inside a
-- transaction keeps its row locks, and the server sees a healthy idle
-- connection, so without a bound a steal or a recovery claim of the rows it
-- holds waits for ever. bound_ms is claims.TxBound(lease) = max(lease/10,
-- 1 s) of the lease on whose behalf the work runs. Both settings are LOCAL:
-- they end with the transaction and never leak into a pooled session.
--
-- A takeover statement sent on its own (AcquireClaim, ClaimForRecovery,
-- RequeueOrphan, ClaimAvailable) bounds itself: it takes
-- bound_ms and sets lock_timeout, LOCAL, before it reaches a row, so the
-- bound costs no statement of its own (see each statement's "Bound").

-- name: BoundTransaction :exec
-- First statement of every transaction leasehold opens (InTx, Maintain),
-- and sent by Run.Hold in the caller's own transaction before it locks the
-- claim row (HoldClaim), so that transaction is bounded from then on:
-- the server ends the session, rolling the transaction back and releasing
-- its locks, once it has sat idle for bound_ms
-- (idle_in_transaction_session_timeout), and any statement in it waiting
-- longer than bound_ms for a lock fails (lock_timeout, SQLSTATE 55P03,
-- retryable: nothing was applied).
SELECT set_config('lock_timeout', (sqlc.arg(bound_ms)::bigint)::text || 'ms', true),
       set_config('idle_in_transaction_session_timeout', (sqlc.arg(bound_ms)::bigint)::text || 'ms', true);
