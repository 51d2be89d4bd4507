-- Findings: facts raised and cleared by episodes, one active finding per key
-- per env (the filtered unique index leasehold_findings_active_key_idx)
-- (T-SQL).
--
-- The statements of sql/queries/postgres/findings.sql, one for one: same
-- names, kinds, @parameters and result columns. NOT EXECUTED IN THIS
-- REPOSITORY'S CI (no SQL Server there); statically checked only, see
-- docs/sqlserver.md.
--
-- Every write is made on behalf of a running episode and is fenced on its
-- work claim (claim key, owner, fence, claimed): a zombie whose lease was
-- stolen raises, updates and clears nothing. The claim must be the episode's
-- own (its dedupe key, or episode:{id}) and the episode must run, unarchived,
-- under the same owner, as for AppendStep: a live claim on some other key
-- grants nothing here. A finding takes its env and stack from the episode
-- row, never from the caller, so an episode of env "rc" can only touch env
-- "rc".
--
-- The fence check is a locking read of the claim row, WITH (UPDLOCK,
-- ROWLOCK), first in an explicit transaction, as the journal writes lock it
-- (StartEpisode, AppendStep): whatever READ_COMMITTED_SNAPSHOT says, it reads
-- the current row, and its update lock is held until COMMIT, so a steal (an
-- UPDATE of the claim row) waits for a write already admitted and every
-- write after the steal sees the new fence. Postgres takes FOR SHARE, which
-- lets two fenced writes of one run proceed side by side; here they queue.
-- The episode row is then read without a hint: its status and owner change
-- only through a claim write (FinishEpisode, ClaimForRecovery), which the
-- held lock keeps out. Lock order: claim row, episode row, finding row, as
-- in AppendStep.
--
-- lease_held is 1 when the fence check passed and the episode qualified, 0
-- when nothing was written because of them; all times are SYSUTCDATETIME().

-- name: RaiseFinding :one
-- Raises the finding @finding_key in the episode's env: inserts it, or, when
-- it is already active, refreshes its details and counts the raise.
--
-- Guarantee: of concurrent raises of one (env, key), exactly one inserts and
-- the others update that row; none fails. This is the UPDATE-then-INSERT
-- upsert under UPDLOCK, HOLDLOCK (not MERGE, whose match phase is not
-- isolated): the UPDATE seeks the filtered unique index for (env, key,
-- active) and keeps the row, or the empty key range when there is none,
-- update-locked until COMMIT, so a second raiser queues on that lock and,
-- once the first commits, finds and updates the row the first inserted. A
-- clear of the same finding queues the same way. The INSERT runs only when
-- the UPDATE matched nothing.
--
-- Duplicates: none can occur while the key range is held; a 2601 from the
-- filtered unique index would be LEFT TO SURFACE (XACT_ABORT rolls back);
-- the adapter then sends the batch once more, which updates the row the
-- other raiser inserted.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @held bit = 0;
DECLARE @ep_id bigint;
DECLARE @ep_actor nvarchar(255);
DECLARE @ep_stack nvarchar(255);
DECLARE @ep_env nvarchar(255);
DECLARE @raised TABLE (
    id                 bigint        NOT NULL,
    finding_key        nvarchar(512) NOT NULL,
    env                nvarchar(255) NOT NULL,
    status             nvarchar(16)  NOT NULL,
    class              nvarchar(128) NOT NULL,
    severity           nvarchar(32)  NOT NULL,
    summary            nvarchar(max) NOT NULL,
    data               nvarchar(max) NULL,
    actor_id           nvarchar(255) NOT NULL,
    source_stack       nvarchar(255) NOT NULL,
    raised_by_episode  bigint        NOT NULL,
    updated_by_episode bigint        NOT NULL,
    raise_count        int           NOT NULL,
    raised_at          datetime2(6)  NOT NULL,
    updated_at         datetime2(6)  NOT NULL
);

BEGIN TRANSACTION;

SELECT @held = 1
FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)
WHERE c.dedupe_key = @claim_key
  AND c.owner_node = @owner_node
  AND c.fence = @fence
  AND c.state = N'claimed';

IF @held = 1
    SELECT @ep_id = e.id, @ep_actor = e.actor_id, @ep_stack = e.source_stack,
        @ep_env = e.source_env
    FROM leasehold_episodes AS e
    WHERE e.id = @episode_id
      AND e.status = N'running'
      AND e.archived_at IS NULL
      AND e.owner_node = @owner_node
      AND COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id)) = @claim_key;

IF @ep_id IS NOT NULL
BEGIN
    UPDATE leasehold_findings WITH (UPDLOCK, HOLDLOCK)
    SET class              = @class,
        severity           = @severity,
        summary            = @summary,
        data               = @data,
        updated_by_episode = @ep_id,
        raise_count        = raise_count + 1,
        updated_at         = SYSUTCDATETIME()
    OUTPUT inserted.id, inserted.finding_key, inserted.env, inserted.status, inserted.class,
        inserted.severity, inserted.summary, inserted.data, inserted.actor_id,
        inserted.source_stack, inserted.raised_by_episode, inserted.updated_by_episode,
        inserted.raise_count, inserted.raised_at, inserted.updated_at
    INTO @raised
    WHERE env = @ep_env
      AND finding_key = @finding_key
      AND status = N'active';

    IF NOT EXISTS (SELECT 1 FROM @raised)
        INSERT INTO leasehold_findings (
            finding_key, env, status, class, severity, summary, data, actor_id,
            source_stack, raised_by_episode, updated_by_episode, raise_count,
            raised_at, updated_at
        )
        OUTPUT inserted.id, inserted.finding_key, inserted.env, inserted.status, inserted.class,
            inserted.severity, inserted.summary, inserted.data, inserted.actor_id,
            inserted.source_stack, inserted.raised_by_episode, inserted.updated_by_episode,
            inserted.raise_count, inserted.raised_at, inserted.updated_at
        INTO @raised
        VALUES (
            @finding_key, @ep_env, N'active', @class, @severity, @summary, @data, @ep_actor,
            @ep_stack, @ep_id, @ep_id, 1, SYSUTCDATETIME(), SYSUTCDATETIME()
        );
