-- Episodes and their step journal (T-SQL).
--
-- The statements of sql/queries/postgres/episodes.sql, one for one: same
-- names, kinds, @parameters and result columns. NOT EXECUTED IN THIS
-- REPOSITORY'S CI (no SQL Server there); statically checked only, see
-- docs/sqlserver.md.
--
-- Creation is decided by the filtered unique index on dedupe_key. Every later
-- write on behalf of a run is fenced: the same statement checks the work
-- claim (dedupe key, owner, fence, claimed) and holds an update lock on that
-- claim row until it commits (UPDLOCK; Postgres takes FOR SHARE), so a steal
-- (an UPDATE of the claim row) waits for a write already admitted and every
-- write that comes after the steal sees the new fence and matches nothing.
-- Without the hint, a subquery on another table reads the last committed
-- version under READ_COMMITTED_SNAPSHOT and locks nothing, and a steal could
-- commit between the check and the write.
--
-- Batches that write two tables do it in one explicit transaction and commit
-- only when every write matched, so the writes land together or not at all;
-- XACT_ABORT ON rolls the transaction back on any error. AppendStep,
-- FinishEpisode and ClaimForRecovery write the claim row before the episode
-- row. StartEpisode is one UPDATE, whose plan decides in which order it
-- locks the two rows; should that ever deadlock with one of the others, the
-- victim's batch (error 1205) is rolled back whole and the adapter retries
-- it. The batches assume autocommit, except FinishEpisode, which the
-- workflow engine also sends inside its advancing transaction (Store.InTx)
-- and which therefore nests (see there). Inside a caller's transaction any
-- error (even a duplicate that CreateEpisode catches) dooms that
-- transaction: XACT_ABORT is ON.
-- All times are SYSUTCDATETIME(), the database clock.

-- name: CreateEpisode :one
-- One episode per trigger, born owned: N nodes insert the same @dedupe_key,
-- the filtered unique index leasehold_episodes_dedupe_key_idx lets exactly
-- one insert through, and the others get no row back (a duplicate, not an
-- error). Archived episodes are outside the index, so they do not block the
-- trigger from running again. A NULL @dedupe_key is never a duplicate.
--
-- In the same transaction the new episode's work claim (its dedupe key, or
-- episode:{id}) is granted to @owner_node with AcquireClaim's rules and
-- hints: UPDATE WITH (UPDLOCK, HOLDLOCK) of a free or expired claim, else an
-- INSERT guarded by NOT EXISTS under the same key-range lock. Both rows land
-- or neither does, so no crash leaves a created episode queued without an
-- owner. fence 0 in the result means the key's claim is held live elsewhere
-- (busy). An empty @owner_node creates the episode unclaimed.
--
-- @start = 1 (the caller holds a free slot for it) starts the episode in
-- the same transaction when the grant was made: status running, owner_node
-- and started_at set, so a run that starts at once costs this commit and its
-- finish, not a StartEpisode in between. The grant is live at that instant
-- on the database clock; the caller's local deadline covers a late answer.
-- Unlike Postgres (which picks the status from its snapshot before the
-- grant), the status here always matches the grant: running only with one.
--
-- Duplicates: the losing episode insert raises 2601 (unique index); it is
-- CAUGHT here (after rolling back) and answered with created = 0, like
-- Postgres's ON CONFLICT DO NOTHING. The id of the live episode that holds
-- the key is not read here (a read of the episodes table in a batch that
-- inserts into it must be an update-locked guard): the adapter reads it
-- with FindLiveEpisode, once the winner has committed.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @created TABLE (id bigint NOT NULL, created_at datetime2(6) NOT NULL);
DECLARE @claim_key nvarchar(512);
DECLARE @duplicate bit = 0;
DECLARE @status nvarchar(16) = N'queued';
DECLARE @granted TABLE (
    fence       bigint       NOT NULL,
    attempt     int          NOT NULL,
    lease_until datetime2(6) NOT NULL,
    claimed_at  datetime2(6) NOT NULL,
    grant_kind  nvarchar(16) NOT NULL
);

