-- Test-only statements of the chaos suite on SQLite (TestChaosSQLite): the
-- statements of chaos.sql under the same names, in SQLite's dialect, for
-- the same invariants. Loaded by name (sqlite_test.go, sqliteQuery).
--
-- Differences from chaos.sql, all forced by the dialect:
--   - times are INTEGER milliseconds since the Unix epoch, read from the
--     database clock with CAST(round(unixepoch('subsec') * 1000) AS
--     INTEGER), as leasehold's SQLite statements read it (the driver
--     converts to and from time.Time: sqliteReads);
--   - SQLite has no data-modifying CTE, so InsertLedger is one INSERT and
--     the ledger_writes row comes from a trigger (CreateLedgerWritesTrigger,
--     SQLite only);
--   - SQLite's triggers carry their body, so there is no
--     CreateGrantEndsFunction (Postgres only);
--   - parameters are ?1, ?2, ... (Postgres: $1, $2, ...).
--
-- The lock: SQLite has one writer per database file, and every write
-- transaction of leasehold and of the suite is BEGIN IMMEDIATE, so it holds
-- that lock from its first statement to COMMIT. Where chaos.sql relies on
-- the claim row's lock (FOR SHARE in leasehold_hold), this file relies on
-- the database's one write lock: nothing else writes in between.

-- name: CreateLedger :exec
-- The strategy's side effect, one row per episode when all is well. No
-- unique constraint on purpose: a second row must be visible, not refused.
CREATE TABLE ledger (
    episode_id INTEGER NOT NULL,
    owner      TEXT    NOT NULL,
    fence      INTEGER NOT NULL,
    "trigger"  TEXT    NOT NULL,
    written_at INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
);

-- name: CreateLedgerWrites :exec
-- Every ledger write that landed, in admission order: seq is drawn inside
-- the writing transaction, which holds the database's write lock from
-- BEGIN IMMEDIATE to COMMIT, so a later grant's writes (made in a later
-- write transaction) always get a higher seq. AUTOINCREMENT: a seq is never
-- reused.
CREATE TABLE ledger_writes (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    episode_id INTEGER NOT NULL,
    owner      TEXT    NOT NULL,
    fence      INTEGER NOT NULL,
    written_at INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
);

-- name: CreateLedgerWritesTrigger :exec
-- Every insert into the ledger that lands is also appended to ledger_writes
-- (chaos.sql does this in InsertLedger's CTE, which SQLite cannot write).
CREATE TRIGGER chaos_ledger_write
    AFTER INSERT ON ledger
    FOR EACH ROW
BEGIN
    INSERT INTO ledger_writes (episode_id, owner, fence)
    VALUES (NEW.episode_id, NEW.owner, NEW.fence);
END;

-- name: CreateGrantEnds :exec
-- The end of every grant that a later grant of the same claim superseded,
-- as the database recorded it (see chaos.sql). Filled by the trigger below.
CREATE TABLE grant_ends (
    dedupe_key  TEXT    NOT NULL,
    fence       INTEGER NOT NULL,
    owner_node  TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    lease_until INTEGER NOT NULL,
    next_owner  TEXT    NOT NULL,
    next_fence  INTEGER NOT NULL,
    next_kind   TEXT    NOT NULL,
    granted_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    PRIMARY KEY (dedupe_key, fence)
);

-- name: CreateGrantEndsTrigger :exec
-- A new grant is an UPDATE of the claim row that moves its fence, whatever
-- statement makes it (an INSERT ... ON CONFLICT DO UPDATE fires UPDATE
-- triggers on SQLite too).
CREATE TRIGGER chaos_grant_end
    AFTER UPDATE ON leasehold_work_claims
    FOR EACH ROW
    WHEN OLD.fence IS NOT NEW.fence
BEGIN
    INSERT INTO grant_ends (dedupe_key, fence, owner_node, state, lease_until, next_owner, next_fence, next_kind)
    VALUES (OLD.dedupe_key, OLD.fence, OLD.owner_node, OLD.state, OLD.lease_until,
            NEW.owner_node, NEW.fence, NEW.grant_kind);
END;

-- name: InsertLedger :exec
-- The strategy's side effect: a plain insert, the application's own write,
-- made in the run's transaction after Run.Hold (leasehold_hold: the
-- transaction holds the write lock and the grant is the current one) and
-- committed with Run.CompleteTx's fenced finish. A stolen grant's
-- transaction commits neither. The trigger chaos_ledger_write appends the
-- write to ledger_writes. ?1 episode, ?2 owner, ?3 fence, ?4 trigger.
INSERT INTO ledger (episode_id, owner, fence, "trigger")
VALUES (?1, ?2, ?3, CAST(?4 AS TEXT));

