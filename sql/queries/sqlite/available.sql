-- Available work (SQLite): an episode row with run_after set (migration
-- 00016). A trigger_only node's trigger, an overflow, a delayed run, a
-- retry in its backoff, a recovered orphan and an operator's retry are all
-- this one state: status queued, run_after the instant it falls due on the
-- database clock, nobody holding a live grant on it. A full node's poller
-- takes it with ClaimAvailable, which grants the work claim and starts the
-- episode in the same transaction.
--
-- The statements of sql/queries/postgres/available.sql, under the same
-- names and kinds, with the same guarantees (ListenTriggerRequests is
-- Postgres-only: SQLite has no notifications, pollers poll on their
-- interval; see sql/queries/dialects.go). Where Postgres writes two tables
-- in one statement (ClaimAvailable), the adapter sends the statements below
-- in one BEGIN IMMEDIATE transaction (Store.inTx) and rolls it back unless
-- they all succeeded. SQLite's single write lock, held from the first
-- statement of the transaction (or of an autocommit statement) to its end,
-- replaces Postgres's row locks and FOR UPDATE SKIP LOCKED: concurrent
-- pollers, in any number of processes, run one after another, each on the
-- latest committed rows.
--
-- Invariant, kept by every statement that writes run_after: it is set only
-- on a queued, unarchived episode that nobody holds a live grant on, and
-- it is cleared by the transaction that grants that episode
-- (ClaimAvailable) or the write that ends it (CancelEpisode,
-- ExpireAvailable). No other grant path meets an available episode:
-- recovery's statements require run_after IS NULL, and CreateEpisode's
-- grant is for the row it inserts.
--
-- Clock: CAST(round(unixepoch('subsec') * 1000) AS INTEGER), milliseconds,
-- read in the deciding statement.
--
-- Scope: a poller sees one env by strict equality (the empty env being the
-- unset env's own world) and either every stack (an empty source_stack
-- argument) or its stack plus unstamped rows, the rule of the recovery sweep.

-- name: CreateDeferredEpisode :one
-- One episode per trigger, created available (queued, unclaimed, due at
-- run_after): one row, so no crash leaves a deferred episode that no
-- poller will ever see. Deduplicated on dedupe_key exactly like
-- CreateEpisode (the same index and predicate): a duplicate writes nothing
-- and returns no row (the adapter reads the live episode's id with
-- FindLiveEpisode in the same transaction, which, under the write lock,
-- always sees it). The episode is due at now + delay_ms on the database
-- clock (0: at once): no poller claims it earlier, whatever the nodes'
-- clocks say. opts is handed to the node that runs it. key_version as
-- CreateEpisode's: a key of a version the file no longer uses is aborted
-- ("leasehold: key version").
INSERT INTO leasehold_episodes (
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
    max_attempts, budget, source_stack, source_env, payload, queued_at,
    trace_parent, key_version, run_after, opts
) VALUES (
    CAST(@actor_id AS TEXT), CAST(@expectation_id AS TEXT), CAST(@trigger_type AS TEXT),
    sqlc.narg(trigger_ref), sqlc.narg(dedupe_key), 'queued',
    CAST(@max_attempts AS INTEGER), sqlc.narg(budget), CAST(@source_stack AS TEXT),
    CAST(@source_env AS TEXT), sqlc.narg(payload), CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    sqlc.narg(trace_parent), CAST(@key_version AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@delay_ms AS INTEGER),
    sqlc.narg(opts)
)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
DO NOTHING
RETURNING id, created_at;

-- name: CreateDeferredEpisodes :many
-- A batch of triggers of one expectation (Node.FireBatch, FireBatchTx): one
-- available episode per item, one row each, in one statement, each
-- deduplicated on its own dedupe_key exactly like CreateDeferredEpisode
-- (the same index and predicate), all due at now + delay_ms on the
-- database clock. items is a JSON array of {"dedupe_key", "key_version",
-- "trigger_ref", "payload", "trace_parent"} (key_version as CreateEpisode's,
-- per item: one aborted key fails the whole batch); keys are distinct
-- within a batch (the caller folds repeats). One row back per episode
-- created, with its key; a key without a row was a duplicate (the adapter
-- reads its live episode with FindLiveEpisode in the same transaction).
-- WHERE true: SQLite's grammar needs a WHERE in INSERT ... SELECT before
-- ON CONFLICT.
INSERT INTO leasehold_episodes (
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
    max_attempts, budget, source_stack, source_env, payload, queued_at,
    trace_parent, key_version, run_after
)
SELECT CAST(@actor_id AS TEXT), CAST(@expectation_id AS TEXT), CAST(@trigger_type AS TEXT),
    nullif(i.value -> '$.trigger_ref', 'null'), i.value ->> '$.dedupe_key', 'queued',
    CAST(@max_attempts AS INTEGER), sqlc.narg(budget), CAST(@source_stack AS TEXT),
    CAST(@source_env AS TEXT), nullif(i.value -> '$.payload', 'null'),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER), i.value ->> '$.trace_parent',
    i.value ->> '$.key_version',
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@delay_ms AS INTEGER)
FROM json_each(@items) AS i
WHERE true
ORDER BY i.key
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
DO NOTHING
RETURNING id, created_at, dedupe_key;

