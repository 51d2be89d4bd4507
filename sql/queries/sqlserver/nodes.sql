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
    draining     = 0,
    started_at   = SYSUTCDATETIME(),
    heartbeat_at = SYSUTCDATETIME()
WHERE node_id = @node_id;

IF @@ROWCOUNT = 0
    INSERT INTO leasehold_nodes (node_id, stack, env, mode, draining, started_at, heartbeat_at)
    VALUES (@node_id, @stack, @env, @mode, 0, SYSUTCDATETIME(), SYSUTCDATETIME());

COMMIT TRANSACTION;

-- name: HeartbeatNode :exec
-- Refreshes the node's row with its current mode and drain state; recreates
-- it if maintenance or an operator removed it meanwhile (started_at then
-- restarts from now). stack and env are written only when the row is
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
    heartbeat_at = SYSUTCDATETIME()
WHERE node_id = @node_id;

IF @@ROWCOUNT = 0
    INSERT INTO leasehold_nodes (node_id, stack, env, mode, draining, started_at, heartbeat_at)
    VALUES (@node_id, @stack, @env, @mode, @draining, SYSUTCDATETIME(), SYSUTCDATETIME());

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