BEGIN TRY
    BEGIN TRANSACTION;

    INSERT INTO leasehold_episodes (
        actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
        max_attempts, budget, source_stack, source_env, payload, queued_at,
        trace_parent, key_version
    )
    OUTPUT inserted.id, inserted.created_at INTO @created
    VALUES (
        @actor_id, @expectation_id, @trigger_type, @trigger_ref, @dedupe_key, N'queued',
        @max_attempts, @budget, @source_stack, @source_env, @payload, SYSUTCDATETIME(),
        @trace_parent, @key_version
    );

    SELECT @claim_key = COALESCE(@dedupe_key, CONCAT(N'episode:', id)) FROM @created;

    IF @owner_node <> N''
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
        OUTPUT inserted.fence, inserted.attempt, inserted.lease_until, inserted.claimed_at,
            inserted.grant_kind
        INTO @granted
        WHERE dedupe_key = @claim_key
          AND (state <> N'claimed' OR lease_until <= SYSUTCDATETIME());

        IF NOT EXISTS (SELECT 1 FROM @granted)
            INSERT INTO leasehold_work_claims (
                dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
                attempt, fence, grant_kind, work_type
            )
            OUTPUT inserted.fence, inserted.attempt, inserted.lease_until, inserted.claimed_at,
                inserted.grant_kind
            INTO @granted
            SELECT @claim_key, N'claimed', @owner_node,
                DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),
                SYSUTCDATETIME(), SYSUTCDATETIME(), 1, 1, N'fresh', N'episode'
            WHERE NOT EXISTS (SELECT 1 FROM leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)
                              WHERE dedupe_key = @claim_key);

        -- Started under the grant just made, in the same transaction.
        IF @start = 1 AND EXISTS (SELECT 1 FROM @granted)
        BEGIN
            UPDATE leasehold_episodes
            SET status       = N'running',
                owner_node   = @owner_node,
                started_at   = SYSUTCDATETIME(),
                last_step_at = SYSUTCDATETIME()
            WHERE id = (SELECT id FROM @created);
            SET @status = N'running';
        END;
    END;

    COMMIT TRANSACTION;
END TRY
BEGIN CATCH
    IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
    -- Another node created the live episode for this trigger: a duplicate.
    IF ERROR_NUMBER() NOT IN (2601, 2627) THROW;
    -- Table variables outlive a rollback: answer with the existing episode.
    SET @duplicate = 1;
END CATCH;

SELECT CAST(1 AS bit) AS created, c.id, c.created_at, @status AS status, @claim_key AS claim_key,
    COALESCE(g.fence, 0) AS fence,
    COALESCE(g.attempt, 0) AS attempt,
    COALESCE(g.lease_until, c.created_at) AS lease_until,
    COALESCE(g.claimed_at, c.created_at) AS claimed_at,
    COALESCE(g.grant_kind, N'') AS grant_kind
FROM @created AS c
LEFT JOIN @granted AS g ON 1 = 1
WHERE @duplicate = 0
UNION ALL
SELECT CAST(0 AS bit), CAST(0 AS bigint), SYSUTCDATETIME(), N'', N'', 0, 0,
    SYSUTCDATETIME(), SYSUTCDATETIME(), N''
WHERE @duplicate = 1;

-- name: FindLiveEpisode :one
-- The live (not archived) episode that holds a dedupe key, if any: what a
-- duplicate trigger reports. Read-only; it decides nothing.
SELECT id FROM leasehold_episodes
WHERE dedupe_key = @dedupe_key AND archived_at IS NULL;

-- name: StartEpisode :one
-- Moves a queued episode to running under the caller's grant, or re-starts a
-- running one whose grant moved to the caller (steal, recovery). Returns the
-- next free step number so a re-run appends after the old journal.
--
-- Guarantee: fenced on the work claim in the same UPDATE; a terminal or
-- archived episode is never started again. The grant must also still be
-- live on the database clock (lease_until > SYSUTCDATETIME()): a grant whose
-- answer came back late, or that waited in the slot queue without being
-- renewed, may already be stealable, and a run must never start on a lease
-- another node may take meanwhile. The check is on the update-locked claim
-- row, so a steal cannot land between it and the write; an expired grant
-- gives the empty result (the adapter's episodes.ErrLeaseLost). A started
-- episode is held, so it is not available work (run_after cleared): an
-- available episode whose key a claims user acquired directly and started
-- is recovery's once that grant lapses, not the pollers'.
--
-- Hints: UPDLOCK, ROWLOCK on the claim row in the EXISTS: the fence check is
-- a locking read (not a row version, whatever READ_COMMITTED_SNAPSHOT says)
-- and its update lock is held until the UPDATE commits, so a steal cannot
-- slip between check and write; ROWLOCK keeps it to that row.
--
-- next_step_no is read after the UPDATE, from the journal: only this grant
-- can write steps now, and every step of an earlier grant committed before
-- the grant moved (each AppendStep holds the claim row until it commits).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @started TABLE (id bigint NOT NULL);

UPDATE leasehold_episodes
SET status       = N'running',
    phase        = NULL,
    run_after    = NULL,
    owner_node   = @owner_node,
    started_at   = COALESCE(started_at, SYSUTCDATETIME()),
    last_step_at = SYSUTCDATETIME()
OUTPUT inserted.id INTO @started
WHERE id = @id
  AND status IN (N'queued', N'running')
  AND archived_at IS NULL
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)
              WHERE c.dedupe_key = @claim_key
                AND c.owner_node = @owner_node
                AND c.fence = @fence
                AND c.state = N'claimed'
                AND c.lease_until > SYSUTCDATETIME());

