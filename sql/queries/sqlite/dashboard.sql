-- Dashboard reads: what the web dashboard (package ui, `leasehold ui`)
-- shows. The SQLite twins of sql/queries/postgres/dashboard.sql, same
-- names, same results. Every statement here is an operator read.
--
-- None has a coordination role and none locks anything: each is a plain
-- SELECT, run outside any BEGIN IMMEDIATE transaction, so it never takes
-- the write lock; in WAL mode it reads the last committed state without
-- waiting for the writer and without holding it up. Nothing decides
-- anything from them: the runs, recovery and the pollers decide with the
-- statements of episodes.sql, recovery.sql and available.sql, each
-- re-checking its own condition under the write lock. So a page is a
-- snapshot that may be stale by the time it is read. Ages, lease liveness
-- and chart windows are computed on the database clock,
-- CAST(round(unixepoch('subsec') * 1000) AS INTEGER) (milliseconds since
-- the Unix epoch, the unit of every time column), never the browser's or
-- the serving node's. Every value a user typed reaches these statements
-- as a parameter.
--
-- The schema keeps no history of grants: a claim row holds its current
-- grant only, and a journal step records the fence of the grant that wrote
-- it, not its node. What the dashboard shows of earlier grants (the
-- timeline, the hand-over charts) is derived from the steps' fences, as
-- each statement below says.

-- name: DashboardClock :one
-- Reads the database clock, which every age and chart axis on a page is
-- measured from (milliseconds since the Unix epoch).
SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER) AS db_now;

-- name: DashboardNodes :many
-- Reads every node row (advisory membership) with, on the database clock,
-- the age of its last heartbeat, the claims it holds under a live lease,
-- the claims it still holds whose lease expired (a node that died: work
-- recovery will take over), and the running episodes it owns. The claim
-- counts seek leasehold_work_claims_claimed_owner_idx; the episode count
-- walks the running episodes' partial index.
SELECT n.node_id, n.stack, n.env, n.mode, n.draining, n.started_at, n.heartbeat_at,
    CAST(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - n.heartbeat_at AS INTEGER) AS heartbeat_age_ms,
    CAST((SELECT count(*) FROM leasehold_work_claims AS c
          WHERE c.owner_node = n.node_id
            AND c.state = 'claimed'
            AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) AS INTEGER) AS live_leases,
    CAST((SELECT count(*) FROM leasehold_work_claims AS x
          WHERE x.owner_node = n.node_id
            AND x.state = 'claimed'
            AND x.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) AS INTEGER) AS expired_leases,
    CAST((SELECT count(*) FROM leasehold_episodes AS e
          WHERE e.owner_node = n.node_id
            AND e.status = 'running'
            AND e.archived_at IS NULL) AS INTEGER) AS running_episodes
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
SELECT e.actor_id, e.status, CAST(count(*) AS INTEGER) AS episodes
FROM leasehold_episodes AS e
WHERE e.archived_at IS NULL
GROUP BY e.actor_id, e.status
ORDER BY e.actor_id, e.status;

