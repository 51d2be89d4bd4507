-- The cluster's dedupe key version (migration 00014): which canonical form
-- of a payload every node hashes into an event key. The database decides
-- it, once, for every node; a node reads it and hashes under it, and the
-- insert trigger leasehold_episodes_key_version refuses a key of another
-- version (SQLSTATE LH002).

-- name: GetKeyVersion :one
-- The version this database uses. Read-only; it decides nothing: a node
-- that read it before a switch finds out at its next version 1 insert,
-- which the trigger refuses.
SELECT v.version::integer AS version, v.switched_at
FROM leasehold_key_version AS v;

-- name: SwitchKeyVersion :one
-- Moves the database to version 2, once, under a lock that no insert runs
-- beside (leasehold_switch_key_version, migration 00014). Refused (version
-- 1 back) while a node whose heartbeat is within live_ms cannot compute
-- version 2; version 2 back when it is done, or was already.
SELECT leasehold_switch_key_version(sqlc.arg(live_ms)::bigint, sqlc.arg(lock_wait_ms)::bigint)::integer AS version;

-- name: ListKeyVersionLaggards :many
-- The live nodes (a heartbeat within live_ms on the database clock) that
-- cannot compute version 2: what keeps SwitchKeyVersion refusing.
-- Read-only, for the operator.
SELECT n.node_id, n.stack, n.env, coalesce(n.key_version, 1)::integer AS key_version,
    (extract(epoch FROM (now() - n.heartbeat_at)) * 1000)::bigint AS heartbeat_age_ms
FROM leasehold_nodes AS n
WHERE n.heartbeat_at > now() - sqlc.arg(live_ms)::bigint * interval '1 millisecond'
  AND coalesce(n.key_version, 1) < 2
ORDER BY n.node_id;
