-- Workflows: instances and their step rows (T-SQL).
--
-- The statements of sql/queries/postgres/workflows.sql, one for one: same
-- names, kinds, @parameters and result columns. NOT EXECUTED IN THIS
-- REPOSITORY'S CI (no SQL Server there); statically checked only, see
-- docs/sqlserver.md.
--
-- Every statement here runs inside the transaction that advances one
-- instance (workflows.Engine through Store.InTx, a READ COMMITTED
-- transaction the adapter begins), which first locks the instance row with
-- LockWorkflowInstance, except the reads (GetWorkflowInstance,
-- ListWorkflowSteps outside a transaction, and ListStalledWorkflowSteps for
-- reconciliation). Step rows change only by conditional updates on their
-- expected status and episode, never by a read-modify-write of the whole
-- instance. All times are SYSUTCDATETIME(), the database clock.
--
-- Inside a caller's transaction: XACT_ABORT is ON (SessionInitSQL, and the
-- multi-statement batches say so again), so any error in these batches
-- rolls back the caller's whole transaction, not just the batch; none of
-- them opens, ends or rolls back a transaction, and none catches an error,
-- so a transaction that is gone is never mistaken for one that goes on. A
-- lost race is answered with an empty result or a zero count, never with an
-- error: CreateWorkflowInstance checks for the running instance under a
-- key-range lock instead of letting the unique index raise 2601.
--
-- :execrows: Postgres returns the driver's row count. These batches return it
-- as one row, one column rows_affected, counted from the OUTPUT rows of the
-- one statement that writes (as in maintenance.sql).

-- name: CreateWorkflowInstance :one
-- Starts an instance, unless one is already running for the same workflow,
-- subject and env (the filtered unique index
-- leasehold_workflow_instances_active_key_idx): then no row comes back and
-- the caller reads the running one. definition_version pins the instance
-- to the definition it starts with (see GetWorkflowDefinition).
--
-- Guarantee: one running instance per key across N starters, and a lost
-- race is the empty result, not an error, so the caller's transaction goes
-- on (Postgres: ON CONFLICT DO NOTHING, which does not abort the
-- transaction). The INSERT is guarded by NOT EXISTS on the running key read
-- WITH (UPDLOCK, HOLDLOCK): the read seeks the filtered unique index and
-- takes an update-mode key-range lock on the key, present or absent, which
-- two sessions cannot both hold, and holds it to the end of the transaction
-- (the statement's own in autocommit, the caller's inside InTx). A second
-- starter therefore waits for the first to commit (or roll back), then
-- re-reads and inserts nothing (or inserts). The same lock keeps a running
-- instance found here from ending before the caller's transaction does, so
-- the GetRunningWorkflowInstance that follows reads it.
--
-- Duplicates: the unique index cannot raise 2601 while the key range is
-- held. No TRY/CATCH: under XACT_ABORT ON a caught 2601 would still have
-- doomed the caller's transaction (XACT_STATE() = -1), so nothing could be
-- answered but an error. Should one surface anyway, the adapter reports it
-- as "not created" on its own (the statement wrote nothing) and as an error
-- inside a transaction (which is gone).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @created TABLE (id bigint NOT NULL, created_at datetime2(6) NOT NULL);

INSERT INTO leasehold_workflow_instances (workflow_id, subject, env, source_stack, status, payload,
    definition_version)
OUTPUT inserted.id, inserted.created_at INTO @created
SELECT @workflow_id, @subject, @env, @source_stack, N'running', @payload, @definition_version
WHERE NOT EXISTS (
    SELECT 1 FROM leasehold_workflow_instances WITH (UPDLOCK, HOLDLOCK)
    WHERE status = N'running'
      AND workflow_id = @workflow_id
      AND subject = @subject
      AND env = @env);

SELECT id, created_at FROM @created;

-- name: GetRunningWorkflowInstance :one
-- The running instance of a workflow, subject and env, if any. Unhinted, as
-- on Postgres; inside Start's transaction the row is already update-locked
-- by CreateWorkflowInstance's check.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE status = N'running'
  AND workflow_id = @workflow_id
  AND subject = @subject
  AND env = @env;

