-- Work claims: lease rows keyed by a dedupe key (T-SQL).
--
-- The statements of sql/queries/postgres/claims.sql, one for one: same
-- names, same kinds, same @parameters (the Postgres sqlc.arg names), one
-- result set with the Postgres RETURNING columns in the same order. An empty
-- result means busy / not owner / lease lost, as no row does on Postgres.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI (no SQL Server there): these batches
-- are parsed, hint-checked and matched against the adapter's calls by
-- adapters/sqlserver/static_test.go. What only a server can confirm is
-- listed in docs/sqlserver.md.
--
-- Every deadline comes from SYSUTCDATETIME(), the database clock, evaluated
-- inside the deciding statement; callers pass durations in milliseconds,
-- never timestamps. DATEADD takes an int, so @lease_ms is cast: leases of
-- 2^31 ms (about 24.8 days) or more fail with an arithmetic overflow.
-- The caller-visible result is always the OUTPUT rows, never @@ROWCOUNT or
-- the driver's RowsAffected (SET NOCOUNT and multi-statement batches make
-- those meaningless). The batches assume autocommit: XACT_ABORT is ON, so
-- inside a caller's transaction any error dooms that transaction.

-- name: AcquireClaim :one
-- Grants the lease on @dedupe_key to @owner_node, or returns no row (busy).
--
-- Guarantee: of any number of concurrent callers, at most one gets a row.
-- Two steps, each atomic on its own (no transaction spans them):
--
-- 1. Take over an existing row that is free (done, failed, released) or
--    whose claimed lease has expired on the database clock. The UPDATE
--    locates the row with an update (U) lock, which two sessions cannot both
--    hold, and evaluates its WHERE on the current committed row, also under
--    READ_COMMITTED_SNAPSHOT; a second stealer of one expired lease waits,
--    then sees the new lease and matches nothing. UPDLOCK states that lock
--    for every access path; HOLDLOCK (serializable) keeps an absent key
--    absent while the statement runs, and is the pair the upsert pattern
--    needs if the steps are ever put in one transaction.
-- 2. Only if step 1 granted nothing: insert a fresh row (attempt 1, fence 1).
--    The primary key arbitrates: of concurrent inserters one wins. The NOT
--    EXISTS guard skips the insert in the common busy case (the row exists
--    and its lease is live) without raising an error; a loser of a true
--    insert race gets 2627 (PRIMARY KEY constraint), which is caught here
--    and returned as the empty result: 2601/2627 are CAUGHT in this batch.
--
-- A lease that expires between the two steps reads as busy (a false
-- negative, safe); a grant is never given twice (no false positive). A live
-- lease, the caller's own included, is busy: acquire is not re-entrant.
--
-- The fence grows on every grant, so writes carrying an older fence (a zombie
-- from before a steal, or from before an A->B->A round trip) match nothing.
-- attempt counts tries of the same work: reset after done, +1 otherwise. In
-- SET, column references read the row as it was before this UPDATE, so the
-- CASEs see the old state.
--
-- Bound: sent behind BoundLockWait (bounds.sql) in the same call, so a
-- frozen holder of the claim row (one stopped inside InTx's transaction,
-- say) makes a stealer fail with 1222 after @bound_ms instead of hanging:
-- nothing was granted, the call is retried, then claims.ErrRetryable.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @granted TABLE (
    dedupe_key  nvarchar(512) NOT NULL,
    state       nvarchar(16)  NOT NULL,
    owner_node  nvarchar(255) NOT NULL,
    lease_until datetime2(6)  NOT NULL,
    claimed_at  datetime2(6)  NOT NULL,
    attempt     int           NOT NULL,
    fence       bigint        NOT NULL,
    grant_kind  nvarchar(16)  NOT NULL,
    work_type   nvarchar(128) NOT NULL
);

UPDATE leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
SET state             = N'claimed',
    owner_node        = @owner_node,
    lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
    claimed_at        = SYSUTCDATETIME(),
    last_heartbeat_at = SYSUTCDATETIME(),
    finished_at       = NULL,
    error_detail      = NULL,
    attempt           = CASE WHEN state = N'done' THEN 1 ELSE attempt + 1 END,
    fence             = fence + 1,
    grant_kind        = CASE WHEN state = N'claimed' THEN N'steal' ELSE N'reclaim' END,
    work_type         = @work_type
OUTPUT inserted.dedupe_key, inserted.state, inserted.owner_node, inserted.lease_until,
    inserted.claimed_at, inserted.attempt, inserted.fence, inserted.grant_kind,
    inserted.work_type
INTO @granted
WHERE dedupe_key = @dedupe_key
  AND (state <> N'claimed' OR lease_until <= SYSUTCDATETIME());

