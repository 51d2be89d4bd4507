-- Maintenance (SQLite): one run per database file at a time, every
-- statement of a run in one BEGIN IMMEDIATE transaction that first runs
-- TryMaintenanceLock. Each statement is bounded by max_rows where the
-- Postgres one is; what is left waits for the next run. All cut-offs are
-- the database clock in milliseconds,
-- CAST(round(unixepoch('subsec') * 1000) AS INTEGER), minus a duration
-- given in milliseconds.
--
-- The lock: Postgres takes a transaction-scoped advisory lock. SQLite has
-- one writer per database file, and BEGIN IMMEDIATE takes that write lock
-- before the run's first statement and keeps it until the COMMIT or
-- ROLLBACK that ends the run (or until the process dies: the lock is the
-- file's, no lock can outlive its holder). So a run excludes every other
-- run, and every other writer too: nothing another connection writes can
-- interleave with a run's statements, which is why no statement here needs
-- Postgres's SKIP LOCKED, and why the re-checks that Postgres needs under
-- READ COMMITTED hold trivially (they are kept, so each statement says
-- everything it decides). A second maintainer does not get "not acquired":
-- it waits in BEGIN IMMEDIATE (busy_timeout) until the first run ends, then
-- runs on what the first left; the adapter reports a run that could not
-- begin within busy_timeout as not run (Ran false). Before it begins, the
-- adapter reads MaintenanceDue (SQLite only) and takes no lock at all when
-- there is nothing to do.

-- name: TryMaintenanceLock :one
-- Always 1. It runs first in the run's BEGIN IMMEDIATE transaction, which
-- already holds the database's write lock (BEGIN IMMEDIATE returns only once
-- it does; a caller's transaction, begun on a pool from Open, is BEGIN
-- IMMEDIATE too), so by the time it answers, this run excludes every other
-- run and every other writer of the file until its transaction ends. The name
-- is Postgres's; the exclusion is the write lock's, not a separate lock.
-- There are no schemas: the lock is per database file.
SELECT CAST(1 AS INTEGER) AS acquired;

-- name: MaintenanceDue :one
-- SQLite only: 1 when a run with these cut-offs would change a row, 0 when
-- it would find nothing. A read, outside the write lock (WAL: it blocks no
-- writer and no writer blocks it), on one snapshot; it decides nothing
-- itself. Maintain runs it before BEGIN IMMEDIATE and, on 0, reports a run
-- that found nothing (Ran true, every count zero) without taking the write
-- lock, which on SQLite stops every writer of the file while a run holds
-- it (Postgres's run blocks no other writer, so it needs no such read). A
-- run taken at the snapshot's instant would have found the same nothing.
-- On 1 the run takes the lock and every statement below decides again.
-- Each test is the predicate of the statement it stands for, or wider
-- (never narrower, so no due work is ever skipped): the journal test
-- covers PurgeArchivedSteps and MarkJournalsPurged, the expiry test omits
-- ExpireAvailable's status, archived and live-claim conditions (an
-- available episode meets them; see available.sql); request_ttl_ms 0 (no
-- RequestTTL) leaves available work out, as Maintain does. The
-- waiting-for-node finding stands for RaiseWaitingForNodeFinding (an
-- available episode due for longer than waiting_after_ms, whether or not a
-- node runs it) and ClearWaitingForNodeFindings (an active finding of
-- waiting_class). Both available tests read
-- leasehold_episodes_available_idx.
SELECT CAST((
    EXISTS (
        SELECT 1 FROM leasehold_episodes AS e
        WHERE e.archived_at IS NULL
          AND e.finished_at IS NOT NULL
          AND e.finished_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@retention_ms AS INTEGER)
          AND e.status IN ('done', 'failed', 'partially_failed', 'canceled'))
    OR EXISTS (
        SELECT 1 FROM leasehold_episodes AS e
        WHERE e.archived_at IS NOT NULL
          AND NOT e.journal_purged)
    OR (CAST(@request_ttl_ms AS INTEGER) > 0 AND EXISTS (
        SELECT 1 FROM leasehold_episodes AS r
        WHERE r.run_after < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@request_ttl_ms AS INTEGER)))
    OR EXISTS (
        SELECT 1 FROM leasehold_work_claims AS x
        WHERE x.state IN ('done', 'failed', 'released')
          AND max(x.lease_until, coalesce(x.finished_at, x.lease_until))
              < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@horizon_ms AS INTEGER)
          AND NOT EXISTS (
              SELECT 1 FROM leasehold_episodes AS e
              WHERE e.dedupe_key = x.dedupe_key
                AND e.archived_at IS NULL
                AND e.status IN ('queued', 'running', 'blocked'))
          AND NOT (x.dedupe_key GLOB 'episode:[0-9]*'
                   AND length(x.dedupe_key) BETWEEN 9 AND 26
                   AND substr(x.dedupe_key, 9) NOT GLOB '*[^0-9]*'
                   AND EXISTS (
                       SELECT 1 FROM leasehold_episodes AS e
                       WHERE e.id = CAST(substr(x.dedupe_key, 9) AS INTEGER)
                         AND e.archived_at IS NULL
                         AND e.status IN ('queued', 'running', 'blocked'))))
    OR EXISTS (
        SELECT 1 FROM leasehold_nodes AS n
        WHERE n.heartbeat_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@stale_after_ms AS INTEGER))
    OR EXISTS (
        SELECT 1 FROM leasehold_episodes AS r
        WHERE r.run_after < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@waiting_after_ms AS INTEGER))
    OR EXISTS (
        SELECT 1 FROM leasehold_findings AS f
        WHERE f.status = 'active'
          AND f.class = CAST(@waiting_class AS TEXT))
) AS INTEGER) AS due;

