-- Membership (SQLite): advisory rows describing the nodes that share this
-- database file. Nothing here grants authority (leases and fences do);
-- heartbeat_at is the database clock's record of a node's last sign of life,
-- in milliseconds since the Unix epoch (see claims.sql for the clock).

-- name: RegisterNode :exec
-- A node announces itself on start: a restarted node with the same
-- identity replaces its old row (started_at is reset). runnable is the
-- (actor, expectation) pairs its poller asks work for, the JSON array of
-- ClaimAvailable's runnable (episodes.RunnableJSON); key_version the
-- newest dedupe key version it computes (migration 00014).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at, runnable, key_version)
VALUES (
    CAST(@node_id AS TEXT), CAST(@stack AS TEXT), CAST(@env AS TEXT), CAST(@mode AS TEXT), 0,
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(@runnable AS TEXT), CAST(@key_version AS INTEGER)
)
ON CONFLICT (node_id) DO UPDATE SET
    stack        = excluded.stack,
    env          = excluded.env,
    mode         = excluded.mode,
    runnable     = excluded.runnable,
    key_version  = excluded.key_version,
    draining     = 0,
    started_at   = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at;

-- name: HeartbeatNode :exec
-- Refreshes the node's row with its current mode, drain state and runnable
-- pairs (they follow its per-actor modes); recreates it if maintenance or
-- an operator removed it meanwhile (started_at then restarts from now).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at, runnable, key_version)
VALUES (
    CAST(@node_id AS TEXT), CAST(@stack AS TEXT), CAST(@env AS TEXT), CAST(@mode AS TEXT),
    CAST(@draining AS BOOLEAN),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(@runnable AS TEXT), CAST(@key_version AS INTEGER)
)
ON CONFLICT (node_id) DO UPDATE SET
    mode         = excluded.mode,
    runnable     = excluded.runnable,
    key_version  = excluded.key_version,
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

-- name: ListWaitingForNode :many
-- Work no live node can run, for operators (episodes ls and show, the
-- dashboard) and for maintenance's waiting-for-node finding: one row per
-- (env, actor, expectation) with queued work of that pair that is due and
-- that no live node could claim. A read that decides nothing and takes no
-- write lock: it grants nothing and changes nothing; the pollers' claim
-- (ClaimAvailable) alone decides who runs the work, and a node that
-- registers the pair takes it on its next poll whatever this read said.
--
-- The predicate of sql/queries/postgres/nodes.sql's ListWaitingForNode:
-- an available episode (run_after set; see available.sql) that is due as
-- ClaimAvailable would take it (run_after come), for which no node row is
-- a node that could take it now (same env; stack-compatible as the poll
-- matches source_stack; mode full; not draining; heartbeat within
-- silent_after_ms of the database clock; the pair in its runnable array,
-- read with json_each as ClaimAvailable reads its parameter).
-- waiting_since is the oldest such episode's run_after, the instant it
-- could first have been taken, oldest_episode_id that episode,
-- overdue whether it is more than overdue_after_ms ago; last_node_id and
-- last_heartbeat_at name the node row of the env, whatever its state, that
-- lists the pair and heartbeated last ('' and NULL when none does). Times
-- are milliseconds on the database clock ('now' is constant within the
-- statement). The available scan uses leasehold_episodes_available_idx;
-- the node table is small.
WITH waiting AS (
    SELECT r.source_env, r.actor_id, r.expectation_id, r.id AS episode_id, r.run_after
    FROM leasehold_episodes AS r
    WHERE r.run_after <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
      AND r.status = 'queued'
      AND r.archived_at IS NULL
      AND NOT EXISTS (
            SELECT 1
            FROM leasehold_nodes AS n, json_each(n.runnable) AS k
            WHERE n.env = r.source_env
              AND (n.stack = '' OR r.source_stack IN (n.stack, ''))
              AND n.mode = 'full'
              AND NOT n.draining
              AND n.heartbeat_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@silent_after_ms AS INTEGER)
              AND json_extract(k.value, '$.actor_id') = r.actor_id
              AND json_extract(k.value, '$.expectation_id') = r.expectation_id)
), pairs AS (
    SELECT w.source_env, w.actor_id, w.expectation_id,
        count(*) AS waiting, min(w.run_after) AS waiting_since
    FROM waiting AS w
    GROUP BY w.source_env, w.actor_id, w.expectation_id
)
SELECT p.source_env, p.actor_id, p.expectation_id,
    CAST(p.waiting AS INTEGER) AS waiting,
    CAST(p.waiting_since AS INTEGER) AS waiting_since,
    CAST((SELECT w.episode_id
          FROM waiting AS w
          WHERE w.source_env = p.source_env
            AND w.actor_id = p.actor_id
            AND w.expectation_id = p.expectation_id
          ORDER BY w.run_after, w.episode_id
          LIMIT 1) AS INTEGER) AS oldest_episode_id,
    CAST(p.waiting_since < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@overdue_after_ms AS INTEGER)
         AS BOOLEAN) AS overdue,
    CAST(coalesce(last.node_id, '') AS TEXT) AS last_node_id,
    last.heartbeat_at AS last_heartbeat_at
FROM pairs AS p
LEFT JOIN leasehold_nodes AS last
    ON last.node_id = (
        SELECT n.node_id
        FROM leasehold_nodes AS n, json_each(n.runnable) AS k
        WHERE n.env = p.source_env
          AND json_extract(k.value, '$.actor_id') = p.actor_id
          AND json_extract(k.value, '$.expectation_id') = p.expectation_id
        ORDER BY n.heartbeat_at DESC, n.node_id
        LIMIT 1)
ORDER BY p.source_env, p.actor_id, p.expectation_id;
