-- Workflows: instances and their step rows (SQLite). Every statement here
-- runs inside the transaction that advances one instance (workflows.Engine),
-- which first locks the instance with LockWorkflowInstance, except the reads
-- (GetWorkflowInstance, ListWorkflowSteps outside a transaction, and
-- ListStalledWorkflowSteps for reconciliation). Step rows change only by
-- conditional updates on their expected status and episode, never by a
-- read-modify-write of the whole instance.
--
-- The statements of sql/queries/postgres/workflows.sql: same names and
-- kinds. Where Postgres locks the instance row (FOR UPDATE), the advancing
-- transaction here is BEGIN IMMEDIATE and holds the database's one write
-- lock from BEGIN to COMMIT: two advances of one instance (or of any two)
-- run one after the other, and the second sees the first's step updates.
-- All times are the database clock in milliseconds,
-- CAST(round(unixepoch('subsec') * 1000) AS INTEGER).

-- name: CreateWorkflowInstance :one
-- Starts an instance, unless one is already running for the same workflow,
-- subject and env (the partial unique index): then no row comes back and
-- the caller reads the running one. definition_version pins the instance
-- to the definition it starts with (see GetWorkflowDefinition).
INSERT INTO leasehold_workflow_instances (workflow_id, subject, env, source_stack, status, payload, created_at,
    definition_version)
VALUES (CAST(@workflow_id AS TEXT), CAST(@subject AS TEXT), CAST(@env AS TEXT), CAST(@source_stack AS TEXT),
    'running', sqlc.narg(payload), CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(@definition_version AS TEXT))
ON CONFLICT (workflow_id, subject, env) WHERE status = 'running' DO NOTHING
RETURNING id, created_at;

-- name: GetRunningWorkflowInstance :one
-- The running instance of a workflow, subject and env, if any.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE workflow_id = CAST(@workflow_id AS TEXT)
  AND subject = CAST(@subject AS TEXT)
  AND env = CAST(@env AS TEXT)
  AND status = 'running';

-- name: InsertWorkflowStep :exec
-- One row per step of a new instance, pending.
INSERT INTO leasehold_workflow_steps (instance_id, step_id, status, attempts, max_attempts, updated_at)
VALUES (CAST(@instance_id AS INTEGER), CAST(@step_id AS TEXT), 'pending', 0, CAST(@max_attempts AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER));

-- name: LockWorkflowInstance :one
-- Reads the instance for the advancing transaction. Postgres locks the row
-- FOR UPDATE; here the lock is the database write lock, which the
-- advancing transaction (BEGIN IMMEDIATE, see InTx) holds from its start:
-- two episodes of one instance ending at once (fan-in) advance one after
-- the other, and the second sees the first's step updates, so no join is
-- missed. Outside such a transaction it locks nothing, as FOR UPDATE in
-- autocommit keeps nothing on Postgres.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE id = CAST(@id AS INTEGER);

-- name: GetWorkflowInstance :one
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE id = CAST(@id AS INTEGER);

-- name: ListWorkflowSteps :many
SELECT instance_id, step_id, status, CAST(coalesce(episode_id, 0) AS INTEGER) AS episode_id,
    attempts, max_attempts, updated_at
FROM leasehold_workflow_steps
WHERE instance_id = CAST(@instance_id AS INTEGER)
ORDER BY step_id;

-- name: GetWorkflowStepByEpisode :one
-- The step an episode is (or was) an attempt of.
SELECT instance_id, step_id, status, CAST(coalesce(episode_id, 0) AS INTEGER) AS episode_id,
    attempts, max_attempts, updated_at
FROM leasehold_workflow_steps
WHERE episode_id = CAST(@episode_id AS INTEGER);