IF NOT EXISTS (SELECT 1 FROM @granted)
BEGIN
    BEGIN TRY
        INSERT INTO leasehold_work_claims (
            dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
            attempt, fence, grant_kind, work_type
        )
        OUTPUT inserted.dedupe_key, inserted.state, inserted.owner_node, inserted.lease_until,
            inserted.claimed_at, inserted.attempt, inserted.fence, inserted.grant_kind,
            inserted.work_type
        INTO @granted
        SELECT @dedupe_key, N'claimed', @owner_node,
            DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
            SYSUTCDATETIME(), SYSUTCDATETIME(), 1, 1, N'fresh', @work_type
        WHERE NOT EXISTS (SELECT 1 FROM leasehold_work_claims WHERE dedupe_key = @dedupe_key);
    END TRY
    BEGIN CATCH
        -- Another node inserted the key first: busy. Anything else (a
        -- deadlock victim's 1205 included) goes back to the caller as is.
        IF ERROR_NUMBER() NOT IN (2601, 2627) THROW;
    END CATCH;
END;

SELECT dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence,
    grant_kind, work_type
FROM @granted;

-- name: RenewClaim :one
-- Extends one lease by @lease_ms from now, on the database clock.
--
-- Guarantee: only the grant identified by (dedupe_key, owner_node, fence) can
-- renew, and only while it is still claimed: all four are checked by this
-- one UPDATE on the row it locks. A lease that expired but was not re-granted
-- may be renewed: no other grant exists (the fence is unchanged), so nobody
-- else can have been admitted. Once anyone re-acquires, the fence moves and
-- this matches no row.
--
-- Hints: UPDLOCK makes the row lookup take the update lock a concurrent
-- steal also needs, whatever access path the plan picks, so renew and steal
-- are ordered and the loser re-reads the fence; ROWLOCK keeps the lock to
-- the one row so heartbeats of other keys never wait on it.
UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
SET lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
    last_heartbeat_at = SYSUTCDATETIME()
OUTPUT inserted.lease_until
WHERE dedupe_key = @dedupe_key
  AND owner_node = @owner_node
  AND fence = @fence
  AND state = N'claimed';

-- name: RenewClaims :many
-- The node heartbeat: renews every lease one owner holds in one statement.
--
-- Guarantee: exactly the (key, fence) pairs that are still claimed by
-- @owner_node come back; a pair missing from the result has been lost
-- (stolen, released, finished) and its work must stop. Pairs are matched on
-- fence too, so a node never renews a newer grant of the same key on behalf
-- of an older task.
--
-- @held is an nvarchar(max) JSON array [{"dedupe_key":"k","fence":1},...]
-- read with OPENJSON (compatibility level 130 or higher). OPENJSON's columns
-- take the database's default collation; dedupe_key is declared with the
-- key column's binary collation so the join compares like the primary key
-- (and raises no collation conflict). A pair listed twice renews its row
-- once.
--
-- Hints: UPDLOCK, ROWLOCK on the claims table as in RenewClaim: each renewed
-- row is update-locked on lookup, so a concurrent steal is ordered before or
-- after the renewal, and the locks stay on the renewed rows only.
UPDATE c
SET lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
    last_heartbeat_at = SYSUTCDATETIME()
OUTPUT inserted.dedupe_key, inserted.fence, inserted.lease_until
FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)
JOIN OPENJSON(@held) WITH (
    dedupe_key nvarchar(512) COLLATE Latin1_General_100_BIN2 '$.dedupe_key',
    fence      bigint                                        '$.fence'
) AS held
    ON c.dedupe_key = held.dedupe_key
   AND c.fence = held.fence
WHERE c.owner_node = @owner_node
  AND c.state = N'claimed';

-- name: CompleteClaim :one
-- Marks the grant's work done and ends its lease.
--
-- Guarantee: fenced on (dedupe_key, owner_node, fence, claimed) in this one
-- UPDATE; a stolen or already-finished grant matches no row and the row is
-- left untouched. Hints as in RenewClaim: UPDLOCK orders this write against
-- a concurrent steal on the same row, ROWLOCK keeps it to that row.
UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
SET state       = N'done',
    finished_at = SYSUTCDATETIME(),
    lease_until = SYSUTCDATETIME()
OUTPUT inserted.fence
WHERE dedupe_key = @dedupe_key
  AND owner_node = @owner_node
  AND fence = @fence
  AND state = N'claimed';

-- name: FailClaim :one
-- Marks the grant's work failed, recording why (@error_detail, JSON or
-- NULL), and ends its lease.
--
-- Guarantee and hints: exactly as CompleteClaim.
UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
SET state        = N'failed',
    finished_at  = SYSUTCDATETIME(),
    lease_until  = SYSUTCDATETIME(),
    error_detail = @error_detail
OUTPUT inserted.fence
WHERE dedupe_key = @dedupe_key
  AND owner_node = @owner_node
  AND fence = @fence
  AND state = N'claimed';