END;

COMMIT TRANSACTION;

-- Always one row: lease_held, then the finding, or NULLs when not held.
SELECT CAST(CASE WHEN @ep_id IS NULL THEN 0 ELSE 1 END AS int) AS lease_held,
    f.id, f.finding_key, f.env, f.status, f.class, f.severity, f.summary, f.data,
    f.actor_id, f.source_stack, f.raised_by_episode, f.updated_by_episode,
    f.raise_count, f.raised_at, f.updated_at
FROM (SELECT 1 AS one) AS one
LEFT JOIN @raised AS f ON 1 = 1;

-- name: UpdateFinding :one
-- Changes the details of the active finding @finding_key in the episode's
-- env without counting a raise. lease_held 0: fence check failed; updated
-- 0: no such active finding. Nothing is created.
--
-- Guarantee: fenced as above; the finding UPDATE locks the row it changes
-- (UPDLOCK, ROWLOCK), so it is ordered against a concurrent raise or clear
-- of the same finding and re-checks status = active on the current row.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @held bit = 0;
DECLARE @ep_id bigint;
DECLARE @ep_env nvarchar(255);
DECLARE @updated TABLE (id bigint NOT NULL);

BEGIN TRANSACTION;

SELECT @held = 1
FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)
WHERE c.dedupe_key = @claim_key
  AND c.owner_node = @owner_node
  AND c.fence = @fence
  AND c.state = N'claimed';

IF @held = 1
    SELECT @ep_id = e.id, @ep_env = e.source_env
    FROM leasehold_episodes AS e
    WHERE e.id = @episode_id
      AND e.status = N'running'
      AND e.archived_at IS NULL
      AND e.owner_node = @owner_node
      AND COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id)) = @claim_key;

IF @ep_id IS NOT NULL
    UPDATE leasehold_findings WITH (UPDLOCK, ROWLOCK)
    SET severity           = @severity,
        summary            = @summary,
        data               = @data,
        updated_by_episode = @ep_id,
        updated_at         = SYSUTCDATETIME()
    OUTPUT inserted.id INTO @updated
    WHERE env = @ep_env
      AND finding_key = @finding_key
      AND status = N'active';

COMMIT TRANSACTION;

SELECT CAST(CASE WHEN @ep_id IS NULL THEN 0 ELSE 1 END AS int) AS lease_held,
    CAST((SELECT COUNT(*) FROM @updated) AS int) AS updated;

-- name: ClearFinding :one
-- Clears the active finding @finding_key in the episode's env; the row
-- stays as history and leaves the filtered unique index, so the key can be
-- raised again. lease_held 0: fence check failed; cleared 0: nothing was
-- active.
--
-- Guarantee: fenced as above; the UPDATE locks the row it clears (UPDLOCK,
-- ROWLOCK) and re-checks status = active on it, so of two concurrent clears
-- one reports cleared 1 and the other 0, and a raise waiting on the row
-- finds no active finding once the clear commits and inserts a new one.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @held bit = 0;
DECLARE @ep_id bigint;
DECLARE @ep_env nvarchar(255);
DECLARE @cleared TABLE (id bigint NOT NULL);

BEGIN TRANSACTION;

SELECT @held = 1
FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)
WHERE c.dedupe_key = @claim_key
  AND c.owner_node = @owner_node
  AND c.fence = @fence
  AND c.state = N'claimed';

IF @held = 1
    SELECT @ep_id = e.id, @ep_env = e.source_env
    FROM leasehold_episodes AS e
    WHERE e.id = @episode_id
      AND e.status = N'running'
      AND e.archived_at IS NULL
      AND e.owner_node = @owner_node
      AND COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id)) = @claim_key;

IF @ep_id IS NOT NULL
    UPDATE leasehold_findings WITH (UPDLOCK, ROWLOCK)
    SET status             = N'cleared',
        cleared_by_episode = @ep_id,
        cleared_at         = SYSUTCDATETIME(),
        updated_at         = SYSUTCDATETIME()
    OUTPUT inserted.id INTO @cleared
    WHERE env = @ep_env
      AND finding_key = @finding_key
      AND status = N'active';

COMMIT TRANSACTION;

SELECT CAST(CASE WHEN @ep_id IS NULL THEN 0 ELSE 1 END AS int) AS lease_held,
    CAST((SELECT COUNT(*) FROM @cleared) AS int) AS cleared;

-- name: ListActiveFindings :many
-- The active findings of one env (strict equality; N'' is the unset env),
-- optionally narrowed by class, actor and key; oldest first. Read-only, no
-- lock hint (and no NOLOCK).
SELECT TOP (@max_rows) f.id, f.finding_key, f.env, f.status, f.class, f.severity,
    f.summary, f.data, f.actor_id, f.source_stack, f.raised_by_episode,
    f.updated_by_episode, f.raise_count, f.raised_at, f.updated_at
FROM leasehold_findings AS f
WHERE f.status = N'active'
  AND f.env = @env
  AND (@class = N'' OR f.class = @class)
  AND (@actor_id = N'' OR f.actor_id = @actor_id)
  AND (@finding_key = N'' OR f.finding_key = @finding_key)
ORDER BY f.raised_at, f.id;
