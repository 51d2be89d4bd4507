-- Maintenance (T-SQL): one run per database and schema at a time, every
-- statement of a run in one transaction that first takes TryMaintenanceLock.
--
-- The statements of sql/queries/postgres/maintenance.sql, one for one: same
-- names, kinds and @parameters. NOT EXECUTED IN THIS REPOSITORY'S CI (no SQL
-- Server there); statically checked only, see docs/sqlserver.md.
--
-- The adapter's Maintain opens the transaction (READ COMMITTED) on one
-- pooled connection and sends these batches in it, in the Postgres order:
-- TryMaintenanceLock, ArchiveEpisodes, PurgeArchivedSteps,
-- MarkJournalsPurged, ExpireAvailable (available.sql, with @all_envs = 1),
-- DeleteSpentClaims, DeleteStaleNodes, then the waiting-for-node findings;
-- then COMMIT. None of these batches opens or ends a transaction of its
-- own. XACT_ABORT is ON (SessionInitSQL, and each batch says so again), so
-- any error rolls the whole run back and releases the lock with it. No batch is sent again
-- inside the transaction (a deadlock victim's transaction is already gone);
-- the adapter sends the whole run again, in a new transaction.
--
-- :execrows: Postgres returns the driver's row count. These batches return it
-- as one row, one column rows_affected, counted from the OUTPUT rows of the
-- one statement that writes: as everywhere in this adapter, what the caller
-- sees comes from OUTPUT rows, not from the driver's RowsAffected (which SET
-- NOCOUNT and multi-statement batches make meaningless) nor @@ROWCOUNT.
--
-- Each statement is bounded by @max_rows where the Postgres one is; what is
-- left waits for the next run. Cut-offs are SYSUTCDATETIME() minus a
-- duration given in milliseconds, split into seconds and milliseconds so
-- that durations over 24.8 days do not overflow DATEADD's int (up to about
-- 68 years; longer fails with error 8115, as Postgres fails on a timestamp
-- out of range).

-- name: TryMaintenanceLock :one
-- True for exactly one transaction at a time per database and default
-- schema; never waits.
--
-- sp_getapplock with @LockOwner = 'Transaction' is Postgres's
-- pg_try_advisory_xact_lock: the lock is released by the COMMIT or ROLLBACK
-- that ends the run, and by the server when the session dies, so no lock
-- can outlive its holder. @LockTimeout = 0 answers at once: 0 (granted) or
-- -1 (held elsewhere). An application lock is already scoped to the current
-- database; the resource names DB_NAME() anyway, for sys.dm_tran_locks
-- readers, and SCHEMA_NAME() (the user's default schema, where the
-- unqualified leasehold_ tables resolve first), so installations in
-- different schemas of one database do not exclude each other, as with
-- current_schema() on Postgres. The resource is the name itself (at most
-- 255 characters), not a 64-bit hash of it.
--
-- Outside a transaction a transaction-owned lock cannot be taken; the batch
-- fails loudly then rather than answer "not acquired", and it fails on
-- -999 (a parameter or call error) rather than report the lock as held.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @r int;
DECLARE @resource nvarchar(255) =
    LEFT(CONCAT(N'leasehold.maintenance:', DB_NAME(), N'.', SCHEMA_NAME()), 255);

IF @@TRANCOUNT = 0
    THROW 50000, N'TryMaintenanceLock must run inside the maintenance transaction', 1;

EXEC @r = sp_getapplock
    @Resource    = @resource,
    @LockMode    = 'Exclusive',
    @LockOwner   = 'Transaction',
    @LockTimeout = 0;

IF @r = -999
    THROW 50000, N'TryMaintenanceLock: sp_getapplock returned -999 (parameter or call error)', 1;

SELECT CAST(CASE WHEN @r >= 0 THEN 1 ELSE 0 END AS bit) AS acquired;

-- name: ArchiveEpisodes :execrows
-- Archives terminal episodes that finished more than @retention_ms ago,
-- oldest first. Archiving takes an episode out of the dedupe index, so its
-- trigger may run again, and out of every coordination query.
--
-- Rows locked by a concurrent writer are skipped, not waited for: the
-- picking read takes an update lock on each row it returns (UPDLOCK) and
-- skips rows another session holds (READPAST), Postgres's FOR UPDATE SKIP
-- LOCKED, with ROWLOCK to keep the locks to the picked rows and
-- READCOMMITTEDLOCK so the read locks under READ_COMMITTED_SNAPSHOT too,
-- where READPAST alone is refused. The UPDATE of the CTE writes exactly the
-- picked rows and re-checks archived_at on them. The picking predicate is
-- leasehold_episodes_finished_idx's filter, written literally.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @archived TABLE (id bigint NOT NULL);

