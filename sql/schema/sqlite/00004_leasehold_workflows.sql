-- leasehold schema, version 4 (SQLite): workflows. The translation of
-- sql/schema/postgres/00004.
--
-- A workflow instance runs a set of steps; each step attempt is an ordinary
-- episode (trigger_type workflow). Step rows change only by conditional
-- per-row updates (WHERE status = <expected> AND episode_id = <expected>), so
-- concurrent writers never overwrite each other's state. Where Postgres locks
-- the instance row (FOR UPDATE) while one transaction advances it, the
-- SQLite adapter advances it inside a BEGIN IMMEDIATE transaction: the
-- database write lock orders fan-in.

-- +goose Up

CREATE TABLE leasehold_workflow_instances (
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
    CONSTRAINT leasehold_workflow_instances_status_check
        CHECK (status IN ('running', 'done', 'failed'))
);

-- At most one active instance per workflow, subject and env: two nodes
-- starting the same workflow for the same subject make one instance.
CREATE UNIQUE INDEX leasehold_workflow_instances_active_key_idx
    ON leasehold_workflow_instances (workflow_id, subject, env)
    WHERE status = 'running';

-- Reconciliation scans running instances of one stack and env.
CREATE INDEX leasehold_workflow_instances_running_idx
    ON leasehold_workflow_instances (env, source_stack)
    WHERE status = 'running';

CREATE TABLE leasehold_workflow_steps (
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
        REFERENCES leasehold_workflow_instances (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_workflow_steps_status_check
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'skipped')),
    CONSTRAINT leasehold_workflow_steps_attempts_check
        CHECK (attempts >= 0 AND max_attempts >= 1)
);

-- An ending episode finds its step.
CREATE UNIQUE INDEX leasehold_workflow_steps_episode_idx
    ON leasehold_workflow_steps (episode_id)
    WHERE episode_id IS NOT NULL;

-- +goose Down
DROP TABLE leasehold_workflow_steps;
DROP TABLE leasehold_workflow_instances;
