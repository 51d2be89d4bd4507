-- Episodes and their step journal (SQLite).
--
-- The statements of sql/queries/postgres/episodes.sql, under the same names
-- and kinds, with the same guarantees. Where Postgres decides in one
-- statement with data-modifying CTEs, which SQLite does not have, the
-- adapter sends the statements below in order in one BEGIN IMMEDIATE
-- transaction (adapters/sqlite, Store.atomically; a SAVEPOINT of the caller's
-- transaction when the Store is bound to one): the parity-named statement and
-- its companions (named after it: CreateEpisodeGrant, AppendStepLease, ...).
-- A companion that matches nothing makes the adapter roll the whole
-- transaction back, so the writes land together or not at all.
--
-- Lock: SQLite has one writer per database file, and BEGIN IMMEDIATE takes
-- the write lock before the first statement, so every statement of the
-- transaction reads the latest committed rows and no other writer, in any
-- process, runs until it commits. Where Postgres locks the claim row (FOR
-- SHARE, FOR UPDATE) to order a steal before or after a fenced write, that
-- write lock is the lock, for every row at once; what a statement checked is
-- still true when the next one writes.
--
-- Clock: every time is SQLite's clock, read inside the deciding statement
-- as CAST(round(unixepoch('subsec') * 1000) AS INTEGER), milliseconds since
-- the Unix epoch (UTC), constant within one statement. The statements of one
-- transaction each read the clock when they run (Postgres reads one now()
-- per transaction): a few microseconds apart, never backwards in practice.
-- Durations come in milliseconds (@lease_ms, @backoff_ms).
--
-- Every later write on behalf of a run is fenced: the statement checks the
-- work claim (dedupe key, owner, fence, claimed), so a write that comes
-- after a steal sees the new fence and matches nothing.

-- name: CreateEpisode :one
-- One episode per trigger: N nodes insert the same dedupe_key, the partial
-- unique index lets exactly one insert through, and the others get no row
-- back (a duplicate, not an error; the adapter then reads the live
-- episode's id with FindLiveEpisode in the same transaction, which, under
-- the write lock, always sees it). Archived episodes are outside the index,
-- so they do not block the trigger from running again. The ON CONFLICT
-- predicate repeats the index predicate, so SQLite uses that index.
--
-- start (the caller holds a free slot for it) creates the episode running,
-- owner_node and started_at set, when owner_node is set and the key's claim
-- is not held live elsewhere (state claimed, lease_until > now): exactly
-- the condition under which CreateEpisodeGrant, next in the transaction,
-- grants the claim, so a running episode always gets its grant (the write
-- lock keeps the claim row as this statement saw it). A claim whose lease
-- ends in the microseconds between the two statements leaves a queued
-- episode with a grant: its caller starts it with StartEpisode.
--
-- key_version is the dedupe key version dedupe_key is a key of (migration
-- 00014): the insert trigger aborts a key of a version the file no longer
-- uses ("leasehold: key version"), and the statement writes nothing.
--
-- WHERE true: SQLite's grammar needs a WHERE in INSERT ... SELECT before
-- ON CONFLICT.
INSERT INTO leasehold_episodes (
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
    max_attempts, budget, source_stack, source_env, payload, queued_at,
    trace_parent, key_version, owner_node, started_at, last_step_at
)
SELECT CAST(@actor_id AS TEXT), CAST(@expectation_id AS TEXT), CAST(@trigger_type AS TEXT),
    sqlc.narg(trigger_ref), sqlc.narg(dedupe_key), s.status,
    CAST(@max_attempts AS INTEGER), sqlc.narg(budget), CAST(@source_stack AS TEXT),
    CAST(@source_env AS TEXT), sqlc.narg(payload), CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    sqlc.narg(trace_parent), CAST(@key_version AS INTEGER),
    CASE WHEN s.status = 'running' THEN CAST(@owner_node AS TEXT) END,
    CASE WHEN s.status = 'running' THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END,
    CASE WHEN s.status = 'running' THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END