WITH picked AS (
    SELECT TOP (@max_rows) e.id, e.archived_at
    FROM leasehold_episodes AS e WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE e.archived_at IS NULL
      AND e.finished_at IS NOT NULL
      AND e.finished_at < DATEADD(second, -CAST(@retention_ms / 1000 AS int),
                              DATEADD(millisecond, -CAST(@retention_ms % 1000 AS int), SYSUTCDATETIME()))
      AND e.status IN (N'done', N'failed', N'partially_failed', N'canceled')
    ORDER BY e.finished_at
)
UPDATE picked
SET archived_at = SYSUTCDATETIME()
OUTPUT inserted.id INTO @archived
WHERE archived_at IS NULL;

SELECT COUNT_BIG(*) AS rows_affected FROM @archived;

-- name: PurgeArchivedSteps :execrows
-- Deletes up to @max_rows journal rows of archived episodes. Archived
-- episodes take no more writes (every coordination statement requires
-- archived_at IS NULL), so nothing else locks these rows; no hint. The
-- episode predicate is leasehold_episodes_unpurged_idx's filter, written
-- literally; the steps are found through their unique (episode_id, step_no)
-- index.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @purged TABLE (id bigint NOT NULL);

DELETE FROM leasehold_episode_steps
OUTPUT deleted.id INTO @purged
WHERE id IN (
    SELECT TOP (@max_rows) s.id
    FROM leasehold_episodes AS e
    JOIN leasehold_episode_steps AS s ON s.episode_id = e.id
    WHERE e.archived_at IS NOT NULL
      AND e.journal_purged = 0);

SELECT COUNT_BIG(*) AS rows_affected FROM @purged;

-- name: MarkJournalsPurged :execrows
-- Marks up to @max_rows archived episodes whose journal is now empty, so
-- later purges skip them (leasehold_episodes_unpurged_idx shrinks). Runs
-- after PurgeArchivedSteps in the same transaction, so it sees that purge.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @marked TABLE (id bigint NOT NULL);

UPDATE leasehold_episodes
SET journal_purged = 1
OUTPUT inserted.id INTO @marked
WHERE id IN (
    SELECT TOP (@max_rows) x.id
    FROM leasehold_episodes AS x
    WHERE x.archived_at IS NOT NULL
      AND x.journal_purged = 0
      AND NOT EXISTS (SELECT 1 FROM leasehold_episode_steps AS s WHERE s.episode_id = x.id));

SELECT COUNT_BIG(*) AS rows_affected FROM @marked;

-- name: DeleteSpentClaims :execrows
-- Deletes up to @max_rows finished claim rows (done, failed, released)
-- whose lease ended more than @horizon_ms ago.
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
-- The DELETE re-checks the finished state and the age on each row it
-- locks, so a claim re-granted since the candidate list was read stays.
-- GREATEST needs SQL Server 2022; the CASE is greatest(lease_until,
-- coalesce(finished_at, lease_until)): a NULL finished_at fails the
-- comparison and yields lease_until.
--
-- episode:<id> keys: Postgres matches '^episode:[0-9]{1,18}$' before the
-- cast. Here the LIKE prefix, the length (DATALENGTH counts the trailing
-- spaces that LEN drops: 9 to 26 UTF-16 code units) and the digits-only
-- test (no character outside 0-9, by code point under the key's binary
-- collation) make the same match, and TRY_CAST yields NULL instead of an
-- error should the optimizer evaluate the cast on a key the other tests
-- reject (SQL Server does not promise left-to-right evaluation). Eighteen
-- digits always fit a bigint.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @deleted TABLE (dedupe_key nvarchar(512) NOT NULL);

DELETE FROM leasehold_work_claims
OUTPUT deleted.dedupe_key INTO @deleted
WHERE dedupe_key IN (
    SELECT TOP (@max_rows) x.dedupe_key
    FROM leasehold_work_claims AS x
    WHERE x.state IN (N'done', N'failed', N'released')
      AND CASE WHEN x.finished_at > x.lease_until THEN x.finished_at ELSE x.lease_until END
          < DATEADD(second, -CAST(@horizon_ms / 1000 AS int),
                DATEADD(millisecond, -CAST(@horizon_ms % 1000 AS int), SYSUTCDATETIME()))
      AND NOT EXISTS (
          SELECT 1 FROM leasehold_episodes AS e
          WHERE e.dedupe_key = x.dedupe_key
            AND e.archived_at IS NULL
            AND e.status IN (N'queued', N'running', N'blocked'))
      AND NOT (x.dedupe_key LIKE N'episode:%'
               AND DATALENGTH(x.dedupe_key) BETWEEN 18 AND 52
               AND SUBSTRING(x.dedupe_key, 9, 18) NOT LIKE N'%[^0-9]%'
               AND EXISTS (
                   SELECT 1 FROM leasehold_episodes AS e
                   WHERE e.id = TRY_CAST(SUBSTRING(x.dedupe_key, 9, 18) AS bigint)
                     AND e.archived_at IS NULL
                     AND e.status IN (N'queued', N'running', N'blocked'))))
  -- Re-checked on the row the DELETE locks, not only in the candidate
  -- list: a claim re-granted and finished (or released) again since the
  -- list was read is young and stays, like on Postgres.
  AND state IN (N'done', N'failed', N'released')
  AND CASE WHEN finished_at > lease_until THEN finished_at ELSE lease_until END
      < DATEADD(second, -CAST(@horizon_ms / 1000 AS int),
            DATEADD(millisecond, -CAST(@horizon_ms % 1000 AS int), SYSUTCDATETIME()));

