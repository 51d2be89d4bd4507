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
--     waiting for a slot and is never touched;
--   * running or queued, and its claim is done or failed. FinishEpisode
--     writes the episode's terminal status and the claim's final state in
--     one transaction, so such a claim was finished by another grant of the
--     same key (a direct claims user that held the key when the episode was
--     created, or stole it later) and nobody will ever finish the episode:
--     without this rule it would stay queued for ever and block its trigger.
-- Never an orphan, whatever its claim: an available episode (run_after set;
-- see available.sql), such as a deferred episode reusing an archived
-- episode's key, or one a failed attempt requeued (RetryEpisode released
-- its claim and made it due after its backoff). It belongs to the pollers
-- (ClaimAvailable, and ExpireAvailable), never to recovery.
-- All cut-offs are computed from SYSUTCDATETIME(), the database clock
-- (@stale_after_ms is cast to int for DATEADD: under about 24.8 days).
--
-- What a restart counts is Postgres's (see the top of its recovery.sql): an
-- orphan whose holder gave its grant back (claim 'released'), or that no
-- grant started since it was last queued (episode 'queued': nothing ran),
-- within attempts + max_attempts grants of the key, restarts as the same
-- attempt (given_back); any other counts one.
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
--
-- An available episode (run_after IS NOT NULL) is left out in both
-- branches, on the episode row itself. With READ_COMMITTED_SNAPSHOT OFF
-- the episode and its claim are not read at one instant, so a finish that
-- commits between the two reads can list an episode that has just ended
-- (its old status, its claim's new 'done'); ClaimForRecovery then finds it
-- terminal and answers busy. With RCSI ON, as on Postgres, the statement
-- reads one committed state and cannot.
SELECT TOP (@max_rows) o.id, o.actor_id, o.expectation_id, o.status, o.dedupe_key,
    o.attempts, o.max_attempts, o.source_stack, o.source_env, o.owner_node,
    o.last_seen_at, o.claim_state, o.claim_owner, o.claim_lease_until, o.given_back
FROM (
    SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
        e.max_attempts, e.source_stack, e.source_env, e.owner_node,
        COALESCE(e.last_step_at, e.started_at, e.created_at) AS last_seen_at,
        COALESCE(c.state, N'') AS claim_state,
        COALESCE(c.owner_node, N'') AS claim_owner,
        COALESCE(c.lease_until, e.created_at) AS claim_lease_until,
        CAST(CASE WHEN c.state = N'released' AND c.attempt <= e.attempts + e.max_attempts
                  THEN 1 ELSE 0 END AS bit) AS given_back
    FROM leasehold_episodes AS e
    OUTER APPLY (
        SELECT TOP (1) x.dedupe_key, x.state, x.owner_node, x.lease_until, x.attempt
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
            -- a claim: expired, released, or finished by another grant
         OR (c.state = N'claimed' AND c.lease_until <= SYSUTCDATETIME())
         OR c.state IN (N'released', N'done', N'failed')
      )
      -- never available work: the pollers'
      AND e.run_after IS NULL
    UNION ALL
    SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
        e.max_attempts, e.source_stack, e.source_env, e.owner_node,
        COALESCE(e.last_step_at, e.started_at, e.created_at) AS last_seen_at,
        COALESCE(c.state, N'') AS claim_state,
        COALESCE(c.owner_node, N'') AS claim_owner,
        COALESCE(c.lease_until, e.created_at) AS claim_lease_until,
        CAST(CASE WHEN c.attempt <= e.attempts + e.max_attempts
                  THEN 1 ELSE 0 END AS bit) AS given_back
    FROM leasehold_episodes AS e
    CROSS APPLY (
        SELECT TOP (1) x.dedupe_key, x.state, x.owner_node, x.lease_until, x.attempt
        FROM leasehold_work_claims AS x
        WHERE x.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
    ) AS c
    WHERE e.status = N'queued'
      AND e.archived_at IS NULL
      AND (@source_stack = N'' OR e.source_stack IN (@source_stack, N''))
      AND e.source_env = @source_env
      AND ((c.state = N'claimed' AND c.lease_until <= SYSUTCDATETIME()) OR c.state IN (N'released', N'done', N'failed'))
      AND e.run_after IS NULL
) AS o;

-- name: ClaimForRecovery :one
-- Takes one orphan over for @owner_node: grants its work claim (fence + 1,
-- attempt + 1, or a fresh claim) and marks the episode queued for recovery,
-- attempts + 1. The grant and the episode update commit together or not at
-- all: if the episode no longer qualifies when its row is locked, the grant
-- is rolled back and the result is empty.
--
-- Guarantee: exactly one caller wins per orphan, and work that finished
-- during the sweep is never reopened. The orphan is first read without
-- locks (as on Postgres), then everything that decides is re-checked under
-- locks, in one transaction, in lock order claim row then episode row (the
-- order of AppendStep and FinishEpisode, so recovery and a writer queue
-- rather than deadlock):
--   * the claim UPDATE re-checks, on the locked row, that nobody can still
--     use the grant: an expired ('claimed' and lease_until <= now) or a
--     'released' one, or a 'done' or 'failed' one of an episode that is not
--     available. A second sweeper, or the original owner whose journal
--     writes extend its lease, makes it match nothing; an episode already
--     being recovered holds a live lease and is excluded the same way;
--   * only when no claim row exists at all (a claim-less running episode,
--     found stale by the first read) is a fresh claim inserted;
--   * the episode UPDATE re-checks, on the row it locks, that the episode
--     is still running or queued, not archived and not available (run_after
--     IS NULL: available work is the pollers'); otherwise the whole grant
--     is rolled back. An UPDATE qualifies the rows it locks on their
--     latest committed version, READ_COMMITTED_SNAPSHOT ON or OFF (as in
--     AcquireClaim; docs/sqlserver.md, assumption 10).
-- The new grant belongs to the sweeper, so a restarted run holds the claim
-- itself and never finds it busy.
--
-- Why taking over a done or failed claim cannot reopen finished work (the
-- race River's rescuer once lost): the episode's own finish, FinishEpisode,
-- writes the claim's final state and the episode's terminal status in one
-- transaction, holding the claim row's lock from its claim UPDATE to its
-- COMMIT. If the owner finishes while this batch waits for the claim row,
-- this UPDATE sees 'done' and matches, but the episode UPDATE that follows
-- sees the terminal status the same commit wrote, matches nothing, and the
-- grant is rolled back. So a done or failed claim is only ever kept when
-- the episode is still non-terminal after the claim's finish committed:
-- the claim was finished by another grant of the key (a direct claims
-- user), and nobody else will ever finish the episode. Every other way an
-- episode ends (a cancel, ExpireAvailable) commits before this episode
-- UPDATE reads the row, or waits for this transaction and then sees the
-- fresh live grant.
--
-- The available exclusion (available work is the pollers': a deferred or
-- overflowing episode, perhaps reusing an archived episode's key whose
-- done claim is the archived run's, or one RetryEpisode requeued after a
-- failed attempt) is read twice: in the first, lock-free SELECT, so that
-- an available episode's claim row is never locked here (a poll locks the
-- episode row first and the claim row second), and again by the episode
-- UPDATE on its locked row. An episode becomes available only when it is
-- created so, or when the write that makes it so releases or ends its
-- grant (RetryEpisode, RequeueEpisode, RequeueOrphan); one made available
-- between the first read and the claim lock leaves a claim this batch may
-- take, and the episode UPDATE then finds run_after set and rolls the
-- grant back. A poll that picked that episode meanwhile and waits for the
-- claim row this batch holds, while this batch waits for the episode row,
-- is a deadlock, and the server makes one of the two the victim (1205:
-- rolled back whole and retried).
--
-- Hints: UPDLOCK, HOLDLOCK on the claim UPDATE and on the NOT EXISTS guard
-- of the insert, inside the transaction: the row (or, when the key is
-- absent, the key range) stays update-locked until COMMIT, so no other
-- session can insert or take the claim between the check and the write, and
-- two sweepers queue on the lock instead of deadlocking (two serializable
-- readers would both hold shared range locks and deadlock converting them).
--
-- Bound: sent behind BoundLockWait (bounds.sql) in the same call, so a
-- frozen holder of the claim or episode row makes it fail with 1222 after
-- @bound_ms (rolled back whole, retried) instead of hanging.
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
    trigger_ref    nvarchar(max) NULL,
    dedupe_key     nvarchar(512) NULL,
    attempts       int           NOT NULL,
    max_attempts   int           NOT NULL,
    source_stack   nvarchar(255) NOT NULL,
    source_env     nvarchar(255) NOT NULL,
    payload        nvarchar(max) NULL,
    created_at     datetime2(6)  NOT NULL
);

-- The orphan: a claim row exists for it (its state is re-checked under lock
-- below), or it is running without one and stale; never available work
-- (re-checked under lock below too).
SELECT @orphan_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
FROM leasehold_episodes AS e
WHERE e.id = @id
  AND e.archived_at IS NULL
  AND e.status IN (N'running', N'queued')
  AND e.run_after IS NULL
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

    -- attempt + 1 whatever the old state (recovery's rule: a recovered run
    -- is another try of the same work; AcquireClaim resets it after done).
    -- grant_kind: 'steal' from an expired grant, 'reclaim' from a released,
    -- done or failed one. SET reads the pre-update row.
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
      AND ((state = N'claimed' AND lease_until <= SYSUTCDATETIME())
           OR state IN (N'released', N'done', N'failed'));

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

    -- The episode, re-checked on its latest committed version under its
    -- row lock, after the claim row's: this is what keeps a claim finished
    -- by the episode's own FinishEpisode from being taken over (above).
    UPDATE leasehold_episodes
    SET status     = N'queued',
        phase      = N'recovering',
        attempts   = attempts + 1,
        owner_node = @owner_node
    OUTPUT inserted.id, inserted.actor_id, inserted.expectation_id, inserted.trigger_type,
        inserted.trigger_ref, inserted.dedupe_key, inserted.attempts, inserted.max_attempts, inserted.source_stack,
        inserted.source_env, inserted.payload, inserted.created_at
    INTO @recovered
    WHERE id = @id
      AND status IN (N'running', N'queued')
      AND archived_at IS NULL
      AND run_after IS NULL
      AND EXISTS (SELECT 1 FROM @grant);

    IF EXISTS (SELECT 1 FROM @recovered)
        COMMIT TRANSACTION;
    ELSE
        ROLLBACK TRANSACTION;
END;

-- Table variables keep their rows across ROLLBACK; @recovered is empty
-- whenever the transaction was rolled back, so this is empty too.
SELECT r.id, r.actor_id, r.expectation_id, r.trigger_type, r.trigger_ref, r.dedupe_key,
    r.attempts, r.max_attempts, r.source_stack, r.source_env, r.payload,
    r.created_at, g.dedupe_key AS claim_key, g.fence,
    g.attempt AS claim_attempt, g.lease_until, g.claimed_at, g.grant_kind
FROM @recovered AS r
CROSS JOIN @grant AS g;

-- name: RequeueOrphan :one
-- Recovery's restart, as sql/queries/postgres/recovery.sql's RequeueOrphan:
-- the orphan becomes available work again (its grant fenced out: released,
-- fence + 1; the episode queued, phase recovering, no owner, as its next
-- attempt, or as the same attempt again when its holder gave the grant
-- back; available, due at once: run_after), so any full node with a free
-- slot for its actor takes it (ClaimAvailable), never past an actor's
-- MaxConcurrent. An orphan with a cancel request ends canceled instead and
-- is not made available. No row: not an orphan (any more),
-- taken by another sweeper, or exhausted (attempts + 2 > max_attempts,
-- attempts + 1 when given back: recovery fails those through
-- ClaimForRecovery).
--
-- Guarantee: exactly ClaimForRecovery's (see there for the reasoning, the
-- hints and the lock order, claim row then episode row): the first,
-- lock-free read finds the orphan and leaves out available work; the claim
-- UPDATE WITH (UPDLOCK, HOLDLOCK) re-checks on the locked row that nobody
-- can still use the grant, and its OUTPUT deleted.* says whether the
-- holder had given the grant back (@given_back); a claim-less episode (no
-- claim row at all, re-read under the same key-range lock) needs no
-- fencing; the episode UPDATE re-checks status, archive, attempts and that
-- the episode is not available (run_after IS NULL) on its latest committed
-- version; anything that matches nothing rolls the whole transaction back.
-- A second sweeper that waited for the first on the claim row finds a
-- released claim, takeable; the first's run_after, on the episode row its
-- UPDATE locks, tells it the orphan was requeued already (the first's
-- attempts + 1 does too, unless the grant had been given back), whether or
-- not that requeue counted an attempt. The Postgres statement's
-- RequeueOrphanLock has no T-SQL counterpart (sql/queries/dialects.go):
-- the episode UPDATE here qualifies the row on its latest committed
-- version.
--
-- Bound: sent behind BoundLockWait (bounds.sql) in the same call, like
-- ClaimForRecovery.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @orphan_key nvarchar(512);
DECLARE @given_back bit = 0;
DECLARE @fenced TABLE (dedupe_key nvarchar(512) NOT NULL, was_state nvarchar(32) NOT NULL, was_attempt int NOT NULL);
DECLARE @episode TABLE (
    id           bigint       NOT NULL,
    attempts     int          NOT NULL,
    max_attempts int          NOT NULL,
    status       nvarchar(32) NOT NULL
);

