-- Deferred execution: a trigger_only node creates the episode and a trigger
-- request; a full node's poller claims the request and takes the episode's
-- work claim (T-SQL).
--
-- The statements of sql/queries/postgres/trigger_requests.sql, one for one:
-- same names, kinds, @parameters and result columns. NOT EXECUTED IN THIS
-- REPOSITORY'S CI (no SQL Server there); statically checked only, see
-- docs/sqlserver.md. Postgres's ListenTriggerRequests (LISTEN for the insert
-- trigger's NOTIFY) has no counterpart: SQL Server pollers poll on their
-- interval.
--
-- Scope: a poller sees one env by strict equality (N'' being the unset env's
-- own world) and either every stack (@source_stack = N'') or its stack plus
-- unstamped rows, the rule of the recovery sweep. All times are
-- SYSUTCDATETIME(), the database clock; @lease_ms is cast to int for
-- DATEADD (under about 24.8 days), as in claims.sql.

-- name: CreateDeferredEpisode :one
-- One episode per trigger, created unclaimed, and its trigger request, in
-- one transaction: neither row can exist without the other, so no crash
-- leaves a deferred episode that no poller will ever see. Deduplicated on
-- dedupe_key like CreateEpisode, by the filtered unique index
-- leasehold_episodes_dedupe_key_idx; a duplicate answers created = 0 (the
-- adapter reads the live episode's id with FindLiveEpisode, as after
-- CreateEpisode). The request is due at created_at +
-- @delay_ms on the database clock (0: at once), split into seconds and
-- milliseconds so a delay of more than 24.8 days does not overflow
-- DATEADD's int.
--
-- Guarantee: one live episode per dedupe key across N creators, and a lost
-- race is the empty result, not an error. The episode INSERT is guarded by
-- NOT EXISTS on the live key read WITH (UPDLOCK, HOLDLOCK): the read seeks
-- the filtered dedupe index (its filter is repeated literally) and takes an
-- update-mode key-range lock on the key, present or absent, held to the end
-- of the transaction, so a second creator waits for the first to commit,
-- then re-reads and inserts nothing. A NULL @dedupe_key is never a
-- duplicate and is not checked.
--
-- Nesting: on its own the batch is its own transaction. Inside a caller's
-- transaction (@@TRANCOUNT > 0: the workflow engine creates a step's next
-- episode in its advancing transaction, Store.InTx) it opens and ends
-- nothing: its writes are the caller's, committed or rolled back with them,
-- and a duplicate is the empty result with the caller's transaction intact,
-- like Postgres's ON CONFLICT DO NOTHING.
--
-- Duplicates: the guard keeps the unique index from raising 2601. Should one
-- surface anyway, on its own the batch CATCHES it (after rolling back) and
-- answers with the empty result, nothing written. Inside a caller's
-- transaction nothing can be caught usefully: XACT_ABORT ON has already
-- doomed that transaction (XACT_STATE() = -1, which neither COMMIT nor a
-- rollback to a savepoint can undo), so the CATCH re-throws whatever it got,
-- the caller's transaction is rolled back and the caller sees the error.
-- The request insert cannot meet a duplicate: its episode_id is the one just
-- created.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @created TABLE (id bigint NOT NULL, created_at datetime2(6) NOT NULL);
DECLARE @request TABLE (id bigint NOT NULL);
DECLARE @duplicate bit = 0;
DECLARE @nested bit = CASE WHEN @@TRANCOUNT > 0 THEN 1 ELSE 0 END;