-- name: InsertWorkflowStep :exec
-- One row per step of a new instance, pending. A step inserted twice raises
-- 2627 (leasehold_workflow_steps_pkey), LEFT TO SURFACE as Postgres raises
-- unique_violation; XACT_ABORT rolls back the caller's transaction with it.
INSERT INTO leasehold_workflow_steps (instance_id, step_id, status, attempts, max_attempts)
VALUES (@instance_id, @step_id, N'pending', 0, @max_attempts);

-- name: LockWorkflowInstance :one
-- Locks the instance for the advancing transaction (Postgres: FOR UPDATE).
-- Two episodes of one instance ending at once (fan-in) advance one after the
-- other, and the second sees the first's step updates, so no join is missed.
--
-- Hints: UPDLOCK takes an update lock on the row, which another advancing
-- transaction cannot take (it waits) while plain readers still can, as with
-- FOR UPDATE; HOLDLOCK keeps it to the end of the transaction (an update
-- lock is held to the end of the transaction anyway, HOLDLOCK says so and
-- makes the read a locking one whatever READ_COMMITTED_SNAPSHOT says);
-- ROWLOCK keeps it to the one row, so instances do not block each other on
-- a page. The reads that follow in the transaction are statement-level (READ
-- COMMITTED, with or without RCSI), so they see every step update a previous
-- holder of the lock committed. Outside a transaction the lock ends with
-- the statement, as on Postgres.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
WHERE id = @id;

-- name: GetWorkflowInstance :one
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE id = @id;

-- name: ListWorkflowSteps :many
-- In step_id order: binary (code-point) order under the column's collation,
-- which can differ from a Postgres collation for non-ASCII IDs; the engine
-- reads the steps by ID, not by position.
SELECT instance_id, step_id, status, COALESCE(episode_id, 0) AS episode_id,
    attempts, max_attempts, updated_at
FROM leasehold_workflow_steps
WHERE instance_id = @instance_id
ORDER BY step_id;

-- name: GetWorkflowStepByEpisode :one
-- The step an episode is (or was) an attempt of. episode_id IS NOT NULL
-- repeats the filter of leasehold_workflow_steps_episode_idx so the
-- optimizer can match it.
SELECT instance_id, step_id, status, COALESCE(episode_id, 0) AS episode_id,
    attempts, max_attempts, updated_at
FROM leasehold_workflow_steps
WHERE episode_id IS NOT NULL
  AND episode_id = @episode_id;

-- name: StartWorkflowStep :execrows
-- Points a step at a new attempt's episode: pending -> running (first
-- attempt) or running -> running (a retry replacing the failed attempt).
-- Conditioned on the status and episode the caller saw, so of two advancing
-- paths (an ending episode, reconciliation) exactly one starts the attempt:
-- the UPDATE re-checks the condition on the row it has locked. An episode
-- already pointed at by another step raises 2601
-- (leasehold_workflow_steps_episode_idx), LEFT TO SURFACE as on Postgres.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @started TABLE (step_id nvarchar(255) NOT NULL);

UPDATE leasehold_workflow_steps
SET status     = N'running',
    episode_id = @new_episode_id,
    attempts   = attempts + 1,
    updated_at = SYSUTCDATETIME()
OUTPUT inserted.step_id INTO @started
WHERE instance_id = @instance_id
  AND step_id = @step_id
  AND status = @from_status
  AND COALESCE(episode_id, 0) = @from_episode_id;

SELECT COUNT_BIG(*) AS rows_affected FROM @started;

-- name: EndWorkflowStep :execrows
-- Ends a running step with done, failed or skipped, only while it still
-- points at the episode that ended: a duplicate or stale end matches no row
-- and advances nothing.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @ended TABLE (step_id nvarchar(255) NOT NULL);

UPDATE leasehold_workflow_steps
SET status = @status, updated_at = SYSUTCDATETIME()
OUTPUT inserted.step_id INTO @ended
WHERE instance_id = @instance_id
  AND step_id = @step_id
  AND status = N'running'
  AND episode_id = @episode_id;

SELECT COUNT_BIG(*) AS rows_affected FROM @ended;