FROM (SELECT CASE WHEN CAST(@start AS INTEGER) = 1 AND CAST(@owner_node AS TEXT) <> ''
                   AND NOT EXISTS (SELECT 1 FROM leasehold_work_claims AS x
                                   WHERE x.dedupe_key = sqlc.narg(dedupe_key)
                                     AND x.state = 'claimed'
                                     AND x.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
                  THEN 'running' ELSE 'queued' END AS status) AS s
WHERE true
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
DO NOTHING
RETURNING id, created_at, status;

-- name: CreateEpisodeGrant :one
-- CreateEpisode's second statement: grants the new episode's work claim
-- (its dedupe key, or episode:{id}, read from the row just inserted) to
-- owner_node with AcquireClaim's rules, in the same transaction as the
-- insert, so no crash can leave a created episode queued without an owner:
-- both rows exist or neither does. No row back means the key's claim is
-- held live elsewhere (busy; fence 0 in the adapter's result). An empty
-- owner_node grants nothing (the episode is created unclaimed, for deferred
-- execution by another node); the adapter does not send it then.
INSERT INTO leasehold_work_claims AS c (
    dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
    attempt, fence, grant_kind, work_type
)
SELECT coalesce(e.dedupe_key, 'episode:' || e.id), 'claimed', CAST(@owner_node AS TEXT),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER), 1, 1, 'fresh', 'episode'
FROM leasehold_episodes AS e
WHERE e.id = CAST(@id AS INTEGER)
  AND CAST(@owner_node AS TEXT) <> ''
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

-- name: FindLiveEpisode :one
-- The live (not archived) episode that holds a dedupe key, if any: what a
-- duplicate trigger reports. Read-only; it decides nothing. Sent in the
-- duplicate's own transaction, under the write lock, so the winner that
-- made the insert a duplicate has committed and is seen.
SELECT id FROM leasehold_episodes
WHERE dedupe_key = CAST(@dedupe_key AS TEXT) AND archived_at IS NULL;

-- name: StartEpisode :one
-- Moves a queued episode to running under the caller's grant, or re-starts a
-- running one whose grant moved to the caller (steal, recovery). Returns the
-- next free step number (the second column) so a re-run appends after the
-- old journal.
--
-- Guarantee: fenced on the work claim in the same statement, which holds
-- the write lock from its start to its end (no steal can land between the
-- check and the write); a terminal or archived episode is never started
-- again. The grant must also still be live on the database clock
-- (lease_until > now): a grant whose answer came back late, or that waited
-- in the slot queue without being renewed, may already be stealable, and a
-- run must never start on a lease another node may take meanwhile.
-- A started episode is held, so it is not available work: run_after is
-- cleared (it is already NULL but for an episode granted outside
-- ClaimAvailable while available, which breaks the invariant of
-- available.sql; started, it is an ordinary running episode, recovery's
-- once its lease lapses).
--
-- The table name qualifies id (sqlc would otherwise find it ambiguous with
-- the journal's id in the RETURNING subquery).
UPDATE leasehold_episodes
SET status       = 'running',
    phase        = NULL,
    run_after    = NULL,
    owner_node   = CAST(@owner_node AS TEXT),
    started_at   = coalesce(started_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    last_step_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE leasehold_episodes.id = CAST(@id AS INTEGER)
  AND status IN ('queued', 'running')
  AND archived_at IS NULL
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER)
                AND c.state = 'claimed'
                AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
RETURNING leasehold_episodes.id,
    (SELECT coalesce(max(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = leasehold_episodes.id);

-- name: AppendStepLease :one
-- AppendStep's first statement. A journaled step proves its run alive, so
-- it extends the lease (never shortening it): recovery, which re-checks the
-- lease in its claim, then leaves alone an episode that journaled after it
-- was listed.
--
-- Guarantee: fenced on the work claim (key, owner, fence, claimed); no row
-- back (a zombie whose lease was stolen) and the adapter rolls back, having
-- written nothing. The claim row is written first, as on Postgres; the
-- write lock orders a steal before or after the whole transaction.
UPDATE leasehold_work_claims
SET lease_until = max(lease_until,
                      CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER)),
    last_heartbeat_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE dedupe_key = CAST(@claim_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
  AND state = 'claimed'
RETURNING dedupe_key;

-- name: AppendStepEpisode :one
-- AppendStep's second statement: refreshes last_step_at, for the cheap
-- staleness check, only on an episode still running under the same owner,
-- and only under the caller's grant (the claim re-checked: key, owner,
-- fence, claimed). No row back: the adapter rolls back (lease lost).
UPDATE leasehold_episodes
SET last_step_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id = CAST(@id AS INTEGER)
  AND status = 'running'
  AND owner_node = CAST(@owner_node AS TEXT)
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER)
                AND c.state = 'claimed')
RETURNING id;

-- name: AppendStep :one
-- Journals one step, last of AppendStep's transaction (after
-- AppendStepLease and AppendStepEpisode matched): fenced again on the claim
-- and on the episode running under the same owner. step_no is unique per
-- episode, so two writers can never both record the same step: a second
-- one fails with a unique violation, and the adapter rolls back its lease
-- and episode writes with it.
INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
SELECT e.id, CAST(@step_no AS INTEGER), CAST(@fence AS INTEGER), sqlc.narg(data)
FROM leasehold_episodes AS e
WHERE e.id = CAST(@id AS INTEGER)
  AND e.status = 'running'
  AND e.owner_node = CAST(@owner_node AS TEXT)
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER)
                AND c.state = 'claimed')
