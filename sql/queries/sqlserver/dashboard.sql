-- Dashboard reads (T-SQL): what the web dashboard (package ui, `leasehold
-- ui`) shows. Every statement here is an operator read.
--
-- The statements of sql/queries/postgres/dashboard.sql, one for one: same
-- names, kinds, @parameters and result columns. NOT EXECUTED IN THIS
-- REPOSITORY'S CI (no SQL Server there); statically checked only, see
-- docs/sqlserver.md.
--
-- None has a coordination role and none locks anything beyond what a
-- plain read takes: no lock hint (and never NOLOCK, which could show a
-- write that later rolled back), no sp_getapplock. Nothing decides
-- anything from them: the runs, recovery and the pollers decide with the
-- statements of episodes.sql, recovery.sql and available.sql, each
-- re-checking its own condition on the rows it locks. So a page is a
-- snapshot that may be stale by the time it is read; with
-- READ_COMMITTED_SNAPSHOT OFF the tables a statement joins are not read at
-- one instant. Ages, lease liveness and chart windows are computed on
-- SYSUTCDATETIME(), never the browser's or the serving node's clock; a
-- window (@window_ms) is cast to int for DATEADD, so it must stay under
-- about 24.8 days (the dashboard's longest is 7 days). Every value a user
-- typed reaches these statements as a parameter.
--
-- The schema keeps no history of grants: a claim row holds its current
-- grant only, and a journal step records the fence of the grant that wrote
-- it, not its node. What the dashboard shows of earlier grants is derived
-- from the steps' fences, as each statement below says.

-- name: DashboardClock :one
-- Reads the database clock, which every age and chart axis on a page is
-- measured from.
SELECT SYSUTCDATETIME() AS db_now;

-- name: DashboardNodes :many
-- Reads every node row (advisory membership) with, on the database clock,
-- the age of its last heartbeat, the claims it holds under a live lease,
-- the claims it still holds whose lease expired (a node that died: work
-- recovery will take over), and the running episodes it owns. DATEDIFF_BIG
-- counts millisecond boundaries crossed, so the age can differ by 1 ms
-- from Postgres's rounded epoch difference. The claim counts seek
-- leasehold_work_claims_claimed_owner_idx. Rows come in node_id order
-- under the binary collation (code-point order).
SELECT n.node_id, n.stack, n.env, n.mode, n.draining, n.started_at, n.heartbeat_at,
    DATEDIFF_BIG(millisecond, n.heartbeat_at, SYSUTCDATETIME()) AS heartbeat_age_ms,
    (SELECT COUNT_BIG(*) FROM leasehold_work_claims AS c
     WHERE c.owner_node = n.node_id
       AND c.state = N'claimed'
       AND c.lease_until > SYSUTCDATETIME()) AS live_leases,
    (SELECT COUNT_BIG(*) FROM leasehold_work_claims AS x
     WHERE x.owner_node = n.node_id
       AND x.state = N'claimed'
       AND x.lease_until <= SYSUTCDATETIME()) AS expired_leases,
    (SELECT COUNT_BIG(*) FROM leasehold_episodes AS e
     WHERE e.owner_node = n.node_id
       AND e.status = N'running'
       AND e.archived_at IS NULL) AS running_episodes
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
-- unarchived episode: an operator's read, bounded by maintenance's
-- retention, never a node's.
SELECT e.actor_id, e.status, COUNT_BIG(*) AS episodes
FROM leasehold_episodes AS e
WHERE e.archived_at IS NULL
GROUP BY e.actor_id, e.status
ORDER BY e.actor_id, e.status;

-- name: DashboardOutcomes :many
-- Counts the episodes that ended in the last @window_ms (database clock),
-- per status and per bucket of their finished_at: bucket is the epoch
-- milliseconds (DATEDIFF_BIG from 1970-01-01, the floor of Postgres's
-- epoch * 1000 for any later time) integer-divided by @bucket_ms, so
-- buckets are aligned to the epoch, as on Postgres. Served by
-- leasehold_episodes_finished_idx; archived episodes are not counted.
SELECT b.bucket, b.status, COUNT_BIG(*) AS episodes
FROM (
    SELECT DATEDIFF_BIG(millisecond, CAST(N'1970-01-01T00:00:00' AS datetime2(6)), e.finished_at) / @bucket_ms AS bucket,
        e.status
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND e.finished_at IS NOT NULL
      AND e.finished_at >= DATEADD(millisecond, -CAST(@window_ms AS int), SYSUTCDATETIME())
) AS b
GROUP BY b.bucket, b.status
ORDER BY b.bucket, b.status;

-- name: DashboardHandovers :many
-- Counts the hand-overs of work from one grant to the next in the last
-- @window_ms, per bucket (as in DashboardOutcomes) of the new grant's
-- first journaled step, with the latency of each: from the last step
-- journaled under the old grant to the first step under the new one.
-- Derived from the journal's fences exactly as on Postgres (see
-- sql/queries/postgres/dashboard.sql): consecutive journaled fences one
-- apart are a retry, two or more apart a takeover. The latency counts
-- millisecond boundaries (DATEDIFF_BIG) and AVG of a bigint truncates, so
-- both can differ by 1 ms from Postgres's rounded values.
WITH scope AS (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND (e.status IN (N'queued', N'running')
           OR e.finished_at >= DATEADD(millisecond, -CAST(@window_ms AS int), SYSUTCDATETIME()))
), grants AS (
    SELECT s.episode_id, s.fence, MIN(s.created_at) AS first_at, MAX(s.created_at) AS last_at
    FROM leasehold_episode_steps AS s
    JOIN scope ON scope.id = s.episode_id
    GROUP BY s.episode_id, s.fence
), handovers AS (
    SELECT g.first_at,
        g.fence - LAG(g.fence) OVER (PARTITION BY g.episode_id ORDER BY g.fence) AS fence_gap,
        DATEDIFF_BIG(millisecond, LAG(g.last_at) OVER (PARTITION BY g.episode_id ORDER BY g.fence), g.first_at) AS latency_ms
    FROM grants AS g
)
SELECT b.bucket, b.kind, COUNT_BIG(*) AS handovers,
    AVG(b.latency_ms) AS avg_latency_ms,
    MAX(b.latency_ms) AS max_latency_ms