BEGIN TRY
    IF @nested = 0
        BEGIN TRANSACTION;

    INSERT INTO leasehold_episodes (
        actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
        max_attempts, budget, source_stack, source_env, payload, queued_at,
        trace_parent, key_version
    )
    OUTPUT inserted.id, inserted.created_at INTO @created
    SELECT @actor_id, @expectation_id, @trigger_type, @trigger_ref, @dedupe_key, N'queued',
        @max_attempts, @budget, @source_stack, @source_env, @payload, SYSUTCDATETIME(),
        @trace_parent, @key_version
    WHERE @dedupe_key IS NULL
       OR NOT EXISTS (
            SELECT 1 FROM leasehold_episodes WITH (UPDLOCK, HOLDLOCK)
            WHERE dedupe_key IS NOT NULL
              AND archived_at IS NULL
              AND dedupe_key = @dedupe_key);

    INSERT INTO leasehold_trigger_requests (
        episode_id, actor_id, expectation_id, source_node, source_stack,
        source_env, opts, status, created_at, run_after
    )
    OUTPUT inserted.id INTO @request
    SELECT c.id, @actor_id, @expectation_id, @source_node, @source_stack,
        @source_env, @opts, N'pending', c.created_at,
        DATEADD(second, CAST(@delay_ms / 1000 AS int),
            DATEADD(millisecond, CAST(@delay_ms % 1000 AS int), c.created_at))
    FROM @created AS c;

    IF @nested = 0
        COMMIT TRANSACTION;
END TRY
BEGIN CATCH
    -- In a caller's transaction, which XACT_ABORT has doomed: re-throw.
    IF @nested = 1
        THROW;
    IF @nested = 0 AND XACT_STATE() <> 0
        ROLLBACK TRANSACTION;
    -- Another node created the live episode for this trigger: a duplicate.
    IF ERROR_NUMBER() NOT IN (2601, 2627) THROW;
    -- Table variables outlive a rollback: answer with the empty result.
    SET @duplicate = 1;
END CATCH;

SELECT CAST(1 AS bit) AS created, c.id, c.created_at, r.id AS request_id
FROM @created AS c
CROSS JOIN @request AS r
WHERE @duplicate = 0
UNION ALL
SELECT CAST(0 AS bit), CAST(0 AS bigint), SYSUTCDATETIME(), CAST(0 AS bigint)
WHERE @duplicate = 1 OR NOT EXISTS (SELECT 1 FROM @created);

