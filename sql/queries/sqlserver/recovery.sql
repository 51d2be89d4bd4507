-- Recovery: finding orphaned episodes and taking each over exactly once
-- (T-SQL).
--
-- The statements of sql/queries/postgres/recovery.sql, one for one: same
-- names, kinds, @parameters and result columns. NOT EXECUTED IN THIS
-- REPOSITORY'S CI (no SQL Server there); statically checked only, see
-- docs/sqlserver.md.
--
-- An episode is orphaned when nobody holds a live lease on it:
--   * running, and its claim expired or was released, or it has no claim at
--     all and its last sign of life (last_step_at, else started_at) is older
--     than @stale_after_ms;
--   * queued, and its claim expired or was released: the node that held it
--     in its slot queue is gone. A queued episode whose claim is live is
--     waiting for a slot and is never touched.
-- All cut-offs are computed from SYSUTCDATETIME(), the database clock
-- (@stale_after_ms is cast to int for DATEADD: under about 24.8 days).
--
-- Scope: a sweep sees its own stack plus unstamped rows (source_stack = N''),
-- or every stack when it names none; env is matched by strict equality, the
-- unset env (N'') being its own world. The key columns use a binary
-- collation, so equality is exact as on Postgres.
--
-- An episode without a dedupe key is claimed under the key 'episode:<id>'
-- (CONCAT gives the same text as Postgres's 'episode:' || id).

-- name: ListOrphanedEpisodes :many
-- Read-only listing; ClaimForRecovery re-checks everything under the row
-- lock, so this needs no lock hint (and must not use NOLOCK, which could
-- list an episode from a write that later rolled back). Each branch repeats
-- its filtered index's predicate as literals (status = N'running' AND
-- archived_at IS NULL; status = N'queued'), and each episode's claim is one
-- primary-key lookup: APPLY with TOP (1), like Postgres's LATERAL ... LIMIT
-- 1, asks for a correlated seek per episode rather than a join over the
-- whole claims table (which keeps every finished claim), so the cost
-- follows the live work, not the history. Like Postgres's LIMIT without
-- ORDER BY, TOP (@max_rows) takes any @max_rows orphans.
--
-- No claim row: claim_state and claim_owner are N'' and claim_lease_until
-- repeats created_at, exactly as on Postgres (never NULL).
SELECT TOP (@max_rows) o.id, o.actor_id, o.expectation_id, o.status, o.dedupe_key,
    o.attempts, o.max_attempts, o.source_stack, o.source_env, o.owner_node,
    o.last_seen_at, o.claim_state, o.claim_owner, o.claim_lease_until
FROM (
    SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
        e.max_attempts, e.source_stack, e.source_env, e.owner_node,
        COALESCE(e.last_step_at, e.started_at, e.created_at) AS last_seen_at,
        COALESCE(c.state, N'') AS claim_state,
        COALESCE(c.owner_node, N'') AS claim_owner,
        COALESCE(c.lease_until, e.created_at) AS claim_lease_until
    FROM leasehold_episodes AS e
    OUTER APPLY (
        SELECT TOP (1) x.dedupe_key, x.state, x.owner_node, x.lease_until
        FROM leasehold_work_claims AS x
        WHERE x.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
    ) AS c
    WHERE e.status = N'running'
      AND e.archived_at IS NULL
      AND (@source_stack = N'' OR e.source_stack IN (@source_stack, N''))
      AND e.source_env = @source_env
      AND (
            -- no claim at all: stale by its last sign of life
            (c.dedupe_key IS NULL
             AND COALESCE(e.last_step_at, e.started_at, e.created_at)
                 < DATEADD(millisecond, -CAST(@stale_after_ms AS int), SYSUTCDATETIME()))
            -- a claim: expired or released
         OR (c.state = N'claimed' AND c.lease_until <= SYSUTCDATETIME())
         OR c.state = N'released'
      )
    UNION ALL
    SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
        e.max_attempts, e.source_stack, e.source_env, e.owner_node,
        COALESCE(e.last_step_at, e.started_at, e.created_at) AS last_seen_at,
        COALESCE(c.state, N'') AS claim_state,
        COALESCE(c.owner_node, N'') AS claim_owner,
        COALESCE(c.lease_until, e.created_at) AS claim_lease_until
    FROM leasehold_episodes AS e
    CROSS APPLY (
        SELECT TOP (1) x.dedupe_key, x.state, x.owner_node, x.lease_until
        FROM leasehold_work_claims AS x
        WHERE x.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
    ) AS c
    WHERE e.status = N'queued'
      AND e.archived_at IS NULL
      AND (@source_stack = N'' OR e.source_stack IN (@source_stack, N''))
      AND e.source_env = @source_env
      AND ((c.state = N'claimed' AND c.lease_until <= SYSUTCDATETIME()) OR c.state = N'released')
) AS o;