FROM (
    SELECT DATEDIFF_BIG(millisecond, CAST(N'1970-01-01T00:00:00' AS datetime2(6)), h.first_at) / @bucket_ms AS bucket,
        CASE WHEN h.fence_gap = 1 THEN N'retry' ELSE N'takeover' END AS kind,
        h.latency_ms
    FROM handovers AS h
    WHERE h.fence_gap IS NOT NULL
      AND h.first_at >= DATEADD(millisecond, -CAST(@window_ms AS int), SYSUTCDATETIME())
) AS b
GROUP BY b.bucket, b.kind
ORDER BY b.bucket, b.kind;

-- name: DashboardEpisodes :many
-- Reads one page of episodes, newest first, with the fence of their claim
-- and whether its lease is live on the database clock. Keyset paging:
-- @before_id 0 is the newest page, else the episodes older than it. N''
-- @status, @actor_id, @expectation_id, @error_class and @owner_node mean
-- any; NULL @source_env and @source_stack mean any (N'' is the unset env
-- or stack); @dedupe_like is a LIKE pattern built by the adapter with '\'
-- as the escape character ('[' escaped too; N'' means any), and matches
-- archived episodes too. error_class has the database's default collation
-- (it is no key): it is compared as bytes, exact as on Postgres (see
-- InspectEpisodes). It walks the primary key down from @before_id until
-- @max_rows match.
SELECT TOP (@max_rows) e.id, e.actor_id, e.expectation_id, e.trigger_type, e.dedupe_key,
    e.status, e.phase, e.attempts, e.max_attempts, e.source_stack, e.source_env,
    e.owner_node, e.error_class, e.created_at, e.started_at, e.finished_at,
    e.last_step_at, e.archived_at, e.cancel_requested_at,
    COALESCE(c.fence, 0) AS claim_fence,
    CAST(CASE WHEN c.state = N'claimed' AND c.lease_until > SYSUTCDATETIME()
              THEN 1 ELSE 0 END AS bit) AS claim_live
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
WHERE (@before_id = 0 OR e.id < @before_id)
  AND (@status = N'' OR e.status = @status)
  AND (@actor_id = N'' OR e.actor_id = @actor_id)
  AND (@expectation_id = N'' OR e.expectation_id = @expectation_id)
  AND (@error_class = N''
       OR CAST(e.error_class AS varbinary(8000)) = CAST(@error_class AS varbinary(8000)))
  AND (@owner_node = N'' OR e.owner_node = @owner_node)
  AND (@source_env IS NULL OR e.source_env = @source_env)
  AND (@source_stack IS NULL OR e.source_stack = @source_stack)
  AND (@dedupe_like = N'' OR e.dedupe_key LIKE @dedupe_like ESCAPE N'\')
ORDER BY e.id DESC;

-- name: DashboardEpisode :one
-- Reads one episode with its claim row, workflow step and journal size,
-- as on Postgres; run_after is set while it is available work (its due
-- time). No claim row: claim_state N''; no workflow step:
-- workflow_instance_id 0.
-- claim_lease_left_ms counts millisecond boundaries (DATEDIFF_BIG), so it
-- can differ by 1 ms from Postgres's. With READ_COMMITTED_SNAPSHOT OFF the
-- joined tables are not read at one instant.
SELECT e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref,
    e.dedupe_key, e.status, e.phase, e.attempts, e.max_attempts, e.budget,
    e.source_stack, e.source_env, e.owner_node, e.payload, e.result,
    e.error_class, e.error_detail, e.queued_at, e.created_at, e.started_at,
    e.finished_at, e.last_step_at, e.archived_at, e.cancel_requested_at, e.trace_parent,
    COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id)) AS claim_key,
    COALESCE(c.state, N'') AS claim_state,
    COALESCE(c.owner_node, N'') AS claim_owner,
    COALESCE(c.fence, 0) AS claim_fence,
    COALESCE(c.attempt, 0) AS claim_attempt,
    COALESCE(c.grant_kind, N'') AS claim_grant,
    COALESCE(c.work_type, N'') AS claim_work_type,
    c.claimed_at AS claim_claimed_at,
    c.lease_until AS claim_lease_until,
    c.last_heartbeat_at AS claim_heartbeat_at,
    c.finished_at AS claim_finished_at,
    c.error_detail AS claim_error_detail,
    CAST(CASE WHEN c.state = N'claimed' AND c.lease_until > SYSUTCDATETIME()
              THEN 1 ELSE 0 END AS bit) AS claim_live,
    COALESCE(DATEDIFF_BIG(millisecond, SYSUTCDATETIME(), c.lease_until), 0) AS claim_lease_left_ms,
    e.run_after,
    COALESCE(w.instance_id, 0) AS workflow_instance_id,
    COALESCE(w.step_id, N'') AS workflow_step_id,
    (SELECT COUNT_BIG(*) FROM leasehold_episode_steps AS s
     WHERE s.episode_id = e.id) AS journal_steps
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
LEFT JOIN leasehold_workflow_steps AS w
    ON w.episode_id = e.id
