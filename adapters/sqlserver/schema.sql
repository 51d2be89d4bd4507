-- The schema check of sqlserver.Store.CheckSchema: not a coordination
-- statement (no twin under sql/queries), embedded here like the Postgres
-- adapter's schema.sql. NOT EXECUTED IN THIS REPOSITORY'S CI.

-- name: SchemaVersion :one
-- The newest leasehold migration applied: goose's own query on leasehold's
-- version table (0 when none; the table missing is error 208).
SELECT COALESCE(MAX(version_id), 0) FROM leasehold_schema_version;