-- name: StartWorkflowStep :execrows
-- Points a step at a new attempt's episode: pending -> running (first
-- attempt) or running -> running (a retry replacing the failed attempt).
-- Conditioned on the status and episode the caller saw, so of two advancing
-- paths (an ending episode, reconciliation) exactly one starts the attempt.
UPDATE leasehold_workflow_steps
SET status     = 'running',
    episode_id = CAST(@new_episode_id AS INTEGER),
    attempts   = attempts + 1,
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE instance_id = CAST(@instance_id AS INTEGER)
  AND step_id = CAST(@step_id AS TEXT)
  AND status = CAST(@from_status AS TEXT)
  AND coalesce(episode_id, 0) = CAST(@from_episode_id AS INTEGER);

-- name: EndWorkflowStep :execrows
-- Ends a running step with done, failed or skipped, only while it still
-- points at the episode that ended: a duplicate or stale end matches no row
-- and advances nothing.
UPDATE leasehold_workflow_steps
SET status = CAST(@status AS TEXT),
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE instance_id = CAST(@instance_id AS INTEGER)
  AND step_id = CAST(@step_id AS TEXT)
  AND status = 'running'
  AND episode_id = CAST(@episode_id AS INTEGER);

-- name: SkipPendingWorkflowSteps :execrows
-- An aborted instance's steps that never started are skipped.
UPDATE leasehold_workflow_steps
SET status = 'skipped', updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE instance_id = CAST(@instance_id AS INTEGER)
  AND status = 'pending';

-- name: FinishWorkflowInstance :execrows
-- Ends a running instance with done, failed or canceled (an operator's
-- cancel, under the advancing transaction's write lock like every
-- advance); its key is free again.
UPDATE leasehold_workflow_instances
SET status = CAST(@status AS TEXT), error_detail = sqlc.narg(error_detail),
    finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id = CAST(@id AS INTEGER)
  AND status = 'running';

-- name: ListStalledWorkflowSteps :many
-- Reconciliation: running steps of running instances (one env, stack scope
-- as in recovery) whose current episode has already ended (done, failed,
-- partially_failed or canceled): an advance that never happened, e.g. an
-- episode failed by recovery. Read-only: the advancing transaction
-- re-checks everything under the write lock.
SELECT s.instance_id, s.step_id, CAST(s.episode_id AS INTEGER) AS episode_id, e.status AS episode_status
FROM leasehold_workflow_instances AS i
JOIN leasehold_workflow_steps AS s ON s.instance_id = i.id
JOIN leasehold_episodes AS e ON e.id = s.episode_id
WHERE i.status = 'running'
  AND i.env = CAST(@env AS TEXT)
  AND (CAST(@source_stack AS TEXT) = '' OR i.source_stack IN (CAST(@source_stack AS TEXT), ''))
  AND s.status = 'running'
  AND e.status IN ('done', 'failed', 'partially_failed', 'canceled')
-- Parked instances last: however many cannot be advanced (a definition
-- that no longer matches), they never fill the batch ahead of those that
-- can.
ORDER BY (i.parked_reason IS NOT NULL), s.instance_id, s.step_id
LIMIT CAST(@max_rows AS INTEGER);

-- name: ParkWorkflowInstance :execrows
-- Records (reason) or clears (NULL) why the instance's advance could not
-- apply the registered definition, e.g. a rolling deploy renamed a step.
-- Run in the advancing transaction, in the one that keeps the step's
-- episode finished; only a running instance is parked.
UPDATE leasehold_workflow_instances
SET parked_reason = sqlc.narg(parked_reason)
WHERE id = CAST(@id AS INTEGER)
  AND status = 'running';

-- name: ListWorkflowInstances :many
-- An operator read (Engine.List, `leasehold workflows ls`), newest first:
-- every filter is optional (empty, NULL or false is any). Locks nothing.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE (CAST(@workflow_id AS TEXT) = '' OR workflow_id = CAST(@workflow_id AS TEXT))
  AND (CAST(@subject AS TEXT) = '' OR subject = CAST(@subject AS TEXT))
  AND (CAST(@status AS TEXT) = '' OR status = CAST(@status AS TEXT))
  AND (CAST(sqlc.narg(env) AS TEXT) IS NULL OR env = CAST(sqlc.narg(env) AS TEXT))
  AND (NOT CAST(@parked_only AS BOOLEAN) OR parked_reason IS NOT NULL)