-- name: ReleaseClaim :one
-- Fence-and-release for graceful handover: the lease ends now, the work is not
-- finished, and any node's AcquireClaim succeeds at once (fence + 1) instead
-- of waiting out the lease.
--
-- Guarantee: fenced exactly like CompleteClaim (same hints, same reasons);
-- the releasing grant's fence is spent, so its late writes are rejected
-- after the next grant.
UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
SET state       = N'released',
    lease_until = SYSUTCDATETIME()
OUTPUT inserted.fence
WHERE dedupe_key = @dedupe_key
  AND owner_node = @owner_node
  AND fence = @fence
  AND state = N'claimed';

-- name: ReleaseClaims :many
-- Fence-and-release of many grants of one owner in one statement: a
-- draining node hands every claim it still holds over at once, and any
-- node's AcquireClaim or recovery takes each immediately (fence + 1).
--
-- Guarantee: each (key, fence) pair is released only while it is still
-- claimed by @owner_node at that fence, exactly like ReleaseClaim; the pairs
-- that come back were released, a missing pair had been lost already.
--
-- @held is the JSON array RenewClaims takes, [{"dedupe_key":"k","fence":1},
-- ...], read with OPENJSON and the key column's binary collation for the
-- same reasons; a pair listed twice releases its row once. Hints as in
-- RenewClaims and ReleaseClaim: UPDLOCK orders each release against a
-- concurrent steal of the same row (the loser re-reads the fence), ROWLOCK
-- keeps the locks to the released rows.
UPDATE c
SET state       = N'released',
    lease_until = SYSUTCDATETIME()
OUTPUT inserted.dedupe_key, inserted.fence
FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)
JOIN OPENJSON(@held) WITH (
    dedupe_key nvarchar(512) COLLATE Latin1_General_100_BIN2 '$.dedupe_key',
    fence      bigint                                        '$.fence'
) AS held
    ON c.dedupe_key = held.dedupe_key
   AND c.fence = held.fence
WHERE c.owner_node = @owner_node
  AND c.state = N'claimed';

-- name: ListExpiredClaims :many
-- Lists claimed leases whose deadline has passed on the database clock,
-- oldest deadline first. Read-only and unhinted: taking one over is
-- AcquireClaim's job, which re-checks expiry under the row lock, so a row
-- this list shows stale (or misses) is harmless. No NOLOCK: a dirty read
-- could list a lease whose steal later rolled back.
SELECT TOP (@max_rows) dedupe_key, state, owner_node, lease_until, claimed_at,
    attempt, fence, grant_kind, work_type
FROM leasehold_work_claims
WHERE state = N'claimed'
  AND lease_until < SYSUTCDATETIME()
ORDER BY lease_until;

-- name: ListClaims :many
-- Operator read (leasehold claims ls): work claims of any state, soonest
-- deadline first. @owner_node N'' means every owner; @expired_only keeps the
-- claimed leases whose deadline has passed on the database clock. It has no
-- coordination role: nothing decides anything from it, so it needs no lock
-- hint (and must not use NOLOCK), and a row it shows may be stale by the
-- time it is printed.
SELECT TOP (@max_rows) dedupe_key, state, owner_node, lease_until, claimed_at,
    attempt, fence, grant_kind, work_type
FROM leasehold_work_claims
WHERE (@owner_node = N'' OR owner_node = @owner_node)
  AND (@expired_only = 0
       OR (state = N'claimed' AND lease_until <= SYSUTCDATETIME()))
ORDER BY lease_until;

-- name: HoldClaim :one
-- The fence, in the caller's transaction (Run.Hold), as the procedure
-- leasehold_hold of migration 00009 (the same body, checked by
-- TestStaticHoldMatchesItsProcedure): the claim row is read WITH (UPDLOCK,
-- HOLDLOCK, ROWLOCK), so its update lock is held until the caller's
-- transaction ends and a takeover waits for it; unless (key, owner, fence)
-- is the current grant it THROWs 51001 (XACT_ABORT: the caller's
-- transaction is rolled back, nothing it wrote commits). Outside a
-- transaction it THROWs 51002: the lock would guard nothing. Returns the
-- grant's lease_until.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @held TABLE (lease_until datetime2(6) NOT NULL);
IF @@TRANCOUNT = 0
    THROW 51002, N'leasehold_hold must be called inside a transaction', 1;
INSERT INTO @held (lease_until)
SELECT c.lease_until
FROM leasehold_work_claims AS c WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
WHERE c.dedupe_key = @claim_key
  AND c.owner_node = @owner_node
  AND c.fence = @fence
  AND c.state = N'claimed';
IF NOT EXISTS (SELECT 1 FROM @held)
    THROW 51001, N'leasehold: lease lost: the grant is not the current one', 1;
SELECT lease_until FROM @held;