SELECT s.id,
    CAST((SELECT COALESCE(MAX(st.step_no), 0) + 1
          FROM leasehold_episode_steps AS st
          WHERE st.episode_id = s.id) AS int) AS next_step_no
FROM @started AS s;

-- name: AppendStep :one
-- Journals one step and refreshes last_step_at, for the cheap staleness check.
-- A journaled step proves its run alive, so it also extends the lease (never
-- shortening it): recovery, which re-checks the lease in its claim, then
-- leaves alone an episode that journaled after it was listed.
--
-- Guarantee: fenced on the work claim and on the episode still running under
-- the same owner; a zombie whose lease was stolen writes nothing. The claim
-- row is updated (so locked) first, so a concurrent steal is ordered before
-- or after the whole write. The three writes (lease, episode, step) commit
-- together or not at all: when any of them matched nothing the transaction
-- is rolled back and the result is empty. step_no is unique per episode, so
-- two writers can never both record the same step.
--
-- Hints: UPDLOCK, ROWLOCK on the claim UPDATE, as in RenewClaim; the lock
-- (U, then X) is held to COMMIT, which covers the episode and step writes.
--
-- Duplicates: a step_no already journaled raises 2627 (UNIQUE constraint
-- leasehold_episode_steps_step_no_key); it is LEFT TO SURFACE, as Postgres
-- raises unique_violation, and XACT_ABORT rolls back the lease and episode
-- writes with it.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @lease TABLE (dedupe_key nvarchar(512) NOT NULL);
DECLARE @episode TABLE (id bigint NOT NULL);
DECLARE @step TABLE (step_no int NOT NULL);

BEGIN TRANSACTION;

UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
SET lease_until = CASE
        WHEN lease_until > DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME())
        THEN lease_until
        ELSE DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME())
    END,
    last_heartbeat_at = SYSUTCDATETIME()
OUTPUT inserted.dedupe_key INTO @lease
WHERE dedupe_key = @claim_key
  AND owner_node = @owner_node
  AND fence = @fence
  AND state = N'claimed';

UPDATE leasehold_episodes
SET last_step_at = SYSUTCDATETIME()
OUTPUT inserted.id INTO @episode
WHERE id = @id
  AND status = N'running'
  AND owner_node = @owner_node
  AND EXISTS (SELECT 1 FROM @lease);

INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
OUTPUT inserted.step_no INTO @step
SELECT id, @step_no, @fence, @data
FROM @episode;

IF EXISTS (SELECT 1 FROM @step)
    COMMIT TRANSACTION;
ELSE
    ROLLBACK TRANSACTION;

SELECT step_no FROM @step;