-- name: DatabaseNow :one
-- The moment a fault was applied, on the clock claimed_at uses.
SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER);

-- name: HeldBy :one
-- What node ?1 still holds of the work it had at ?2, and what it left
-- available (see chaos.sql).
SELECT coalesce(sum(h.held), 0)      AS held,
       coalesce(sum(NOT h.held), 0)  AS available,
       coalesce(group_concat(CASE WHEN h.held THEN h.what END, ', '), '') AS what
FROM (
    SELECT e.id || ': ' || CASE
            WHEN c.state = 'claimed' THEN 'claim held, ' || CASE WHEN c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) THEN 'lease live' ELSE 'lease expired ' || (CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - c.lease_until) || ' ms ago' END
            ELSE 'claim ' || c.state || ', episode ' || e.status || ', ' || CASE WHEN e.run_after IS NULL THEN 'not available' ELSE 'available' END END AS what,
        coalesce((c.state = 'claimed' AND c.owner_node = ?1 AND c.claimed_at <= ?2)
        OR (c.state = 'released' AND c.owner_node = ?1 AND c.claimed_at <= ?2 AND e.run_after IS NULL), 0) AS held,
           coalesce((c.state = 'released' AND c.owner_node = ?1 AND c.claimed_at <= ?2
            AND e.status = 'queued' AND e.run_after IS NOT NULL), 0) AS available
    FROM leasehold_episodes AS e
    JOIN leasehold_work_claims AS c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
    WHERE e.status IN ('queued', 'running')
) AS h
WHERE h.held OR h.available;

-- name: HolderSessions :one
-- See chaos.sql: SQLite has no server sessions; a dead process's write
-- lock ends with its file handle.
SELECT 'n/a (SQLite)' WHERE ?1 IS NOT NULL;

-- name: BusySessions :one
-- See chaos.sql: SQLite has no server sessions.
SELECT 'n/a (SQLite)';

-- name: Unsettled :one
-- Episodes not yet in a terminal state; the suite waits for 0.
SELECT count(*) FROM leasehold_episodes WHERE status IN ('queued', 'running', 'blocked');

-- name: UnsettledBreakdown :many
-- The unsettled episodes grouped by what they wait on (see chaos.sql).
SELECT e.actor_id || '/' || e.expectation_id || ' ' || e.status
        || ', claim ' || coalesce(c.state || CASE WHEN c.state = 'claimed' THEN CASE WHEN c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) THEN ' (live)' ELSE ' (expired)' END ELSE '' END
            || ' by ' || c.owner_node, 'none')
        || CASE WHEN e.run_after IS NULL THEN '' WHEN e.run_after > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) THEN ', available (not due)' ELSE ', available' END AS what,
    count(*) AS n
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.status IN ('queued', 'running', 'blocked')
GROUP BY 1
ORDER BY 2 DESC, 1
LIMIT 20;