-- name: SkipPendingWorkflowSteps :execrows
-- An aborted instance's steps that never started are skipped.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @skipped TABLE (step_id nvarchar(255) NOT NULL);

UPDATE leasehold_workflow_steps
SET status = N'skipped', updated_at = SYSUTCDATETIME()
OUTPUT inserted.step_id INTO @skipped
WHERE instance_id = @instance_id
  AND status = N'pending';

SELECT COUNT_BIG(*) AS rows_affected FROM @skipped;

-- name: FinishWorkflowInstance :execrows
-- Ends a running instance with done, failed or canceled (an operator's
-- cancel, under the instance lock like every advance); the row leaves the
-- filtered unique index, so its key is free again once this commits.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @finished TABLE (id bigint NOT NULL);

UPDATE leasehold_workflow_instances
SET status = @status, error_detail = @error_detail, finished_at = SYSUTCDATETIME()
OUTPUT inserted.id INTO @finished
WHERE id = @id
  AND status = N'running';

SELECT COUNT_BIG(*) AS rows_affected FROM @finished;

-- name: ListStalledWorkflowSteps :many
-- Reconciliation: running steps of running instances (one env, stack scope
-- as in recovery) whose current episode has already ended (done, failed,
-- partially_failed or canceled): an advance that never happened, e.g. an
-- episode failed by recovery. Read-only and unhinted (no NOLOCK): the
-- advancing transaction re-checks everything under the instance lock.
-- Parked instances last: however many cannot be advanced (a definition that
-- no longer matches), they never fill the batch ahead of those that can.
SELECT TOP (@max_rows) s.instance_id, s.step_id, s.episode_id, e.status AS episode_status
FROM leasehold_workflow_instances AS i
JOIN leasehold_workflow_steps AS s ON s.instance_id = i.id
JOIN leasehold_episodes AS e ON e.id = s.episode_id
WHERE i.status = N'running'
  AND i.env = @env
  AND (@source_stack = N'' OR i.source_stack IN (@source_stack, N''))
  AND s.status = N'running'
  AND e.status IN (N'done', N'failed', N'partially_failed', N'canceled')
ORDER BY CASE WHEN i.parked_reason IS NULL THEN 0 ELSE 1 END, s.instance_id, s.step_id;