-- name: ClaimAvailable :many
-- A poll, first of three statements in one transaction: picks up to
-- max_rows due available episodes for owner_node and takes them out of the
-- available set (run_after cleared); ClaimAvailableGrant then grants each
-- one's work claim and ClaimAvailableStart starts the granted ones, so the
-- transaction does what Postgres's one statement does. Due first: run_after
-- <= now on the database clock, whatever the nodes' clocks say. Only
-- episodes of the (actor, expectation) pairs this node runs in full mode
-- are taken (runnable, a JSON array of {"actor_id", "expectation_id"}
-- objects, the same in every dialect): a node of another version, without
-- an expectation or its actor, never takes work it cannot run, so it never
-- starts it nor spends an attempt on it; the work waits for a node that
-- can. The runner asks for no more than the slots it has reserved, so work
-- flows to the nodes with capacity instead of waiting in one node's
-- memory. The picked episodes come back with their claim key, pair and
-- opts.
--
-- Guarantee: each available episode is granted to exactly one poller, and
-- started under that grant. The transaction holds the write lock from its
-- BEGIN IMMEDIATE to its COMMIT: where Postgres locks the picked rows FOR
-- UPDATE SKIP LOCKED so that concurrent pollers take disjoint sets, here
-- concurrent pollers run one after the other and each picks among the
-- rows the previous ones left available (the latest committed rows); a
-- cancel or an expiry that committed first is seen (run_after cleared),
-- and one that comes after finds the episode running. If any of the three
-- statements fails the transaction rolls back whole: the picked episodes
-- stay available, and no grant is left without its started episode. Every
-- picked episode leaves the available set here, so one whose claim is held
-- live elsewhere (a state the invariant above rules out, kept for a
-- database that broke it), which ClaimAvailableGrant does not grant, only
-- loses run_after: its holder runs it, or recovery takes it once that
-- lease ends. The pick reads leasehold_episodes_available_idx in its own
-- order (source_env, run_after; ties by id), and the UPDATE reaches the
-- picked rows by primary key.
UPDATE leasehold_episodes
SET run_after = NULL
WHERE id IN (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.source_env = CAST(@source_env AS TEXT)
      AND e.run_after <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
      AND e.status = 'queued'
      AND e.archived_at IS NULL
      AND (CAST(@source_stack AS TEXT) = '' OR e.source_stack IN (CAST(@source_stack AS TEXT), ''))
      AND EXISTS (
            SELECT 1
            FROM json_each(@runnable) AS k
            WHERE json_extract(k.value, '$.actor_id') = e.actor_id
              AND json_extract(k.value, '$.expectation_id') = e.expectation_id)
    ORDER BY e.run_after, e.id
    LIMIT CAST(@max_rows AS INTEGER)
)
RETURNING id, CAST(coalesce(dedupe_key, 'episode:' || id) AS TEXT) AS claim_key,
    actor_id, expectation_id, opts;

-- name: ClaimAvailableGrant :many
-- ClaimAvailable's second statement: grants the work claim of each episode
-- it picked (episode_ids, a JSON array of their ids) to owner_node with
-- AcquireClaim's rules (a row nobody holds live: fence + 1, attempt and
-- grant kind as AcquireClaim counts them), re-checking that the episode is
-- still queued and unarchived (under the write lock, it is). One row back
-- per grant made; a picked episode without one is held live elsewhere
-- (fence 0 in the adapter's result).
INSERT INTO leasehold_work_claims AS c (
    dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
    attempt, fence, grant_kind, work_type
)
SELECT coalesce(e.dedupe_key, 'episode:' || e.id), 'claimed', CAST(@owner_node AS TEXT),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER), 1, 1, 'fresh', 'episode'
FROM leasehold_episodes AS e
WHERE e.id IN (SELECT j.value FROM json_each(@episode_ids) AS j)
  AND e.status = 'queued'
  AND e.archived_at IS NULL
ON CONFLICT (dedupe_key) DO UPDATE SET
    state             = 'claimed',
    owner_node        = excluded.owner_node,
    lease_until       = excluded.lease_until,
    claimed_at        = excluded.claimed_at,
    last_heartbeat_at = excluded.claimed_at,
    finished_at       = NULL,
    error_detail      = NULL,
    attempt           = CASE WHEN c.state = 'done' THEN 1 ELSE c.attempt + 1 END,
    fence             = c.fence + 1,
    grant_kind        = CASE WHEN c.state = 'claimed' THEN 'steal' ELSE 'reclaim' END,
    work_type         = excluded.work_type
WHERE c.state <> 'claimed' OR c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
RETURNING dedupe_key, fence, attempt, lease_until, claimed_at, grant_kind;