-- name: DashboardOutcomes :many
-- Counts the episodes that ended in the last window_ms (database clock),
-- per status and per bucket of their finished_at: bucket is
-- finished_at / bucket_ms in integer division (floor, the times being
-- positive milliseconds), so buckets are aligned to the epoch and the
-- caller turns a bucket back into its start time. Served by
-- leasehold_episodes_finished_idx; archived episodes are not counted.
SELECT b.bucket, b.status, CAST(count(*) AS INTEGER) AS episodes
FROM (
    SELECT CAST(e.finished_at / CAST(@bucket_ms AS INTEGER) AS INTEGER) AS bucket,
        e.status
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND e.finished_at IS NOT NULL
      AND e.finished_at >= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@window_ms AS INTEGER)
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
-- Derived from the journal alone, exactly as on Postgres (see
-- sql/queries/postgres/dashboard.sql): consecutive journaled fences one
-- apart are a retry (the old holder ended its own grant and the next grant
-- followed directly), two or more apart a takeover (another node fenced the
-- old grant out first). A grant that journaled no step is not seen. The
-- latencies are whole milliseconds (the times' unit); the average is
-- rounded to the millisecond, as Postgres's ::bigint rounds. It reads the
-- journals of the queued and running episodes and of those that ended in
-- the window, through the journal's (episode_id, step_no) index.
WITH scope AS (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND (e.status IN ('queued', 'running')
           OR e.finished_at >= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@window_ms AS INTEGER))
), grants AS (
    SELECT s.episode_id, s.fence, min(s.created_at) AS first_at, max(s.created_at) AS last_at
    FROM leasehold_episode_steps AS s
    JOIN scope ON scope.id = s.episode_id
    GROUP BY s.episode_id, s.fence
), handovers AS (
    SELECT g.first_at,
        g.fence - lag(g.fence) OVER (PARTITION BY g.episode_id ORDER BY g.fence) AS fence_gap,
        g.first_at - lag(g.last_at) OVER (PARTITION BY g.episode_id ORDER BY g.fence) AS latency_ms
    FROM grants AS g
)
SELECT b.bucket, b.kind, CAST(count(*) AS INTEGER) AS handovers,
    CAST(round(avg(b.latency_ms)) AS INTEGER) AS avg_latency_ms,
    CAST(max(b.latency_ms) AS INTEGER) AS max_latency_ms
FROM (
    SELECT CAST(h.first_at / CAST(@bucket_ms AS INTEGER) AS INTEGER) AS bucket,
        CAST(CASE WHEN h.fence_gap = 1 THEN 'retry' ELSE 'takeover' END AS TEXT) AS kind,
        h.latency_ms
    FROM handovers AS h
    WHERE h.fence_gap IS NOT NULL
      AND h.first_at >= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@window_ms AS INTEGER)
) AS b
GROUP BY b.bucket, b.kind
ORDER BY b.bucket, b.kind;

-- name: DashboardEpisodes :many
-- Reads one page of episodes, newest first, with the fence of their claim
-- and whether its lease is live on the database clock. Keyset paging:
-- before_id 0 is the newest page, else the episodes older than before_id.
-- Empty status, actor_id, expectation_id, error_class and owner_node mean
-- any; NULL source_env and source_stack mean any ('' is the unset env or
-- stack); dedupe_contains keeps the dedupe keys that contain it ('' means
-- any), and matches archived episodes too. It is a literal, case-sensitive
-- substring test (instr), where Postgres uses LIKE with the pattern's
-- wildcards escaped: SQLite's LIKE ignores ASCII case, and instr gives
-- Postgres's result without a pattern. It walks the primary key down from
-- before_id until max_rows match: the filters other than the status and id
-- have no index.
SELECT e.id, e.actor_id, e.expectation_id, e.trigger_type, e.dedupe_key, e.status, e.phase,
    e.attempts, e.max_attempts, e.source_stack, e.source_env, e.owner_node, e.error_class,
    e.created_at, e.started_at, e.finished_at, e.last_step_at, e.archived_at, e.cancel_requested_at,
    CAST(coalesce(c.fence, 0) AS INTEGER) AS claim_fence,
    CAST(CASE WHEN c.state = 'claimed'
              AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
         THEN 1 ELSE 0 END AS BOOLEAN) AS claim_live
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE (CAST(@before_id AS INTEGER) = 0 OR e.id < CAST(@before_id AS INTEGER))
  AND (CAST(@status AS TEXT) = '' OR e.status = CAST(@status AS TEXT))
  AND (CAST(@actor_id AS TEXT) = '' OR e.actor_id = CAST(@actor_id AS TEXT))
  AND (CAST(@expectation_id AS TEXT) = '' OR e.expectation_id = CAST(@expectation_id AS TEXT))
  AND (CAST(@error_class AS TEXT) = '' OR e.error_class = CAST(@error_class AS TEXT))
  AND (CAST(@owner_node AS TEXT) = '' OR e.owner_node = CAST(@owner_node AS TEXT))
  AND (CAST(sqlc.narg(source_env) AS TEXT) IS NULL OR e.source_env = CAST(sqlc.narg(source_env) AS TEXT))
  AND (CAST(sqlc.narg(source_stack) AS TEXT) IS NULL OR e.source_stack = CAST(sqlc.narg(source_stack) AS TEXT))
  AND (CAST(@dedupe_contains AS TEXT) = '' OR instr(e.dedupe_key, CAST(@dedupe_contains AS TEXT)) > 0)
