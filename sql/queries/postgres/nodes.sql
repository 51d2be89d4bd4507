-- Membership: advisory rows describing the nodes that share this database.
-- Nothing here grants authority (leases and fences do); heartbeat_at is the
-- database clock's record of a node's last sign of life.

-- name: RegisterNode :exec
-- A node announces itself on start: a restarted node with the same
-- identity replaces its old row (started_at is reset).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at)
VALUES (sqlc.arg(node_id), sqlc.arg(stack), sqlc.arg(env), sqlc.arg(mode), false, now(), now())
ON CONFLICT (node_id) DO UPDATE SET
    stack        = excluded.stack,
    env          = excluded.env,
    mode         = excluded.mode,
    draining     = false,
    started_at   = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at;

-- name: HeartbeatNode :exec
-- Refreshes the node's row with its current mode and drain state; recreates
-- it if maintenance or an operator removed it meanwhile (started_at then
-- restarts from now).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at)
VALUES (sqlc.arg(node_id), sqlc.arg(stack), sqlc.arg(env), sqlc.arg(mode), sqlc.arg(draining), now(), now())
ON CONFLICT (node_id) DO UPDATE SET
    mode         = excluded.mode,
    draining     = excluded.draining,
    heartbeat_at = excluded.heartbeat_at;

-- name: DeregisterNode :exec
-- A drained node removes its row.
DELETE FROM leasehold_nodes WHERE node_id = sqlc.arg(node_id);

-- name: ListNodes :many
-- Operator listing (leasehold nodes ls): every node row with the age of its
-- last heartbeat and the live leases it holds, both on the database clock.
SELECT n.node_id, n.stack, n.env, n.mode, n.draining, n.started_at, n.heartbeat_at,
    (extract(epoch FROM (now() - n.heartbeat_at)) * 1000)::bigint AS heartbeat_age_ms,
    (SELECT count(*) FROM leasehold_work_claims AS c
     WHERE c.owner_node = n.node_id
       AND c.state = 'claimed'
       AND c.lease_until > now())::bigint AS live_leases
FROM leasehold_nodes AS n
ORDER BY n.node_id;