-- name: ClaimAvailableStart :many
-- ClaimAvailable's last statement: starts each episode granted by
-- ClaimAvailableGrant under its grant (StartEpisode's write: running,
-- owner, started and last step on the database clock; no StartEpisode), so
-- the run begins without another round trip. items is a JSON array of
-- {"id", "claim_key", "fence"}, one per grant; each episode is started
-- only under its own grant (its claim key, owner_node, the fence, claimed)
-- and while queued and unarchived, which under the write lock both hold,
-- so every grant is started here (no row back for one would mean the
-- episode changed, and the caller releases the grant, as on Postgres). The
-- started rows come back with the next free step number. From then on each
-- is an ordinary running episode: if this node dies, recovery finds it
-- (running, lease expired) exactly as it finds any other. The table name
-- qualifies id (sqlc would otherwise find it ambiguous with the journal's
-- id in the RETURNING subquery).
UPDATE leasehold_episodes
SET status       = 'running',
    phase        = NULL,
    run_after    = NULL,
    owner_node   = CAST(@owner_node AS TEXT),
    started_at   = coalesce(started_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    last_step_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE leasehold_episodes.id IN (SELECT k.value ->> '$.id' FROM json_each(@items) AS k)
  AND status = 'queued'
  AND archived_at IS NULL
  AND EXISTS (SELECT 1 FROM json_each(@items) AS g
              JOIN leasehold_work_claims AS c
                ON c.dedupe_key = g.value ->> '$.claim_key' AND c.fence = g.value ->> '$.fence'
              WHERE g.value ->> '$.id' = leasehold_episodes.id
                AND c.dedupe_key = coalesce(leasehold_episodes.dedupe_key, 'episode:' || leasehold_episodes.id)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.state = 'claimed')
RETURNING leasehold_episodes.id,
    (SELECT coalesce(max(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = leasehold_episodes.id) AS next_step_no,
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, attempts, max_attempts,
    source_stack, source_env, payload, result, error_class, error_detail, created_at,
    started_at, last_step_at, trace_parent;

-- name: ExpireAvailable :many
-- Expires the available episodes of one env (and stack scope) due
-- (run_after) more than ttl_ms ago: each ends canceled, class
-- trigger_expired, and leaves the available set (a delayed run is never
-- expired before it was even due). all_envs (database maintenance) ignores
-- source_env and source_stack. The ids canceled come back.
--
-- Guarantee: one statement under the write lock, deciding on the latest
-- committed rows: a poll that granted the episode first (run_after
-- cleared, running) is seen and the episode is left to its node, and a
-- poll that comes after finds it canceled. An episode whose claim is held
-- live (the invariant of this file rules it out) is left alone.
UPDATE leasehold_episodes
SET status = 'canceled', phase = NULL, error_class = 'trigger_expired',
    run_after = NULL, finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE run_after < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@ttl_ms AS INTEGER)
  AND status = 'queued'
  AND archived_at IS NULL
  AND (CAST(@all_envs AS INTEGER) = 1 OR source_env = CAST(@source_env AS TEXT))
  AND (CAST(@all_envs AS INTEGER) = 1 OR CAST(@source_stack AS TEXT) = ''
       OR source_stack IN (CAST(@source_stack AS TEXT), ''))
  AND NOT EXISTS (
      SELECT 1 FROM leasehold_work_claims AS c
      WHERE c.dedupe_key = coalesce(leasehold_episodes.dedupe_key, 'episode:' || leasehold_episodes.id)
        AND c.state = 'claimed'
        AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
RETURNING id;

-- name: NextAvailableDue :one
-- How long until the next available episode of a poller's scope
-- (source_env, source_stack, runnable, as ClaimAvailable) falls due, in
-- milliseconds on the database clock: the earliest run_after that has not
-- come yet (a delayed run, a retry's backoff). -1 when there is none.
--
-- A read that decides nothing and takes no write lock: the poller sleeps
-- that long (at most its interval) instead of until its next tick, and
-- ClaimAvailable re-checks due-ness on the database clock when it wakes,
-- so a timer that fires early takes nothing and asks again, and one that
-- fires late only starts the work late. Served by
-- leasehold_episodes_available_idx.
SELECT CAST(coalesce(min(e.run_after) - CAST(round(unixepoch('subsec') * 1000) AS INTEGER), -1) AS INTEGER) AS wait_ms
FROM leasehold_episodes AS e
WHERE e.source_env = CAST(@source_env AS TEXT)
  AND e.run_after > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
  AND (CAST(@source_stack AS TEXT) = '' OR e.source_stack IN (CAST(@source_stack AS TEXT), ''))
  AND EXISTS (
        SELECT 1
        FROM json_each(@runnable) AS k
        WHERE json_extract(k.value, '$.actor_id') = e.actor_id
          AND json_extract(k.value, '$.expectation_id') = e.expectation_id);
