-- leasehold schema, version 4 (SQL Server): workflows.
--
-- The tables, columns, constraints and indexes of
-- sql/schema/postgres/00004_leasehold_workflows.sql, in the types and
-- conventions of version 1 (00001_leasehold_init.sql, whose header applies
-- here too): datetime2(6) written from SYSUTCDATETIME(), nvarchar text, the
-- binary collation Latin1_General_100_BIN2 on every column compared for
-- identity (workflow, subject, env, stack, step), JSON in nvarchar(max)
-- without an ISJSON check (payload and error_detail may be any JSON value),
-- unset env and stack as N'' NOT NULL, never NULL, and the Postgres names on
-- constraints, defaults and indexes.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more; docs/sqlserver.md lists
-- what only a real server can confirm. The session SET options listed in
-- 00001 are required here as well: three indexes below are filtered.
--
-- A workflow instance runs a set of steps; each step attempt is an ordinary
-- episode (trigger_type workflow). Step rows change only by conditional
-- per-row updates (WHERE status = <expected> AND episode_id = <expected>), so
-- concurrent writers never overwrite each other's state; the instance row is
-- locked (LockWorkflowInstance: UPDLOCK, HOLDLOCK, ROWLOCK, Postgres's FOR
-- UPDATE) while one transaction advances it, which orders fan-in.

-- +goose Up

CREATE TABLE leasehold_workflow_instances (
    id            bigint IDENTITY(1, 1) NOT NULL,
    workflow_id   nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    subject       nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL,
    env           nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_workflow_instances_env_default DEFAULT N'',
    source_stack  nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_workflow_instances_source_stack_default DEFAULT N'',
    status        nvarchar(16)  NOT NULL
        CONSTRAINT leasehold_workflow_instances_status_default DEFAULT N'running',
    payload       nvarchar(max) NULL,
    error_detail  nvarchar(max) NULL,
    created_at    datetime2(6)  NOT NULL
        CONSTRAINT leasehold_workflow_instances_created_at_default DEFAULT SYSUTCDATETIME(),
    finished_at   datetime2(6)  NULL,
    CONSTRAINT leasehold_workflow_instances_pkey PRIMARY KEY CLUSTERED (id),
    CONSTRAINT leasehold_workflow_instances_status_check
        CHECK (status IN (N'running', N'done', N'failed'))
);

-- At most one running instance per workflow, subject and env: two nodes
-- starting the same workflow for the same subject make one instance. The
-- arbiter of CreateWorkflowInstance, whose existence check seeks it under
-- UPDLOCK, HOLDLOCK, so the key range of an absent instance stays locked
-- until the starting transaction commits; ended instances leave the index
-- and free the key. The statements repeat the filter literally
-- (status = N'running') so the optimizer can match it.
--
-- Key size: workflow_id (up to 510 bytes), subject (1024) and env (510) can
-- reach 2044 bytes, over the 1700-byte limit of a nonclustered key. SQL
-- Server creates the index with a warning, and an insert whose three values
-- together exceed 1700 bytes (850 UTF-16 code units) fails with error 1946.
-- A 512-character subject leaves 338 characters for workflow ID and env
-- together; docs/sqlserver.md states the limit.
CREATE UNIQUE NONCLUSTERED INDEX leasehold_workflow_instances_active_key_idx
    ON leasehold_workflow_instances (workflow_id, subject, env)
    WHERE status = N'running';

-- Reconciliation (ListStalledWorkflowSteps) scans running instances of one
-- env and stack scope; the filter keeps the scan proportional to running
-- work, not history.
CREATE NONCLUSTERED INDEX leasehold_workflow_instances_running_idx
    ON leasehold_workflow_instances (env, source_stack)
    WHERE status = N'running';

-- One row per step of an instance. The clustered primary key (instance_id,
-- step_id) is at most 518 bytes, within the 900-byte clustered limit, and
-- also serves the cascade from leasehold_workflow_instances (SQL Server does
-- not index foreign keys by itself) and ListWorkflowSteps. episode_id is the
-- episode of the current (or last) attempt; no foreign key to
-- leasehold_episodes, as on Postgres.
CREATE TABLE leasehold_workflow_steps (
    instance_id   bigint        NOT NULL,
    step_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    status        nvarchar(16)  NOT NULL
        CONSTRAINT leasehold_workflow_steps_status_default DEFAULT N'pending',
    episode_id    bigint        NULL,
    attempts      int           NOT NULL
        CONSTRAINT leasehold_workflow_steps_attempts_default DEFAULT 0,
    max_attempts  int           NOT NULL
        CONSTRAINT leasehold_workflow_steps_max_attempts_default DEFAULT 1,
    updated_at    datetime2(6)  NOT NULL
        CONSTRAINT leasehold_workflow_steps_updated_at_default DEFAULT SYSUTCDATETIME(),
    CONSTRAINT leasehold_workflow_steps_pkey PRIMARY KEY CLUSTERED (instance_id, step_id),
    CONSTRAINT leasehold_workflow_steps_instance_fkey FOREIGN KEY (instance_id)
        REFERENCES leasehold_workflow_instances (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_workflow_steps_status_check
        CHECK (status IN (N'pending', N'running', N'done', N'failed', N'skipped')),
    CONSTRAINT leasehold_workflow_steps_attempts_check
        CHECK (attempts >= 0 AND max_attempts >= 1)
);

-- An ending episode finds its step (GetWorkflowStepByEpisode), and no
-- episode is the attempt of two steps. Filtered on IS NOT NULL, which is
-- required here, not just an optimisation: a unique index on SQL Server
-- admits only one NULL, and every pending step has none.
CREATE UNIQUE NONCLUSTERED INDEX leasehold_workflow_steps_episode_idx
    ON leasehold_workflow_steps (episode_id)
    WHERE episode_id IS NOT NULL;

-- +goose Down
DROP TABLE leasehold_workflow_steps;
DROP TABLE leasehold_workflow_instances;