-- name: ParkWorkflowInstance :execrows
-- Records (reason) or clears (NULL) why the instance's advance could not
-- apply the registered definition, e.g. a rolling deploy renamed a step.
-- Run under the instance lock (LockWorkflowInstance's UPDLOCK, HOLDLOCK,
-- ROWLOCK, held by the caller's transaction), in the transaction that keeps
-- the step's episode finished; only a running instance is parked.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @parked TABLE (id bigint NOT NULL);

UPDATE leasehold_workflow_instances
SET parked_reason = @parked_reason
OUTPUT inserted.id INTO @parked
WHERE id = @id
  AND status = N'running';

SELECT COUNT_BIG(*) AS rows_affected FROM @parked;

-- name: ListWorkflowInstances :many
-- An operator read (Engine.List, `leasehold workflows ls`), newest first:
-- every filter is optional (N'' / NULL / 0 is any). Unhinted (no NOLOCK):
-- committed rows only, and it locks nothing beyond the statement.
SELECT TOP (@max_rows) id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE (@workflow_id = N'' OR workflow_id = @workflow_id)
  AND (@subject = N'' OR subject = @subject)
  AND (@status = N'' OR status = @status)
  AND (@env IS NULL OR env = @env)
  AND (@parked_only = 0 OR parked_reason IS NOT NULL)
ORDER BY id DESC;

-- name: GetAgentMaxAttempts :one
-- The max attempts of an expectation as the nodes that register it
-- recorded it when they started (PutAgentDefinition): what a workflow
-- step's episode gets, so that it is bounded like every other episode of
-- the expectation, whichever node starts the step. A plain read, as on
-- Postgres.
SELECT max_attempts
FROM leasehold_agent_definitions
WHERE actor_id = @actor_id
  AND expectation_id = @expectation_id
  AND max_attempts IS NOT NULL;

-- name: PutWorkflowDefinition :exec
-- Records a workflow definition under its version, a hash of its canonical
-- JSON: every node that registers the definition runs it when it starts
-- (and a Start runs it in its transaction until one committed), and every
-- run after the first changes nothing (Postgres: ON CONFLICT DO NOTHING). A
-- version's row is therefore written once and never updated: the definition
-- an instance pinned with definition_version cannot change under it.
--
-- Guarantee: two nodes recording one version at once both succeed, one of
-- them inserting. The INSERT is guarded by NOT EXISTS read WITH (UPDLOCK,
-- HOLDLOCK): the read takes an update-mode key-range lock on the key,
-- present or absent, which two sessions cannot both hold, and keeps it to
-- the end of the statement (or of the caller's transaction inside Start's
-- InTx), so the second writer waits, re-reads and inserts nothing. No
-- TRY/CATCH: a 2627 cannot occur while the key range is held, and would be
-- LEFT TO SURFACE (XACT_ABORT rolls back), as on CreateWorkflowInstance.
SET NOCOUNT ON;
SET XACT_ABORT ON;

INSERT INTO leasehold_workflow_definitions (workflow_id, version, definition, recorded_by)
SELECT @workflow_id, @version, @definition, @recorded_by
WHERE NOT EXISTS (
    SELECT 1 FROM leasehold_workflow_definitions WITH (UPDLOCK, HOLDLOCK)
    WHERE workflow_id = @workflow_id
      AND version = @version);

-- name: GetWorkflowDefinition :one
-- The definition of a workflow at one version: what an advance uses when
-- the instance's definition_version is not the one registered on the
-- advancing node (a rolling deploy). A plain read, unhinted as on
-- Postgres: the row never changes once written (PutWorkflowDefinition), and
-- the instance lock (LockWorkflowInstance) already orders the advances that
-- use it.
SELECT definition
FROM leasehold_workflow_definitions
WHERE workflow_id = @workflow_id
  AND version = @version;

-- name: MoveWorkflowStep :execrows
-- Migrate: the step takes its ID and max attempts in the version the
-- instance moves to, keeping its status, attempts and episode. Run under
-- the instance lock (LockWorkflowInstance's UPDLOCK, HOLDLOCK, ROWLOCK,
-- held by the caller's transaction), conditioned on the status and episode
-- the caller saw, like every step update: zero rows means the step
-- changed, and the migration is rolled back. A new ID already taken raises
-- 2627 (leasehold_workflow_steps_pkey), LEFT TO SURFACE as on Postgres
-- (the engine never asks for one).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @moved TABLE (step_id nvarchar(255) NOT NULL);

UPDATE leasehold_workflow_steps
SET step_id = @new_step_id, max_attempts = @max_attempts, updated_at = SYSUTCDATETIME()
OUTPUT inserted.step_id INTO @moved
WHERE instance_id = @instance_id
  AND step_id = @step_id
  AND status = @from_status
  AND COALESCE(episode_id, 0) = @from_episode_id;

SELECT COUNT_BIG(*) AS rows_affected FROM @moved;

-- name: DeleteWorkflowStep :execrows
-- Migrate: a step the version the instance moves to does not have. Run
-- under the instance lock, conditioned on the status and episode the caller
-- saw; never a running step, whose episode's end would then advance
-- nothing.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @deleted TABLE (step_id nvarchar(255) NOT NULL);

DELETE FROM leasehold_workflow_steps
OUTPUT deleted.step_id INTO @deleted
WHERE instance_id = @instance_id
  AND step_id = @step_id
  AND status = @from_status
  AND status <> N'running'
  AND COALESCE(episode_id, 0) = @from_episode_id;

SELECT COUNT_BIG(*) AS rows_affected FROM @deleted;

-- name: SetWorkflowDefinitionVersion :execrows
-- Migrate: the running instance follows another version of its workflow
-- from now on (its steps were moved in the same transaction, under the
-- instance lock), and a parked reason is cleared: the instance's steps are
-- those of that version.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @migrated TABLE (id bigint NOT NULL);

UPDATE leasehold_workflow_instances
SET definition_version = @definition_version, parked_reason = NULL
OUTPUT inserted.id INTO @migrated
WHERE id = @id
  AND status = N'running';

SELECT COUNT_BIG(*) AS rows_affected FROM @migrated;