RETURNING step_no;

-- name: FinishEpisodeClaim :one
-- FinishEpisode's first statement: ends the claim (claim_state), fenced on
-- the caller's live grant (key, owner, fence, claimed) and only while the
-- episode is still open (queued or running). No row back: a duplicate
-- finish, or one from a grant that was stolen; the adapter rolls back and
-- nothing changed (claims.ErrLeaseLost), and in a caller's transaction
-- runs DoomTransaction.
UPDATE leasehold_work_claims
SET state        = CAST(@claim_state AS TEXT),
    finished_at  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    lease_until  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    error_detail = sqlc.narg(error_detail)
WHERE dedupe_key = CAST(@claim_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
  AND state = 'claimed'
  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
              WHERE r.id = CAST(@id AS INTEGER) AND r.status IN ('queued', 'running'))
RETURNING dedupe_key;

-- name: FinishEpisodeStep :exec
-- FinishEpisode's (and RetryEpisode's) optional second statement (step_no
-- > 0): journals the run's last step under the same fence, saving the
-- commit of a separate AppendStep. Sent only after FinishEpisodeClaim (or
-- RetryEpisodeClaim) matched, in its transaction; the claim is re-checked by key, owner and fence (the finish
-- changed its state, never its fence).
INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
SELECT CAST(@id AS INTEGER), CAST(@step_no AS INTEGER), CAST(@fence AS INTEGER), sqlc.narg(step_data)
WHERE CAST(@step_no AS INTEGER) > 0
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER));

-- name: FinishEpisode :one
-- Ends a run: the episode's terminal status, last of the transaction whose
-- FinishEpisodeClaim wrote the claim's final state, so neither can land
-- without the other. A queued episode can be finished too (recovery failing
-- an orphan, a cancel).
--
-- Guarantee: fenced; it runs only after the claim UPDATE matched the
-- caller's live grant, re-checks the claim by key, owner and fence, and
-- writes only an open episode. No row back: the adapter rolls back the
-- claim write too, and in a caller's transaction then runs
-- DoomTransaction, so that transaction cannot commit either.
UPDATE leasehold_episodes
SET status       = CAST(@status AS TEXT),
    phase        = NULL,
    result       = sqlc.narg(result),
    error_class  = sqlc.narg(error_class),
    error_detail = sqlc.narg(error_detail),
    finished_at  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    last_step_at = CASE WHEN CAST(@step_no AS INTEGER) > 0
                        THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) ELSE last_step_at END
WHERE id = CAST(@id AS INTEGER)
  AND status IN ('queued', 'running')
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER))
RETURNING id;

