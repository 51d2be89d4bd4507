-- Operator reads: what `leasehold episodes ls` and `leasehold episodes show`
-- print (package inspect). The SQLite twins of
-- sql/queries/postgres/inspect.sql, same names, same results.
--
-- None has a coordination role. Nothing decides anything from them: the runs,
-- recovery and the pollers decide with the statements of episodes.sql,
-- recovery.sql and available.sql, each re-checking its own condition.
-- So each is a plain SELECT: it takes no write lock (BEGIN IMMEDIATE is for
-- writes), reads the last committed state in WAL mode without waiting for
-- the writer, and a row it returns may have changed by the time it is
-- printed. Whether a lease is live is judged on the database clock,
-- CAST(round(unixepoch('subsec') * 1000) AS INTEGER) (milliseconds), read
-- inside the statement, never the operator's. Times are INTEGER
-- milliseconds since the Unix epoch.

-- name: InspectEpisodes :many
-- Reads episodes, newest first, with their error class: `episodes ls`. An
-- empty status, actor_id, error_class or dedupe_key means any; stale_only
-- keeps the running episodes whose last sign of life (last_step_at, else
-- started_at) is older than stale_after_ms on the database clock. A
-- dedupe-key lookup matches archived episodes too (every run of the
-- trigger), so it is not served by the dedupe index, which holds only the
-- unarchived ones; the error-class filter has no index either. Both walk the
-- table newest first until max_rows match: an operator's occasional read,
-- never a node's.
SELECT id, actor_id, expectation_id, trigger_type, dedupe_key, status, phase,
    attempts, max_attempts, source_stack, source_env, owner_node, error_class,
    created_at, started_at, finished_at, last_step_at
FROM leasehold_episodes
WHERE (CAST(@status AS TEXT) = '' OR status = CAST(@status AS TEXT))
  AND (CAST(@actor_id AS TEXT) = '' OR actor_id = CAST(@actor_id AS TEXT))
  AND (CAST(@error_class AS TEXT) = '' OR error_class = CAST(@error_class AS TEXT))
  AND (CAST(@dedupe_key AS TEXT) = '' OR dedupe_key = CAST(@dedupe_key AS TEXT))
  AND (NOT CAST(@stale_only AS BOOLEAN)
       OR (status = 'running'
           AND coalesce(last_step_at, started_at, created_at)
               < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@stale_after_ms AS INTEGER)))
ORDER BY id DESC
LIMIT CAST(@max_rows AS INTEGER);

-- name: InspectEpisode :one
-- Reads one episode with everything `episodes show` prints beside its row,
-- in one statement, so the parts are of one snapshot: the claim row of its
-- claim key (its dedupe key, or episode:{id}, the key its runs hold) and
-- the size of its journal; run_after is set while it is available work
-- (its due time). No claim row: claim_state '' and the claim's other
-- columns zero or NULL. claim_live says, on the database clock, whether
-- the claim is held by a lease that has not expired.
SELECT e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref,
    e.dedupe_key, e.status, e.phase, e.attempts, e.max_attempts,
    e.source_stack, e.source_env, e.owner_node, e.payload, e.result,
    e.error_class, e.error_detail, e.created_at, e.started_at,
    e.finished_at, e.last_step_at, e.archived_at,
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
    CAST(CASE WHEN c.state = 'claimed'
              AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
         THEN 1 ELSE 0 END AS BOOLEAN) AS claim_live,
    e.run_after,
    CAST((SELECT count(*) FROM leasehold_episode_steps AS s
          WHERE s.episode_id = e.id) AS INTEGER) AS journal_steps
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.id = @id;

-- name: InspectJournal :many
-- Reads the last max_rows steps of one episode's journal, last first (the
-- caller shows them in step order): number, fence, time, data, and the
-- owner of the grant that wrote each. The journal records a step's fence,
-- not its node; a fence names one grant of the key for ever (it only grows),
-- and the claim row keeps the owner of its current grant only. So a step's
-- owner is known, and given, when its fence is the claim's fence, and is ''
-- for the steps of earlier grants (a run before a steal or a recovery).
SELECT s.step_no, s.fence,
    CAST(coalesce(CASE WHEN s.fence = c.fence THEN c.owner_node END, '') AS TEXT) AS owner_node,
    s.data, s.created_at
FROM leasehold_episode_steps AS s
JOIN leasehold_episodes AS e
    ON e.id = s.episode_id
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE s.episode_id = @episode_id
ORDER BY s.step_no DESC
LIMIT CAST(@max_rows AS INTEGER);