-- name: FinishEpisode :one
-- Ends a run: the episode's terminal status (@status) and the claim's final
-- state (@claim_state) are written in one transaction that commits only if
-- both matched, so neither can land without the other. A queued episode can
-- be finished too (recovery failing an orphan, a cancel).
--
-- Guarantee: fenced; the claim UPDATE matches only the caller's live grant,
-- and the episode UPDATE runs only if it did. A duplicate finish, or one from
-- a grant that was stolen, changes nothing, and inside a caller's
-- transaction rolls that transaction back (see Nesting).
--
-- @step_no > 0 also journals the run's last step (@step_data) in the same
-- transaction, under the same fence, saving a separate AppendStep.
--
-- Hints: UPDLOCK, ROWLOCK on the claim UPDATE, as in CompleteClaim; its lock
-- is held to COMMIT, so no steal can come between the two writes. The
-- episode status read inside it needs no hint: the episode UPDATE re-checks
-- the status under its own lock, and the batch rolls back if it changed.
--
-- Nesting: on its own the batch is its own transaction, rolled back when
-- the finish matched nothing (no row back). Inside a caller's transaction
-- (@@TRANCOUNT > 0: Run.CompleteTx and Run.FailTx through Store.WithTx, or
-- the workflow engine finishing a step's episode and advancing its
-- workflow in one transaction, Store.InTx) it begins none, and a finish
-- that matched nothing THROWs 51001, leasehold_hold's "lease lost"
-- (migration 00009): XACT_ABORT rolls the caller's whole transaction back,
-- this batch's writes with it, so nothing the caller wrote beside a
-- zombie's finish can commit, and go-mssqldb refuses the transaction's
-- later batches and its COMMIT. A bare ROLLBACK there would end the
-- caller's transaction without an error and leave its later batches in
-- autocommit, where a caller that ignored claims.ErrLeaseLost would land
-- them. No error is caught.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @claim TABLE (dedupe_key nvarchar(512) NOT NULL);
DECLARE @finished TABLE (id bigint NOT NULL);
DECLARE @nested bit = CASE WHEN @@TRANCOUNT > 0 THEN 1 ELSE 0 END;

IF @nested = 0
    BEGIN TRANSACTION;

UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
SET state        = @claim_state,
    finished_at  = SYSUTCDATETIME(),
    lease_until  = SYSUTCDATETIME(),
    error_detail = @error_detail
OUTPUT inserted.dedupe_key INTO @claim
WHERE dedupe_key = @claim_key
  AND owner_node = @owner_node
  AND fence = @fence
  AND state = N'claimed'
  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
              WHERE r.id = @id AND r.status IN (N'queued', N'running'));

INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
SELECT @id, @step_no, @fence, @step_data
FROM @claim
WHERE @step_no > 0;

UPDATE leasehold_episodes
SET status       = @status,
    phase        = NULL,
    run_after    = NULL,
    result       = @result,
    error_class  = @error_class,
    error_detail = @error_detail,
    finished_at  = SYSUTCDATETIME(),
    last_step_at = CASE WHEN @step_no > 0 THEN SYSUTCDATETIME() ELSE last_step_at END
OUTPUT inserted.id INTO @finished
WHERE id = @id
  AND status IN (N'queued', N'running')
  AND EXISTS (SELECT 1 FROM @claim);

IF EXISTS (SELECT 1 FROM @finished)
BEGIN
    IF @nested = 0
        COMMIT TRANSACTION;
END
ELSE IF @nested = 1
    THROW 51001, N'leasehold: lease lost: a fenced finish in this transaction matched no row, so the transaction is rolled back', 1;
ELSE
    ROLLBACK TRANSACTION;

SELECT id FROM @finished;

-- name: FinishEpisodes :many
-- Grouped finishing, as sql/queries/postgres/episodes.sql's FinishEpisodes:
-- the terminal writes of many runs of one node in one transaction. @rows is
-- an nvarchar(max) JSON array, one object per run with FinishEpisode's
-- arguments, read with OPENJSON (the claim key with the key column's binary
-- collation, as in RenewClaims). The ids of the episodes finished come
-- back; a run missing from the result lost its grant.
--
-- Guarantee: each row is FinishEpisode's, fenced on its own claim (key,
-- @owner_node, fence, claimed) with its episode still open: the claim
-- UPDATE outputs only the claims that matched, and the step INSERT and the
-- episode UPDATE join on them, so a run whose grant is gone writes nothing
-- and the others land together, in one COMMIT. Rows name distinct claims.
--
-- Hints: UPDLOCK, ROWLOCK on the claim UPDATE, as in FinishEpisode: each
-- matched row stays locked to COMMIT, so no steal comes between the writes.
-- Outside a caller's transaction only (the runner's grouped finishes).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @finish TABLE (
    id           bigint        NOT NULL,
    claim_key    nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL,
    fence        bigint        NOT NULL,
    status       nvarchar(32)  NOT NULL,
    claim_state  nvarchar(16)  NOT NULL,
    result       nvarchar(max) NULL,
    error_class  nvarchar(255) NULL,
    error_detail nvarchar(max) NULL,
    step_no      int           NOT NULL,
    step_data    nvarchar(max) NULL
);
DECLARE @claim TABLE (dedupe_key nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL, fence bigint NOT NULL);
DECLARE @finished TABLE (id bigint NOT NULL);

