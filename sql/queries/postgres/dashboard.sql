-- Dashboard reads: what the web dashboard (package ui, `leasehold ui`)
-- shows. Every statement here is an operator read.
--
-- None has a coordination role and none locks anything: no FOR UPDATE, no
-- FOR SHARE, no advisory lock. Nothing decides anything from them: the runs,
-- recovery and the pollers decide with the statements of episodes.sql,
-- recovery.sql and available.sql, each re-checking its own condition
-- on the rows it locks. So a page is a snapshot that may be stale by the
-- time it is read. Ages, lease liveness and chart windows are computed on
-- the database clock (now()), never the browser's or the serving node's.
-- Every value a user typed reaches these statements as a parameter.
--
-- The schema keeps no history of grants: a claim row holds its current
-- grant only, and a journal step records the fence of the grant that wrote
-- it, not its node. What the dashboard shows of earlier grants (the
-- timeline, the hand-over charts) is derived from the steps' fences, as
-- each statement below says.

-- name: DashboardClock :one
-- Reads the database clock, which every age and chart axis on a page is
-- measured from.
SELECT now()::timestamptz AS db_now;

-- name: DashboardNodes :many
-- Reads every node row (advisory membership) with, on the database clock,
-- the age of its last heartbeat, the claims it holds under a live lease,
-- the claims it still holds whose lease expired (a node that died: work
-- recovery will take over), and the running episodes it owns. The claim
-- counts seek leasehold_work_claims_claimed_owner_idx; the episode count
-- walks the running episodes' partial index.
SELECT n.node_id, n.stack, n.env, n.mode, n.draining, n.started_at, n.heartbeat_at,
    (extract(epoch FROM (now() - n.heartbeat_at)) * 1000)::bigint AS heartbeat_age_ms,
    (SELECT count(*) FROM leasehold_work_claims AS c
     WHERE c.owner_node = n.node_id
       AND c.state = 'claimed'
       AND c.lease_until > now())::bigint AS live_leases,
    (SELECT count(*) FROM leasehold_work_claims AS x
     WHERE x.owner_node = n.node_id
       AND x.state = 'claimed'
       AND x.lease_until <= now())::bigint AS expired_leases,
    (SELECT count(*) FROM leasehold_episodes AS e
     WHERE e.owner_node = n.node_id
       AND e.status = 'running'
       AND e.archived_at IS NULL)::bigint AS running_episodes
FROM leasehold_nodes AS n
ORDER BY n.node_id;

-- name: DashboardDefinitions :many
-- Reads the expectations the nodes recorded when they started, with the
-- recovery policy and max attempts they apply (NULL: not recorded).
SELECT d.actor_id, d.expectation_id, d.recovery_policy, d.max_attempts, d.updated_at
FROM leasehold_agent_definitions AS d
ORDER BY d.actor_id, d.expectation_id;

-- name: DashboardStatusCounts :many
-- Counts the unarchived episodes per actor and status. It walks every
-- unarchived episode (no index covers the count): an operator's read,
-- bounded by maintenance's retention, never a node's.
SELECT e.actor_id, e.status, count(*)::bigint AS episodes
FROM leasehold_episodes AS e
WHERE e.archived_at IS NULL
GROUP BY e.actor_id, e.status
ORDER BY e.actor_id, e.status;

-- name: DashboardOutcomes :many
-- Counts the episodes that ended in the last window_ms (database clock),
-- per status and per bucket of their finished_at: bucket is
-- floor(epoch milliseconds / bucket_ms), so buckets are aligned to the
-- epoch and the caller turns a bucket back into its start time. Served by
-- leasehold_episodes_finished_idx; archived episodes are not counted.
SELECT b.bucket, b.status, count(*)::bigint AS episodes
FROM (
    SELECT floor(extract(epoch FROM e.finished_at) * 1000 / sqlc.arg(bucket_ms)::bigint)::bigint AS bucket,
        e.status
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND e.finished_at IS NOT NULL
      AND e.finished_at >= now() - (sqlc.arg(window_ms)::bigint * interval '1 millisecond')
) AS b
GROUP BY b.bucket, b.status
ORDER BY b.bucket, b.status;