-- name: DoomTransaction :exec
-- Makes the caller's transaction fail at COMMIT after a fenced write in it
-- (Store.WithTx on the caller's *sql.Tx) matched no row: FinishEpisode
-- (Run.CompleteTx, Run.FailTx) or HoldClaim (Run.Hold). The run's grant is
-- gone, and what the caller wrote beside the write is a zombie's effect. A
-- failed statement does not end an SQLite transaction (Postgres aborts it:
-- its DoomTransaction raises), so this writes a row of
-- leasehold_doomed_transactions (migration 00011), whose foreign key no row
-- can satisfy and which SQLite checks at COMMIT: the COMMIT fails
-- (SQLITE_CONSTRAINT_FOREIGNKEY) and the transaction is rolled back, so a
-- caller that ignores claims.ErrLeaseLost and commits lands nothing.
--
-- Guarantee: unconditional; the adapter runs it only after a fenced write
-- in the caller's transaction matched nothing (whatever the cause), outside
-- the write's own savepoint, so rolling that back does not undo it. A
-- ROLLBACK TO a savepoint the caller took before the write does, as on
-- Postgres. Needs foreign keys on (Open's DSN).
INSERT INTO leasehold_doomed_transactions (dedupe_key) VALUES (CAST(@dedupe_key AS TEXT));

-- name: FinishEpisodesClaims :many
-- FinishEpisodes' first statement (grouped finishing: the terminal writes
-- of many runs of one node in one transaction, one commit). rows is a JSON
-- array, one object per run: {"id", "claim_key", "fence", "status",
-- "claim_state", "result", "error_class", "error_detail", "step_no",
-- "step_data"}, as FinishEpisode's arguments.
--
-- Guarantee: each claim is ended only under its own row's condition: its
-- key and fence in one row of rows, owner_node, state claimed, and that
-- row's episode still open. The (key, fence) of the claims that matched
-- come back; the adapter sends the next two statements with those rows
-- only (Postgres's matched CTE), so a run whose claim did not match writes
-- neither its step nor its episode. Rows of one batch name distinct claims.
UPDATE leasehold_work_claims
SET state        = (SELECT f.value ->> '$.claim_state' FROM json_each(@rows) AS f
                    WHERE f.value ->> '$.claim_key' = leasehold_work_claims.dedupe_key
                      AND f.value ->> '$.fence' = leasehold_work_claims.fence),
    finished_at  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    lease_until  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    error_detail = (SELECT nullif(f.value -> '$.error_detail', 'null') FROM json_each(@rows) AS f
                    WHERE f.value ->> '$.claim_key' = leasehold_work_claims.dedupe_key
                      AND f.value ->> '$.fence' = leasehold_work_claims.fence)
WHERE dedupe_key IN (SELECT k.value ->> '$.claim_key' FROM json_each(@rows) AS k)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND state = 'claimed'
  AND EXISTS (SELECT 1 FROM json_each(@rows) AS f
              WHERE f.value ->> '$.claim_key' = leasehold_work_claims.dedupe_key
                AND f.value ->> '$.fence' = leasehold_work_claims.fence
                AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
                            WHERE r.id = f.value ->> '$.id' AND r.status IN ('queued', 'running')))
RETURNING dedupe_key, fence;

-- name: FinishEpisodesSteps :exec
-- FinishEpisodes' second statement: the last steps (step_no > 0) of the
-- rows whose claim FinishEpisodesClaims ended (rows holds those only), each
-- re-checked on its claim by key, owner and fence.
INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
SELECT f.value ->> '$.id', f.value ->> '$.step_no', f.value ->> '$.fence',
    nullif(f.value -> '$.step_data', 'null')
FROM json_each(@rows) AS f
WHERE coalesce(f.value ->> '$.step_no', 0) > 0
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = f.value ->> '$.claim_key'
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = f.value ->> '$.fence');

-- name: FinishEpisodes :many
-- FinishEpisodes' last statement: the terminal status of each open episode
-- of the rows whose claim FinishEpisodesClaims ended (rows holds those
-- only), re-checked on its claim by key, owner and fence. The ids of the
-- episodes finished come back; a run missing from them lost its grant
-- (claims.ErrLeaseLost).
UPDATE leasehold_episodes
SET status       = (SELECT f.value ->> '$.status' FROM json_each(@rows) AS f
                    WHERE f.value ->> '$.id' = leasehold_episodes.id),
    phase        = NULL,
    result       = (SELECT nullif(f.value -> '$.result', 'null') FROM json_each(@rows) AS f
                    WHERE f.value ->> '$.id' = leasehold_episodes.id),
    error_class  = (SELECT f.value ->> '$.error_class' FROM json_each(@rows) AS f
                    WHERE f.value ->> '$.id' = leasehold_episodes.id),
    error_detail = (SELECT nullif(f.value -> '$.error_detail', 'null') FROM json_each(@rows) AS f
                    WHERE f.value ->> '$.id' = leasehold_episodes.id),
    finished_at  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    last_step_at = CASE WHEN (SELECT coalesce(f.value ->> '$.step_no', 0) FROM json_each(@rows) AS f
                              WHERE f.value ->> '$.id' = leasehold_episodes.id) > 0
                        THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) ELSE last_step_at END
