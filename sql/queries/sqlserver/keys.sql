-- The cluster's dedupe key version (SQL Server; migration 00014): the
-- statements of sql/queries/postgres/keys.sql but SwitchKeyVersion, which
-- SQL Server does not have (queries.DialectOnly): its databases stay on
-- version 1.

-- name: GetKeyVersion :one
-- The version this database uses: 1, pinned by the table's check.
-- Read-only.
SELECT CAST(v.version AS int) AS version, v.switched_at
FROM leasehold_key_version AS v;

-- name: ListKeyVersionLaggards :many
-- The live nodes (a heartbeat within @live_ms on the database clock) that
-- cannot compute version 2. Read-only, for the operator.
SELECT n.node_id, n.stack, n.env, CAST(COALESCE(n.key_version, 1) AS int) AS key_version,
    CAST(DATEDIFF_BIG(millisecond, n.heartbeat_at, SYSUTCDATETIME()) AS bigint) AS heartbeat_age_ms
FROM leasehold_nodes AS n
WHERE n.heartbeat_at > DATEADD(millisecond, -@live_ms, SYSUTCDATETIME())
  AND COALESCE(n.key_version, 1) < 2
ORDER BY n.node_id;
