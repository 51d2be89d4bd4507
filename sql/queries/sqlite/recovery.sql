-- Recovery: finding orphaned episodes and taking each over exactly once
-- (SQLite).
--
-- The statements of sql/queries/postgres/recovery.sql, under the same names
-- and kinds, with the same guarantees; see there for what an orphan is:
--   * running, and its claim expired or was released, or it has no claim at
--     all and its last sign of life (last_step_at, else started_at) is older
--     than stale_after;
--   * queued, and its claim expired or was released;
--   * running or queued, and its claim is done or failed (finished by
--     another grant of the same key: nobody will ever finish the episode).
-- Never an orphan, whatever its claim: an available episode (run_after
-- set; see available.sql): it belongs to the pollers.
-- What a restart counts is Postgres's too: an orphan whose holder gave its
-- grant back (claim 'released'), or that no grant started since it was
-- last queued (episode 'queued': nothing ran), within attempts +
-- max_attempts grants of the key, restarts as the same attempt
-- (given_back); any other counts one. The listing's queued branch needs
-- only the bound.
--
-- Takeovers (ClaimForRecovery, RequeueOrphan) are a few statements in one
-- BEGIN IMMEDIATE transaction (adapters/sqlite, Store.inTx). Where Postgres
-- locks the claim row, then the episode row, FOR UPDATE, and re-checks both
-- on their latest committed versions, SQLite's single write lock, taken
-- before the first statement, is the lock: every statement reads the latest
-- committed rows and no other writer (another sweeper, the zombie owner
-- journaling, a poller) runs until the transaction ends. Everything that
-- decides is re-checked in the statements themselves. A statement that
-- matches nothing makes the adapter roll back the whole transaction.
--
-- Clock: CAST(round(unixepoch('subsec') * 1000) AS INTEGER), milliseconds,
-- read in the deciding statement. Scope: a sweep sees its own stack plus
-- unstamped rows (source_stack = ''), or every stack when it names none;
-- env is matched by strict equality, the unset env ('') its own world.

-- name: ListOrphanedEpisodes :many
-- Read-only listing; ClaimForRecovery and RequeueOrphan re-check
-- everything. Each branch is served by its partial index (running, queued),
-- and each episode's claim is one primary-key lookup (Postgres needs a
-- LATERAL ... LIMIT 1 for that; SQLite's planner does it for the join on
-- the primary key), so the cost follows the live work, not the history.
-- No claim row: claim_state '' (the lease column then repeats created_at).
-- given_back: its holder gave the grant back, within the free hand-backs
-- (see the top of this file).
SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
    e.max_attempts, e.source_stack, e.source_env, e.owner_node,
    coalesce(e.last_step_at, e.started_at, e.created_at) AS last_seen_at,
    coalesce(c.state, '') AS claim_state,
    coalesce(c.owner_node, '') AS claim_owner,
    coalesce(c.lease_until, e.created_at) AS claim_lease_until,
    CAST(coalesce(c.state = 'released' AND c.attempt <= e.attempts + e.max_attempts, 0) AS BOOLEAN) AS given_back
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
  ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.status = 'running'
  AND e.archived_at IS NULL
  AND (CAST(@source_stack AS TEXT) = '' OR e.source_stack IN (CAST(@source_stack AS TEXT), ''))
  AND e.source_env = CAST(@source_env AS TEXT)
  AND CASE
        WHEN c.dedupe_key IS NULL THEN coalesce(e.last_step_at, e.started_at, e.created_at)
            < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@stale_after_ms AS INTEGER)
        ELSE (c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
             OR c.state IN ('released', 'done', 'failed')
      END
  AND e.run_after IS NULL
UNION ALL
SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
    e.max_attempts, e.source_stack, e.source_env, e.owner_node,
    coalesce(e.last_step_at, e.started_at, e.created_at) AS last_seen_at,
    coalesce(c.state, '') AS claim_state,
    coalesce(c.owner_node, '') AS claim_owner,
    coalesce(c.lease_until, e.created_at) AS claim_lease_until,
    CAST(coalesce(c.attempt <= e.attempts + e.max_attempts, 0) AS BOOLEAN) AS given_back
FROM leasehold_episodes AS e
JOIN leasehold_work_claims AS c
  ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.status = 'queued'
  AND e.archived_at IS NULL
  AND (CAST(@source_stack AS TEXT) = '' OR e.source_stack IN (CAST(@source_stack AS TEXT), ''))
  AND e.source_env = CAST(@source_env AS TEXT)
  AND ((c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
       OR c.state IN ('released', 'done', 'failed'))
  AND e.run_after IS NULL
LIMIT CAST(@max_rows AS INTEGER);

-- name: ClaimForRecoveryGrant :one
-- ClaimForRecovery's first statement: grants one orphan's work claim to
-- owner_node (fence + 1, attempt + 1), deciding, on the latest committed
-- rows under the write lock, that it is an orphan:
--   * the episode is running or queued, not archived, and not available
--     (run_after IS NULL: available work is the pollers'): a zombie that
--     finished the episode before this transaction began made it terminal,
--     and nothing is granted;
--   * it has a claim row, or (claim-less) it is running and stale;
--   * the upsert takes over only a grant nobody can still use: an expired
--     or released one, or a done or failed one of a non-terminal episode
--     (finished by another grant of the key). A second sweeper, or the
--     original owner whose journal writes extended its lease, makes it match
--     nothing; an episode already being recovered holds a live lease and is
--     excluded the same way. Safe for done and failed too: the episode was
--     seen non-terminal in this transaction, so this is not the owner's own
--     finish (which ends the episode in the same transaction).
-- No row back: claims.ErrBusy. The new grant belongs to the sweeper, so a
-- restarted run holds the claim itself and never finds it busy.
INSERT INTO leasehold_work_claims AS c (
    dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
    attempt, fence, grant_kind, work_type
)
SELECT coalesce(e.dedupe_key, 'episode:' || e.id), 'claimed', CAST(@owner_node AS TEXT),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER), 1, 1, 'fresh', 'episode'
FROM leasehold_episodes AS e
WHERE e.id = CAST(@id AS INTEGER)
  AND e.archived_at IS NULL
  AND e.status IN ('running', 'queued')
  AND (
    EXISTS (SELECT 1 FROM leasehold_work_claims AS x
            WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id))
    OR (e.status = 'running'
        AND coalesce(e.last_step_at, e.started_at, e.created_at)
            < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@stale_after_ms AS INTEGER))
  )
  AND e.run_after IS NULL