WHERE id IN (SELECT k.value ->> '$.id' FROM json_each(@rows) AS k)
  AND status IN ('queued', 'running')
  AND EXISTS (SELECT 1 FROM json_each(@rows) AS f
              JOIN leasehold_work_claims AS c
                ON c.dedupe_key = f.value ->> '$.claim_key' AND c.fence = f.value ->> '$.fence'
              WHERE f.value ->> '$.id' = leasehold_episodes.id
                AND c.owner_node = CAST(@owner_node AS TEXT))
RETURNING id;

-- name: RetryEpisodeClaim :one
-- RetryEpisode's first statement (ending a failed attempt that may run
-- again, in one transaction): releases the claim, fenced like
-- FinishEpisodeClaim on the caller's live grant and on the episode still
-- open. No row back: a retry from a grant that was stolen, or a duplicate;
-- the adapter rolls back, nothing changed.
UPDATE leasehold_work_claims
SET state        = 'released',
    finished_at  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    lease_until  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    error_detail = sqlc.narg(error_detail)
WHERE dedupe_key = CAST(@claim_key AS TEXT)
  AND owner_node = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
  AND state = 'claimed'
  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
              WHERE r.id = CAST(@id AS INTEGER) AND r.status IN ('queued', 'running'))
RETURNING dedupe_key;

-- name: RetryEpisode :one
-- RetryEpisode's episode write, after RetryEpisodeClaim matched (and
-- FinishEpisodeStep journaled the attempt's error when step_no > 0): the
-- error is kept on the episode (error_class, error_detail) and the episode
-- is queued again as its next attempt (attempts + 1, phase retrying, no
-- owner) and made available, due at now + backoff_ms on the database
-- clock (run_after), so whichever full node has a free slot for the actor
-- then takes it (ClaimAvailable). RetryEpisodeClaim released the claim in
-- this transaction, so it is not live and the available episode keeps the
-- invariant of available.sql. A cancel requested meanwhile
-- (cancel_requested_at) ends it canceled instead, not available. The
-- dedupe key stays with the episode: the same trigger fired meanwhile is a
-- duplicate. The claim is re-checked by key, owner and fence; no row back:
-- the adapter rolls back. last_step_at is this statement's instant, the
-- run_after of a canceled retry's result.
UPDATE leasehold_episodes
SET status       = CASE WHEN cancel_requested_at IS NULL THEN 'queued' ELSE 'canceled' END,
    phase        = CASE WHEN cancel_requested_at IS NULL THEN 'retrying' END,
    attempts     = CASE WHEN cancel_requested_at IS NULL THEN attempts + 1 ELSE attempts END,
    owner_node   = NULL,
    error_class  = CASE WHEN cancel_requested_at IS NULL THEN sqlc.narg(error_class) ELSE 'canceled' END,
    error_detail = sqlc.narg(error_detail),
    finished_at  = CASE WHEN cancel_requested_at IS NULL THEN NULL
                        ELSE CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END,
    last_step_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    run_after    = CASE WHEN cancel_requested_at IS NULL
                        THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@backoff_ms AS INTEGER) END
WHERE id = CAST(@id AS INTEGER)
  AND status IN ('queued', 'running')
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER))
RETURNING id, attempts, status, last_step_at, run_after;

-- name: CancelEpisodeTarget :one
-- CancelEpisode's first statement (cancel from anywhere in the cluster, in
-- one transaction): the open (queued or running), unarchived episode, its
-- claim key, and whether anybody holds it live: its claim in state claimed
-- with lease_until > now on the database clock. Read under the write lock,
-- so no grant lands between this read and the writes that follow it (a
-- grant that comes after finds the episode terminal: StartEpisode refuses
-- it). No row: the episode is unknown, archived or already terminal.
SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key,
    EXISTS (SELECT 1 FROM leasehold_work_claims AS x
            WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
              AND x.state = 'claimed'
              AND x.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) AS held
FROM leasehold_episodes AS e
WHERE e.id = CAST(@id AS INTEGER)
  AND e.status IN ('queued', 'running')
  AND e.archived_at IS NULL;