ORDER BY e.id DESC
LIMIT CAST(@max_rows AS INTEGER);

-- name: DashboardEpisode :one
-- Reads one episode (with trace_parent, the W3C trace context its
-- trigger's span stored, NULL for none) with, in the same statement (one
-- snapshot): the claim row of its claim key (its dedupe key, or
-- episode:{id}) with whether its lease is live and how long it has left on
-- the database clock, the workflow step it is the episode of, and the
-- size of its journal; run_after is set while it is available work (its
-- due time). No claim row: claim_state '' and the claim's other columns
-- zero or NULL; no workflow step: workflow_instance_id 0.
SELECT e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref,
    e.dedupe_key, e.status, e.phase, e.attempts, e.max_attempts, e.budget,
    e.source_stack, e.source_env, e.owner_node, e.payload, e.result,
    e.error_class, e.error_detail, e.queued_at, e.created_at, e.started_at,
    e.finished_at, e.last_step_at, e.archived_at, e.cancel_requested_at, e.trace_parent,
    CAST(coalesce(e.dedupe_key, 'episode:' || e.id) AS TEXT) AS claim_key,
    CAST(coalesce(c.state, '') AS TEXT) AS claim_state,
    CAST(coalesce(c.owner_node, '') AS TEXT) AS claim_owner,
    CAST(coalesce(c.fence, 0) AS INTEGER) AS claim_fence,
    CAST(coalesce(c.attempt, 0) AS INTEGER) AS claim_attempt,
    CAST(coalesce(c.grant_kind, '') AS TEXT) AS claim_grant,
    CAST(coalesce(c.work_type, '') AS TEXT) AS claim_work_type,
    c.claimed_at AS claim_claimed_at,
    c.lease_until AS claim_lease_until,
    c.last_heartbeat_at AS claim_heartbeat_at,
    c.finished_at AS claim_finished_at,
    c.error_detail AS claim_error_detail,
    CAST(CASE WHEN c.state = 'claimed'
              AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
         THEN 1 ELSE 0 END AS BOOLEAN) AS claim_live,
    CAST(coalesce(c.lease_until - CAST(round(unixepoch('subsec') * 1000) AS INTEGER), 0) AS INTEGER) AS claim_lease_left_ms,
    e.run_after,
    CAST(coalesce(w.instance_id, 0) AS INTEGER) AS workflow_instance_id,
    CAST(coalesce(w.step_id, '') AS TEXT) AS workflow_step_id,
    CAST((SELECT count(*) FROM leasehold_episode_steps AS s
          WHERE s.episode_id = e.id) AS INTEGER) AS journal_steps
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
LEFT JOIN leasehold_workflow_steps AS w
    ON w.episode_id = e.id
WHERE e.id = @id;

-- name: DashboardGrants :many
-- Reads, per fence, the steps one episode's journal holds: how many, the
-- first and last step numbers and when they were written. Each fence is
-- one grant of the episode's claim (fences only grow, one per grant), so
-- these are the grants that journaled something, in order; the caller
-- infers the grants that journaled nothing from the gaps between fences
-- and from the claim's current fence. Served by the journal's
-- (episode_id, step_no) index.
SELECT s.fence, CAST(count(*) AS INTEGER) AS steps,
    CAST(min(s.step_no) AS INTEGER) AS first_step_no, CAST(max(s.step_no) AS INTEGER) AS last_step_no,
    CAST(min(s.created_at) AS INTEGER) AS first_at, CAST(max(s.created_at) AS INTEGER) AS last_at
FROM leasehold_episode_steps AS s
WHERE s.episode_id = @episode_id
GROUP BY s.fence
ORDER BY s.fence;

