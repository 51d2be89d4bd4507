-- Membership (SQLite): advisory rows describing the nodes that share this
-- database file. Nothing here grants authority (leases and fences do);
-- heartbeat_at is the database clock's record of a node's last sign of life,
-- in milliseconds since the Unix epoch (see claims.sql for the clock).

-- name: RegisterNode :exec
-- A node announces itself on start: a restarted node with the same
-- identity replaces its old row (started_at is reset).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at)
VALUES (
    CAST(@node_id AS TEXT), CAST(@stack AS TEXT), CAST(@env AS TEXT), CAST(@mode AS TEXT), 0,
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
)
ON CONFLICT (node_id) DO UPDATE SET
    stack        = excluded.stack,
    env          = excluded.env,
    mode         = excluded.mode,
    draining     = 0,
    started_at   = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at;

-- name: HeartbeatNode :exec
-- Refreshes the node's row with its current mode and drain state; recreates
-- it if maintenance or an operator removed it meanwhile (started_at then
-- restarts from now).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at)
VALUES (
    CAST(@node_id AS TEXT), CAST(@stack AS TEXT), CAST(@env AS TEXT), CAST(@mode AS TEXT),
    CAST(@draining AS BOOLEAN),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
)
ON CONFLICT (node_id) DO UPDATE SET
    mode         = excluded.mode,
    draining     = excluded.draining,
    heartbeat_at = excluded.heartbeat_at;

-- name: DeregisterNode :exec
-- A drained node removes its row.
DELETE FROM leasehold_nodes WHERE node_id = CAST(@node_id AS TEXT);

-- name: ListNodes :many
-- Operator listing (leasehold nodes ls): every node row with the age of its
-- last heartbeat and the live leases it holds, both on the database clock
-- (one reading: 'now' is constant within the statement).
SELECT n.node_id, n.stack, n.env, n.mode, n.draining, n.started_at, n.heartbeat_at,
    CAST(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - n.heartbeat_at AS INTEGER) AS heartbeat_age_ms,
    CAST((SELECT count(*) FROM leasehold_work_claims AS c
     WHERE c.owner_node = n.node_id
       AND c.state = 'claimed'
       AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) AS INTEGER) AS live_leases
FROM leasehold_nodes AS n
ORDER BY n.node_id;