-- name: DashboardHandovers :many
-- Counts the hand-overs of work from one grant to the next in the last
-- window_ms, per bucket (as in DashboardOutcomes) of the new grant's first
-- journaled step, with the latency of each: from the last step journaled
-- under the old grant to the first step under the new one (an upper bound
-- on the time the work stood still: the old lease running out, the sweep,
-- the pickup and the new run's first step).
--
-- Derived from the journal alone, because the schema keeps no history of
-- grants: every grant has a fence one higher than the grant before it, and
-- each step records the fence it was written under. Consecutive journaled
-- fences one apart mean the old holder ended its own grant and the next
-- grant followed directly: a retry (RetryEpisode, or an operator's
-- RequeueEpisode, then ClaimAvailable). Two or more apart mean
-- another node fenced the old grant out first: a takeover (recovery's
-- RequeueOrphan or ClaimForRecovery after the holder died, lost its lease
-- or released its work on drain). A grant that journaled no step is not
-- seen. It reads the journals of the queued and running episodes and of
-- those that ended in the window, through the journal's (episode_id,
-- step_no) index.
WITH scope AS (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND (e.status IN ('queued', 'running')
           OR e.finished_at >= now() - (sqlc.arg(window_ms)::bigint * interval '1 millisecond'))
), grants AS (
    SELECT s.episode_id, s.fence, min(s.created_at) AS first_at, max(s.created_at) AS last_at
    FROM leasehold_episode_steps AS s
    JOIN scope ON scope.id = s.episode_id
    GROUP BY s.episode_id, s.fence
), handovers AS (
    SELECT g.first_at,
        g.fence - lag(g.fence) OVER (PARTITION BY g.episode_id ORDER BY g.fence) AS fence_gap,
        (extract(epoch FROM (g.first_at - lag(g.last_at) OVER (PARTITION BY g.episode_id ORDER BY g.fence))) * 1000)::bigint AS latency_ms
    FROM grants AS g
)
SELECT b.bucket, b.kind, count(*)::bigint AS handovers,
    avg(b.latency_ms)::bigint AS avg_latency_ms,
    max(b.latency_ms)::bigint AS max_latency_ms
FROM (
    SELECT floor(extract(epoch FROM h.first_at) * 1000 / sqlc.arg(bucket_ms)::bigint)::bigint AS bucket,
        (CASE WHEN h.fence_gap = 1 THEN 'retry' ELSE 'takeover' END)::text AS kind,
        h.latency_ms
    FROM handovers AS h
    WHERE h.fence_gap IS NOT NULL
      AND h.first_at >= now() - (sqlc.arg(window_ms)::bigint * interval '1 millisecond')
) AS b
GROUP BY b.bucket, b.kind
ORDER BY b.bucket, b.kind;

