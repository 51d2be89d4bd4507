-- Membership: advisory rows describing the nodes that share this database
-- (T-SQL).
--
-- The statements of sql/queries/postgres/nodes.sql, one for one: same names,
-- kinds, @parameters and result columns. NOT EXECUTED IN THIS REPOSITORY'S
-- CI (no SQL Server there); statically checked only, see docs/sqlserver.md.
--
-- Nothing here grants authority (leases and fences do); heartbeat_at is the
-- database clock's record of a node's last sign of life, SYSUTCDATETIME().
-- A membership row may be stale, missing or recreated without any effect on
-- correctness, so these statements need no fencing.

-- name: RegisterNode :exec
-- A node announces itself on start: a restarted node with the same
-- identity replaces its old row (started_at is reset, draining cleared).
-- @runnable is the (actor, expectation) pairs its poller asks work for, the
-- nvarchar(max) JSON array of ClaimAvailable's @runnable
-- (episodes.RunnableJSON).
--
-- The upsert of Postgres's INSERT ... ON CONFLICT DO UPDATE, without MERGE,
-- as PutAgentDefinition does it: UPDLOCK, HOLDLOCK on the UPDATE inside the
-- transaction keep the key (present or absent) update-locked until COMMIT,
-- so two registrations of one node queue instead of both inserting, and the
-- INSERT runs only when the key is absent. @@ROWCOUNT is read right after
-- the UPDATE for control flow only; the batch returns no result set.
--
-- Duplicates: none can occur while the key range is held; a 2627 would be
-- LEFT TO SURFACE (XACT_ABORT rolls back).
SET NOCOUNT ON;
SET XACT_ABORT ON;

BEGIN TRANSACTION;

UPDATE leasehold_nodes WITH (UPDLOCK, HOLDLOCK)
SET stack        = @stack,
    env          = @env,
    mode         = @mode,
    runnable     = @runnable,
    key_version  = @key_version,
    draining     = 0,
    started_at   = SYSUTCDATETIME(),
    heartbeat_at = SYSUTCDATETIME()
WHERE node_id = @node_id;

IF @@ROWCOUNT = 0
    INSERT INTO leasehold_nodes (node_id, stack, env, mode, draining, started_at, heartbeat_at, runnable, key_version)
    VALUES (@node_id, @stack, @env, @mode, 0, SYSUTCDATETIME(), SYSUTCDATETIME(), @runnable, @key_version);

COMMIT TRANSACTION;

-- name: HeartbeatNode :exec
-- Refreshes the node's row with its current mode, drain state and runnable
-- pairs (they follow its per-actor modes); recreates it if maintenance or
-- an operator removed it meanwhile (started_at then restarts from now).
-- stack and env are written only when the row is
-- recreated, as on Postgres.
--
-- The same upsert as RegisterNode (UPDLOCK, HOLDLOCK in one transaction). A
-- heartbeat racing DeleteStaleNodes waits for the maintenance transaction,
-- then finds the row gone and inserts it again.
SET NOCOUNT ON;
SET XACT_ABORT ON;

BEGIN TRANSACTION;

UPDATE leasehold_nodes WITH (UPDLOCK, HOLDLOCK)
SET mode         = @mode,
    draining     = @draining,
    runnable     = @runnable,
    key_version  = @key_version,
    heartbeat_at = SYSUTCDATETIME()
WHERE node_id = @node_id;

IF @@ROWCOUNT = 0
    INSERT INTO leasehold_nodes (node_id, stack, env, mode, draining, started_at, heartbeat_at, runnable, key_version)
    VALUES (@node_id, @stack, @env, @mode, @draining, SYSUTCDATETIME(), SYSUTCDATETIME(), @runnable, @key_version);

COMMIT TRANSACTION;

-- name: DeregisterNode :exec
-- A drained node removes its row.
DELETE FROM leasehold_nodes WHERE node_id = @node_id;

-- name: ListNodes :many
-- Operator listing (leasehold nodes ls): every node row with the age of its
-- last heartbeat and the live leases it holds, both on the database clock.
-- Read-only and unhinted (no NOLOCK): nothing decides anything from it.
--
-- DATEDIFF_BIG counts millisecond boundaries crossed, so the age can differ
-- by 1 ms from Postgres's rounded epoch difference. The lease count seeks
-- leasehold_work_claims_claimed_owner_idx (owner_node, filtered on
-- state = N'claimed'). Rows come in node_id order under the binary
-- collation (code-point order), which can differ from a Postgres
-- collation's order for non-ASCII ids.
SELECT n.node_id, n.stack, n.env, n.mode, n.draining, n.started_at, n.heartbeat_at,
    DATEDIFF_BIG(millisecond, n.heartbeat_at, SYSUTCDATETIME()) AS heartbeat_age_ms,
    (SELECT COUNT_BIG(*) FROM leasehold_work_claims AS c
     WHERE c.owner_node = n.node_id
       AND c.state = N'claimed'
       AND c.lease_until > SYSUTCDATETIME()) AS live_leases
