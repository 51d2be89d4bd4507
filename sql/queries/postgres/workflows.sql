-- Workflows: instances and their step rows. Every statement here runs inside
-- the transaction that advances one instance (workflows.Engine), which first
-- locks the instance row with LockWorkflowInstance, except the reads
-- (GetWorkflowInstance, ListWorkflowSteps outside a transaction, and
-- ListStalledWorkflowSteps for reconciliation). Step rows change only by
-- conditional updates on their expected status and episode, never by a
-- read-modify-write of the whole instance. All times are now().

-- name: CreateWorkflowInstance :one
-- Starts an instance, unless one is already running for the same workflow,
-- subject and env (the filtered unique index): then no row comes back and
-- the caller reads the running one. definition_version pins the instance
-- to the definition it starts with (see GetWorkflowDefinition).
INSERT INTO leasehold_workflow_instances (workflow_id, subject, env, source_stack, status, payload,
    definition_version)
VALUES (sqlc.arg(workflow_id), sqlc.arg(subject), sqlc.arg(env), sqlc.arg(source_stack), 'running',
    sqlc.narg(payload), sqlc.arg(definition_version))
ON CONFLICT (workflow_id, subject, env) WHERE status = 'running' DO NOTHING
RETURNING id, created_at;

-- name: GetRunningWorkflowInstance :one
-- The running instance of a workflow, subject and env, if any.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE workflow_id = sqlc.arg(workflow_id)
  AND subject = sqlc.arg(subject)
  AND env = sqlc.arg(env)
  AND status = 'running';

-- name: InsertWorkflowStep :exec
-- One row per step of a new instance, pending.
INSERT INTO leasehold_workflow_steps (instance_id, step_id, status, attempts, max_attempts)
VALUES (sqlc.arg(instance_id), sqlc.arg(step_id), 'pending', 0, sqlc.arg(max_attempts));

-- name: LockWorkflowInstance :one
-- Locks the instance for the advancing transaction. Two episodes of one
-- instance ending at once (fan-in) advance one after the other, and the
-- second sees the first's step updates, so no join is missed.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE id = sqlc.arg(id)
FOR UPDATE;

-- name: GetWorkflowInstance :one
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE id = sqlc.arg(id);

-- name: ListWorkflowSteps :many
SELECT instance_id, step_id, status, coalesce(episode_id, 0)::bigint AS episode_id,
    attempts, max_attempts, updated_at
FROM leasehold_workflow_steps
WHERE instance_id = sqlc.arg(instance_id)
ORDER BY step_id;

-- name: GetWorkflowStepByEpisode :one
-- The step an episode is (or was) an attempt of.
SELECT instance_id, step_id, status, coalesce(episode_id, 0)::bigint AS episode_id,
    attempts, max_attempts, updated_at
FROM leasehold_workflow_steps
WHERE episode_id = sqlc.arg(episode_id);

-- name: StartWorkflowStep :execrows
-- Points a step at a new attempt's episode: pending -> running (first
-- attempt) or running -> running (a retry replacing the failed attempt).
-- Conditioned on the status and episode the caller saw, so of two advancing
-- paths (an ending episode, reconciliation) exactly one starts the attempt.
UPDATE leasehold_workflow_steps
SET status     = 'running',
    episode_id = sqlc.arg(new_episode_id),
    attempts   = attempts + 1,
    updated_at = now()
WHERE instance_id = sqlc.arg(instance_id)
  AND step_id = sqlc.arg(step_id)
  AND status = sqlc.arg(from_status)
  AND coalesce(episode_id, 0) = sqlc.arg(from_episode_id)::bigint;

-- name: EndWorkflowStep :execrows
-- Ends a running step with done, failed or skipped, only while it still
-- points at the episode that ended: a duplicate or stale end matches no row
-- and advances nothing.
UPDATE leasehold_workflow_steps
SET status = sqlc.arg(status), updated_at = now()
WHERE instance_id = sqlc.arg(instance_id)
  AND step_id = sqlc.arg(step_id)
  AND status = 'running'
  AND episode_id = sqlc.arg(episode_id);

-- name: SkipPendingWorkflowSteps :execrows
-- An aborted instance's steps that never started are skipped.
UPDATE leasehold_workflow_steps
SET status = 'skipped', updated_at = now()
WHERE instance_id = sqlc.arg(instance_id)
  AND status = 'pending';

-- name: FinishWorkflowInstance :execrows
-- Ends a running instance with done, failed or canceled (an operator's
-- cancel, under the instance lock like every advance); its key is free
-- again.
UPDATE leasehold_workflow_instances
SET status = sqlc.arg(status), error_detail = sqlc.narg(error_detail), finished_at = now()
WHERE id = sqlc.arg(id)
  AND status = 'running';

-- name: ListStalledWorkflowSteps :many
-- Reconciliation: running steps of running instances (one env, stack scope
-- as in recovery) whose current episode has already ended (done, failed,
-- partially_failed or canceled) — an advance that never happened, e.g. an
-- episode failed by recovery. Read-only: the advancing transaction
-- re-checks everything under the instance lock.
SELECT s.instance_id, s.step_id, s.episode_id::bigint AS episode_id, e.status AS episode_status
FROM leasehold_workflow_instances AS i
JOIN leasehold_workflow_steps AS s ON s.instance_id = i.id
JOIN leasehold_episodes AS e ON e.id = s.episode_id
WHERE i.status = 'running'
  AND i.env = sqlc.arg(env)::text
  AND (sqlc.arg(source_stack)::text = '' OR i.source_stack IN (sqlc.arg(source_stack)::text, ''))
  AND s.status = 'running'
  AND e.status IN ('done', 'failed', 'partially_failed', 'canceled')
