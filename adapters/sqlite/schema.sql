-- The schema check of sqlite.Store.CheckSchema: not a coordination
-- statement, and not compiled by sqlc (the goose version table is goose's,
-- not in the migrations sqlc reads), so it is embedded here.

-- name: SchemaVersion :one
-- The newest leasehold migration applied: goose's own query on leasehold's
-- version table (0 when none; the table missing is SQLite's "no such table"
-- error, SQLITE_ERROR).
SELECT CAST(coalesce(max(version_id), 0) AS INTEGER) FROM leasehold_schema_version;