-- name: ClaimForRecovery :one
-- Takes one orphan over for @owner_node: grants its work claim (fence + 1,
-- attempt + 1, or a fresh claim) and marks the episode queued for recovery,
-- attempts + 1. The grant and the episode update commit together or not at
-- all: if the episode no longer qualifies when its row is locked, the grant
-- is rolled back and the result is empty.
--
-- Guarantee: exactly one caller wins per orphan. The orphan is first read
-- without locks (as on Postgres), then everything that decides is re-checked
-- under locks, in one transaction:
--   * the claim UPDATE re-checks, on the locked row, that no live lease
--     exists. Only an expired ('claimed' and lease_until <= now) or a
--     'released' grant is taken over, never a done or failed one: if the
--     owner finished the episode while this batch waited for the claim row,
--     the re-check sees its final state and matches nothing (the race
--     River's rescuer once lost). A second sweeper, or the original owner
--     whose journal writes extend its lease, makes it match nothing; an
--     episode already being recovered holds a live lease and is excluded the
--     same way;
--   * only when no claim row exists at all (a claim-less running episode,
--     found stale by the first read) is a fresh claim inserted;
--   * the episode UPDATE re-checks status and archival on the locked row.
-- The new grant belongs to the sweeper, so a restarted run holds the claim
-- itself and never finds it busy.
--
-- Hints: UPDLOCK, HOLDLOCK on the claim UPDATE and on the NOT EXISTS guard
-- of the insert, inside the transaction: the row (or, when the key is
-- absent, the key range) stays update-locked until COMMIT, so no other
-- session can insert or take the claim between the check and the write, and
-- two sweepers queue on the lock instead of deadlocking (two serializable
-- readers would both hold shared range locks and deadlock converting them).
-- Lock order: claim row, then episode row, as in AppendStep and
-- FinishEpisode.
--
-- Duplicates: the fresh-claim INSERT cannot meet a duplicate while the key
-- range is held; a 2601/2627 would be LEFT TO SURFACE, and XACT_ABORT rolls
-- back the whole transaction.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @orphan_key nvarchar(512);
DECLARE @grant TABLE (
    dedupe_key  nvarchar(512) NOT NULL,
    fence       bigint        NOT NULL,
    attempt     int           NOT NULL,
    lease_until datetime2(6)  NOT NULL,
    claimed_at  datetime2(6)  NOT NULL,
    grant_kind  nvarchar(16)  NOT NULL
);
DECLARE @recovered TABLE (
    id             bigint        NOT NULL,
    actor_id       nvarchar(255) NOT NULL,
    expectation_id nvarchar(255) NOT NULL,
    trigger_type   nvarchar(32)  NOT NULL,
    dedupe_key     nvarchar(512) NULL,
    attempts       int           NOT NULL,
    max_attempts   int           NOT NULL,
    source_stack   nvarchar(255) NOT NULL,
    source_env     nvarchar(255) NOT NULL,
    payload        nvarchar(max) NULL,
    created_at     datetime2(6)  NOT NULL
);

-- The orphan: a claim row exists for it (its state is re-checked under lock
-- below), or it is running without one and stale.
SELECT @orphan_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
FROM leasehold_episodes AS e
WHERE e.id = @id
  AND e.archived_at IS NULL
  AND e.status IN (N'running', N'queued')
  AND (
        EXISTS (SELECT 1 FROM leasehold_work_claims AS x
                WHERE x.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id)))
     OR (e.status = N'running'
         AND COALESCE(e.last_step_at, e.started_at, e.created_at)
             < DATEADD(millisecond, -CAST(@stale_after_ms AS int), SYSUTCDATETIME()))
  );

