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
-- the caller reads the running one.
INSERT INTO leasehold_workflow_instances (workflow_id, subject, env, source_stack, status, payload)
VALUES (sqlc.arg(workflow_id), sqlc.arg(subject), sqlc.arg(env), sqlc.arg(source_stack), 'running',
    sqlc.narg(payload))
ON CONFLICT (workflow_id, subject, env) WHERE status = 'running' DO NOTHING
RETURNING id, created_at;

-- name: GetRunningWorkflowInstance :one
-- The running instance of a workflow, subject and env, if any.
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason
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
    created_at, finished_at, parked_reason
FROM leasehold_workflow_instances
WHERE id = sqlc.arg(id)
FOR UPDATE;

-- name: GetWorkflowInstance :one
SELECT id, workflow_id, subject, env, source_stack, status, payload, error_detail,
    created_at, finished_at, parked_reason
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
    created_at, finished_at, parked_reason
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
