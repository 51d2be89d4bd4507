-- Work claims: lease rows keyed by a dedupe key.
--
-- Every statement here is the single decision for its transition; none reads a
-- row and then writes it. All deadlines come from now(), the database clock;
-- callers pass durations in milliseconds, never timestamps. Run these in
-- autocommit (or short transactions): now() is the transaction start time.

-- name: AcquireClaim :one
-- Grants the lease on dedupe_key to owner_node, or returns no row (busy).
--
-- Guarantee: of any number of concurrent callers, at most one gets a row. A
-- fresh key inserts (attempt 1, fence 1). An existing key is updated only when
-- it is free (done, failed, released) or its claimed lease has expired on the
-- database clock; the ON CONFLICT ... WHERE is re-evaluated on the latest row
-- version after the row lock, so two stealers of one expired lease cannot both
-- match. A live lease, the caller's own included, is busy: acquire is not
-- re-entrant, and a restarted holder must wait out or release its old lease.
--
-- The fence grows on every grant, so writes carrying an older fence (a zombie
-- from before a steal, or from before an A->B->A round trip) match nothing.
-- attempt counts tries of the same work: reset after done, +1 otherwise.
--
-- Bound: a holder frozen inside a transaction keeps the row locked, and the
-- conflict check waits for it. bound_ms > 0 sets lock_timeout, LOCAL, in
-- this statement before the row is reached (the insert's source row is
-- computed, set_config included, before the insert meets the conflict), so
-- the wait ends after bound_ms with 55P03 (retryable: nothing applied); in
-- autocommit the setting ends with the statement. bound_ms = 0 (inside a
-- caller's transaction, where a LOCAL setting would outlive the statement)
-- leaves the transaction's own setting as it is.
INSERT INTO leasehold_work_claims AS c (
    dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
    attempt, fence, grant_kind, work_type
)
SELECT sqlc.arg(dedupe_key)::text, 'claimed', sqlc.arg(owner_node)::text,
    now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
    now(), now(), 1, 1, 'fresh', sqlc.arg(work_type)::text
FROM (SELECT CASE WHEN sqlc.arg(bound_ms)::bigint > 0
                  THEN set_config('lock_timeout', sqlc.arg(bound_ms)::bigint || 'ms', true)
             END AS lock_timeout) AS bound
ON CONFLICT (dedupe_key) DO UPDATE SET
    state             = 'claimed',
    owner_node        = excluded.owner_node,
    lease_until       = excluded.lease_until,
    claimed_at        = excluded.claimed_at,
    last_heartbeat_at = excluded.claimed_at,
    finished_at       = NULL,
    error_detail      = NULL,
    attempt           = CASE WHEN c.state = 'done' THEN 1 ELSE c.attempt + 1 END,
    fence             = c.fence + 1,
    grant_kind        = CASE WHEN c.state = 'claimed' THEN 'steal' ELSE 'reclaim' END,
    work_type         = excluded.work_type
WHERE c.state <> 'claimed' OR c.lease_until <= now()
RETURNING dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence,
    grant_kind, work_type;

-- name: RenewClaim :one
-- Extends one lease by lease_ms from now, on the database clock.
--
-- Guarantee: only the grant identified by (dedupe_key, owner_node, fence) can
-- renew, and only while it is still claimed. A lease that expired but was not
-- re-granted may be renewed: no other grant exists (the fence is unchanged),
-- so nobody else can have been admitted. Once anyone re-acquires, the fence
-- moves and this matches no row.
UPDATE leasehold_work_claims
SET lease_until       = now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
    last_heartbeat_at = now()
WHERE dedupe_key = sqlc.arg(dedupe_key)
  AND owner_node = sqlc.arg(owner_node)
  AND fence = sqlc.arg(fence)
  AND state = 'claimed'
RETURNING lease_until;

-- name: RenewClaims :many
-- The node heartbeat: renews every lease one owner holds in one statement.
--
-- Guarantee: exactly the (key, fence) pairs that are still claimed by
-- owner_node come back; a pair missing from the result has been lost (stolen,
-- released, finished) and its work must stop. Pairs are matched on fence too,
-- so a node never renews a newer grant of the same key on behalf of an older
-- task. The two unnest calls stay separate because sqlc cannot type the
-- two-argument form; equal-length arrays zip row by row.
--
-- Plan: the adapter runs this as an unnamed statement so it is planned with
-- the real arrays (unnest's row estimate = array length). A cached generic
-- plan assumes 10 rows and can nest-loop over every claimed row per lease.
UPDATE leasehold_work_claims AS c
SET lease_until       = now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
    last_heartbeat_at = now()
FROM (
    SELECT unnest(sqlc.arg(dedupe_keys)::text[]) AS dedupe_key,
           unnest(sqlc.arg(fences)::bigint[])    AS fence
) AS held
WHERE c.dedupe_key = held.dedupe_key
  AND c.fence = held.fence
  AND c.owner_node = sqlc.arg(owner_node)
  AND c.state = 'claimed'
RETURNING c.dedupe_key, c.fence, c.lease_until;

-- name: CompleteClaim :one
-- Marks the grant's work done and ends its lease.
--
-- Guarantee: fenced on (dedupe_key, owner_node, fence, claimed); a stolen or
-- already-finished grant matches no row and the row is left untouched.
UPDATE leasehold_work_claims
SET state       = 'done',
    finished_at = now(),
    lease_until = now()
WHERE dedupe_key = sqlc.arg(dedupe_key)
  AND owner_node = sqlc.arg(owner_node)
  AND fence = sqlc.arg(fence)
  AND state = 'claimed'
RETURNING fence;

-- name: FailClaim :one
-- Marks the grant's work failed, recording why, and ends its lease.
--
-- Guarantee: fenced exactly like CompleteClaim.
UPDATE leasehold_work_claims
SET state        = 'failed',
    finished_at  = now(),
    lease_until  = now(),
    error_detail = sqlc.arg(error_detail)
WHERE dedupe_key = sqlc.arg(dedupe_key)
  AND owner_node = sqlc.arg(owner_node)
  AND fence = sqlc.arg(fence)
  AND state = 'claimed'
RETURNING fence;

-- name: ReleaseClaim :one
-- Fence-and-release for graceful handover: the lease ends now, the work is not
-- finished, and any node's AcquireClaim succeeds at once (fence + 1) instead
-- of waiting out the lease.
--
-- Guarantee: fenced exactly like CompleteClaim; the releasing grant's fence is
-- spent, so its late writes are rejected after the next grant.
UPDATE leasehold_work_claims
SET state       = 'released',
    lease_until = now()
WHERE dedupe_key = sqlc.arg(dedupe_key)
  AND owner_node = sqlc.arg(owner_node)
  AND fence = sqlc.arg(fence)
  AND state = 'claimed'
RETURNING fence;

-- name: ReleaseClaims :many
-- Fence-and-release of many grants of one owner in one statement: a
-- draining node hands every claim it still holds over at once, and any
-- node's AcquireClaim or recovery takes each immediately (fence + 1).
--
-- Guarantee: each (key, fence) pair is released only while it is still
-- claimed by owner_node at that fence, exactly like ReleaseClaim; the pairs
-- that come back were released, a missing pair had been lost already.
-- Planned unnamed like RenewClaims, with the real array lengths.
UPDATE leasehold_work_claims AS c
SET state       = 'released',
    lease_until = now()
FROM (
    SELECT unnest(sqlc.arg(dedupe_keys)::text[]) AS dedupe_key,
           unnest(sqlc.arg(fences)::bigint[])    AS fence
) AS held
WHERE c.dedupe_key = held.dedupe_key
  AND c.fence = held.fence
  AND c.owner_node = sqlc.arg(owner_node)
  AND c.state = 'claimed'
RETURNING c.dedupe_key, c.fence;

-- name: ListExpiredClaims :many
-- Lists claimed leases whose deadline has passed on the database clock,
-- oldest deadline first. Read-only: taking one over is AcquireClaim's job,
-- which re-checks expiry under the row lock.
SELECT dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence,
    grant_kind, work_type
FROM leasehold_work_claims
WHERE state = 'claimed'
  AND lease_until < now()
ORDER BY lease_until
LIMIT sqlc.arg(max_rows)::integer;

-- name: ListClaims :many
-- Operator read (leasehold claims ls): work claims of any state, soonest
-- deadline first. An empty owner_node means every owner; expired_only keeps the
-- claimed leases whose deadline has passed on the database clock. It has no
-- coordination role: nothing decides anything from it, so it takes no lock
-- and a row it shows may be stale by the time it is printed.
SELECT dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence,
    grant_kind, work_type
FROM leasehold_work_claims
WHERE (sqlc.arg(owner_node)::text = '' OR owner_node = sqlc.arg(owner_node)::text)
  AND (NOT sqlc.arg(expired_only)::boolean
       OR (state = 'claimed' AND lease_until <= now()))
ORDER BY lease_until
LIMIT sqlc.arg(max_rows)::integer;

-- name: HoldClaim :one
-- The fence, in the caller's transaction (Run.Hold): leasehold_hold
-- (migration 00009) locks the claim row FOR SHARE until the transaction
-- ends and raises SQLSTATE LH001 unless (key, owner, fence) is the current
-- grant, so the caller's own writes after it commit only under that grant:
-- a takeover waits for the transaction, and a stale grant's transaction is
-- aborted. Returns the grant's lease_until.
SELECT leasehold_hold(sqlc.arg(claim_key)::text, sqlc.arg(owner_node)::text, sqlc.arg(fence)::bigint)::timestamptz AS lease_until;