SELECT COUNT_BIG(*) AS rows_affected FROM @deleted;

-- name: DeleteStaleNodes :execrows
-- Deletes membership rows of nodes that have not heartbeated for
-- @stale_after_ms (they died without draining). Advisory rows only; a
-- heartbeat that races this waits for the run to commit, then recreates its
-- row (HeartbeatNode). Unbounded, as on Postgres.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @deleted TABLE (node_id nvarchar(255) NOT NULL);

DELETE FROM leasehold_nodes
OUTPUT deleted.node_id INTO @deleted
WHERE heartbeat_at < DATEADD(second, -CAST(@stale_after_ms / 1000 AS int),
                         DATEADD(millisecond, -CAST(@stale_after_ms % 1000 AS int), SYSUTCDATETIME()));

SELECT COUNT_BIG(*) AS rows_affected FROM @deleted;

-- name: RaiseWaitingForNodeFinding :execrows
-- Raises maintenance's finding for work no live node can run: one (env,
-- actor, expectation) pair that ListWaitingForNode, read just before in the
-- same run's transaction, reported overdue. Inserts the finding, or
-- refreshes the active one of the same (env, key) with the current count,
-- oldest episode and summary (not counted as a raise: the same fact, still
-- true). raised_by_episode is the oldest waiting episode. Not fenced on any
-- claim, unlike RaiseFinding: no episode runs this; the run's maintenance
-- lock keeps two runs from writing at once. Advisory: nothing reads a
-- finding to decide who runs what.
--
-- RaiseFinding's upsert: UPDATE WITH (UPDLOCK, HOLDLOCK) of the active
-- (env, key), keeping the row or the empty key range update-locked to the
-- end of Maintain's transaction, then the INSERT only when the UPDATE
-- matched nothing; a raise by an episode of the same key queues on that
-- lock. Runs inside Maintain's transaction and opens none of its own; a
-- 2601 from the filtered unique index would be LEFT TO SURFACE (XACT_ABORT
-- rolls the run back; the next run raises again).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @raised TABLE (id bigint NOT NULL);

UPDATE leasehold_findings WITH (UPDLOCK, HOLDLOCK)
SET class              = @class,
    severity           = @severity,
    summary            = @summary,
    data               = @data,
    updated_by_episode = @episode_id,
    updated_at         = SYSUTCDATETIME()
OUTPUT inserted.id INTO @raised
WHERE env = @env
  AND finding_key = @finding_key
  AND status = N'active';

IF NOT EXISTS (SELECT 1 FROM @raised)
    INSERT INTO leasehold_findings (
        finding_key, env, status, class, severity, summary, data, actor_id,
        source_stack, raised_by_episode, updated_by_episode, raise_count,
        raised_at, updated_at
    )
    OUTPUT inserted.id INTO @raised
    VALUES (
        @finding_key, @env, N'active', @class, @severity, @summary, @data, @actor_id,
        N'', @episode_id, @episode_id, 1, SYSUTCDATETIME(), SYSUTCDATETIME()
    );

SELECT COUNT_BIG(*) AS rows_affected FROM @raised;

-- name: ClearWaitingForNodeFindings :execrows
-- Clears maintenance's active waiting-for-node findings (class @class)
-- whose pair no longer waits: @waiting is the nvarchar(max) JSON array of
-- {"env", "finding_key"} of every pair ListWaitingForNode reported in this
-- run, overdue or not, so a finding stays while any episode of its pair
-- waits and clears once none does (canceled, run, or a capable node is
-- live). cleared_by_episode stays NULL: no episode cleared it. The row
-- stays as history and leaves the filtered unique index, so the key can be
-- raised again. The UPDATE locks the rows it clears (UPDLOCK, ROWLOCK) and
-- re-checks status = active on them, as ClearFinding does.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @cleared TABLE (id bigint NOT NULL);

UPDATE f
SET status     = N'cleared',
    cleared_at = SYSUTCDATETIME(),
    updated_at = SYSUTCDATETIME()
OUTPUT inserted.id INTO @cleared
FROM leasehold_findings AS f WITH (UPDLOCK, ROWLOCK)
WHERE f.status = N'active'
  AND f.class = @class
  AND NOT EXISTS (
        SELECT 1
        FROM OPENJSON(@waiting) WITH (
            env         nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.env',
            finding_key nvarchar(512) COLLATE Latin1_General_100_BIN2 '$.finding_key'
        ) AS w
        WHERE w.env = f.env
          AND w.finding_key = f.finding_key);

SELECT COUNT_BIG(*) AS rows_affected FROM @cleared;