ORDER BY id DESC
LIMIT CAST(@max_rows AS INTEGER);

-- name: GetAgentMaxAttempts :one
-- The max attempts of an expectation as the nodes that register it
-- recorded it when they started (PutAgentDefinition): what a workflow
-- step's episode gets, so that it is bounded like every other episode of
-- the expectation, whichever node starts the step.
SELECT CAST(max_attempts AS INTEGER) AS max_attempts
FROM leasehold_agent_definitions
WHERE actor_id = CAST(@actor_id AS TEXT)
  AND expectation_id = CAST(@expectation_id AS TEXT)
  AND max_attempts IS NOT NULL;

-- name: PutWorkflowDefinition :exec
-- Records a workflow definition under its version, a hash of its canonical
-- JSON: every node that registers the definition runs it when it starts
-- (and a Start runs it in its transaction until one committed), and every
-- run after the first changes nothing (DO NOTHING on the primary key). A
-- version's row is therefore written once and never updated: the definition
-- an instance pinned with definition_version cannot change under it.
INSERT INTO leasehold_workflow_definitions (workflow_id, version, definition, recorded_at, recorded_by)
VALUES (CAST(@workflow_id AS TEXT), CAST(@version AS TEXT), CAST(@definition AS TEXT),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER), CAST(@recorded_by AS TEXT))
ON CONFLICT (workflow_id, version) DO NOTHING;

-- name: GetWorkflowDefinition :one
-- The definition of a workflow at one version: what an advance uses when
-- the instance's definition_version is not the one registered on the
-- advancing node (a rolling deploy). A plain read: the row never changes
-- once written (PutWorkflowDefinition), and the advancing transaction's
-- write lock already orders the advances that use it.
SELECT definition
FROM leasehold_workflow_definitions
WHERE workflow_id = CAST(@workflow_id AS TEXT)
  AND version = CAST(@version AS TEXT);

-- name: MoveWorkflowStep :execrows
-- Migrate: the step takes its ID and max attempts in the version the
-- instance moves to, keeping its status, attempts and episode. Run in the
-- advancing transaction (its write lock is the instance lock),
-- conditioned on the status and episode the caller saw, like every step
-- update: zero rows means the step changed, and the migration is rolled
-- back.
UPDATE leasehold_workflow_steps
SET step_id = CAST(@new_step_id AS TEXT), max_attempts = CAST(@max_attempts AS INTEGER),
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE instance_id = CAST(@instance_id AS INTEGER)
  AND step_id = CAST(@step_id AS TEXT)
  AND status = CAST(@from_status AS TEXT)
  AND coalesce(episode_id, 0) = CAST(@from_episode_id AS INTEGER);

-- name: DeleteWorkflowStep :execrows
-- Migrate: a step the version the instance moves to does not have. Run in
-- the advancing transaction, conditioned on the status and episode the
-- caller saw; never a running step, whose episode's end would then advance
-- nothing.
DELETE FROM leasehold_workflow_steps
WHERE instance_id = CAST(@instance_id AS INTEGER)
  AND step_id = CAST(@step_id AS TEXT)
  AND status = CAST(@from_status AS TEXT)
  AND status <> 'running'
  AND coalesce(episode_id, 0) = CAST(@from_episode_id AS INTEGER);

-- name: SetWorkflowDefinitionVersion :execrows
-- Migrate: the running instance follows another version of its workflow
-- from now on (its steps were moved in the same transaction), and a parked
-- reason is cleared: the instance's steps are those of that version.
UPDATE leasehold_workflow_instances
SET definition_version = CAST(@definition_version AS TEXT), parked_reason = NULL
WHERE id = CAST(@id AS INTEGER)
  AND status = 'running';
