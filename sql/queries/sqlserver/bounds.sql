-- Server-side bounds on waiting for a frozen holder (T-SQL).
--
-- The statements of sql/queries/postgres/bounds.sql: same names, kinds and
-- @parameters. NOT EXECUTED IN THIS REPOSITORY'S CI (no SQL Server there);
-- statically checked only, see docs/sqlserver.md.
--
-- A node that stops (SIGSTOP, a long GC pause, a hung VM) inside a
-- transaction keeps its row locks, and the server sees a healthy idle
-- connection, so without a bound a steal or a recovery claim of the rows it
-- holds waits for ever. @bound_ms is claims.TxBound(lease) = max(lease/10,
-- 1 s) of the lease on whose behalf the work runs (claims.TxBoundFrom).
--
-- How SQL Server differs from Postgres, and why these are never sent alone:
--   * SQL Server has no idle_in_transaction_session_timeout. Nothing on the
--     server ends a transaction whose client has stopped: a frozen holder
--     keeps its locks until it resumes or its connection is dropped (KILL,
--     or TCP keepalive when its host is gone; a SIGSTOPped process's kernel
--     still answers keepalives). What SQL Server can bound is the WAITER:
--     SET LOCK_TIMEOUT makes a statement that waits longer than @bound_ms
--     for a lock fail with error 1222, which XACT_ABORT ON turns into a
--     rollback of the whole batch (or of the transaction it runs in); the
--     adapter retries it (retryInCall) and then reports claims.ErrRetryable.
--   * A SET inside a parameterized call is undone when that call returns:
--     go-mssqldb sends every batch with parameters as an sp_executesql RPC,
--     and "if a SET statement is specified in a dynamic SQL string that is
--     run by using sp_executesql or EXECUTE, the value of the SET option is
--     restored after control is returned from the batch" (SET Statements,
--     Transact-SQL). Sent on its own, either statement would bound nothing.
--     So the adapter sends each one as the TOP of the batch it bounds, in
--     the same call (Store.batch): the setting then covers every statement
--     of that batch and reverts when the call ends, so it never leaks into
--     the session or a pooled connection (Postgres's set_config(..., true)
--     is LOCAL to the transaction for the same reason).
--   * SET LOCK_TIMEOUT takes an integer literal or a variable, not an
--     expression: @bound_ms (bigint, as on Postgres) is first copied into an
--     int variable. The adapter keeps it between 1 and 2^31 - 1 ms (0 would
--     mean "never wait", -1 "wait for ever").
-- The variable name is reserved for these prefixes: no batch may declare
-- @leasehold_lock_timeout_ms itself (checked by TestStaticBounds).

-- name: BoundTransaction :exec
-- The top of every batch sent inside a transaction leasehold opens (InTx,
-- Maintain): any statement of the transaction that waits longer than
-- @bound_ms for a lock fails with 1222, and XACT_ABORT rolls the whole
-- transaction back (retryable: nothing was applied; the runner sends the
-- whole finish again, Maintain the whole run). Postgres also ends a
-- transaction left idle for @bound_ms; SQL Server cannot (see above), so a
-- holder frozen between two batches of its transaction keeps its locks.
DECLARE @leasehold_lock_timeout_ms int = CAST(@bound_ms AS int);
SET LOCK_TIMEOUT @leasehold_lock_timeout_ms;

-- name: BoundLockWait :exec
-- The top of each takeover batch sent on its own (AcquireClaim,
-- ClaimForRecovery, RequeueOrphan, ClaimAvailable): the takeover waits at
-- most @bound_ms for a lock held by a frozen holder, then fails with 1222
-- and is rolled back whole (XACT_ABORT), so a sweeper or poller retries and
-- moves on instead of hanging behind it. The takeover's own decision is
-- unchanged: a lock it does get is held exactly as before.
DECLARE @leasehold_lock_timeout_ms int = CAST(@bound_ms AS int);
SET LOCK_TIMEOUT @leasehold_lock_timeout_ms;