-- name: CancelEpisode :one
-- Cancels an episode. One nobody holds a live lease on (held = 0 from
-- CancelEpisodeTarget: available work, or an orphan whose lease expired)
-- ends canceled at once, here, and leaves the available set (run_after
-- cleared); the next statement fences out its expired grant
-- (CancelEpisodeFence), so no poller takes it and no zombie writes after
-- it. One held live (running, or queued in its holder's
-- slot queue) gets cancel_requested_at instead: its holder reads
-- ListCancelRequests once per heartbeat interval and cancels the run, which
-- ends canceled by its own fenced FinishEpisode. Either way
-- cancel_requested_at is set, so an attempt that fails or is recovered
-- meanwhile ends canceled instead of running again (RetryEpisode,
-- RequeueOrphan). Status canceled in the result: ended here; queued or
-- running: requested. The open, unarchived condition is re-checked.
UPDATE leasehold_episodes
SET status              = CASE WHEN CAST(@held AS INTEGER) = 1 THEN status ELSE 'canceled' END,
    phase               = CASE WHEN CAST(@held AS INTEGER) = 1 THEN phase END,
    error_class         = CASE WHEN CAST(@held AS INTEGER) = 1 THEN error_class ELSE 'canceled' END,
    error_detail        = CASE WHEN CAST(@held AS INTEGER) = 1 THEN error_detail ELSE sqlc.narg(error_detail) END,
    finished_at         = CASE WHEN CAST(@held AS INTEGER) = 1 THEN finished_at
                               ELSE CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END,
    run_after           = CASE WHEN CAST(@held AS INTEGER) = 1 THEN run_after END,
    cancel_requested_at = coalesce(cancel_requested_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
WHERE id = CAST(@id AS INTEGER)
  AND status IN ('queued', 'running')
  AND archived_at IS NULL
RETURNING id, status, cancel_requested_at;

-- name: CancelEpisodeFence :exec
-- CancelEpisode's fence-out, for an episode it ended (not held): an expired
-- grant (claimed, lease_until <= now) becomes failed with fence + 1, so its
-- zombie's writes match nothing after this.
UPDATE leasehold_work_claims
SET state       = 'failed',
    fence       = fence + 1,
    lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE dedupe_key = CAST(@claim_key AS TEXT)
  AND CAST(@held AS INTEGER) = 0
  AND state = 'claimed'
  AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER);

-- name: ListCancelRequests :many
-- The episodes owner_node holds (claim in state claimed under its name)
-- that have a pending cancel request: the holder cancels each run (or its
-- wait in the slot queue) and ends it canceled with its own fenced
-- FinishEpisode. Read-only, served by the partial index on
-- cancel_requested_at, so its cost follows the requests, not the history.
SELECT e.id, c.fence
FROM leasehold_episodes AS e
JOIN leasehold_work_claims AS c
  ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.cancel_requested_at IS NOT NULL
  AND e.status IN ('queued', 'running')
  AND c.owner_node = CAST(@owner_node AS TEXT)
  AND c.state = 'claimed';

-- name: RequeueEpisode :one
-- Runs a failed or canceled episode again, for an operator: it becomes
-- available as its next attempt (attempts + 1, phase retrying, no owner,
-- its cancel request cleared), due at once (run_after), so whichever full
-- node has a free slot for its actor takes it (ClaimAvailable).
-- max_attempts grows to admit that attempt when the episode had used them
-- all. The dedupe key stays with the episode, as it always did.
--
-- Guarantee: only a terminal failed or canceled episode that is not
-- archived is requeued (its own finish wrote a claim that is not live, so
-- the available invariant holds, and the poll grants a fresh fence); the
-- write lock orders two operators, and the second matches nothing (no row
-- back).
UPDATE leasehold_episodes
SET status              = 'queued',
    phase               = 'retrying',
    attempts            = attempts + 1,
    max_attempts        = max(max_attempts, attempts + 2),
    owner_node          = NULL,
    finished_at         = NULL,
    cancel_requested_at = NULL,
    last_step_at        = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    run_after           = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id = CAST(@id AS INTEGER)
  AND status IN ('failed', 'canceled')
  AND archived_at IS NULL
RETURNING id, attempts, run_after;

-- name: GetEpisode :one
SELECT id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key,
    status, phase, attempts, max_attempts, budget, source_stack, source_env,
    owner_node, payload, result, error_class, error_detail, queued_at,
    started_at, finished_at, last_step_at, archived_at, created_at, trace_parent
FROM leasehold_episodes
WHERE id = CAST(@id AS INTEGER);

-- name: ListSteps :many
SELECT episode_id, step_no, fence, data, created_at
FROM leasehold_episode_steps
WHERE episode_id = CAST(@episode_id AS INTEGER)
ORDER BY step_no;