WHERE e.id = @id;

-- name: DashboardGrants :many
-- Reads, per fence, the steps one episode's journal holds (how many, the
-- first and last step numbers, when they were written): the grants that
-- journaled something, in order, as on Postgres.
SELECT s.fence, COUNT_BIG(*) AS steps,
    MIN(s.step_no) AS first_step_no, MAX(s.step_no) AS last_step_no,
    MIN(s.created_at) AS first_at, MAX(s.created_at) AS last_at
FROM leasehold_episode_steps AS s
WHERE s.episode_id = @episode_id
GROUP BY s.fence
ORDER BY s.fence;

-- name: DashboardJournal :many
-- Reads the last @max_rows steps of one episode's journal, last first (the
-- caller shows them in step order under their grants).
SELECT TOP (@max_rows) s.step_no, s.fence, s.data, s.created_at
FROM leasehold_episode_steps AS s
WHERE s.episode_id = @episode_id
ORDER BY s.step_no DESC;

-- name: DashboardWorkflows :many
-- Reads one page of workflow instances, newest first, each joined with its
-- step rows and each step's episode status, as on Postgres: the page of
-- @max_rows instances is chosen first (TOP in the derived table), then
-- their steps are joined. @before_id 0 is the newest page; @instance_id 0
-- means any; N'' @workflow_id and @status mean any. Steps come in step_id
-- order under the binary collation (code-point order).
-- definition_version is the version of the definition the instance follows
-- (N'' when started before versions were recorded).
SELECT i.id, i.workflow_id, i.subject, i.env, i.source_stack, i.status, i.payload,
    i.error_detail, i.created_at, i.finished_at, i.parked_reason, i.definition_version,
    COALESCE(s.step_id, N'') AS step_id,
    COALESCE(s.status, N'') AS step_status,
    COALESCE(s.episode_id, 0) AS step_episode_id,
    COALESCE(s.attempts, 0) AS step_attempts,
    COALESCE(s.max_attempts, 0) AS step_max_attempts,
    s.updated_at AS step_updated_at,
    COALESCE(e.status, N'') AS episode_status,
    COALESCE(e.error_class, N'') AS episode_error_class