IF @orphan_key IS NOT NULL
BEGIN
    BEGIN TRANSACTION;

    UPDATE leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
    SET state             = N'claimed',
        owner_node        = @owner_node,
        lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
        claimed_at        = SYSUTCDATETIME(),
        last_heartbeat_at = SYSUTCDATETIME(),
        finished_at       = NULL,
        error_detail      = NULL,
        attempt           = attempt + 1,
        fence             = fence + 1,
        grant_kind        = CASE WHEN state = N'claimed' THEN N'steal' ELSE N'reclaim' END,
        work_type         = N'episode'
    OUTPUT inserted.dedupe_key, inserted.fence, inserted.attempt, inserted.lease_until,
        inserted.claimed_at, inserted.grant_kind
    INTO @grant
    WHERE dedupe_key = @orphan_key
      AND ((state = N'claimed' AND lease_until <= SYSUTCDATETIME()) OR state = N'released');

    IF NOT EXISTS (SELECT 1 FROM @grant)
        INSERT INTO leasehold_work_claims (
            dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
            attempt, fence, grant_kind, work_type
        )
        OUTPUT inserted.dedupe_key, inserted.fence, inserted.attempt, inserted.lease_until,
            inserted.claimed_at, inserted.grant_kind
        INTO @grant
        SELECT @orphan_key, N'claimed', @owner_node,
            DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
            SYSUTCDATETIME(), SYSUTCDATETIME(), 1, 1, N'fresh', N'episode'
        WHERE NOT EXISTS (SELECT 1 FROM leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
                          WHERE dedupe_key = @orphan_key);

    UPDATE leasehold_episodes
    SET status     = N'queued',
        phase      = N'recovering',
        attempts   = attempts + 1,
        owner_node = @owner_node
    OUTPUT inserted.id, inserted.actor_id, inserted.expectation_id, inserted.trigger_type,
        inserted.dedupe_key, inserted.attempts, inserted.max_attempts, inserted.source_stack,
        inserted.source_env, inserted.payload, inserted.created_at
    INTO @recovered
    WHERE id = @id
      AND status IN (N'running', N'queued')
      AND archived_at IS NULL
      AND EXISTS (SELECT 1 FROM @grant);

    IF EXISTS (SELECT 1 FROM @recovered)
        COMMIT TRANSACTION;
    ELSE
        ROLLBACK TRANSACTION;
END;

-- Table variables keep their rows across ROLLBACK; @recovered is empty
-- whenever the transaction was rolled back, so this is empty too.
SELECT r.id, r.actor_id, r.expectation_id, r.trigger_type, r.dedupe_key,
    r.attempts, r.max_attempts, r.source_stack, r.source_env, r.payload,
    r.created_at, g.dedupe_key AS claim_key, g.fence,
    g.attempt AS claim_attempt, g.lease_until, g.claimed_at, g.grant_kind
FROM @recovered AS r
CROSS JOIN @grant AS g;

-- name: GetAgentRecoveryPolicy :one
-- The recovery policy of a dynamic actor's expectation, if defined.
SELECT recovery_policy
FROM leasehold_agent_definitions
WHERE actor_id = @actor_id AND expectation_id = @expectation_id;

-- name: PutAgentDefinition :exec
-- Records (or changes) a dynamic actor's recovery policy: the upsert of
-- Postgres's ON CONFLICT DO UPDATE, without MERGE (whose match phase is not
-- isolated). UPDLOCK, HOLDLOCK on the UPDATE inside the transaction keep the
-- key (present or absent) update-locked until COMMIT: concurrent writers of
-- one key queue instead of both inserting or deadlocking, and the INSERT
-- runs only when the key is absent. @@ROWCOUNT is read right after the
-- UPDATE for control flow only; the batch returns no result set.
--
-- Duplicates: none can occur while the key range is held; a 2627 would be
-- LEFT TO SURFACE (XACT_ABORT rolls back).
SET NOCOUNT ON;
SET XACT_ABORT ON;

BEGIN TRANSACTION;

UPDATE leasehold_agent_definitions WITH (UPDLOCK, HOLDLOCK)
SET recovery_policy = @recovery_policy,
    updated_at      = SYSUTCDATETIME()
WHERE actor_id = @actor_id AND expectation_id = @expectation_id;

IF @@ROWCOUNT = 0
    INSERT INTO leasehold_agent_definitions (actor_id, expectation_id, recovery_policy)
    VALUES (@actor_id, @expectation_id, @recovery_policy);

COMMIT TRANSACTION;
