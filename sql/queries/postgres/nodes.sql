-- Membership: advisory rows describing the nodes that share this database.
-- Nothing here grants authority (leases and fences do); heartbeat_at is the
-- database clock's record of a node's last sign of life.

-- name: RegisterNode :exec
-- A node announces itself on start: a restarted node with the same
-- identity replaces its old row (started_at is reset). runnable is the
-- (actor, expectation) pairs its poller asks work for, the JSON array of
-- ClaimAvailable's runnable (episodes.RunnableJSON), passed as text;
-- key_version the newest dedupe key version it computes (migration 00014).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at, runnable, key_version)
VALUES (sqlc.arg(node_id), sqlc.arg(stack), sqlc.arg(env), sqlc.arg(mode), false, now(), now(),
    sqlc.arg(runnable)::text::jsonb, sqlc.arg(key_version)::smallint)
ON CONFLICT (node_id) DO UPDATE SET
    stack        = excluded.stack,
    env          = excluded.env,
    mode         = excluded.mode,
    runnable     = excluded.runnable,
    key_version  = excluded.key_version,
    draining     = false,
    started_at   = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at;

-- name: HeartbeatNode :exec
-- Refreshes the node's row with its current mode, drain state and runnable
-- pairs (they follow its per-actor modes); recreates it if maintenance or
-- an operator removed it meanwhile (started_at then restarts from now).
INSERT INTO leasehold_nodes AS n (node_id, stack, env, mode, draining, started_at, heartbeat_at, runnable, key_version)
VALUES (sqlc.arg(node_id), sqlc.arg(stack), sqlc.arg(env), sqlc.arg(mode), sqlc.arg(draining), now(), now(),
    sqlc.arg(runnable)::text::jsonb, sqlc.arg(key_version)::smallint)
ON CONFLICT (node_id) DO UPDATE SET
    mode         = excluded.mode,
    runnable     = excluded.runnable,
    key_version  = excluded.key_version,
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

-- name: ListWaitingForNode :many
-- Work no live node can run, for operators (episodes ls and show, the
-- dashboard) and for maintenance's waiting-for-node finding: one row per
-- (env, actor, expectation) with queued work of that pair that is due and
-- that no live node could claim. A read that decides nothing: it locks
-- nothing, grants nothing and changes nothing; the pollers' claim
-- (ClaimAvailable) alone decides who runs the work, and a node that
-- registers the pair takes it on its next poll whatever this read said.
--
-- Waiting: an available episode (run_after set; see available.sql) that
-- is due as ClaimAvailable would take it (run_after come), for which no
-- node row is a node that could take it now: same env, stack-compatible as the claim
-- matches source_stack (a node of stack S takes requests of S and of no
-- stack; a node of no stack takes all), mode full, not draining, heartbeat
-- within silent_after_ms on the database clock (the dashboard's "silent"
-- bound), and the pair in its runnable array (read with
-- jsonb_to_recordset, as ClaimAvailable reads its parameter). A node
-- that polls another env or stack than its own (runner.PollConfig's
-- SourceEnv, SourceStack) is counted by its row's.
--
-- waiting_since is the oldest such episode's run_after, the instant it
-- could first have been taken, and oldest_episode_id that episode;
-- overdue is whether that is longer ago than overdue_after_ms (database
-- clock). last_node_id and last_heartbeat_at name the node row of the same
-- env, whatever its state, that lists the pair and heartbeated last, or ''
-- and NULL when no row lists it (rows of nodes gone for NodeStaleAfter are
-- deleted by maintenance). The available scan uses
-- leasehold_episodes_available_idx; the node table is small.
WITH waiting AS (
    SELECT r.source_env, r.actor_id, r.expectation_id, r.id AS episode_id, r.run_after
    FROM leasehold_episodes AS r
    WHERE r.run_after <= now()
      AND r.status = 'queued'
      AND r.archived_at IS NULL
      AND NOT EXISTS (
            SELECT 1
            FROM leasehold_nodes AS n
            CROSS JOIN LATERAL jsonb_to_recordset(n.runnable) AS k (actor_id text, expectation_id text)
            WHERE n.env = r.source_env
              AND (n.stack = '' OR r.source_stack IN (n.stack, ''))
              AND n.mode = 'full'
              AND NOT n.draining
              AND n.heartbeat_at > now() - (sqlc.arg(silent_after_ms)::bigint * interval '1 millisecond')
              AND k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
), pairs AS (
    SELECT w.source_env, w.actor_id, w.expectation_id,
        count(*)::bigint AS waiting, min(w.run_after) AS waiting_since
    FROM waiting AS w
    GROUP BY w.source_env, w.actor_id, w.expectation_id
)
SELECT p.source_env, p.actor_id, p.expectation_id, p.waiting, p.waiting_since::timestamptz AS waiting_since,
    oldest.episode_id AS oldest_episode_id,
    (p.waiting_since < now() - (sqlc.arg(overdue_after_ms)::bigint * interval '1 millisecond'))::boolean AS overdue,
    coalesce(last.node_id, '')::text AS last_node_id,
    last.heartbeat_at AS last_heartbeat_at
FROM pairs AS p
CROSS JOIN LATERAL (
    SELECT w.episode_id
    FROM waiting AS w
    WHERE w.source_env = p.source_env
      AND w.actor_id = p.actor_id
      AND w.expectation_id = p.expectation_id
    ORDER BY w.run_after, w.episode_id
    LIMIT 1
) AS oldest
LEFT JOIN leasehold_nodes AS last
    ON last.node_id = (
        SELECT n.node_id
        FROM leasehold_nodes AS n
        CROSS JOIN LATERAL jsonb_to_recordset(n.runnable) AS k (actor_id text, expectation_id text)
        WHERE n.env = p.source_env
          AND k.actor_id = p.actor_id
          AND k.expectation_id = p.expectation_id
        ORDER BY n.heartbeat_at DESC, n.node_id
        LIMIT 1)
ORDER BY p.source_env, p.actor_id, p.expectation_id;
