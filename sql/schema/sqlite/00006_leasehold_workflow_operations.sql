-- leasehold schema, version 6 (SQLite): operating workflows. The translation
-- of sql/schema/postgres/00006.
--
-- An operator can cancel a running instance (status canceled), and an
-- instance whose advance cannot apply the definition this node registered
-- (a rolling deploy that renamed a step) is parked: it stays running, its
-- step's episode keeps its finish, and parked_reason says why nothing moved,
-- for Reconcile and `leasehold workflows ls` to report. The next advance
-- that succeeds (a node with a matching definition) clears it.
--
-- SQLite cannot drop or replace a CHECK constraint, so the Up rebuilds the
-- instance table with the wider check (SQLite's documented procedure: create
-- the new table, copy, drop the old one, rename), inside goose's
-- transaction. Foreign keys stay on; so that dropping the old instance table
-- (an implicit DELETE) cascades to no step row, the step table, which
-- references it, is rebuilt with it and its old copy dropped first. The
-- AUTOINCREMENT counter is carried over, so no instance id is ever reused;
-- the indexes are recreated under their own names.

-- +goose Up
CREATE TABLE leasehold_workflow_instances_v6 (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id   TEXT    NOT NULL CHECK (length(workflow_id) <= 255),
    subject       TEXT    NOT NULL CHECK (length(subject) <= 512),
    env           TEXT    NOT NULL DEFAULT '' CHECK (length(env) <= 255),
    source_stack  TEXT    NOT NULL DEFAULT '' CHECK (length(source_stack) <= 255),
    status        TEXT    NOT NULL DEFAULT 'running' CHECK (length(status) <= 16),
    payload       TEXT    CHECK (payload IS NULL OR json_valid(payload)),
    error_detail  TEXT    CHECK (error_detail IS NULL OR json_valid(error_detail)),
    created_at    INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    finished_at   INTEGER,
    parked_reason TEXT,
    CONSTRAINT leasehold_workflow_instances_status_check
        CHECK (status IN ('running', 'done', 'failed', 'canceled'))
);

INSERT INTO leasehold_workflow_instances_v6
    (id, workflow_id, subject, env, source_stack, status, payload, error_detail, created_at, finished_at)
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail, created_at, finished_at
FROM leasehold_workflow_instances;

DELETE FROM sqlite_sequence WHERE name = 'leasehold_workflow_instances_v6';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'leasehold_workflow_instances_v6', seq FROM sqlite_sequence WHERE name = 'leasehold_workflow_instances';

CREATE TABLE leasehold_workflow_steps_v6 (
    instance_id   INTEGER NOT NULL,
    step_id       TEXT    NOT NULL CHECK (length(step_id) <= 255),
    status        TEXT    NOT NULL DEFAULT 'pending' CHECK (length(status) <= 16),
    -- The episode of the current (or last) attempt.
    episode_id    INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL DEFAULT 1,
    updated_at    INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    CONSTRAINT leasehold_workflow_steps_pkey PRIMARY KEY (instance_id, step_id),
    CONSTRAINT leasehold_workflow_steps_instance_fkey FOREIGN KEY (instance_id)
        REFERENCES leasehold_workflow_instances_v6 (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_workflow_steps_status_check
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'skipped')),
    CONSTRAINT leasehold_workflow_steps_attempts_check
        CHECK (attempts >= 0 AND max_attempts >= 1)
);

INSERT INTO leasehold_workflow_steps_v6
    (instance_id, step_id, status, episode_id, attempts, max_attempts, updated_at)
SELECT instance_id, step_id, status, episode_id, attempts, max_attempts, updated_at
FROM leasehold_workflow_steps;

DROP TABLE leasehold_workflow_steps;
DROP TABLE leasehold_workflow_instances;
-- Renaming the instance table rewrites the step table's foreign key to the
-- new name (legacy_alter_table is off), and carries its sqlite_sequence row.
ALTER TABLE leasehold_workflow_instances_v6 RENAME TO leasehold_workflow_instances;
ALTER TABLE leasehold_workflow_steps_v6 RENAME TO leasehold_workflow_steps;

CREATE UNIQUE INDEX leasehold_workflow_instances_active_key_idx
    ON leasehold_workflow_instances (workflow_id, subject, env)
    WHERE status = 'running';

CREATE INDEX leasehold_workflow_instances_running_idx
    ON leasehold_workflow_instances (env, source_stack)
    WHERE status = 'running';

CREATE UNIQUE INDEX leasehold_workflow_steps_episode_idx
    ON leasehold_workflow_steps (episode_id)
    WHERE episode_id IS NOT NULL;

-- +goose Down
-- Canceled instances, if any, keep their status: Postgres restores the
-- older check NOT VALID so that the rollback does not rewrite history;
-- SQLite has no NOT VALID (a rebuilt table's check would reject those rows),
-- so the rollback keeps the wider check and drops only parked_reason.
ALTER TABLE leasehold_workflow_instances DROP COLUMN parked_reason;