INSERT INTO @finish (id, claim_key, fence, status, claim_state, result, error_class, error_detail, step_no, step_data)
SELECT id, claim_key, fence, status, claim_state, result, error_class, error_detail, step_no, step_data
FROM OPENJSON(@rows) WITH (
    id           bigint        '$.id',
    claim_key    nvarchar(512) COLLATE Latin1_General_100_BIN2 '$.claim_key',
    fence        bigint        '$.fence',
    status       nvarchar(32)  '$.status',
    claim_state  nvarchar(16)  '$.claim_state',
    result       nvarchar(max) '$.result' AS JSON,
    error_class  nvarchar(255) '$.error_class',
    error_detail nvarchar(max) '$.error_detail' AS JSON,
    step_no      int           '$.step_no',
    step_data    nvarchar(max) '$.step_data' AS JSON
);

BEGIN TRANSACTION;

UPDATE c
SET state        = f.claim_state,
    finished_at  = SYSUTCDATETIME(),
    lease_until  = SYSUTCDATETIME(),
    error_detail = f.error_detail
OUTPUT inserted.dedupe_key, inserted.fence INTO @claim
FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)
JOIN OPENJSON(@rows) WITH (
    id           bigint        '$.id',
    dedupe_key   nvarchar(512) COLLATE Latin1_General_100_BIN2 '$.claim_key',
    fence        bigint        '$.fence',
    claim_state  nvarchar(16)  '$.claim_state',
    error_detail nvarchar(max) '$.error_detail' AS JSON
) AS f
    ON c.dedupe_key = f.dedupe_key
   AND c.fence = f.fence
WHERE c.owner_node = @owner_node
  AND c.state = N'claimed'
  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
              WHERE r.id = f.id AND r.status IN (N'queued', N'running'));

INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
SELECT f.id, f.step_no, f.fence, f.step_data
FROM @finish AS f
JOIN @claim AS m ON m.dedupe_key = f.claim_key AND m.fence = f.fence
WHERE f.step_no > 0;

UPDATE e
SET status       = f.status,
    phase        = NULL,
    run_after    = NULL,
    result       = f.result,
    error_class  = f.error_class,
    error_detail = f.error_detail,
    finished_at  = SYSUTCDATETIME(),
    last_step_at = CASE WHEN f.step_no > 0 THEN SYSUTCDATETIME() ELSE e.last_step_at END
OUTPUT inserted.id INTO @finished
FROM leasehold_episodes AS e
JOIN @finish AS f ON e.id = f.id
JOIN @claim AS m ON m.dedupe_key = f.claim_key AND m.fence = f.fence
WHERE e.status IN (N'queued', N'running');

COMMIT TRANSACTION;

SELECT id FROM @finished;

-- name: RetryEpisode :one
-- Ends a failed attempt that may run again, in one transaction: the claim
-- is released, the attempt's error is journaled (@step_no, @step_data) and
-- kept on the episode, the episode is queued again as its next attempt
-- (attempts + 1, phase retrying, no owner) and made available, due at
-- SYSUTCDATETIME() + @backoff_ms (run_after; split into seconds and
-- milliseconds so a backoff of more than 24.8 days does not overflow
-- DATEADD's int), so whichever full node has a free slot for the actor
-- then takes it (ClaimAvailable). The dedupe key stays with the episode.
--
-- Guarantee: fenced like FinishEpisode; the claim UPDATE matches only the
-- caller's live grant and every later write depends on its OUTPUT; the batch
-- commits only if the episode was requeued (or ended canceled), so nothing
-- lands alone. A retry from a stolen grant, or a duplicate, changes nothing
-- (empty result). The claim it releases is not live, so the available
-- episode keeps the invariant of available.sql. With a cancel request the
-- episode ends canceled instead and is not made available.
--
-- Hints: UPDLOCK, ROWLOCK on the claim UPDATE, as in FinishEpisode (held to
-- COMMIT: no steal can come between the writes). Lock order: claim,
-- episode, as in FinishEpisode.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @claim TABLE (dedupe_key nvarchar(512) NOT NULL);
DECLARE @episode TABLE (
    id        bigint       NOT NULL,
    attempts  int          NOT NULL,
    status    nvarchar(32) NOT NULL,
    run_after datetime2(6) NULL
);

BEGIN TRANSACTION;

UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
SET state        = N'released',
    finished_at  = SYSUTCDATETIME(),
    lease_until  = SYSUTCDATETIME(),
    error_detail = @error_detail
OUTPUT inserted.dedupe_key INTO @claim
WHERE dedupe_key = @claim_key
  AND owner_node = @owner_node
  AND fence = @fence
  AND state = N'claimed'
  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
              WHERE r.id = @id AND r.status IN (N'queued', N'running'));

INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
SELECT @id, @step_no, @fence, @step_data
FROM @claim
WHERE @step_no > 0;

-- A cancel requested meanwhile (CancelEpisode) ends the episode canceled
-- instead, not available: SET reads the pre-update row.
UPDATE leasehold_episodes
SET status       = CASE WHEN cancel_requested_at IS NULL THEN N'queued' ELSE N'canceled' END,
    phase        = CASE WHEN cancel_requested_at IS NULL THEN N'retrying' END,
    attempts     = CASE WHEN cancel_requested_at IS NULL THEN attempts + 1 ELSE attempts END,
    owner_node   = NULL,
    error_class  = CASE WHEN cancel_requested_at IS NULL THEN @error_class ELSE N'canceled' END,
    error_detail = @error_detail,
    finished_at  = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE SYSUTCDATETIME() END,
    last_step_at = SYSUTCDATETIME(),
    run_after    = CASE WHEN cancel_requested_at IS NULL
                        THEN DATEADD(second, CAST(@backoff_ms / 1000 AS int),
                                 DATEADD(millisecond, CAST(@backoff_ms % 1000 AS int), SYSUTCDATETIME()))
                   END
OUTPUT inserted.id, inserted.attempts, inserted.status, inserted.run_after INTO @episode
WHERE id = @id
  AND status IN (N'queued', N'running')
  AND EXISTS (SELECT 1 FROM @claim);

-- Made available, or ended canceled: either way every write matched.
IF EXISTS (SELECT 1 FROM @episode)
    COMMIT TRANSACTION;
ELSE
    ROLLBACK TRANSACTION;

SELECT e.id, e.attempts, e.status,
    COALESCE(e.run_after, CAST(SYSUTCDATETIME() AS datetime2(6))) AS run_after
FROM @episode AS e;

-- name: CancelEpisode :one
-- Cancels an episode from anywhere in the cluster, as
-- sql/queries/postgres/episodes.sql's CancelEpisode: one nobody holds a
-- live lease on (available work, or an orphan whose lease expired) ends
-- canceled at once (it leaves the available set, run_after cleared, and an
-- expired grant is fenced out: failed, fence + 1), so no poller takes it
-- and no zombie writes after it; one held live gets cancel_requested_at,
-- and its holder (ListCancelRequests, once per heartbeat interval) ends the
-- run canceled by its own fenced finish. Status canceled in the result:
-- ended here; queued or running: requested. Empty: unknown, archived or
-- already terminal.
--
-- Guarantee: one transaction, in the writers' lock order (claim row, then
-- episode row), every decision on locked rows: the claim row is read WITH
-- (UPDLOCK, HOLDLOCK) (its latest committed version, whatever
-- READ_COMMITTED_SNAPSHOT says, and held to COMMIT: no grant lands between
-- the read and the writes), the episode row is updated, so locked, under
-- the status re-check. "Held live" is state claimed and lease_until >
-- SYSUTCDATETIME(). A poll (ClaimAvailable) locks the episode row first
-- and its claim row second: one that committed first left the episode
-- running under a live grant (a cancel request, then), one that comes
-- after skips the locked row and finds it canceled; when each holds its
-- first row, the server makes one the deadlock victim (1205: rolled back
-- whole and retried by the adapter).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @claim_key nvarchar(512);
DECLARE @held bit = 0;
DECLARE @episode TABLE (
    id                  bigint       NOT NULL,
    status              nvarchar(32) NOT NULL,
    cancel_requested_at datetime2(6) NULL
);

BEGIN TRANSACTION;