-- name: ArchiveEpisodes :execrows
-- Archives terminal episodes that finished more than retention_ms ago,
-- oldest first. Archiving takes an episode out of the dedupe index, so its
-- trigger may run again, and out of every coordination query. No row can
-- be held by a concurrent writer (the run holds the write lock), so the
-- batch skips nothing; the UPDATE re-checks archived_at on the rows it
-- writes.
UPDATE leasehold_episodes
SET archived_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE archived_at IS NULL
  AND id IN (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.archived_at IS NULL
      AND e.finished_at IS NOT NULL
      AND e.finished_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@retention_ms AS INTEGER)
      AND e.status IN ('done', 'failed', 'partially_failed', 'canceled')
    ORDER BY e.finished_at
    LIMIT CAST(@max_rows AS INTEGER)
);

-- name: PurgeArchivedSteps :execrows
-- Deletes up to max_rows journal rows of archived episodes. Archived
-- episodes take no more writes (every coordination statement requires
-- archived_at IS NULL).
DELETE FROM leasehold_episode_steps
WHERE id IN (
    SELECT s2.id
    FROM leasehold_episodes AS e
    JOIN leasehold_episode_steps AS s2 ON s2.episode_id = e.id
    WHERE e.archived_at IS NOT NULL
      AND NOT e.journal_purged
    LIMIT CAST(@max_rows AS INTEGER)
);

-- name: MarkJournalsPurged :execrows
-- Marks archived episodes whose journal is now empty, so later purges skip
-- them (the partial index leasehold_episodes_unpurged_idx shrinks). Runs
-- after PurgeArchivedSteps in the same transaction, so it sees that purge.
UPDATE leasehold_episodes
SET journal_purged = 1
WHERE id IN (
    SELECT x.id
    FROM leasehold_episodes AS x
    WHERE x.archived_at IS NOT NULL
      AND NOT x.journal_purged
      AND NOT EXISTS (SELECT 1 FROM leasehold_episode_steps AS s WHERE s.episode_id = x.id)
    LIMIT CAST(@max_rows AS INTEGER)
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
-- it), whether the claim is keyed by the episode's dedupe key or by
-- episode:<id>.
--
-- episode:<id> keys: Postgres matches '^episode:[0-9]{1,18}$' before the
-- cast. SQLite has no regular expressions; the GLOB prefix, the length (9
-- to 26 characters) and the digits-only test (no character outside 0-9)
-- make the same match, and eighteen digits always fit an INTEGER.
-- greatest() is the scalar max(), which coalesce keeps from NULL.
DELETE FROM leasehold_work_claims
WHERE dedupe_key IN (
    SELECT x.dedupe_key
    FROM leasehold_work_claims AS x
    WHERE x.state IN ('done', 'failed', 'released')
      AND max(x.lease_until, coalesce(x.finished_at, x.lease_until))
          < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@horizon_ms AS INTEGER)
      AND NOT EXISTS (
          SELECT 1 FROM leasehold_episodes AS e
          WHERE e.dedupe_key = x.dedupe_key
            AND e.archived_at IS NULL
            AND e.status IN ('queued', 'running', 'blocked'))
      AND NOT (x.dedupe_key GLOB 'episode:[0-9]*'
               AND length(x.dedupe_key) BETWEEN 9 AND 26
               AND substr(x.dedupe_key, 9) NOT GLOB '*[^0-9]*'
               AND EXISTS (
                   SELECT 1 FROM leasehold_episodes AS e
                   WHERE e.id = CAST(substr(x.dedupe_key, 9) AS INTEGER)
                     AND e.archived_at IS NULL
                     AND e.status IN ('queued', 'running', 'blocked')))
    LIMIT CAST(@max_rows AS INTEGER)
)
  -- Re-checked on the row deleted, as on Postgres (where READ COMMITTED
  -- re-evaluates these on the locked row version). Here the candidate list
  -- and the delete read one state under the write lock, so a claim
  -- re-granted and finished again was either committed before the run
  -- began (young, not a candidate) or waits for the run to end.
  AND state IN ('done', 'failed', 'released')
  AND max(lease_until, coalesce(finished_at, lease_until))
      < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@horizon_ms AS INTEGER);