-- name: DashboardJournal :many
-- Reads the last max_rows steps of one episode's journal, last first (the
-- caller shows them in step order under their grants): number, fence,
-- data and time.
SELECT s.step_no, s.fence, s.data, s.created_at
FROM leasehold_episode_steps AS s
WHERE s.episode_id = @episode_id
ORDER BY s.step_no DESC
LIMIT CAST(@max_rows AS INTEGER);

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
    CAST(coalesce(s.step_id, '') AS TEXT) AS step_id,
    CAST(coalesce(s.status, '') AS TEXT) AS step_status,
    CAST(coalesce(s.episode_id, 0) AS INTEGER) AS step_episode_id,
    CAST(coalesce(s.attempts, 0) AS INTEGER) AS step_attempts,
    CAST(coalesce(s.max_attempts, 0) AS INTEGER) AS step_max_attempts,
    s.updated_at AS step_updated_at,
    CAST(coalesce(e.status, '') AS TEXT) AS episode_status,
    CAST(coalesce(e.error_class, '') AS TEXT) AS episode_error_class
FROM (
    SELECT w.id, w.workflow_id, w.subject, w.env, w.source_stack, w.status, w.payload,
        w.error_detail, w.created_at, w.finished_at, w.parked_reason, w.definition_version
    FROM leasehold_workflow_instances AS w
    WHERE (CAST(@before_id AS INTEGER) = 0 OR w.id < CAST(@before_id AS INTEGER))
      AND (CAST(@instance_id AS INTEGER) = 0 OR w.id = CAST(@instance_id AS INTEGER))
      AND (CAST(@workflow_id AS TEXT) = '' OR w.workflow_id = CAST(@workflow_id AS TEXT))
      AND (CAST(@status AS TEXT) = '' OR w.status = CAST(@status AS TEXT))
    ORDER BY w.id DESC
    LIMIT CAST(@max_rows AS INTEGER)
) AS i
LEFT JOIN leasehold_workflow_steps AS s
    ON s.instance_id = i.id
LEFT JOIN leasehold_episodes AS e
    ON e.id = s.episode_id
ORDER BY i.id DESC, s.step_id;

-- name: DashboardFindings :many
-- Reads one page of findings, newest first. status '' means any, else
-- active or cleared (the active ones: one per key per env, the partial
-- unique index); NULL env means any ('' is the unset env); empty class
-- means any; key_contains keeps the keys that contain it, a literal,
-- case-sensitive substring test (instr, as in DashboardEpisodes; '' means
-- any). Keyset paging: before_id 0 is the newest page. It walks the
-- primary key down until max_rows match.
SELECT f.id, f.finding_key, f.env, f.status, f.class, f.severity, f.summary, f.data,
    f.actor_id, f.source_stack, f.raised_by_episode, f.updated_by_episode,
    f.cleared_by_episode, f.raise_count, f.raised_at, f.updated_at, f.cleared_at
FROM leasehold_findings AS f
WHERE (CAST(@before_id AS INTEGER) = 0 OR f.id < CAST(@before_id AS INTEGER))
  AND (CAST(@status AS TEXT) = '' OR f.status = CAST(@status AS TEXT))
  AND (CAST(sqlc.narg(env) AS TEXT) IS NULL OR f.env = CAST(sqlc.narg(env) AS TEXT))
  AND (CAST(@class AS TEXT) = '' OR f.class = CAST(@class AS TEXT))
  AND (CAST(@key_contains AS TEXT) = '' OR instr(f.finding_key, CAST(@key_contains AS TEXT)) > 0)
ORDER BY f.id DESC
LIMIT CAST(@max_rows AS INTEGER);

-- name: DashboardFindingHistory :many
-- Reads every finding of one key in one env (strict: '' is the unset env),
-- active and cleared, newest first: the key's history of raises and
-- clears. Cleared rows have no index (only active ones are in the partial
-- unique index), so it walks the findings table: an operator's read.
SELECT f.id, f.finding_key, f.env, f.status, f.class, f.severity, f.summary, f.data,
    f.actor_id, f.source_stack, f.raised_by_episode, f.updated_by_episode,
    f.cleared_by_episode, f.raise_count, f.raised_at, f.updated_at, f.cleared_at
FROM leasehold_findings AS f
WHERE f.env = CAST(@env AS TEXT)
  AND f.finding_key = CAST(@finding_key AS TEXT)
ORDER BY f.id DESC
LIMIT CAST(@max_rows AS INTEGER);