FROM leasehold_nodes AS n
ORDER BY n.node_id;

-- name: ListWaitingForNode :many
-- Work no live node can run, for operators (episodes ls and show, the
-- dashboard) and for maintenance's waiting-for-node finding: one row per
-- (env, actor, expectation) with queued work of that pair that is due and
-- that no live node could claim. A read that decides nothing: no lock hint
-- (and no NOLOCK), it grants nothing and changes nothing; the pollers'
-- poll (ClaimAvailable) alone decides who runs the work, and a node that
-- registers the pair takes it on its next poll whatever this read said.
--
-- The predicate of sql/queries/postgres/nodes.sql's ListWaitingForNode:
-- an available episode (run_after set; see available.sql) that is due as
-- ClaimAvailable would take it (run_after come, queued, unarchived), for
-- which no node row is a node that could take it now (same env;
-- stack-compatible as the poll matches source_stack; mode full; not
-- draining; heartbeat within @silent_after_ms of SYSUTCDATETIME(); the
-- pair in its runnable array, read with OPENJSON ... WITH in the key
-- columns' binary collation, as ClaimAvailable reads its @runnable).
-- waiting_since is the oldest such episode's run_after, oldest_episode_id
-- that episode, overdue whether it is more than @overdue_after_ms ago;
-- last_node_id and last_heartbeat_at name the node row of the env,
-- whatever its state, that lists the pair and heartbeated last (N'' and
-- NULL when none does). The
-- durations are split into seconds and milliseconds, as in
-- maintenance.sql, so that bounds over 24.8 days do not overflow DATEADD's
-- int. The CTE is read twice (the pairs and each pair's oldest episode);
-- it is the due available backlog, small by nature, read through
-- leasehold_episodes_available_idx (its filter repeated literally).
WITH waiting AS (
    SELECT r.source_env, r.actor_id, r.expectation_id, r.id AS episode_id, r.run_after
    FROM leasehold_episodes AS r
    WHERE r.run_after IS NOT NULL
      AND r.run_after <= SYSUTCDATETIME()
      AND r.status = N'queued'
      AND r.archived_at IS NULL
      AND NOT EXISTS (
            SELECT 1
            FROM leasehold_nodes AS n
            CROSS APPLY OPENJSON(n.runnable) WITH (
                actor_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.actor_id',
                expectation_id nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.expectation_id'
            ) AS k
            WHERE n.env = r.source_env
              AND (n.stack = N'' OR r.source_stack IN (n.stack, N''))
              AND n.mode = N'full'
              AND n.draining = 0
              AND n.heartbeat_at > DATEADD(second, -CAST(@silent_after_ms / 1000 AS int),
                                       DATEADD(millisecond, -CAST(@silent_after_ms % 1000 AS int), SYSUTCDATETIME()))
              AND k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
), pairs AS (
    SELECT w.source_env, w.actor_id, w.expectation_id,
        COUNT_BIG(*) AS waiting, MIN(w.run_after) AS waiting_since
    FROM waiting AS w
    GROUP BY w.source_env, w.actor_id, w.expectation_id
)
SELECT p.source_env, p.actor_id, p.expectation_id, p.waiting, p.waiting_since,
    oldest.episode_id AS oldest_episode_id,
    CAST(CASE WHEN p.waiting_since < DATEADD(second, -CAST(@overdue_after_ms / 1000 AS int),
                                         DATEADD(millisecond, -CAST(@overdue_after_ms % 1000 AS int), SYSUTCDATETIME()))
              THEN 1 ELSE 0 END AS bit) AS overdue,
    COALESCE(last.node_id, N'') AS last_node_id,
    last.heartbeat_at AS last_heartbeat_at
FROM pairs AS p
CROSS APPLY (
    SELECT TOP (1) w.episode_id
    FROM waiting AS w
    WHERE w.source_env = p.source_env
      AND w.actor_id = p.actor_id
      AND w.expectation_id = p.expectation_id
    ORDER BY w.run_after, w.episode_id
) AS oldest
LEFT JOIN leasehold_nodes AS last
    ON last.node_id = (
        SELECT TOP (1) n.node_id
        FROM leasehold_nodes AS n
        CROSS APPLY OPENJSON(n.runnable) WITH (
            actor_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.actor_id',
            expectation_id nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.expectation_id'
        ) AS k
        WHERE n.env = p.source_env
          AND k.actor_id = p.actor_id
          AND k.expectation_id = p.expectation_id
        ORDER BY n.heartbeat_at DESC, n.node_id)
ORDER BY p.source_env, p.actor_id, p.expectation_id;
