-- leasehold schema, version 4 (Postgres): workflows.
--
-- A workflow instance runs a set of steps; each step attempt is an ordinary
-- episode (trigger_type workflow). Step rows change only by conditional
-- per-row updates (WHERE status = <expected> AND episode_id = <expected>), so
-- concurrent writers never overwrite each other's state; the instance row is
-- locked (FOR UPDATE) while one transaction advances it, which orders fan-in.

-- +goose Up

CREATE TABLE leasehold_workflow_instances (
    id            bigint GENERATED ALWAYS AS IDENTITY,
    workflow_id   varchar(255) NOT NULL,
    subject       varchar(512) NOT NULL,
    env           varchar(255) NOT NULL DEFAULT '',
    source_stack  varchar(255) NOT NULL DEFAULT '',
    status        varchar(16)  NOT NULL DEFAULT 'running',
    payload       jsonb,
    error_detail  jsonb,
    created_at    timestamptz  NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    CONSTRAINT leasehold_workflow_instances_pkey PRIMARY KEY (id),
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
    instance_id   bigint       NOT NULL,
    step_id       varchar(255) NOT NULL,
    status        varchar(16)  NOT NULL DEFAULT 'pending',
    -- The episode of the current (or last) attempt.
    episode_id    bigint,
    attempts      integer      NOT NULL DEFAULT 0,
    max_attempts  integer      NOT NULL DEFAULT 1,
    updated_at    timestamptz  NOT NULL DEFAULT now(),
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