FROM (
    SELECT TOP (@max_rows) w.id, w.workflow_id, w.subject, w.env, w.source_stack, w.status,
        w.payload, w.error_detail, w.created_at, w.finished_at, w.parked_reason, w.definition_version
    FROM leasehold_workflow_instances AS w
    WHERE (@before_id = 0 OR w.id < @before_id)
      AND (@instance_id = 0 OR w.id = @instance_id)
      AND (@workflow_id = N'' OR w.workflow_id = @workflow_id)
      AND (@status = N'' OR w.status = @status)
    ORDER BY w.id DESC
) AS i
LEFT JOIN leasehold_workflow_steps AS s
    ON s.instance_id = i.id
LEFT JOIN leasehold_episodes AS e
    ON e.id = s.episode_id
ORDER BY i.id DESC, s.step_id;

-- name: DashboardFindings :many
-- Reads one page of findings, newest first, as on Postgres: N'' @status
-- means any, else active or cleared; NULL @env means any (N'' is the unset
-- env); N'' @class means any; @key_like is a LIKE pattern built by the
-- adapter with '\' as the escape character ('[' escaped too; N'' means
-- any). @before_id 0 is the newest page.
SELECT TOP (@max_rows) f.id, f.finding_key, f.env, f.status, f.class, f.severity,
    f.summary, f.data, f.actor_id, f.source_stack, f.raised_by_episode,
    f.updated_by_episode, f.cleared_by_episode, f.raise_count, f.raised_at,
    f.updated_at, f.cleared_at
FROM leasehold_findings AS f
WHERE (@before_id = 0 OR f.id < @before_id)
  AND (@status = N'' OR f.status = @status)
  AND (@env IS NULL OR f.env = @env)
  AND (@class = N'' OR f.class = @class)
  AND (@key_like = N'' OR f.finding_key LIKE @key_like ESCAPE N'\')
ORDER BY f.id DESC;

-- name: DashboardFindingHistory :many
-- Reads every finding of one key in one env (strict: N'' is the unset
-- env), active and cleared, newest first. Cleared rows are in no index: it
-- walks the findings table, an operator's read.
SELECT TOP (@max_rows) f.id, f.finding_key, f.env, f.status, f.class, f.severity,
    f.summary, f.data, f.actor_id, f.source_stack, f.raised_by_episode,
    f.updated_by_episode, f.cleared_by_episode, f.raise_count, f.raised_at,
    f.updated_at, f.cleared_at
FROM leasehold_findings AS f
WHERE f.env = @env
  AND f.finding_key = @finding_key
ORDER BY f.id DESC;
