-- Maintenance: one run per database at a time, every statement of a run in
-- one transaction that first takes TryMaintenanceLock. The lock is a
-- transaction-scoped advisory lock, so it is released by the commit or
-- rollback that ends the run, and by the server if the node dies; no lock
-- can outlive its holder. Each statement is bounded by max_rows; what is
-- left waits for the next run. All cut-offs are computed from now().

-- name: TryMaintenanceLock :one
-- True for exactly one transaction at a time per leasehold schema (the key
-- includes current_schema(), so installations sharing a database in
-- different schemas do not exclude each other); never waits.
SELECT pg_try_advisory_xact_lock(
    hashtextextended('leasehold.maintenance:' || current_schema(), 0)) AS acquired;

-- name: ArchiveEpisodes :execrows
-- Archives terminal episodes that finished more than retention_ms ago,
-- oldest first. Archiving takes an episode out of the dedupe index, so its
-- trigger may run again, and out of every coordination query. Rows locked
-- by a concurrent writer are skipped, not waited for.
WITH batch AS (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND e.finished_at IS NOT NULL
      AND e.finished_at < now() - (sqlc.arg(retention_ms)::bigint * interval '1 millisecond')
      AND e.status IN ('done', 'failed', 'partially_failed', 'canceled')
    ORDER BY e.finished_at
    LIMIT sqlc.arg(max_rows)::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE leasehold_episodes AS e
SET archived_at = now()
FROM batch
WHERE e.id = batch.id;

-- name: PurgeArchivedSteps :execrows
-- Deletes up to max_rows journal rows of archived episodes.
DELETE FROM leasehold_episode_steps AS s
WHERE s.id IN (
    SELECT s2.id
    FROM leasehold_episodes AS e
    JOIN leasehold_episode_steps AS s2 ON s2.episode_id = e.id
    WHERE e.archived_at IS NOT NULL
      AND NOT e.journal_purged
    LIMIT sqlc.arg(max_rows)::integer
);

-- name: MarkJournalsPurged :execrows
-- Marks archived episodes whose journal is now empty, so later purges skip
-- them (the partial index leasehold_episodes_unpurged_idx shrinks).
UPDATE leasehold_episodes AS e
SET journal_purged = true
WHERE e.id IN (
    SELECT x.id
    FROM leasehold_episodes AS x
    WHERE x.archived_at IS NOT NULL
      AND NOT x.journal_purged
      AND NOT EXISTS (SELECT 1 FROM leasehold_episode_steps AS s WHERE s.episode_id = x.id)
    LIMIT sqlc.arg(max_rows)::integer
);

-- name: DeleteSpentClaims :execrows
-- Deletes finished claim rows (done, failed, released) whose lease ended
-- more than horizon_ms ago.
--
-- Guarantee: a claim row is the memory of its key's fence; deleting it
-- restarts the fence at 1. The horizon is far beyond any lease (the caller
-- enforces it), and every run stops at its local lease deadline, so no
-- zombie of an old grant can still be writing when its row goes. Live
-- claims are never deleted, and neither is the claim of an episode that is
-- still queued, running or blocked (a released claim is how recovery finds
-- it).
DELETE FROM leasehold_work_claims AS c
WHERE c.dedupe_key IN (
    SELECT x.dedupe_key
    FROM leasehold_work_claims AS x
    WHERE x.state IN ('done', 'failed', 'released')
      AND greatest(x.lease_until, coalesce(x.finished_at, x.lease_until))
          < now() - (sqlc.arg(horizon_ms)::bigint * interval '1 millisecond')
      AND NOT EXISTS (
          SELECT 1 FROM leasehold_episodes AS e
          WHERE e.dedupe_key = x.dedupe_key
            AND e.archived_at IS NULL
            AND e.status IN ('queued', 'running', 'blocked'))
      AND NOT (x.dedupe_key ~ '^episode:[0-9]{1,18}$' AND EXISTS (
          SELECT 1 FROM leasehold_episodes AS e
          WHERE e.id = substring(x.dedupe_key FROM 9)::bigint
            AND e.archived_at IS NULL
            AND e.status IN ('queued', 'running', 'blocked')))
    LIMIT sqlc.arg(max_rows)::integer
)
  -- Re-checked on the locked row version (READ COMMITTED re-evaluates
  -- these, not the subquery): a row picked from the snapshot but re-granted
  -- meanwhile is claimed, or finished again just now; either way not spent.
  AND c.state IN ('done', 'failed', 'released')
  AND greatest(c.lease_until, coalesce(c.finished_at, c.lease_until))
      < now() - (sqlc.arg(horizon_ms)::bigint * interval '1 millisecond');

-- name: DeleteStaleNodes :execrows
-- Deletes membership rows of nodes that have not heartbeated for
-- stale_after_ms (they died without draining). Advisory rows only.
DELETE FROM leasehold_nodes AS n
WHERE n.heartbeat_at < now() - (sqlc.arg(stale_after_ms)::bigint * interval '1 millisecond');

-- name: RaiseWaitingForNodeFinding :execrows
-- Raises maintenance's finding for work no live node can run: one (env,
-- actor, expectation) pair that ListWaitingForNode, read just before in the
-- same run's transaction, reported overdue. Inserts the finding, or
-- refreshes the active one of the same (env, key) with the current count,
-- oldest episode and summary (not counted as a raise: the same fact,
-- still true). raised_by_episode is the oldest waiting episode. Not fenced
-- on any claim, unlike RaiseFinding: no episode runs this; the run's
-- maintenance lock keeps two runs from writing at once, and the ON CONFLICT
-- on leasehold_findings_active_key_idx absorbs a raise racing it. Advisory:
-- nothing reads a finding to decide who runs what.
INSERT INTO leasehold_findings AS f (
    finding_key, env, status, class, severity, summary, data, actor_id,
    source_stack, raised_by_episode, updated_by_episode, raise_count,
    raised_at, updated_at
)
VALUES (
    sqlc.arg(finding_key)::text, sqlc.arg(env)::text, 'active', sqlc.arg(class)::text,
    sqlc.arg(severity)::text, sqlc.arg(summary)::text, sqlc.arg(data)::text::jsonb,
    sqlc.arg(actor_id)::text, '', sqlc.arg(episode_id)::bigint, sqlc.arg(episode_id)::bigint, 1,
    now(), now()
)
ON CONFLICT (env, finding_key) WHERE status = 'active'
DO UPDATE SET
    class              = excluded.class,
    severity           = excluded.severity,
    summary            = excluded.summary,
    data               = excluded.data,
    updated_by_episode = excluded.updated_by_episode,
    updated_at         = now();

-- name: ClearWaitingForNodeFindings :execrows
-- Clears maintenance's active waiting-for-node findings (class class)
-- whose pair no longer waits: waiting is the JSON array of {"env",
-- "finding_key"} of every pair ListWaitingForNode reported in this run,
-- overdue or not, so a finding stays while any episode of its pair waits
-- and clears once none does (canceled, run, or a capable node is live).
-- cleared_by_episode stays NULL: no episode cleared it. The row stays as
-- history and leaves the unique index, so the key can be raised again.
UPDATE leasehold_findings AS f
SET status     = 'cleared',
    cleared_at = now(),
    updated_at = now()
WHERE f.status = 'active'
  AND f.class = sqlc.arg(class)::text
  AND NOT EXISTS (
        SELECT 1
        FROM jsonb_to_recordset(sqlc.arg(waiting)::text::jsonb) AS w (env text, finding_key text)
        WHERE w.env = f.env
          AND w.finding_key = f.finding_key);