-- name: DashboardEpisodes :many
-- Reads one page of episodes, newest first, with the fence of their claim
-- and whether its lease is live on the database clock. Keyset paging:
-- before_id 0 is the newest page, else the episodes older than before_id.
-- Empty status, actor_id, expectation_id, error_class and owner_node mean
-- any; NULL source_env and source_stack mean any ('' is the unset env or
-- stack); dedupe_like is a LIKE pattern built by the adapter with '\' as
-- the escape character ('' means any), and matches archived episodes too.
-- It walks the primary key down from before_id until max_rows match: the
-- filters other than the status and id have no index.
SELECT e.id, e.actor_id, e.expectation_id, e.trigger_type, e.dedupe_key, e.status, e.phase,
    e.attempts, e.max_attempts, e.source_stack, e.source_env, e.owner_node, e.error_class,
    e.created_at, e.started_at, e.finished_at, e.last_step_at, e.archived_at, e.cancel_requested_at,
    coalesce(c.fence, 0)::bigint AS claim_fence,
    (CASE WHEN c.state = 'claimed' AND c.lease_until > now() THEN true ELSE false END)::boolean AS claim_live
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE (sqlc.arg(before_id)::bigint = 0 OR e.id < sqlc.arg(before_id)::bigint)
  AND (sqlc.arg(status)::text = '' OR e.status = sqlc.arg(status)::text)
  AND (sqlc.arg(actor_id)::text = '' OR e.actor_id = sqlc.arg(actor_id)::text)
  AND (sqlc.arg(expectation_id)::text = '' OR e.expectation_id = sqlc.arg(expectation_id)::text)
  AND (sqlc.arg(error_class)::text = '' OR e.error_class = sqlc.arg(error_class)::text)
  AND (sqlc.arg(owner_node)::text = '' OR e.owner_node = sqlc.arg(owner_node)::text)
  AND (sqlc.narg(source_env)::text IS NULL OR e.source_env = sqlc.narg(source_env)::text)
  AND (sqlc.narg(source_stack)::text IS NULL OR e.source_stack = sqlc.narg(source_stack)::text)
  AND (sqlc.arg(dedupe_like)::text = '' OR e.dedupe_key LIKE sqlc.arg(dedupe_like)::text ESCAPE '\')
ORDER BY e.id DESC
LIMIT sqlc.arg(max_rows)::integer;

-- name: DashboardEpisode :one
-- Reads one episode (with trace_parent, the W3C trace context its
-- trigger's span stored, NULL for none) with, in the same statement (one
-- snapshot): the claim
-- row of its claim key (its dedupe key, or episode:{id}) with whether its
-- lease is live and how long it has left on the database clock, the
-- workflow step it is the episode of, and the size of its journal;
-- run_after is set while it is available work (its due time). No claim
-- row: claim_state '' and the claim's other columns zero or NULL; no
-- workflow step:
-- workflow_instance_id 0.
SELECT e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref,
    e.dedupe_key, e.status, e.phase, e.attempts, e.max_attempts, e.budget,
    e.source_stack, e.source_env, e.owner_node, e.payload, e.result,
    e.error_class, e.error_detail, e.queued_at, e.created_at, e.started_at,
    e.finished_at, e.last_step_at, e.archived_at, e.cancel_requested_at, e.trace_parent,
    coalesce(e.dedupe_key, 'episode:' || e.id)::text AS claim_key,
    coalesce(c.state, '')::text AS claim_state,
    coalesce(c.owner_node, '')::text AS claim_owner,
    coalesce(c.fence, 0)::bigint AS claim_fence,
    coalesce(c.attempt, 0)::integer AS claim_attempt,
    coalesce(c.grant_kind, '')::text AS claim_grant,
    coalesce(c.work_type, '')::text AS claim_work_type,
    c.claimed_at AS claim_claimed_at,
    c.lease_until AS claim_lease_until,
    c.last_heartbeat_at AS claim_heartbeat_at,
    c.finished_at AS claim_finished_at,
    c.error_detail AS claim_error_detail,
    (CASE WHEN c.state = 'claimed' AND c.lease_until > now() THEN true ELSE false END)::boolean AS claim_live,
    coalesce(extract(epoch FROM (c.lease_until - now())) * 1000, 0)::bigint AS claim_lease_left_ms,
    e.run_after,
    coalesce(w.instance_id, 0)::bigint AS workflow_instance_id,
    coalesce(w.step_id, '')::text AS workflow_step_id,
    (SELECT count(*) FROM leasehold_episode_steps AS s
     WHERE s.episode_id = e.id)::bigint AS journal_steps
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
LEFT JOIN leasehold_workflow_steps AS w
    ON w.episode_id = e.id
WHERE e.id = sqlc.arg(id);

-- name: DashboardGrants :many
-- Reads, per fence, the steps one episode's journal holds: how many, the
-- first and last step numbers and when they were written. Each fence is
-- one grant of the episode's claim (fences only grow, one per grant), so
-- these are the grants that journaled something, in order; the caller
-- infers the grants that journaled nothing from the gaps between fences
-- and from the claim's current fence. Served by the journal's
-- (episode_id, step_no) index.
SELECT s.fence, count(*)::bigint AS steps,
    min(s.step_no)::integer AS first_step_no, max(s.step_no)::integer AS last_step_no,
    min(s.created_at)::timestamptz AS first_at, max(s.created_at)::timestamptz AS last_at
FROM leasehold_episode_steps AS s
WHERE s.episode_id = sqlc.arg(episode_id)
GROUP BY s.fence
ORDER BY s.fence;

-- name: DashboardJournal :many
-- Reads the last max_rows steps of one episode's journal, last first (the
-- caller shows them in step order under their grants): number, fence,
-- data and time.
SELECT s.step_no, s.fence, s.data, s.created_at
FROM leasehold_episode_steps AS s
WHERE s.episode_id = sqlc.arg(episode_id)
ORDER BY s.step_no DESC
LIMIT sqlc.arg(max_rows)::integer;

