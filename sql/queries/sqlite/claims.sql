-- Work claims: lease rows keyed by a dedupe key (SQLite).
--
-- The statements of sql/queries/postgres/claims.sql, under the same names and
-- kinds, with the same guarantees. Every statement here is the single
-- decision for its transition; none reads a row and then writes it.
--
-- Clock: every deadline comes from SQLite's clock, read inside the deciding
-- statement as CAST(round(unixepoch('subsec') * 1000) AS INTEGER):
-- milliseconds since the Unix epoch, UTC. SQLite holds 'now' constant for
-- the whole of one statement (one sqlite3_step; with RETURNING every change
-- is made in the first step), so one statement reads one instant, as now()
-- does on Postgres. Callers pass durations in milliseconds, never times.
--
-- Lock: SQLite has one writer per database file. A write statement takes the
-- database write lock when it starts (in autocommit, or inside the adapter's
-- BEGIN IMMEDIATE transactions) and holds it until it (or its transaction)
-- ends, so it reads and writes one state: where Postgres relies on the row
-- lock taken by INSERT ... ON CONFLICT or UPDATE, the write lock is that
-- lock here, for every row at once. A writer that finds the lock held waits
-- up to busy_timeout (adapters/sqlite.Open), then fails SQLITE_BUSY without
-- having applied anything (claims.ErrRetryable).
--
-- Batches (RenewClaims, ReleaseClaims) take their (key, fence) pairs as JSON
-- text, [["key", fence], ...], read with json_each: the condition stays per
-- row, exactly as with Postgres's unnest arrays.

-- name: AcquireClaim :one
-- Grants the lease on dedupe_key to owner_node, or returns no row (busy).
--
-- Guarantee: of any number of concurrent callers, in any number of
-- processes, at most one gets a row. The statement holds the write lock
-- from its start to its end, so the conflict check and the update see the
-- latest committed row and no other writer runs in between. A fresh key
-- inserts (attempt 1, fence 1). An existing key is updated only when it is
-- free (done, failed, released) or its claimed lease has expired on the
-- database clock (ON CONFLICT ... WHERE); otherwise nothing is written and
-- no row comes back. A live lease, the caller's own included, is busy:
-- acquire is not re-entrant.
--
-- The fence grows on every grant, so writes carrying an older fence (a zombie
-- from before a steal, or from before an A->B->A round trip) match nothing.
-- attempt counts tries of the same work: reset after done, +1 otherwise.
INSERT INTO leasehold_work_claims AS c (
    dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
    attempt, fence, grant_kind, work_type
) VALUES (
    CAST(@dedupe_key AS TEXT), 'claimed', CAST(@owner_node AS TEXT),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    1, 1, 'fresh', CAST(@work_type AS TEXT)
)
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
WHERE c.state <> 'claimed' OR c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
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
SET lease_until       = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    last_heartbeat_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE dedupe_key = CAST(@dedupe_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
  AND state = 'claimed'
RETURNING lease_until;

-- name: RenewClaims :many
-- The node heartbeat: renews every lease one owner holds in one statement.
--
-- Guarantee: exactly the (key, fence) pairs that are still claimed by
-- owner_node come back; a pair missing from the result has been lost (stolen,
-- released, finished) and its work must stop. Pairs are matched on fence too
-- (the row value (dedupe_key, fence) must be one of the pairs), so a node
-- never renews a newer grant of the same key on behalf of an older task.
-- held is JSON text: [["key", fence], ...].
UPDATE leasehold_work_claims
SET lease_until       = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    last_heartbeat_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE owner_node = CAST(@owner_node AS TEXT)
  AND state = 'claimed'
  AND (dedupe_key, fence) IN (
      SELECT json_extract(h.value, '$[0]'), json_extract(h.value, '$[1]')
      FROM json_each(CAST(@held AS TEXT)) AS h
  )
RETURNING dedupe_key, fence, lease_until;

-- name: CompleteClaim :one
-- Marks the grant's work done and ends its lease.
--
-- Guarantee: fenced on (dedupe_key, owner_node, fence, claimed); a stolen or
-- already-finished grant matches no row and the row is left untouched.
UPDATE leasehold_work_claims
SET state       = 'done',
    finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE dedupe_key = CAST(@dedupe_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
  AND state = 'claimed'
RETURNING fence;

-- name: FailClaim :one
-- Marks the grant's work failed, recording why, and ends its lease.
--
-- Guarantee: fenced exactly like CompleteClaim. error_detail is JSON text or
-- NULL.
UPDATE leasehold_work_claims
SET state        = 'failed',
    finished_at  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    lease_until  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    error_detail = sqlc.narg(error_detail)
WHERE dedupe_key = CAST(@dedupe_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
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
    lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE dedupe_key = CAST(@dedupe_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
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
-- held is JSON text: [["key", fence], ...].
UPDATE leasehold_work_claims
SET state       = 'released',
    lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE owner_node = CAST(@owner_node AS TEXT)
  AND state = 'claimed'
  AND (dedupe_key, fence) IN (
      SELECT json_extract(h.value, '$[0]'), json_extract(h.value, '$[1]')
      FROM json_each(CAST(@held AS TEXT)) AS h
  )
RETURNING dedupe_key, fence;

-- name: ListExpiredClaims :many
-- Lists claimed leases whose deadline has passed on the database clock,
-- oldest deadline first. Read-only: taking one over is AcquireClaim's job,
-- which re-checks expiry under the write lock.
SELECT dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence,
    grant_kind, work_type
FROM leasehold_work_claims
WHERE state = 'claimed'
  AND lease_until < CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
ORDER BY lease_until
LIMIT CAST(@max_rows AS INTEGER);

-- name: ListClaims :many
-- Operator read (leasehold claims ls): work claims of any state, soonest
-- deadline first. An empty owner_node means every owner; expired_only keeps the
-- claimed leases whose deadline has passed on the database clock. It has no
-- coordination role: nothing decides anything from it, so it takes no lock
-- and a row it shows may be stale by the time it is printed.
SELECT dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence,
    grant_kind, work_type
FROM leasehold_work_claims
WHERE (CAST(@owner_node AS TEXT) = '' OR owner_node = CAST(@owner_node AS TEXT))
  AND (NOT CAST(@expired_only AS BOOLEAN)
       OR (state = 'claimed' AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)))
ORDER BY lease_until
LIMIT CAST(@max_rows AS INTEGER);

-- name: HoldClaim :one
-- The fence, in the caller's transaction (Run.Hold). SQLite has no row
-- locks and no stored functions, so this is leasehold_hold (Postgres
-- migration 00009) as one statement: a no-op write of the claim row,
-- conditioned exactly like the fenced writes (key, owner, fence, state
-- claimed; no clock, as on Postgres). Being a write, it holds the database
-- write lock from here until the caller's transaction ends (already held
-- when the transaction began BEGIN IMMEDIATE; taken here, or failed with
-- SQLITE_BUSY, when it began DEFERRED), so no takeover can commit before the
-- caller's own writes do: the caller's writes commit only under this grant.
-- No row back (the grant is not the current one) is claims.ErrLeaseLost, and
-- the caller must roll back. Returns the grant's lease_until.
UPDATE leasehold_work_claims
SET fence = fence
WHERE dedupe_key = CAST(@claim_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
  AND state = 'claimed'
RETURNING lease_until;
