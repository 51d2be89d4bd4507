-- The cluster's dedupe key version (SQLite; migration 00014): the
-- statements of sql/queries/postgres/keys.sql. Times are milliseconds
-- since the Unix epoch on the database clock (see claims.sql).

-- name: GetKeyVersion :one
-- The version this file uses. Read-only; it decides nothing: a node that
-- read it before a switch finds out at its next version 1 insert, which
-- the trigger aborts.
SELECT v.version, v.switched_at
FROM leasehold_key_version AS v;

-- name: SwitchKeyVersion :one
-- Moves the file to version 2, once; refused (version 1 back) while a node
-- whose heartbeat is within live_ms cannot compute version 2. The adapter
-- runs it under the write lock (BEGIN IMMEDIATE), which no insert runs
-- beside, so no insert that read version 1 commits after it. Returns
-- version 2 when it moved the file; no row when it was refused or the file
-- was there already (the adapter then reads GetKeyVersion in the same
-- transaction).
UPDATE leasehold_key_version
SET version = 2,
    switched_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE singleton = 1
  AND version = 1
  AND NOT EXISTS (SELECT 1 FROM leasehold_nodes AS n
                  WHERE n.heartbeat_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@live_ms AS INTEGER)
                    AND coalesce(n.key_version, 1) < 2)
RETURNING version;

-- name: ListKeyVersionLaggards :many
-- The live nodes (a heartbeat within live_ms on the database clock) that
-- cannot compute version 2: what keeps SwitchKeyVersion refusing.
-- Read-only, for the operator.
SELECT n.node_id, n.stack, n.env, CAST(coalesce(n.key_version, 1) AS INTEGER) AS key_version,
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - n.heartbeat_at AS heartbeat_age_ms
FROM leasehold_nodes AS n
WHERE n.heartbeat_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@live_ms AS INTEGER)
  AND coalesce(n.key_version, 1) < 2
ORDER BY n.node_id;