-- Parked instances last: however many cannot be advanced (a definition
-- that no longer matches), they never fill the batch ahead of those that
-- can.
ORDER BY (i.parked_reason IS NOT NULL), s.instance_id, s.step_id
LIMIT sqlc.arg(max_rows)::integer;

-- name: ParkWorkflowInstance :execrows
-- Records (reason) or clears (NULL) why the instance's advance could not
-- apply the registered definition, e.g. a rolling deploy renamed a step.
-- Run under the instance lock, in the transaction that keeps the step's
-- episode finished; only a running instance is parked.
UPDATE leasehold_workflow_instances
SET parked_reason = sqlc.narg(parked_reason)
WHERE id = sqlc.arg(id)
  AND status = 'running';

-- name: ListWorkflowInstances :many
-- An operator read (Engine.List, `leasehold workflows ls`), newest first:
-- every filter is optional ('' / NULL / false is any). Locks nothing.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason, definition_version
FROM leasehold_workflow_instances
WHERE (sqlc.arg(workflow_id)::text = '' OR workflow_id = sqlc.arg(workflow_id)::text)
  AND (sqlc.arg(subject)::text = '' OR subject = sqlc.arg(subject)::text)
  AND (sqlc.arg(status)::text = '' OR status = sqlc.arg(status)::text)
  AND (sqlc.narg(env)::text IS NULL OR env = sqlc.narg(env)::text)
  AND (NOT sqlc.arg(parked_only)::boolean OR parked_reason IS NOT NULL)
ORDER BY id DESC
LIMIT sqlc.arg(max_rows)::integer;

-- name: GetAgentMaxAttempts :one
-- The max attempts of an expectation as the nodes that register it
-- recorded it when they started (PutAgentDefinition): what a workflow
-- step's episode gets, so that it is bounded like every other episode of
-- the expectation, whichever node starts the step.
SELECT max_attempts::integer AS max_attempts
FROM leasehold_agent_definitions
WHERE actor_id = sqlc.arg(actor_id)
  AND expectation_id = sqlc.arg(expectation_id)
  AND max_attempts IS NOT NULL;

-- name: PutWorkflowDefinition :exec
-- Records a workflow definition under its version, a hash of its canonical
-- JSON: every node that registers the definition runs it when it starts
-- (and a Start runs it in its transaction until one committed), and every
-- run after the first changes nothing (DO NOTHING on the primary key). A
-- version's row is therefore written once and never updated: the definition
-- an instance pinned with definition_version cannot change under it, and
-- two nodes recording it at once both succeed, one of them inserting.
INSERT INTO leasehold_workflow_definitions (workflow_id, version, definition, recorded_by)
VALUES (sqlc.arg(workflow_id), sqlc.arg(version), sqlc.arg(definition), sqlc.arg(recorded_by))
ON CONFLICT (workflow_id, version) DO NOTHING;

-- name: GetWorkflowDefinition :one
-- The definition of a workflow at one version: what an advance uses when
-- the instance's definition_version is not the one registered on the
-- advancing node (a rolling deploy). A plain read: the row never changes
-- once written (PutWorkflowDefinition), and the instance lock already
-- orders the advances that use it.
SELECT definition
FROM leasehold_workflow_definitions
WHERE workflow_id = sqlc.arg(workflow_id)
  AND version = sqlc.arg(version);

-- name: MoveWorkflowStep :execrows
-- Migrate: the step takes its ID and max attempts in the version the
-- instance moves to, keeping its status, attempts and episode. Run under
-- the instance lock (LockWorkflowInstance), conditioned on the status and
-- episode the caller saw, like every step update: zero rows means the step
-- changed, and the migration is rolled back.
UPDATE leasehold_workflow_steps
SET step_id = sqlc.arg(new_step_id), max_attempts = sqlc.arg(max_attempts), updated_at = now()
WHERE instance_id = sqlc.arg(instance_id)
  AND step_id = sqlc.arg(step_id)
  AND status = sqlc.arg(from_status)
  AND coalesce(episode_id, 0) = sqlc.arg(from_episode_id)::bigint;

-- name: DeleteWorkflowStep :execrows
-- Migrate: a step the version the instance moves to does not have. Run
-- under the instance lock, conditioned on the status and episode the caller
-- saw; never a running step, whose episode's end would then advance
-- nothing.
DELETE FROM leasehold_workflow_steps
WHERE instance_id = sqlc.arg(instance_id)
  AND step_id = sqlc.arg(step_id)
  AND status = sqlc.arg(from_status)
  AND status <> 'running'
  AND coalesce(episode_id, 0) = sqlc.arg(from_episode_id)::bigint;

-- name: SetWorkflowDefinitionVersion :execrows
-- Migrate: the running instance follows another version of its workflow
-- from now on (its steps were moved in the same transaction, under the
-- instance lock), and a parked reason is cleared: the instance's steps are
-- those of that version.
UPDATE leasehold_workflow_instances
SET definition_version = sqlc.arg(definition_version), parked_reason = NULL
WHERE id = sqlc.arg(id)
  AND status = 'running';