-- name: DeleteStaleNodes :execrows
-- Deletes membership rows of nodes that have not heartbeated for
-- stale_after_ms (they died without draining). Advisory rows only; a
-- heartbeat that races this waits for the run's write lock, then recreates
-- its row (HeartbeatNode). Unbounded, as on Postgres.
DELETE FROM leasehold_nodes
WHERE heartbeat_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@stale_after_ms AS INTEGER);

-- name: RaiseWaitingForNodeFinding :execrows
-- Raises maintenance's finding for work no live node can run: one (env,
-- actor, expectation) pair that ListWaitingForNode, read just before in the
-- same run's transaction, reported overdue. Inserts the finding, or
-- refreshes the active one of the same (env, key) with the current count,
-- oldest episode and summary (not counted as a raise: the same fact, still
-- true). raised_by_episode is the oldest waiting episode. Not fenced on any
-- claim, unlike RaiseFinding: no episode runs this; the run holds the write
-- lock, and ON CONFLICT on the partial unique index absorbs an active
-- finding of the key. Advisory: nothing reads a finding to decide who runs
-- what.
INSERT INTO leasehold_findings (
    finding_key, env, status, class, severity, summary, data, actor_id,
    source_stack, raised_by_episode, updated_by_episode, raise_count,
    raised_at, updated_at
)
VALUES (
    CAST(@finding_key AS TEXT), CAST(@env AS TEXT), 'active', CAST(@class AS TEXT),
    CAST(@severity AS TEXT), CAST(@summary AS TEXT), CAST(@data AS TEXT),
    CAST(@actor_id AS TEXT), '', CAST(@episode_id AS INTEGER), CAST(@episode_id AS INTEGER), 1,
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
)
ON CONFLICT (env, finding_key) WHERE status = 'active'
DO UPDATE SET
    class              = excluded.class,
    severity           = excluded.severity,
    summary            = excluded.summary,
    data               = excluded.data,
    updated_by_episode = excluded.updated_by_episode,
    updated_at         = CAST(round(unixepoch('subsec') * 1000) AS INTEGER);

-- name: ClearWaitingForNodeFindings :execrows
-- Clears maintenance's active waiting-for-node findings (class class)
-- whose pair no longer waits: waiting is the JSON array of {"env",
-- "finding_key"} of every pair ListWaitingForNode reported in this run,
-- overdue or not, so a finding stays while any episode of its pair waits
-- and clears once none does (canceled, run, or a capable node is live).
-- cleared_by_episode stays NULL: no episode cleared it. The row stays as
-- history and leaves the unique index, so the key can be raised again.
UPDATE leasehold_findings
SET status     = 'cleared',
    cleared_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE status = 'active'
  AND class = CAST(@class AS TEXT)
  AND NOT EXISTS (
        SELECT 1
        FROM json_each(@waiting) AS w
        WHERE json_extract(w.value, '$.env') = leasehold_findings.env
          AND json_extract(w.value, '$.finding_key') = leasehold_findings.finding_key);
