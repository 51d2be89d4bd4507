-- leasehold schema, version 13 (SQLite): workflow definitions are
-- versioned. The translation of sql/schema/postgres/00013.
--
-- leasehold_workflow_definitions holds every definition a node registered,
-- keyed by workflow and version (a hash of the definition's canonical
-- JSON, so a row never changes once written); the definition is JSON text,
-- checked with json_valid (Postgres stores jsonb); recorded_at is the
-- database clock in milliseconds, as every time here.
-- leasehold_workflow_instances.definition_version is the version an
-- instance was started with, '' for instances created before this
-- migration (advanced, and parked, as before). A constant default, so
-- SQLite's ADD COLUMN accepts NOT NULL and fills existing rows.

-- +goose Up
CREATE TABLE leasehold_workflow_definitions (
    workflow_id  TEXT    NOT NULL CHECK (length(workflow_id) <= 255),
    version      TEXT    NOT NULL CHECK (length(version) <= 64),
    definition   TEXT    NOT NULL CHECK (json_valid(definition)),
    recorded_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    recorded_by  TEXT    NOT NULL DEFAULT '' CHECK (length(recorded_by) <= 255),
    CONSTRAINT leasehold_workflow_definitions_pkey PRIMARY KEY (workflow_id, version)
);

ALTER TABLE leasehold_workflow_instances
    ADD COLUMN definition_version TEXT NOT NULL DEFAULT '' CHECK (length(definition_version) <= 64);

-- +goose Down
ALTER TABLE leasehold_workflow_instances DROP COLUMN definition_version;
DROP TABLE leasehold_workflow_definitions;