SELECT @claim_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
FROM leasehold_episodes AS e
WHERE e.id = @id;

SELECT @held = CASE WHEN x.state = N'claimed' AND x.lease_until > SYSUTCDATETIME() THEN 1 ELSE 0 END
FROM leasehold_work_claims AS x WITH (UPDLOCK, HOLDLOCK)
WHERE x.dedupe_key = @claim_key;

-- SET reads the pre-update row.
UPDATE leasehold_episodes
SET status              = CASE WHEN @held = 1 THEN status ELSE N'canceled' END,
    phase               = CASE WHEN @held = 1 THEN phase END,
    error_class         = CASE WHEN @held = 1 THEN error_class ELSE N'canceled' END,
    error_detail        = CASE WHEN @held = 1 THEN error_detail ELSE @error_detail END,
    finished_at         = CASE WHEN @held = 1 THEN finished_at ELSE SYSUTCDATETIME() END,
    run_after           = CASE WHEN @held = 1 THEN run_after END,
    cancel_requested_at = COALESCE(cancel_requested_at, SYSUTCDATETIME())
OUTPUT inserted.id, inserted.status, inserted.cancel_requested_at INTO @episode
WHERE id = @id
  AND status IN (N'queued', N'running')
  AND archived_at IS NULL;

-- An expired grant is fenced out: its zombie writes nothing after this.
IF EXISTS (SELECT 1 FROM @episode WHERE status = N'canceled')
    UPDATE leasehold_work_claims WITH (UPDLOCK, ROWLOCK)
    SET state = N'failed', fence = fence + 1, lease_until = SYSUTCDATETIME(), finished_at = SYSUTCDATETIME()
    WHERE dedupe_key = @claim_key
      AND state = N'claimed'
      AND lease_until <= SYSUTCDATETIME();

COMMIT TRANSACTION;

SELECT id, status, cancel_requested_at FROM @episode;

-- name: ListCancelRequests :many
-- The episodes @owner_node holds live (claim in state claimed under its
-- name) that have a pending cancel request, as on Postgres. Read-only,
-- served by the filtered index on cancel_requested_at.
SELECT e.id, c.fence
FROM leasehold_episodes AS e
JOIN leasehold_work_claims AS c
  ON c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
WHERE e.cancel_requested_at IS NOT NULL
  AND e.status IN (N'queued', N'running')
  AND c.owner_node = @owner_node
  AND c.state = N'claimed';

-- name: RequeueEpisode :one
-- Runs a failed or canceled episode again, for an operator, as on Postgres:
-- it becomes available as its next attempt (attempts + 1, phase retrying,
-- no owner, cancel request cleared, max_attempts grown to admit it), due at
-- once (run_after), so whichever full node has a free slot for its actor
-- takes it (ClaimAvailable). One UPDATE, so no transaction of its own.
--
-- Guarantee: only a terminal failed or canceled, unarchived episode is
-- requeued (its own finish wrote a claim that is not live, so the
-- available invariant holds, and the poll grants a fresh fence); the
-- UPDATE locks the row and re-checks the status on its latest committed
-- version, so of two operators the second matches nothing (empty result).
-- SET reads the pre-update row.
SET NOCOUNT ON;
UPDATE leasehold_episodes
SET status              = N'queued',
    phase               = N'retrying',
    attempts            = attempts + 1,
    max_attempts        = CASE WHEN max_attempts > attempts + 2 THEN max_attempts ELSE attempts + 2 END,
    owner_node          = NULL,
    finished_at         = NULL,
    cancel_requested_at = NULL,
    last_step_at        = SYSUTCDATETIME(),
    run_after           = SYSUTCDATETIME()
OUTPUT inserted.id, inserted.attempts, inserted.run_after
WHERE id = @id
  AND status IN (N'failed', N'canceled')
  AND archived_at IS NULL;

-- name: GetEpisode :one
SELECT id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key,
    status, phase, attempts, max_attempts, budget, source_stack, source_env,
    owner_node, payload, result, error_class, error_detail, queued_at,
    started_at, finished_at, last_step_at, archived_at, created_at, trace_parent
FROM leasehold_episodes
WHERE id = @id;

-- name: ListSteps :many
SELECT episode_id, step_no, fence, data, created_at
FROM leasehold_episode_steps
WHERE episode_id = @episode_id
ORDER BY step_no;
