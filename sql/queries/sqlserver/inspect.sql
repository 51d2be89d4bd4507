-- Operator reads (T-SQL): what `leasehold episodes ls` and `leasehold
-- episodes show` print (package inspect).
--
-- The statements of sql/queries/postgres/inspect.sql, one for one: same
-- names, kinds, @parameters and result columns. NOT EXECUTED IN THIS
-- REPOSITORY'S CI (no SQL Server there); statically checked only, see
-- docs/sqlserver.md.
--
-- None has a coordination role. Nothing decides anything from them: the runs,
-- recovery and the pollers decide with the statements of episodes.sql,
-- recovery.sql and available.sql, each re-checking its own condition.
-- So they need no lock hint (and must not use NOLOCK, which could show a
-- write that later rolled back), and a row they return may have changed by
-- the time it is printed. Whether a lease is live is judged on
-- SYSUTCDATETIME(), never the operator's clock.

-- name: InspectEpisodes :many
-- Reads episodes, newest first, with their error class: `episodes ls`.
-- @status, @actor_id, @error_class and @dedupe_key N'' mean any;
-- @stale_only keeps the running episodes whose last sign of life
-- (last_step_at, else started_at) is older than @stale_after_ms on the
-- database clock (cast to int for DATEADD: under about 24.8 days). A
-- dedupe-key lookup matches archived episodes too (every run of the
-- trigger), so it is not served by the filtered dedupe index; the
-- error-class filter has no index either. Both walk the table newest first
-- until @max_rows match: an operator's occasional read, never a node's.
-- error_class has the database's default collation (it is no key), often
-- case-insensitive: it is compared as bytes (varbinary, UTF-16 on both
-- sides), exact as on Postgres, trailing spaces included.
SELECT TOP (@max_rows) id, actor_id, expectation_id, trigger_type, dedupe_key,
    status, phase, attempts, max_attempts, source_stack, source_env,
    owner_node, error_class, created_at, started_at, finished_at, last_step_at
FROM leasehold_episodes
WHERE (@status = N'' OR status = @status)
  AND (@actor_id = N'' OR actor_id = @actor_id)
  AND (@error_class = N''
       OR CAST(error_class AS varbinary(8000)) = CAST(@error_class AS varbinary(8000)))
  AND (@dedupe_key = N'' OR dedupe_key = @dedupe_key)
  AND (@stale_only = 0
       OR (status = N'running'
           AND COALESCE(last_step_at, started_at, created_at)
               < DATEADD(millisecond, -CAST(@stale_after_ms AS int), SYSUTCDATETIME())))
ORDER BY id DESC;

-- name: InspectEpisode :one
-- Reads one episode with everything `episodes show` prints beside its row,
-- in one statement: the claim row of its claim key (its dedupe key, or
-- episode:{id}; CONCAT gives the same text as Postgres's 'episode:' || id)
-- and the size of its journal; run_after is set while it is available
-- work (its due time). No claim row: claim_state N'' and the claim's other
-- columns zero or NULL, as on Postgres. claim_live says, on the database
-- clock, whether the claim is held by a lease that has not expired. With
-- READ_COMMITTED_SNAPSHOT OFF the tables are not read
-- at one instant, so a write that commits meanwhile can show in one part
-- and not another; with RCSI ON, as on Postgres, they are of one snapshot.
SELECT e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref,
    e.dedupe_key, e.status, e.phase, e.attempts, e.max_attempts,
    e.source_stack, e.source_env, e.owner_node, e.payload, e.result,
    e.error_class, e.error_detail, e.created_at, e.started_at,
    e.finished_at, e.last_step_at, e.archived_at,
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
    CAST(CASE WHEN c.state = N'claimed' AND c.lease_until > SYSUTCDATETIME()
              THEN 1 ELSE 0 END AS bit) AS claim_live,
    e.run_after,
    (SELECT COUNT_BIG(*) FROM leasehold_episode_steps AS s
     WHERE s.episode_id = e.id) AS journal_steps
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
WHERE e.id = @id;

-- name: InspectJournal :many
-- Reads the last @max_rows steps of one episode's journal, last first (the
-- caller shows them in step order): number, fence, time, data, and the
-- owner of the grant that wrote each. The journal records a step's fence,
-- not its node; a fence names one grant of the key for ever (it only grows),
-- and the claim row keeps the owner of its current grant only. So a step's
-- owner is known, and given, when its fence is the claim's fence, and is N''
-- for the steps of earlier grants (a run before a steal or a recovery).
SELECT TOP (@max_rows) s.step_no, s.fence,
    COALESCE(CASE WHEN s.fence = c.fence THEN c.owner_node END, N'') AS owner_node,
    s.data, s.created_at
FROM leasehold_episode_steps AS s
JOIN leasehold_episodes AS e
    ON e.id = s.episode_id
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
WHERE s.episode_id = @episode_id
ORDER BY s.step_no DESC;