-- name: DashboardWorkflows :many
-- Reads one page of workflow instances, newest first, each joined with its
-- step rows (one row per step, in step_id order; an instance without steps
-- comes once with step_id '') and each step's episode status. Keyset
-- paging on the instances: before_id 0 is the newest page. instance_id 0
-- means any, else that instance alone; empty workflow_id and status mean
-- any. The page of instances is chosen first (max_rows of them), then
-- their steps are joined, so the limit counts instances, not steps.
-- definition_version is the version of the definition the instance follows
-- ('' when started before versions were recorded).
SELECT i.id, i.workflow_id, i.subject, i.env, i.source_stack, i.status, i.payload,
    i.error_detail, i.created_at, i.finished_at, i.parked_reason, i.definition_version,
    coalesce(s.step_id, '')::text AS step_id,
    coalesce(s.status, '')::text AS step_status,
    coalesce(s.episode_id, 0)::bigint AS step_episode_id,
    coalesce(s.attempts, 0)::integer AS step_attempts,
    coalesce(s.max_attempts, 0)::integer AS step_max_attempts,
    s.updated_at AS step_updated_at,
    coalesce(e.status, '')::text AS episode_status,
    coalesce(e.error_class, '')::text AS episode_error_class
FROM (
    SELECT w.id, w.workflow_id, w.subject, w.env, w.source_stack, w.status, w.payload,
        w.error_detail, w.created_at, w.finished_at, w.parked_reason, w.definition_version
    FROM leasehold_workflow_instances AS w
    WHERE (sqlc.arg(before_id)::bigint = 0 OR w.id < sqlc.arg(before_id)::bigint)
      AND (sqlc.arg(instance_id)::bigint = 0 OR w.id = sqlc.arg(instance_id)::bigint)
      AND (sqlc.arg(workflow_id)::text = '' OR w.workflow_id = sqlc.arg(workflow_id)::text)
      AND (sqlc.arg(status)::text = '' OR w.status = sqlc.arg(status)::text)
    ORDER BY w.id DESC
    LIMIT sqlc.arg(max_rows)::integer
) AS i
LEFT JOIN leasehold_workflow_steps AS s
    ON s.instance_id = i.id
LEFT JOIN leasehold_episodes AS e
    ON e.id = s.episode_id
ORDER BY i.id DESC, s.step_id;

-- name: DashboardFindings :many
-- Reads one page of findings, newest first. status '' means any, else
-- active or cleared (the active ones: one per key per env, the filtered
-- unique index); NULL env means any ('' is the unset env); empty class
-- means any; key_like is a LIKE pattern built by the adapter with '\' as
-- the escape character ('' means any). Keyset paging: before_id 0 is the
-- newest page. It walks the primary key down until max_rows match.
SELECT f.id, f.finding_key, f.env, f.status, f.class, f.severity, f.summary, f.data,
    f.actor_id, f.source_stack, f.raised_by_episode, f.updated_by_episode,
    f.cleared_by_episode, f.raise_count, f.raised_at, f.updated_at, f.cleared_at
FROM leasehold_findings AS f
WHERE (sqlc.arg(before_id)::bigint = 0 OR f.id < sqlc.arg(before_id)::bigint)
  AND (sqlc.arg(status)::text = '' OR f.status = sqlc.arg(status)::text)
  AND (sqlc.narg(env)::text IS NULL OR f.env = sqlc.narg(env)::text)
  AND (sqlc.arg(class)::text = '' OR f.class = sqlc.arg(class)::text)
  AND (sqlc.arg(key_like)::text = '' OR f.finding_key LIKE sqlc.arg(key_like)::text ESCAPE '\')
ORDER BY f.id DESC
LIMIT sqlc.arg(max_rows)::integer;

-- name: DashboardFindingHistory :many
-- Reads every finding of one key in one env (strict: '' is the unset env),
-- active and cleared, newest first: the key's history of raises and
-- clears. Cleared rows have no index (only active ones are in the unique
-- index), so it walks the findings table: an operator's read.
SELECT f.id, f.finding_key, f.env, f.status, f.class, f.severity, f.summary, f.data,
    f.actor_id, f.source_stack, f.raised_by_episode, f.updated_by_episode,
    f.cleared_by_episode, f.raise_count, f.raised_at, f.updated_at, f.cleared_at
FROM leasehold_findings AS f
WHERE f.env = sqlc.arg(env)::text
  AND f.finding_key = sqlc.arg(finding_key)::text
ORDER BY f.id DESC
LIMIT sqlc.arg(max_rows)::integer;