ON CONFLICT (dedupe_key) DO UPDATE SET
    state             = 'claimed',
    owner_node        = excluded.owner_node,
    lease_until       = excluded.lease_until,
    claimed_at        = excluded.claimed_at,
    last_heartbeat_at = excluded.claimed_at,
    finished_at       = NULL,
    error_detail      = NULL,
    attempt           = c.attempt + 1,
    fence             = c.fence + 1,
    grant_kind        = CASE WHEN c.state = 'claimed' THEN 'steal' ELSE 'reclaim' END,
    work_type         = excluded.work_type
WHERE (c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
   OR c.state IN ('released', 'done', 'failed')
RETURNING dedupe_key, owner_node, fence, attempt, lease_until, claimed_at, grant_kind;

-- name: ClaimForRecovery :one
-- ClaimForRecovery's second statement: marks the orphan queued for
-- recovery under the grant just made (attempts + 1, owner the sweeper),
-- re-checking it is still running or queued and not archived, and that the
-- grant (key, owner, fence, claimed) is the one ClaimForRecoveryGrant made.
-- No row back: the adapter rolls back the grant too (claims.ErrBusy).
UPDATE leasehold_episodes
SET status     = 'queued',
    phase      = 'recovering',
    attempts   = attempts + 1,
    owner_node = CAST(@owner_node AS TEXT)
WHERE id = CAST(@id AS INTEGER)
  AND status IN ('running', 'queued')
  AND archived_at IS NULL
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER)
                AND c.state = 'claimed')
RETURNING id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key,
    attempts, max_attempts, source_stack, source_env, payload, created_at;

-- name: RequeueOrphanTarget :one
-- RequeueOrphan's first statement (recovery's restart, in one transaction:
-- the orphan becomes available work again instead of running on the
-- sweeping node, so recovered episodes flow to whichever full nodes have
-- free slots for their actor, never past an actor's MaxConcurrent). Reads,
-- under the write lock, whether the episode is an orphan this sweeper may
-- requeue: running or queued, not archived, not available (run_after IS
-- NULL; the pollers' already), a claim row or (claim-less) running and stale, its
-- attempts still the count the sweeper listed, and the attempt it would
-- start within max_attempts (attempts + 2 <= max_attempts, the attempt
-- after Attempt(); attempts + 1 <= max_attempts when given_back: the same
-- attempt again): an exhausted orphan is not requeued but failed, through
-- ClaimForRecovery and FinishEpisode. has_claim says whether
-- RequeueOrphanFence must fence out a claim, given_back (read before the
-- fence-out changes the claim) whether RequeueOrphan counts an attempt. No
-- row: claims.ErrBusy. The adapter also runs it once as a plain read before
-- the transaction, so that a sweeper that lost the race (three in four
-- do) does not take the write lock to find that out.
--
-- What keeps two sweepers from requeueing one orphan twice: the second,
-- serialized behind the first by the write lock, sees the episode the first
-- one made available (run_after set), and matches nothing here; and the
-- first changed attempts unless the grant was given back.
SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key,
    EXISTS (SELECT 1 FROM leasehold_work_claims AS x
            WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)) AS has_claim,
    CAST(coalesce((SELECT (x.state = 'released' OR e.status = 'queued')
                          AND x.attempt <= e.attempts + e.max_attempts
                   FROM leasehold_work_claims AS x
                   WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)), 0) AS BOOLEAN) AS given_back