-- name: EpisodeAudit :many
-- One row per episode with everything the invariants compare (see
-- chaos.sql): its trigger and status, its claim row, its journal, its
-- ledger rows and its ledger writes.
SELECT e.id,
    coalesce(e.payload ->> 'trigger', '')    AS "trigger",
    e.status,
    coalesce(e.error_class, '')              AS error_class,
    coalesce(e.error_detail, '')             AS error_detail,
    e.attempts,
    coalesce(e.owner_node, '')               AS owner_node,
    coalesce(c.state, '')                    AS claim_state,
    coalesce(c.owner_node, '')               AS claim_owner,
    coalesce(c.fence, 0)                     AS claim_fence,
    coalesce(j.steps, 0)                     AS steps,
    coalesce(j.last_fence, 0)                AS last_step_fence,
    coalesce(j.regressions, 0)               AS step_regressions,
    coalesce(l.n, 0)                         AS ledger_rows,
    coalesce(l.owner, '')                    AS ledger_owner,
    coalesce(l.fence, 0)                     AS ledger_fence,
    coalesce(l.tr, '')                       AS ledger_trigger,
    coalesce(l.all_rows, '')                 AS ledger_all_rows,
    coalesce(w.writes, 0)                    AS ledger_writes,
    coalesce(w.grants, 0)                    AS ledger_grants,
    coalesce(w.stale, 0)                     AS stale_writes
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
LEFT JOIN (
    SELECT episode_id, count(*) AS steps,
        max(CASE WHEN last_first = 1 THEN fence END) AS last_fence,
        count(*) FILTER (WHERE fence < prev_max) AS regressions
    FROM (SELECT episode_id, step_no, fence,
                 max(fence) OVER (PARTITION BY episode_id ORDER BY step_no
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max,
                 row_number() OVER (PARTITION BY episode_id ORDER BY step_no DESC) AS last_first
          FROM leasehold_episode_steps) AS s
    GROUP BY episode_id
) AS j ON j.episode_id = e.id
LEFT JOIN (
    SELECT episode_id, count(*) AS n, min(owner) AS owner, min(fence) AS fence,
        min("trigger") AS tr,
        string_agg(owner || ' fence ' || fence, '; ' ORDER BY written_at, rowid) AS all_rows
    FROM ledger
    GROUP BY episode_id
) AS l ON l.episode_id = e.id
LEFT JOIN (
    SELECT episode_id, count(*) AS writes, count(DISTINCT fence) AS grants,
        count(*) FILTER (WHERE fence < prev_max) AS stale
    FROM (SELECT episode_id, fence,
                 max(fence) OVER (PARTITION BY episode_id ORDER BY seq
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
          FROM ledger_writes) AS x
    GROUP BY episode_id
) AS w ON w.episode_id = e.id
ORDER BY e.id;

-- name: StrayLedgerRows :one
-- Ledger rows and ledger writes for an episode that does not exist.
SELECT (SELECT count(*) FROM ledger AS l
        WHERE NOT EXISTS (SELECT 1 FROM leasehold_episodes AS e WHERE e.id = l.episode_id))
     + (SELECT count(*) FROM ledger_writes AS w
        WHERE NOT EXISTS (SELECT 1 FROM leasehold_episodes AS e WHERE e.id = w.episode_id));

-- name: OpenClaims :many
-- Claims still claimed or released (none should be, once every episode is
-- terminal), with whether the lease is live on the database clock (0/1).
SELECT dedupe_key, state, owner_node,
    lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) AS live
FROM leasehold_work_claims
WHERE state IN ('claimed', 'released')
ORDER BY dedupe_key;

-- name: GrantEnds :many
-- Every superseded grant (see CreateGrantEnds), oldest first (rowid breaks
-- ties within a millisecond: it grows with each insert).
SELECT dedupe_key, fence, owner_node, state, lease_until, next_owner, next_fence, next_kind
FROM grant_ends
ORDER BY granted_at, rowid;

-- name: GrantOfKey :one
-- The current grant of one claim and its episode's status.
SELECT c.owner_node, c.fence, c.state, coalesce(e.status, '') AS status
FROM leasehold_work_claims AS c
LEFT JOIN leasehold_episodes AS e ON coalesce(e.dedupe_key, 'episode:' || e.id) = c.dedupe_key
WHERE c.dedupe_key = ?1;

-- name: GrantWrites :one
-- The journal steps and ledger writes of one grant (?1 key, ?2 fence) that
-- landed.
SELECT
    (SELECT count(*) FROM leasehold_episode_steps AS s
     JOIN leasehold_episodes AS e ON e.id = s.episode_id
     WHERE coalesce(e.dedupe_key, 'episode:' || e.id) = ?1 AND s.fence = ?2) AS steps,
    (SELECT count(*) FROM ledger_writes AS w
     JOIN leasehold_episodes AS e ON e.id = w.episode_id
     WHERE coalesce(e.dedupe_key, 'episode:' || e.id) = ?1 AND w.fence = ?2) AS ledger_writes;

-- name: DoneBySlot :many
-- Done episodes per worker slot (identities are worker-<slot>-<generation>;
-- the slot is the text between the first and the second '-').
SELECT substr(rest, 1, instr(rest, '-') - 1) AS slot, count(*) AS done
FROM (SELECT substr(owner_node, instr(owner_node, '-') + 1) AS rest
      FROM leasehold_episodes
      WHERE status = 'done') AS d
GROUP BY 1
ORDER BY 1;

-- name: RetriedAttempts :one
-- Attempts that failed and were retried (RetryEpisode journals each one's
-- error as a step), and the episodes they belong to. json_type is NULL
-- exactly when the key is absent (Postgres: data ? 'error').
SELECT count(*) AS attempts, count(DISTINCT episode_id) AS episodes
FROM leasehold_episode_steps
WHERE json_type(data, '$.error') IS NOT NULL;

-- name: ClaimKeys :many
-- The claim key of every episode (its dedupe key, or episode:{id}).
SELECT id, CAST(coalesce(dedupe_key, 'episode:' || id) AS TEXT) AS claim_key
FROM leasehold_episodes;