-- name: CreateDeferredEpisodes :many
-- A batch of triggers of one expectation, as
-- sql/queries/postgres/trigger_requests.sql's CreateDeferredEpisodes: one
-- available episode per item of @items (a JSON array of {"dedupe_key",
-- "key_version", "trigger_ref", "payload", "trace_parent"}, keys distinct)
-- and its trigger
-- request, in one transaction (or the caller's), each item deduplicated on
-- its own key by CreateDeferredEpisode's guard: NOT EXISTS on the live key
-- read WITH (UPDLOCK, HOLDLOCK), so a second creator of a key waits for the
-- first to commit and then inserts nothing for it. One row back per item:
-- created with its episode and request, or a duplicate (id 0: the adapter
-- reads the live episode's id with FindLiveEpisode, as after
-- CreateEpisode).
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
DECLARE @request TABLE (id bigint NOT NULL, episode_id bigint NOT NULL);
DECLARE @nested bit = CASE WHEN @@TRANCOUNT > 0 THEN 1 ELSE 0 END;

INSERT INTO @input (dedupe_key, trigger_ref, payload, trace_parent, key_version)
SELECT dedupe_key, trigger_ref, payload, trace_parent, key_version
FROM OPENJSON(@items) WITH (
    dedupe_key   nvarchar(512) COLLATE Latin1_General_100_BIN2 '$.dedupe_key',
    trigger_ref  nvarchar(max) '$.trigger_ref' AS JSON,
    payload      nvarchar(max) '$.payload' AS JSON,
    trace_parent nvarchar(1024) '$.trace_parent',
    key_version  smallint '$.key_version'
);

IF @nested = 0
    BEGIN TRANSACTION;

INSERT INTO leasehold_episodes (
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
    max_attempts, budget, source_stack, source_env, payload, queued_at,
    trace_parent, key_version
)
OUTPUT inserted.id, inserted.created_at, inserted.dedupe_key INTO @created
SELECT @actor_id, @expectation_id, @trigger_type, i.trigger_ref, i.dedupe_key, N'queued',
    @max_attempts, @budget, @source_stack, @source_env, i.payload, SYSUTCDATETIME(),
    i.trace_parent, i.key_version
FROM @input AS i
WHERE NOT EXISTS (
        SELECT 1 FROM leasehold_episodes AS x WITH (UPDLOCK, HOLDLOCK)
        WHERE x.dedupe_key IS NOT NULL
          AND x.archived_at IS NULL
          AND x.dedupe_key = i.dedupe_key);

INSERT INTO leasehold_trigger_requests (
    episode_id, actor_id, expectation_id, source_node, source_stack,
    source_env, status, created_at, run_after
)
OUTPUT inserted.id, inserted.episode_id INTO @request
SELECT c.id, @actor_id, @expectation_id, @source_node, @source_stack,
    @source_env, N'pending', c.created_at,
    DATEADD(second, CAST(@delay_ms / 1000 AS int),
        DATEADD(millisecond, CAST(@delay_ms % 1000 AS int), c.created_at))
FROM @created AS c;

IF @nested = 0
    COMMIT TRANSACTION;

SELECT CAST(1 AS bit) AS created, c.id, c.created_at, c.dedupe_key, r.id AS request_id
FROM @created AS c
JOIN @request AS r ON r.episode_id = c.id
UNION ALL
SELECT CAST(0 AS bit), CAST(0 AS bigint), SYSUTCDATETIME(), i.dedupe_key, CAST(0 AS bigint)
FROM @input AS i
WHERE NOT EXISTS (SELECT 1 FROM @created AS c WHERE c.dedupe_key = i.dedupe_key);

-- name: ClaimTriggerRequests :many
-- Claims up to @max_rows open requests for @owner_node, oldest first:
-- pending ones, and claimed ones whose poller let the claim lapse (it died
-- between claiming and handing over). Only requests for the (actor,
-- expectation) pairs this node runs in full mode are taken: a node of
-- another version, without an expectation or its actor, never claims work
-- it cannot run, so it never starts it nor spends an attempt on it.
--
-- Guarantee: each request goes to exactly one poller per claim, and
-- concurrent pollers take disjoint sets without waiting on each other: the
-- picking read takes an update lock on each row it returns (UPDLOCK), which
-- two sessions cannot both hold, and skips rows another session has locked
-- (READPAST) instead of queueing behind them; the UPDATE, through the CTE,
-- writes exactly the picked rows and re-checks the claimable condition on
-- them. This is Postgres's FOR UPDATE SKIP LOCKED. ROWLOCK keeps the locks
-- to the picked rows so pollers do not collide on pages; READCOMMITTEDLOCK
-- makes the read a locking read under READ_COMMITTED_SNAPSHOT too, where
-- READPAST alone is refused. Every claim bumps fence, which the hand-over is
-- conditioned on.
--
-- @runnable is an nvarchar(max) JSON array of objects
-- [{"actor_id":"a","expectation_id":"e"}] read with OPENJSON (compatibility
-- level 130 or higher), with the key columns' binary collation as in RenewClaims.
-- EXISTS is a semi-join: a pair listed twice claims nothing twice.
WITH picked AS (
    SELECT TOP (@max_rows) r.id, r.episode_id, r.actor_id, r.expectation_id,
        r.source_node, r.status, r.claimed_by, r.claimed_at, r.claim_until,
        r.run_after, r.fence, r.opts
    FROM leasehold_trigger_requests AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE r.status IN (N'pending', N'claimed')
      AND ((r.status = N'pending' AND r.run_after <= SYSUTCDATETIME()) OR r.claim_until <= SYSUTCDATETIME())
      AND r.source_env = @source_env
      AND (@source_stack = N'' OR r.source_stack IN (@source_stack, N''))
      AND EXISTS (
            SELECT 1
            FROM OPENJSON(@runnable) WITH (
                actor_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.actor_id',
                expectation_id nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.expectation_id'
            ) AS k
            WHERE k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
    ORDER BY r.run_after, r.id
)
UPDATE picked
SET status      = N'claimed',
    claimed_by  = @owner_node,
    claimed_at  = SYSUTCDATETIME(),
    claim_until = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
    fence       = fence + 1
OUTPUT inserted.id, inserted.episode_id, inserted.actor_id, inserted.expectation_id,
    inserted.source_node, inserted.fence, inserted.opts
WHERE (status = N'pending' AND run_after <= SYSUTCDATETIME())
   OR (status = N'claimed' AND claim_until <= SYSUTCDATETIME());

-- name: DispatchTriggerRequest :one
-- Hands a claimed request over to its episode's work claim, in one
-- transaction: the request becomes completed and, if the episode is still
-- queued and unarchived and nobody holds a live lease on it, its work claim
-- is granted to @owner_node with AcquireClaim's rules (fence + 1, attempt
-- reset after done, + 1 otherwise, or a fresh claim), and the episode is
-- started under that grant (StartEpisode's write) in the same transaction,
-- so the run begins without another round trip. From then on the episode is
-- an ordinary running episode: if this node dies, recovery finds it
-- (running, lease expired) exactly as it finds any other.
--
-- Guarantee: fenced on the request claim (id, claimed_by, fence, claimed) in
-- the request UPDATE, whose row lock is held to COMMIT; no row back means the
-- request claim lapsed and another poller owns it (or it expired), and
-- nothing was written. fence 0 in the result means the request is completed
-- but the episode is not this node's to run: it already ran, was canceled, or
-- its claim is held live elsewhere. The completion commits either way, as on
-- Postgres. The start runs only under the grant made here (IF EXISTS
-- @granted) and re-checks queued and unarchived on the episode row it
-- updates: started 0 with a fence means the episode changed since it was
-- read (a cancel), and the caller releases the grant.
--
-- Hints: UPDLOCK, ROWLOCK on the request UPDATE, as on the fenced claim
-- writes. The episode is read without a hint, as Postgres reads it from its
-- snapshot: the claim, not the episode row, decides who runs it. The grant
-- takes AcquireClaim's and ClaimForRecovery's hints inside the transaction:
-- UPDATE WITH (UPDLOCK, HOLDLOCK) of a free or expired claim, else an INSERT
-- guarded by NOT EXISTS under the same key-range lock, so no other session
-- can insert or take the claim between the check and the write. Lock order:
-- request row, claim row.
--
-- Bound: sent behind BoundLockWait (bounds.sql) in the same call, so a
-- frozen holder of the request, episode or claim row makes the hand-over
-- fail with 1222 after @bound_ms, rolled back whole (the request stays
-- claimed, the poller retries or lets it lapse), instead of hanging.
--
-- Duplicates: the fresh-claim INSERT cannot meet a duplicate while the key
-- range is held; a 2601/2627 would be LEFT TO SURFACE, and XACT_ABORT rolls
-- back the whole transaction (the request stays claimed and lapses).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @request TABLE (id bigint NOT NULL, episode_id bigint NOT NULL);
DECLARE @started TABLE (id bigint NOT NULL);
DECLARE @claim_key nvarchar(512);
DECLARE @granted TABLE (
    dedupe_key  nvarchar(512) NOT NULL,
    fence       bigint        NOT NULL,
    attempt     int           NOT NULL,
    lease_until datetime2(6)  NOT NULL,
    claimed_at  datetime2(6)  NOT NULL,
    grant_kind  nvarchar(16)  NOT NULL
);

BEGIN TRANSACTION;

UPDATE leasehold_trigger_requests WITH (UPDLOCK, ROWLOCK)
SET status      = N'completed',
    finished_at = SYSUTCDATETIME()
OUTPUT inserted.id, inserted.episode_id INTO @request
WHERE id = @id
  AND claimed_by = @owner_node
  AND fence = @fence
  AND status = N'claimed';

SELECT @claim_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
FROM leasehold_episodes AS e
JOIN @request AS r ON e.id = r.episode_id
WHERE e.status = N'queued'
  AND e.archived_at IS NULL;

IF @claim_key IS NOT NULL
BEGIN
    UPDATE leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
    SET state             = N'claimed',
        owner_node        = @owner_node,
        lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
        claimed_at        = SYSUTCDATETIME(),
        last_heartbeat_at = SYSUTCDATETIME(),
        finished_at       = NULL,
        error_detail      = NULL,
        attempt           = CASE WHEN state = N'done' THEN 1 ELSE attempt + 1 END,
        fence             = fence + 1,
        grant_kind        = CASE WHEN state = N'claimed' THEN N'steal' ELSE N'reclaim' END,
        work_type         = N'episode'
    OUTPUT inserted.dedupe_key, inserted.fence, inserted.attempt, inserted.lease_until,
        inserted.claimed_at, inserted.grant_kind
    INTO @granted
    WHERE dedupe_key = @claim_key
      AND (state <> N'claimed' OR lease_until <= SYSUTCDATETIME());

    IF NOT EXISTS (SELECT 1 FROM @granted)
        INSERT INTO leasehold_work_claims (
            dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
            attempt, fence, grant_kind, work_type
        )
        OUTPUT inserted.dedupe_key, inserted.fence, inserted.attempt, inserted.lease_until,
            inserted.claimed_at, inserted.grant_kind
        INTO @granted
        SELECT @claim_key, N'claimed', @owner_node,
            DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
            SYSUTCDATETIME(), SYSUTCDATETIME(), 1, 1, N'fresh', N'episode'
        WHERE NOT EXISTS (SELECT 1 FROM leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
                          WHERE dedupe_key = @claim_key);

    -- Started under the grant just made, in the same transaction.
    IF EXISTS (SELECT 1 FROM @granted)
        UPDATE leasehold_episodes WITH (UPDLOCK, ROWLOCK)
        SET status       = N'running',
            phase        = NULL,
            owner_node   = @owner_node,
            started_at   = COALESCE(started_at, SYSUTCDATETIME()),
            last_step_at = SYSUTCDATETIME()
        OUTPUT inserted.id INTO @started
        WHERE id = (SELECT episode_id FROM @request)
          AND status = N'queued'
          AND archived_at IS NULL;
END;

COMMIT TRANSACTION;

-- One row when the request was ours, none otherwise; the claim columns are
-- the grant, or N''/0/now when there was none (Postgres's coalesce). The
-- started episode's columns are read after the commit, without a hint, as
-- GetEpisode reads them; NULL when it was not started.
SELECT r.id AS request_id, r.episode_id,
    COALESCE(g.dedupe_key, N'') AS claim_key,
    COALESCE(g.fence, 0) AS claim_fence,
    COALESCE(g.attempt, 0) AS attempt,
    COALESCE(g.lease_until, CAST(SYSUTCDATETIME() AS datetime2(6))) AS lease_until,
    COALESCE(g.claimed_at, CAST(SYSUTCDATETIME() AS datetime2(6))) AS claimed_at,
    COALESCE(g.grant_kind, N'') AS grant_kind,
    CAST(CASE WHEN st.id IS NULL THEN 0 ELSE 1 END AS bit) AS started,
    (SELECT COALESCE(MAX(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = r.episode_id) AS next_step_no,
    e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref,
    e.dedupe_key, e.attempts, e.max_attempts, e.source_stack,
    e.source_env, e.payload, e.result, e.error_class,
    e.error_detail, e.created_at, e.started_at, e.last_step_at,
    e.trace_parent
FROM @request AS r
LEFT JOIN @granted AS g ON 1 = 1
LEFT JOIN @started AS st ON st.id = r.episode_id
LEFT JOIN leasehold_episodes AS e ON e.id = st.id;

-- name: ExpireTriggerRequests :many
-- Expires the open requests of one env (and stack scope) due (run_after)
-- more than @ttl_ms ago that no poller holds live (a delayed run is never
-- expired before it was even due), and cancels their episodes (error
-- class trigger_expired) when they are still queued and unclaimed, so an
-- expired request never leaves an episode queued forever. An episode whose
-- claim is live (a node took it) is left to that node. Both writes commit
-- together. @all_envs = 1 (database maintenance) ignores @source_env and
-- @source_stack.
--
-- Guarantee: a request is either expired here or dispatched, never both: the
-- request UPDATE re-checks the open condition on the row it locks, and a
-- dispatch fenced on the same row either completed it first (it is no
-- longer open) or finds it expired (no row, lease lost). The episode UPDATE
-- re-checks status = queued on its locked row.
--
-- Hints: the live-claim check reads the claim row WITH (UPDLOCK, HOLDLOCK)
-- inside the transaction, a locking read whatever READ_COMMITTED_SNAPSHOT
-- says: a grant committing meanwhile is seen, and no grant can land on the
-- key (present or absent) until the cancel commits. Postgres reads the claim
-- from its snapshot; this is stricter. Lock order: request, episode, claim.
--
-- @ttl_ms is split into seconds and milliseconds so a TTL of more than 24.8
-- days does not overflow DATEADD's int. One cached plan serves both scopes:
-- with @all_envs in the predicate it may scan the filtered open-request
-- index (every env's backlog, never closed requests) instead of seeking one
-- env.
--
-- Runs on its own and inside Maintain's transaction (maintenance.sql). Its
-- BEGIN TRANSACTION / COMMIT TRANSACTION pair nests there: BEGIN raises
-- @@TRANCOUNT to 2 and COMMIT lowers it to 1, committing nothing; the outer
-- COMMIT decides. The batch must therefore never ROLLBACK (that would end
-- the outer transaction and its maintenance lock too) and relies on
-- XACT_ABORT ON instead: any error rolls back whatever transaction is open,
-- this batch's alone or the whole maintenance run, which is what both
-- callers want. static_test.go checks that Maintain's batches stay so.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @expired TABLE (id bigint NOT NULL, episode_id bigint NOT NULL);
DECLARE @canceled TABLE (id bigint NOT NULL);

BEGIN TRANSACTION;

UPDATE leasehold_trigger_requests
SET status      = N'expired',
    finished_at = SYSUTCDATETIME()
OUTPUT inserted.id, inserted.episode_id INTO @expired
WHERE status IN (N'pending', N'claimed')
  AND (status = N'pending' OR claim_until <= SYSUTCDATETIME())
  AND (@all_envs = 1 OR source_env = @source_env)
  AND (@all_envs = 1 OR @source_stack = N'' OR source_stack IN (@source_stack, N''))
  AND run_after < DATEADD(second, -CAST(@ttl_ms / 1000 AS int),
                       DATEADD(millisecond, -CAST(@ttl_ms % 1000 AS int), SYSUTCDATETIME()));

UPDATE e
SET status      = N'canceled',
    phase       = NULL,
    error_class = N'trigger_expired',
    finished_at = SYSUTCDATETIME()
OUTPUT inserted.id INTO @canceled
FROM leasehold_episodes AS e
JOIN @expired AS x ON e.id = x.episode_id
WHERE e.status = N'queued'
  AND NOT EXISTS (
      SELECT 1 FROM leasehold_work_claims AS c WITH (UPDLOCK, HOLDLOCK)
      WHERE c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
        AND c.state = N'claimed'
        AND c.lease_until > SYSUTCDATETIME());

COMMIT TRANSACTION;

SELECT x.id, x.episode_id,
    CAST(CASE WHEN c.id IS NULL THEN 0 ELSE 1 END AS bit) AS episode_canceled
FROM @expired AS x
LEFT JOIN @canceled AS c ON c.id = x.episode_id;

-- name: ListTriggerRequests :many
-- Operator and test listing of one env's requests, newest first; no
-- coordination role, so no lock hint (and no NOLOCK: a dirty read could show
-- a claim that later rolled back). @status N'' means any.
SELECT TOP (@max_rows) r.id, r.episode_id, r.actor_id, r.expectation_id, r.source_node,
    r.source_stack, r.source_env, r.status, COALESCE(r.claimed_by, N'') AS claimed_by,
    r.fence, r.opts, r.created_at, r.claimed_at, r.claim_until, r.finished_at
FROM leasehold_trigger_requests AS r
WHERE r.source_env = @source_env
  AND (@status = N'' OR r.status = @status)
ORDER BY r.id DESC;

-- name: ReleaseTriggerRequests :many
-- Gives claimed requests back that their poller will not hand over (it is
-- draining, or a hand-over failed): each becomes pending again, due as it
-- was, so another poller claims it at once instead of after the claim
-- lease. @items is an nvarchar(max) JSON array of {"id", "fence"}, the
-- poller's claims, read with OPENJSON.
--
-- Guarantee: fenced per row on the request claim (id, @owner_node, fence,
-- claimed), as the hand-over is: the join pairs each row with its own
-- item's fence, so a claim that lapsed and was taken by another poller
-- (fence + 1), or one already handed over (completed), is left alone. The
-- fence is kept: the next claim bumps it, so the releasing poller's claim
-- can never hand the request over afterwards. UPDLOCK, ROWLOCK: the rows
-- are re-checked under their update locks. The ids released come back.
SET NOCOUNT ON;
UPDATE r
SET status      = N'pending',
    claimed_by  = NULL,
    claimed_at  = NULL,
    claim_until = NULL
OUTPUT inserted.id
FROM leasehold_trigger_requests AS r WITH (UPDLOCK, ROWLOCK)
JOIN OPENJSON(@items) WITH (
    id    bigint '$.id',
    fence bigint '$.fence'
) AS i ON i.id = r.id
WHERE r.claimed_by = @owner_node
  AND r.fence = i.fence
  AND r.status = N'claimed';

-- name: NextTriggerRequestDue :one
-- How long until the next open request of a poller's scope (@source_env,
-- @source_stack, @runnable as ClaimTriggerRequests)
-- becomes claimable, in milliseconds on the database clock: the earliest
-- run_after of a pending request that is not due yet (a delayed run, a
-- retry's backoff), or the claim_until of a claimed one whose poller may
-- still let it lapse. -1 when there is none.
--
-- A read that decides nothing, so no lock hint: the poller sleeps that long
-- (at most its interval) instead of until its next tick, and
-- ClaimTriggerRequests re-checks due-ness on the database clock when it
-- wakes, so a timer that fires early claims nothing and asks again.
SELECT CAST(COALESCE(DATEDIFF_BIG(millisecond, SYSUTCDATETIME(), MIN(d.due)) + 1, -1) AS bigint) AS wait_ms
FROM (
    SELECT r.run_after AS due
    FROM leasehold_trigger_requests AS r
    WHERE r.status = N'pending'
      AND r.run_after > SYSUTCDATETIME()
      AND r.source_env = @source_env
      AND (@source_stack = N'' OR r.source_stack IN (@source_stack, N''))
      AND EXISTS (
            SELECT 1
            FROM OPENJSON(@runnable) WITH (
                actor_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.actor_id',
                expectation_id nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.expectation_id'
            ) AS k
            WHERE k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
    UNION ALL
    SELECT r.claim_until
    FROM leasehold_trigger_requests AS r
    WHERE r.status = N'claimed'
      AND r.claim_until > SYSUTCDATETIME()
      AND r.source_env = @source_env
      AND (@source_stack = N'' OR r.source_stack IN (@source_stack, N''))
      AND EXISTS (
            SELECT 1
            FROM OPENJSON(@runnable) WITH (
                actor_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.actor_id',
                expectation_id nvarchar(255) COLLATE Latin1_General_100_BIN2 '$.expectation_id'
            ) AS k
            WHERE k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
) AS d;
