-- Available work: an episode row with run_after set (migration 00016), taken
-- by a full node's poller (T-SQL).
--
-- The statements of sql/queries/postgres/available.sql, one for one: same
-- names, kinds, @parameters and result columns; that file's header states
-- the model and the invariant every statement that writes run_after keeps
-- (set only on a queued, unarchived episode nobody holds a live grant on;
-- cleared by the write that grants it, ClaimAvailable, or ends it,
-- CancelEpisode and ExpireAvailable). NOT EXECUTED IN THIS REPOSITORY'S CI
-- (no SQL Server there); statically checked only, see docs/sqlserver.md.
-- Postgres's ListenTriggerRequests (LISTEN for the triggers' NOTIFY) has no
-- counterpart: SQL Server pollers poll on their interval.
--
-- Scope: a poller sees one env by strict equality (N'' being the unset env's
-- own world) and either every stack (@source_stack = N'') or its stack plus
-- unstamped rows, the rule of the recovery sweep. All times are
-- SYSUTCDATETIME(), the database clock; @lease_ms is cast to int for
-- DATEADD (under about 24.8 days), as in claims.sql. The statements that
-- read the available set repeat the filter of leasehold_episodes_available_idx
-- (run_after IS NOT NULL) literally, so the optimizer can match it.

-- name: CreateDeferredEpisode :one
-- One episode per trigger, created available (queued, unclaimed, due at
-- run_after): one row, so no crash leaves a deferred episode that no poller
-- will ever see. Deduplicated on dedupe_key like CreateEpisode, by the
-- filtered unique index leasehold_episodes_dedupe_key_idx; a duplicate
-- answers created = 0 (the adapter reads the live episode's id with
-- FindLiveEpisode, as after CreateEpisode). The episode is due at
-- SYSUTCDATETIME() + @delay_ms on the database clock (0: at once), split
-- into seconds and milliseconds so a delay of more than 24.8 days does not
-- overflow DATEADD's int: no poller takes it earlier, whatever the nodes'
-- clocks say.
--
-- Guarantee: one live episode per dedupe key across N creators, and a lost
-- race is the empty result, not an error. The INSERT is guarded by NOT
-- EXISTS on the live key read WITH (UPDLOCK, HOLDLOCK): the read seeks the
-- filtered dedupe index (its filter is repeated literally) and takes an
-- update-mode key-range lock on the key, present or absent, held to the end
-- of the statement (of the caller's transaction, inside one), so a second
-- creator waits for the first to commit, then re-reads and inserts nothing.
-- A NULL @dedupe_key is never a duplicate and is not checked.
--
-- Nesting: one INSERT, so the batch opens no transaction. Inside a caller's
-- transaction (@@TRANCOUNT > 0: the workflow engine creates a step's next
-- episode in its advancing transaction, Store.InTx) its write is the
-- caller's, committed or rolled back with it, and a duplicate is the empty
-- result with the caller's transaction intact, like Postgres's ON CONFLICT
-- DO NOTHING.
--
-- Duplicates: the guard keeps the unique index from raising 2601. Should one
-- surface anyway, on its own the batch CATCHES it (the failed INSERT wrote
-- nothing) and answers with the empty result. Inside a caller's transaction
-- nothing can be caught usefully: XACT_ABORT ON has already doomed that
-- transaction (XACT_STATE() = -1, which neither COMMIT nor a rollback to a
-- savepoint can undo), so the CATCH re-throws whatever it got, the caller's
-- transaction is rolled back and the caller sees the error.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @created TABLE (id bigint NOT NULL, created_at datetime2(6) NOT NULL);
DECLARE @duplicate bit = 0;
DECLARE @nested bit = CASE WHEN @@TRANCOUNT > 0 THEN 1 ELSE 0 END;

BEGIN TRY
    INSERT INTO leasehold_episodes (
        actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
        max_attempts, budget, source_stack, source_env, payload, queued_at,
        trace_parent, key_version, run_after, opts
    )
    OUTPUT inserted.id, inserted.created_at INTO @created
    SELECT @actor_id, @expectation_id, @trigger_type, @trigger_ref, @dedupe_key, N'queued',
        @max_attempts, @budget, @source_stack, @source_env, @payload, SYSUTCDATETIME(),
        @trace_parent, @key_version,
        DATEADD(second, CAST(@delay_ms / 1000 AS int),
            DATEADD(millisecond, CAST(@delay_ms % 1000 AS int), SYSUTCDATETIME())),
        @opts
    WHERE @dedupe_key IS NULL
       OR NOT EXISTS (
            SELECT 1 FROM leasehold_episodes WITH (UPDLOCK, HOLDLOCK)
            WHERE dedupe_key IS NOT NULL
              AND archived_at IS NULL
              AND dedupe_key = @dedupe_key);
END TRY
BEGIN CATCH
    -- In a caller's transaction, which XACT_ABORT has doomed: re-throw.
    IF @nested = 1
        THROW;
    -- Another node created the live episode for this trigger: a duplicate.
    IF ERROR_NUMBER() NOT IN (2601, 2627) THROW;
    SET @duplicate = 1;
END CATCH;

SELECT CAST(1 AS bit) AS created, c.id, c.created_at
FROM @created AS c
WHERE @duplicate = 0
UNION ALL
SELECT CAST(0 AS bit), CAST(0 AS bigint), SYSUTCDATETIME()
WHERE @duplicate = 1 OR NOT EXISTS (SELECT 1 FROM @created);

-- name: CreateDeferredEpisodes :many
-- A batch of triggers of one expectation, as
-- sql/queries/postgres/available.sql's CreateDeferredEpisodes: one
-- available episode per item of @items (a JSON array of {"dedupe_key",
-- "key_version", "trigger_ref", "payload", "trace_parent"}, keys distinct),
-- one row each, in one INSERT (in the caller's transaction, inside one),
-- each item deduplicated on its own key by CreateDeferredEpisode's guard:
-- NOT EXISTS on the live key read WITH (UPDLOCK, HOLDLOCK), so a second
-- creator of a key waits for the first to commit and then inserts nothing
-- for it. Every item is due at SYSUTCDATETIME() + @delay_ms, split as in
-- CreateDeferredEpisode. One row back per item: created with its episode,
-- or a duplicate (id 0: the adapter reads the live episode's id with
-- FindLiveEpisode, as after CreateEpisode).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @input TABLE (
    dedupe_key   nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL,
    trigger_ref  nvarchar(max) NULL,
    payload      nvarchar(max) NULL,
    trace_parent nvarchar(1024) NULL,
    key_version  smallint NULL
);
DECLARE @created TABLE (id bigint NOT NULL, created_at datetime2(6) NOT NULL,
    dedupe_key nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL);

INSERT INTO @input (dedupe_key, trigger_ref, payload, trace_parent, key_version)
SELECT dedupe_key, trigger_ref, payload, trace_parent, key_version
FROM OPENJSON(@items) WITH (
    dedupe_key   nvarchar(512) COLLATE Latin1_General_100_BIN2 '$.dedupe_key',
    trigger_ref  nvarchar(max) '$.trigger_ref' AS JSON,
    payload      nvarchar(max) '$.payload' AS JSON,
    trace_parent nvarchar(1024) '$.trace_parent',
    key_version  smallint '$.key_version'
);

INSERT INTO leasehold_episodes (
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
    max_attempts, budget, source_stack, source_env, payload, queued_at,
    trace_parent, key_version, run_after
)
OUTPUT inserted.id, inserted.created_at, inserted.dedupe_key INTO @created
SELECT @actor_id, @expectation_id, @trigger_type, i.trigger_ref, i.dedupe_key, N'queued',
    @max_attempts, @budget, @source_stack, @source_env, i.payload, SYSUTCDATETIME(),
    i.trace_parent, i.key_version,
    DATEADD(second, CAST(@delay_ms / 1000 AS int),
        DATEADD(millisecond, CAST(@delay_ms % 1000 AS int), SYSUTCDATETIME()))
FROM @input AS i
WHERE NOT EXISTS (
        SELECT 1 FROM leasehold_episodes AS x WITH (UPDLOCK, HOLDLOCK)
        WHERE x.dedupe_key IS NOT NULL
          AND x.archived_at IS NULL
          AND x.dedupe_key = i.dedupe_key);

SELECT CAST(1 AS bit) AS created, c.id, c.created_at, c.dedupe_key
FROM @created AS c
UNION ALL
SELECT CAST(0 AS bit), CAST(0 AS bigint), SYSUTCDATETIME(), i.dedupe_key
FROM @input AS i
WHERE NOT EXISTS (SELECT 1 FROM @created AS c WHERE c.dedupe_key = i.dedupe_key);

-- name: ClaimAvailable :many
-- A poll: takes up to @max_rows due available episodes for @owner_node and
-- starts each under a fresh grant of its work claim, in one batch and one
-- transaction, set-based (no row at a time). Due first: run_after <=
-- SYSUTCDATETIME() on the database clock, whatever the nodes' clocks say.
-- Only episodes of the (actor, expectation) pairs this node runs in full
-- mode are taken (@runnable, an nvarchar(max) JSON array of objects
-- [{"actor_id":"a","expectation_id":"e"}] read with OPENJSON in the key
-- columns' binary collation, as in RenewClaims; EXISTS is a semi-join, so a
-- pair listed twice takes nothing twice): a node without an expectation or
-- its actor never takes work it cannot run, so it never starts it nor
-- spends an attempt on it; the work waits for a node that can. The runner
-- asks for no more than the slots it has reserved.
--
-- Guarantee: each available episode is granted to exactly one poller, and
-- started under that grant.
--   * The pick is Postgres's FOR UPDATE SKIP LOCKED: it takes an update lock
--     on each row it returns (UPDLOCK), which two sessions cannot both hold,
--     held to COMMIT, and skips rows another session has locked (READPAST)
--     instead of queueing behind them, so concurrent pollers take disjoint
--     sets and never wait on each other. ROWLOCK keeps the locks to the
--     picked rows; READCOMMITTEDLOCK makes the read a locking read under
--     READ_COMMITTED_SNAPSHOT too (where READPAST alone is refused), so the
--     pick's conditions (queued, unarchived, due) are decided on each row's
--     latest committed version under its lock: a cancel or an expiry that
--     committed first is seen, and one that comes after waits for this
--     transaction and then finds run_after cleared. Nothing can change a
--     picked row until COMMIT, so the writes below need no re-check.
--   * The grant is AcquireClaim's and the old hand-over's
--     (DispatchTriggerRequest's), set-based: an UPDATE of the picked
--     episodes' claim rows, joined to @picked on the claim key, WITH
--     (UPDLOCK, HOLDLOCK), of a claim nobody holds live (state <> claimed,
--     or lease_until <= now): fence + 1, attempt reset after done and + 1
--     otherwise, grant kind steal from an expired grant and reclaim from a
--     finished one; then, for the picked episodes that UPDATE did not
--     grant, an INSERT of a fresh claim (fence 1, attempt 1) guarded by NOT
--     EXISTS under the same key-range lock, so no other session can insert
--     or take the claim between the check and the write. A claim held live
--     elsewhere is neither updated nor inserted.
--   * Every picked episode leaves the available set in this transaction:
--     the ones granted are started (running, phase NULL, owner_node,
--     started and last step on the database clock; no StartEpisode), and
--     one whose claim is held live elsewhere (a state the invariant rules
--     out, kept for a database that broke it) only loses run_after: its
--     holder runs it, or recovery takes it once that lease ends. Its row
--     comes back with fence 0 (claim_key N'', attempt 0, grant_kind N'',
--     now for the times: Postgres's coalesce).
--
-- Locks: episode rows, then their claim rows, in key order: @picked's
-- primary key is the claim key (NONCLUSTERED: a clustered key holds 900
-- bytes, a dedupe key up to 1,024), which covers what the grant and the
-- fresh INSERT read of @picked, and their plans are forced to a nested
-- loop driven by it (OPTION (LOOP JOIN, FORCE ORDER)), so the claim rows
-- are reached one seek each, in key order, and never by a scan of the
-- claims table (whose serializable range locks would stop every writer).
-- The episode UPDATEs reach their rows by primary key through @picked the
-- same way. Two polls never meet on a claim row (at most one unarchived
-- episode per key); the other writers of an available episode's rows take
-- the claim row first (CancelEpisode, and recovery's takeovers, which skip
-- an available episode in their first read), so a cancel racing this
-- grant can deadlock with it, and the server then makes one of the two the
-- victim (1205: rolled back whole, retried by the adapter) instead of both
-- waiting.
--
-- Bound: sent behind BoundLockWait (bounds.sql) in the same call, so a
-- frozen holder of a claim row makes this fail with 1222 after @bound_ms,
-- rolled back whole (the picked episodes stay available), instead of
-- hanging; the pick skips locked rows and never waits.
--
-- Duplicates: the fresh-claim INSERT cannot meet a duplicate while the key
-- range is held; a 2601/2627 would be LEFT TO SURFACE, and XACT_ABORT rolls
-- back the whole transaction. So would two picked episodes of one claim
-- key (an episode whose dedupe key spells another's episode:{id}), on
-- @picked's primary key, rather than be started twice.
--
-- The answer is read after COMMIT from the table variables, one row per
-- picked episode: the started row as the start UPDATE's OUTPUT wrote it
-- (NULL columns when not started), and its first free step number.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @picked TABLE (
    claim_key      nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY NONCLUSTERED,
    id             bigint        NOT NULL,
    actor_id       nvarchar(255) NOT NULL,
    expectation_id nvarchar(255) NOT NULL,
    opts           nvarchar(max) NULL
);
DECLARE @granted TABLE (
    dedupe_key  nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL,
    fence       bigint        NOT NULL,
    attempt     int           NOT NULL,
    lease_until datetime2(6)  NOT NULL,
    claimed_at  datetime2(6)  NOT NULL,
    grant_kind  nvarchar(16)  NOT NULL
);
DECLARE @started TABLE (
    id             bigint         NOT NULL,
    actor_id       nvarchar(255)  NOT NULL,
    expectation_id nvarchar(255)  NOT NULL,
    trigger_type   nvarchar(32)   NOT NULL,
    trigger_ref    nvarchar(max)  NULL,
    dedupe_key     nvarchar(512)  NULL,
    attempts       int            NOT NULL,
    max_attempts   int            NOT NULL,
    source_stack   nvarchar(255)  NOT NULL,
    source_env     nvarchar(255)  NOT NULL,
    payload        nvarchar(max)  NULL,
    result         nvarchar(max)  NULL,
    error_class    nvarchar(64)   NULL,
    error_detail   nvarchar(max)  NULL,
    created_at     datetime2(6)   NOT NULL,
    started_at     datetime2(6)   NULL,
    last_step_at   datetime2(6)   NULL,
    trace_parent   nvarchar(1024) NULL
);

BEGIN TRANSACTION;

INSERT INTO @picked (claim_key, id, actor_id, expectation_id, opts)
SELECT TOP (@max_rows) COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id)), e.id,
    e.actor_id, e.expectation_id, e.opts
FROM leasehold_episodes AS e WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
WHERE e.source_env = @source_env
  AND e.run_after IS NOT NULL
  AND e.run_after <= SYSUTCDATETIME()
  AND e.status = N'queued'
  AND e.archived_at IS NULL
  AND (@source_stack = N'' OR e.source_stack IN (@source_stack, N''))
  AND EXISTS (
        SELECT 1
        FROM OPENJSON(@runnable) WITH (
            actor_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.actor_id',
            expectation_id nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.expectation_id'
        ) AS k
        WHERE k.actor_id = e.actor_id
          AND k.expectation_id = e.expectation_id)
ORDER BY e.run_after;

-- SET reads the pre-update row.
UPDATE c
SET state             = N'claimed',
    owner_node        = @owner_node,
    lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
    claimed_at        = SYSUTCDATETIME(),
    last_heartbeat_at = SYSUTCDATETIME(),
    finished_at       = NULL,
    error_detail      = NULL,
    attempt           = CASE WHEN c.state = N'done' THEN 1 ELSE c.attempt + 1 END,
    fence             = c.fence + 1,
    grant_kind        = CASE WHEN c.state = N'claimed' THEN N'steal' ELSE N'reclaim' END,
    work_type         = N'episode'
OUTPUT inserted.dedupe_key, inserted.fence, inserted.attempt, inserted.lease_until,
    inserted.claimed_at, inserted.grant_kind
INTO @granted
FROM @picked AS p
JOIN leasehold_work_claims AS c WITH (UPDLOCK, HOLDLOCK) ON c.dedupe_key = p.claim_key
WHERE (c.state <> N'claimed' OR c.lease_until <= SYSUTCDATETIME())
OPTION (LOOP JOIN, FORCE ORDER);

-- The picked episodes the UPDATE did not grant: a fresh claim where the
-- key has no claim row (one held live elsewhere has a row, and is left).
IF EXISTS (SELECT 1 FROM @picked AS p
           WHERE NOT EXISTS (SELECT 1 FROM @granted AS g WHERE g.dedupe_key = p.claim_key))
    INSERT INTO leasehold_work_claims (
        dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
        attempt, fence, grant_kind, work_type
    )
    OUTPUT inserted.dedupe_key, inserted.fence, inserted.attempt, inserted.lease_until,
        inserted.claimed_at, inserted.grant_kind
    INTO @granted
    SELECT p.claim_key, N'claimed', @owner_node,
        DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
        SYSUTCDATETIME(), SYSUTCDATETIME(), 1, 1, N'fresh', N'episode'
    FROM @picked AS p
    WHERE NOT EXISTS (SELECT 1 FROM leasehold_work_claims AS x WITH (UPDLOCK, HOLDLOCK)
                      WHERE x.dedupe_key = p.claim_key)
    OPTION (LOOP JOIN, FORCE ORDER);

-- Started under the grants just made, in the same transaction.
UPDATE e
SET status       = N'running',
    phase        = NULL,
    run_after    = NULL,
    owner_node   = @owner_node,
    started_at   = COALESCE(e.started_at, SYSUTCDATETIME()),
    last_step_at = SYSUTCDATETIME()
OUTPUT inserted.id, inserted.actor_id, inserted.expectation_id, inserted.trigger_type,
    inserted.trigger_ref, inserted.dedupe_key, inserted.attempts, inserted.max_attempts,
    inserted.source_stack, inserted.source_env, inserted.payload, inserted.result,
    inserted.error_class, inserted.error_detail, inserted.created_at, inserted.started_at,
    inserted.last_step_at, inserted.trace_parent
INTO @started
FROM @picked AS p
JOIN @granted AS g ON g.dedupe_key = p.claim_key
JOIN leasehold_episodes AS e ON e.id = p.id
OPTION (LOOP JOIN, FORCE ORDER);

-- Held live elsewhere: no longer available, its holder's.
UPDATE e
SET run_after = NULL
FROM @picked AS p
JOIN leasehold_episodes AS e ON e.id = p.id
WHERE NOT EXISTS (SELECT 1 FROM @granted AS g WHERE g.dedupe_key = p.claim_key)
OPTION (LOOP JOIN, FORCE ORDER);

COMMIT TRANSACTION;

SELECT p.id AS episode_id, p.actor_id AS picked_actor_id,
    p.expectation_id AS picked_expectation_id, p.opts,
    COALESCE(g.dedupe_key, N'') AS claim_key,
    COALESCE(g.fence, 0) AS claim_fence,
    COALESCE(g.attempt, 0) AS attempt,
    COALESCE(g.lease_until, CAST(SYSUTCDATETIME() AS datetime2(6))) AS lease_until,
    COALESCE(g.claimed_at, CAST(SYSUTCDATETIME() AS datetime2(6))) AS claimed_at,
    COALESCE(g.grant_kind, N'') AS grant_kind,
    CAST(CASE WHEN s.id IS NULL THEN 0 ELSE 1 END AS bit) AS started,
    (SELECT COALESCE(MAX(j.step_no), 0) + 1 FROM leasehold_episode_steps AS j
     WHERE j.episode_id = p.id) AS next_step_no,
    s.actor_id, s.expectation_id, s.trigger_type, s.trigger_ref,
    s.dedupe_key, s.attempts, s.max_attempts, s.source_stack,
    s.source_env, s.payload, s.result, s.error_class,
    s.error_detail, s.created_at, s.started_at, s.last_step_at,
    s.trace_parent
FROM @picked AS p
LEFT JOIN @granted AS g ON g.dedupe_key = p.claim_key
LEFT JOIN @started AS s ON s.id = p.id
ORDER BY p.id;

-- name: ExpireAvailable :many
-- Expires the available episodes of one env (and stack scope) due
-- (run_after) more than @ttl_ms ago: each ends canceled, class
-- trigger_expired, and leaves the available set (a delayed run is never
-- expired before it was even due). @all_envs = 1 (database maintenance)
-- ignores @source_env and @source_stack. The ids canceled come back.
--
-- Guarantee: one UPDATE, which locks each row it writes and qualifies it
-- on its latest committed version, READ_COMMITTED_SNAPSHOT ON or OFF: a
-- poll that granted the episode first (run_after cleared, running) is seen
-- and the episode is left to its node, and a poll that comes after skips
-- the locked row (READPAST) and then finds it canceled. An episode whose
-- claim is held live (the invariant rules it out) is left alone: the
-- live-claim check reads the claim row WITH (UPDLOCK, HOLDLOCK), a locking
-- read whatever READ_COMMITTED_SNAPSHOT says, so a grant committing
-- meanwhile is seen and none can land on the key (present or absent) until
-- the cancel commits. Postgres reads the claim from its snapshot; this is
-- stricter. Lock order: episode, claim, as ClaimAvailable's.
--
-- @ttl_ms is split into seconds and milliseconds so a TTL of more than 24.8
-- days does not overflow DATEADD's int. One cached plan serves both scopes:
-- with @all_envs in the predicate it may scan the filtered available index
-- (every env's backlog, never the history) instead of seeking one env.
--
-- Runs on its own and inside Maintain's transaction (maintenance.sql): one
-- statement that opens and ends no transaction, so inside Maintain's it is
-- that transaction's, and any error rolls back the whole maintenance run
-- (XACT_ABORT). static_test.go checks that Maintain's batches stay so.
SET NOCOUNT ON;
UPDATE e
SET status      = N'canceled',
    phase       = NULL,
    error_class = N'trigger_expired',
    run_after   = NULL,
    finished_at = SYSUTCDATETIME()
OUTPUT inserted.id
FROM leasehold_episodes AS e
WHERE e.run_after IS NOT NULL
  AND e.run_after < DATEADD(second, -CAST(@ttl_ms / 1000 AS int),
                        DATEADD(millisecond, -CAST(@ttl_ms % 1000 AS int), SYSUTCDATETIME()))
  AND e.status = N'queued'
  AND e.archived_at IS NULL
  AND (@all_envs = 1 OR e.source_env = @source_env)
  AND (@all_envs = 1 OR @source_stack = N'' OR e.source_stack IN (@source_stack, N''))
  AND NOT EXISTS (
      SELECT 1 FROM leasehold_work_claims AS c WITH (UPDLOCK, HOLDLOCK)
      WHERE c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
        AND c.state = N'claimed'
        AND c.lease_until > SYSUTCDATETIME());

-- name: NextAvailableDue :one
-- How long until the next available episode of a poller's scope
-- (@source_env, @source_stack, @runnable as ClaimAvailable) falls due, in
-- milliseconds on the database clock: the earliest run_after that has not
-- come yet (a delayed run, a retry's backoff). -1 when there is none.
--
-- A read that decides nothing, so no lock hint (and no NOLOCK): the poller
-- sleeps that long (at most its interval) instead of until its next tick,
-- and ClaimAvailable re-checks due-ness on the database clock when it
-- wakes, so a timer that fires early takes nothing and asks again, and one
-- that fires late only starts the work late. Served by
-- leasehold_episodes_available_idx. The + 1 keeps the wait from falling
-- short of the due time, as Postgres's ceil does.
SELECT CAST(COALESCE(DATEDIFF_BIG(millisecond, SYSUTCDATETIME(), MIN(e.run_after)) + 1, -1) AS bigint) AS wait_ms
FROM leasehold_episodes AS e
WHERE e.source_env = @source_env
  AND e.run_after IS NOT NULL
  AND e.run_after > SYSUTCDATETIME()
  AND (@source_stack = N'' OR e.source_stack IN (@source_stack, N''))
  AND EXISTS (
        SELECT 1
        FROM OPENJSON(@runnable) WITH (
            actor_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.actor_id',
            expectation_id nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.expectation_id'
        ) AS k
        WHERE k.actor_id = e.actor_id
          AND k.expectation_id = e.expectation_id);