FROM leasehold_episodes AS e
WHERE e.id = CAST(@id AS INTEGER)
  AND e.archived_at IS NULL
  AND e.status IN ('running', 'queued')
  AND e.attempts = CAST(@attempts AS INTEGER)
  AND e.attempts + CASE WHEN coalesce((SELECT (x.state = 'released' OR e.status = 'queued')
                          AND x.attempt <= e.attempts + e.max_attempts
                                       FROM leasehold_work_claims AS x
                                       WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)), 0)
                        THEN 1 ELSE 2 END <= e.max_attempts
  AND (
    EXISTS (SELECT 1 FROM leasehold_work_claims AS x
            WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id))
    OR (e.status = 'running'
        AND coalesce(e.last_step_at, e.started_at, e.created_at)
            < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@stale_after_ms AS INTEGER))
  )
  AND e.run_after IS NULL;

-- name: RequeueOrphanFence :one
-- RequeueOrphan's fence-out of the orphan's grant (when it has a claim):
-- released, fence + 1, so a zombie still running it writes nothing more.
-- It takes over only a grant nobody can still use, as ClaimForRecoveryGrant
-- does: an expired or released one, or a done or failed one. No row back: a
-- live grant (the owner journaled meanwhile); the adapter rolls back
-- (claims.ErrBusy).
UPDATE leasehold_work_claims
SET state       = 'released',
    owner_node  = CAST(@owner_node AS TEXT),
    lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    fence       = fence + 1,
    grant_kind  = CASE WHEN state = 'claimed' THEN 'steal' ELSE 'reclaim' END
WHERE dedupe_key = CAST(@claim_key AS TEXT)
  AND ((state = 'claimed' AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
       OR state IN ('released', 'done', 'failed'))
RETURNING dedupe_key;

-- name: RequeueOrphan :one
-- RequeueOrphan's episode write, after RequeueOrphanTarget (and, with a
-- claim, RequeueOrphanFence) matched: queued as its next attempt (attempts
-- + 1, phase recovering, no owner), or as the same attempt again when
-- RequeueOrphanTarget found the grant given back (given_back, read in this
-- transaction), and available, due at once (run_after), so whichever full
-- node has a free slot for its actor takes it (ClaimAvailable). The grant
-- RequeueOrphanFence fenced out is not live, so the available episode
-- keeps the invariant of available.sql. An orphan with a cancel request
-- ends canceled instead (class canceled) and is not made available.
-- Re-checks the attempts the sweeper listed, the status, archived_at and
-- that it is not available already.
UPDATE leasehold_episodes
SET status      = CASE WHEN cancel_requested_at IS NOT NULL THEN 'canceled' ELSE 'queued' END,
    phase       = CASE WHEN cancel_requested_at IS NOT NULL THEN NULL ELSE 'recovering' END,
    attempts    = CASE WHEN cancel_requested_at IS NOT NULL OR CAST(@given_back AS BOOLEAN) THEN attempts
                       ELSE attempts + 1 END,
    owner_node  = NULL,
    error_class = CASE WHEN cancel_requested_at IS NOT NULL THEN 'canceled' ELSE error_class END,
    finished_at = CASE WHEN cancel_requested_at IS NOT NULL
                       THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END,
    run_after   = CASE WHEN cancel_requested_at IS NULL
                       THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END
WHERE id = CAST(@id AS INTEGER)
  AND attempts = CAST(@attempts AS INTEGER)
  AND status IN ('running', 'queued')
  AND archived_at IS NULL
  AND run_after IS NULL
RETURNING id, status, attempts, max_attempts;

-- name: GetAgentRecoveryPolicy :one
-- The recovery policy of an expectation, as the nodes that run it recorded
-- it when they started (or as set for a dynamic actor), if any. A sweeper
-- on a node without the actor's code applies it; without a row it leaves
-- the orphan for a node that knows the policy.
SELECT recovery_policy
FROM leasehold_agent_definitions
WHERE actor_id = CAST(@actor_id AS TEXT) AND expectation_id = CAST(@expectation_id AS TEXT);

-- name: PutAgentDefinition :exec
-- Records (or changes) an expectation's recovery policy and max attempts:
-- every node upserts those of its registered expectations when it starts,
-- the last start winning (nodes of one deploy register the same actors).
INSERT INTO leasehold_agent_definitions (actor_id, expectation_id, recovery_policy, max_attempts)
VALUES (CAST(@actor_id AS TEXT), CAST(@expectation_id AS TEXT), CAST(@recovery_policy AS TEXT), sqlc.narg(max_attempts))
ON CONFLICT (actor_id, expectation_id) DO UPDATE
SET recovery_policy = excluded.recovery_policy, max_attempts = excluded.max_attempts,
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER);