SELECT @orphan_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
FROM leasehold_episodes AS e
WHERE e.id = @id
  AND e.archived_at IS NULL
  AND e.status IN (N'running', N'queued')
  AND e.run_after IS NULL
  AND e.attempts = @attempts
  -- The exact bound (+ 1 given back, + 2 otherwise) is checked under the
  -- lock below, once the claim row says which.
  AND e.attempts + 1 <= e.max_attempts
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

    -- SET reads the pre-update row; so does OUTPUT deleted.*.
    UPDATE leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
    SET state       = N'released',
        owner_node  = @owner_node,
        lease_until = SYSUTCDATETIME(),
        finished_at = SYSUTCDATETIME(),
        fence       = fence + 1,
        grant_kind  = CASE WHEN state = N'claimed' THEN N'steal' ELSE N'reclaim' END
    OUTPUT inserted.dedupe_key, deleted.state AS was_state, deleted.attempt AS was_attempt INTO @fenced
    WHERE dedupe_key = @orphan_key
      AND ((state = N'claimed' AND lease_until <= SYSUTCDATETIME())
           OR state IN (N'released', N'done', N'failed'));

    -- Given back: released by its holder, or never started under any grant
    -- since it was last queued, within the free hand-backs.
    SELECT @given_back = CASE WHEN (f.was_state = N'released' OR e.status = N'queued')
                                   AND f.was_attempt <= e.attempts + e.max_attempts
                              THEN 1 ELSE 0 END
    FROM @fenced AS f
    JOIN leasehold_episodes AS e WITH (UPDLOCK, HOLDLOCK) ON e.id = @id;

    -- A claim row that was not fenced is a grant somebody can still use:
    -- nothing is taken over.
    IF EXISTS (SELECT 1 FROM @fenced)
       OR NOT EXISTS (SELECT 1 FROM leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
                      WHERE dedupe_key = @orphan_key)
        UPDATE leasehold_episodes
        SET status      = CASE WHEN cancel_requested_at IS NOT NULL THEN N'canceled' ELSE N'queued' END,
            phase       = CASE WHEN cancel_requested_at IS NOT NULL THEN NULL ELSE N'recovering' END,
            attempts    = CASE WHEN cancel_requested_at IS NOT NULL OR @given_back = 1 THEN attempts
                               ELSE attempts + 1 END,
            owner_node  = NULL,
            error_class = CASE WHEN cancel_requested_at IS NOT NULL THEN N'canceled' ELSE error_class END,
            finished_at = CASE WHEN cancel_requested_at IS NOT NULL THEN SYSUTCDATETIME() END,
            run_after   = CASE WHEN cancel_requested_at IS NULL THEN SYSUTCDATETIME() END
        OUTPUT inserted.id, inserted.attempts, inserted.max_attempts, inserted.status
        INTO @episode
        WHERE id = @id
          AND status IN (N'running', N'queued')
          AND archived_at IS NULL
          AND run_after IS NULL
          AND attempts = @attempts
          AND attempts + CASE WHEN @given_back = 1 THEN 1 ELSE 2 END <= max_attempts;

    IF EXISTS (SELECT 1 FROM @episode)
        COMMIT TRANSACTION;
    ELSE
        ROLLBACK TRANSACTION;
END;

-- @episode is empty whenever the transaction was rolled back: answer only
-- for a committed requeue or cancel.
SELECT e.id, e.status, e.attempts, e.max_attempts
FROM @episode AS e;

-- name: GetAgentRecoveryPolicy :one
-- The recovery policy of an expectation, as the nodes that run it recorded
-- it when they started (or as set for a dynamic actor), if any. A sweeper
-- on a node without the actor's code applies it; without a row it leaves
-- the orphan for a node that knows the policy.
SELECT recovery_policy
FROM leasehold_agent_definitions
WHERE actor_id = @actor_id AND expectation_id = @expectation_id;

-- name: PutAgentDefinition :exec
-- Records (or changes) an expectation's recovery policy and max attempts
-- (every node upserts those of its registered expectations when it starts,
-- the last start winning): the upsert of
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
    max_attempts    = @max_attempts,
    updated_at      = SYSUTCDATETIME()
WHERE actor_id = @actor_id AND expectation_id = @expectation_id;

IF @@ROWCOUNT = 0
    INSERT INTO leasehold_agent_definitions (actor_id, expectation_id, recovery_policy, max_attempts)
    VALUES (@actor_id, @expectation_id, @recovery_policy, @max_attempts);

COMMIT TRANSACTION;
