-- Episodes and their step journal.
--
-- Creation is decided by the filtered unique index on dedupe_key. Every later
-- write on behalf of a run is fenced: the same statement checks the work
-- claim (dedupe key, owner, fence, claimed) and locks that claim row FOR
-- SHARE, so a steal (an UPDATE of the claim row) waits for a write already
-- admitted and every write that comes after the steal sees the new fence and
-- matches nothing. All times are now(), the database clock.

-- name: CreateEpisode :one
-- One episode per trigger, born owned: N nodes insert the same dedupe_key,
-- the filtered unique index lets exactly one insert through, and the others
-- get created = false back, with the id of the live episode that holds the
-- key (a duplicate, not an error). Archived episodes are outside the index,
-- so they do not block the trigger from running again. The ON CONFLICT
-- predicate must match the index predicate for Postgres to use it.
--
-- The same statement grants the new episode's work claim (its dedupe key,
-- or episode:{id}) to owner_node, with AcquireClaim's rules, so no crash can
-- leave a created episode queued without an owner: either both rows exist
-- or neither does. fence 0 in the result means the key's claim is held live
-- elsewhere (busy). An empty owner_node creates the episode unclaimed, for
-- deferred execution by another node.
--
-- start (the caller holds a free slot for it) creates the episode running
-- under that grant, owner_node and started_at set, so a run that starts at
-- once costs this commit and its finish, not a StartEpisode in between. The
-- grant is live at the instant it is made, which is the instant the run
-- starts on the database clock; the caller's local deadline covers a late
-- answer. The status is chosen before the grant, from the key's claim as
-- the statement's snapshot shows it: queued when it is held live
-- elsewhere. A claim that changes hands during the statement can leave a
-- running episode with fence 0 (its caller does not run it: busy, as
-- above; recovery takes it once that claim ends) or a queued one with a
-- grant (its caller starts it with StartEpisode).
--
-- A duplicate's id is read in the same statement, from its snapshot; a key
-- whose live episode committed after that snapshot began reports no id
-- here (existing_id 0), and the adapter reads it by FindLiveEpisode.
--
-- key_version is the dedupe key version dedupe_key is a key of (migration
-- 00014): the insert trigger refuses a version 1 key once the database
-- uses version 2 (SQLSTATE LH002), and the statement writes nothing.
WITH created AS (
    INSERT INTO leasehold_episodes (
        actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
        max_attempts, budget, source_stack, source_env, payload, queued_at,
        trace_parent, key_version, owner_node, started_at, last_step_at
    )
    SELECT sqlc.arg(actor_id), sqlc.arg(expectation_id), sqlc.arg(trigger_type),
        sqlc.narg(trigger_ref), sqlc.narg(dedupe_key), s.status,
        sqlc.arg(max_attempts), sqlc.narg(budget), sqlc.arg(source_stack),
        sqlc.arg(source_env), sqlc.narg(payload), now(), sqlc.narg(trace_parent)::text,
        sqlc.arg(key_version)::smallint,
        CASE WHEN s.status = 'running' THEN sqlc.arg(owner_node)::text END,
        CASE WHEN s.status = 'running' THEN now() END,
        CASE WHEN s.status = 'running' THEN now() END
    FROM (SELECT CASE WHEN sqlc.arg(start)::boolean AND sqlc.arg(owner_node)::text <> ''
                       AND NOT EXISTS (SELECT 1 FROM leasehold_work_claims AS x
                                       WHERE x.dedupe_key = sqlc.narg(dedupe_key)::text
                                         AND x.state = 'claimed' AND x.lease_until > now())
                      THEN 'running' ELSE 'queued' END AS status) AS s
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
    DO NOTHING
    RETURNING id, created_at, status, coalesce(dedupe_key, 'episode:' || id) AS claim_key
), granted AS (
    INSERT INTO leasehold_work_claims AS c (
        dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
        attempt, fence, grant_kind, work_type
    )
    SELECT created.claim_key, 'claimed', sqlc.arg(owner_node)::text,
        now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
        now(), now(), 1, 1, 'fresh', 'episode'
    FROM created
    WHERE sqlc.arg(owner_node)::text <> ''
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
    WHERE c.state <> 'claimed' OR c.lease_until <= now()
    RETURNING c.fence, c.attempt, c.lease_until, c.claimed_at, c.grant_kind
), existing AS (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.dedupe_key = sqlc.narg(dedupe_key)::text
      AND e.archived_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM created)
    LIMIT 1
)
SELECT true AS created, created.id, created.created_at, created.status::text AS status,
    created.claim_key::text AS claim_key,
    coalesce(granted.fence, 0)::bigint AS fence,
    coalesce(granted.attempt, 0)::integer AS attempt,
    coalesce(granted.lease_until, created.created_at)::timestamptz AS lease_until,
    coalesce(granted.claimed_at, created.created_at)::timestamptz AS claimed_at,
    coalesce(granted.grant_kind, '')::text AS grant_kind
FROM created
LEFT JOIN granted ON true
UNION ALL
SELECT false, coalesce((SELECT id FROM existing), 0)::bigint, now(), '', '', 0, 0, now(), now(), ''
WHERE NOT EXISTS (SELECT 1 FROM created);

-- name: FindLiveEpisode :one
-- The live (not archived) episode that holds a dedupe key, if any: what a
-- duplicate trigger reports when its creating statement's snapshot began
-- before that episode committed. Read-only; it decides nothing.
SELECT id FROM leasehold_episodes
WHERE dedupe_key = sqlc.arg(dedupe_key)::text AND archived_at IS NULL;

-- name: StartEpisode :one
-- Moves a queued episode to running under the caller's grant, or re-starts a
-- running one whose grant moved to the caller (steal, recovery). Returns the
-- next free step number so a re-run appends after the old journal.
--
-- Guarantee: fenced on the work claim; a terminal or archived episode is
-- never started again. The grant must also still be live on the database
-- clock (lease_until > now()): a grant whose answer came back late, or that
-- waited in the slot queue without being renewed, may already be stealable,
-- and a run must never start on a lease another node may take meanwhile.
-- A started episode is held, so it is not available work (run_after
-- cleared): an available episode whose key a claims user acquired directly
-- and started is recovery's once that grant lapses, not the pollers'.
WITH lease AS (
    SELECT 1 FROM leasehold_work_claims AS c
    WHERE c.dedupe_key = sqlc.arg(claim_key)
      AND c.owner_node = sqlc.arg(owner_node)::text
      AND c.fence = sqlc.arg(fence)
      AND c.state = 'claimed'
      AND c.lease_until > now()
    FOR SHARE
)
UPDATE leasehold_episodes AS e
SET status       = 'running',
    phase        = NULL,
    run_after    = NULL,
    owner_node   = sqlc.arg(owner_node)::text,
    started_at   = coalesce(e.started_at, now()),
    last_step_at = now()
WHERE e.id = sqlc.arg(id)
  AND e.status IN ('queued', 'running')
  AND e.archived_at IS NULL
  AND EXISTS (SELECT 1 FROM lease)
RETURNING e.id,
    (SELECT coalesce(max(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = e.id)::integer AS next_step_no;

-- name: AppendStep :one
-- Journals one step and refreshes last_step_at, for the cheap staleness check.
-- A journaled step proves its run alive, so it also extends the lease (never
-- shortening it): recovery, which re-checks the lease in its claim, then
-- leaves alone an episode that journaled after it was listed.
--
-- Guarantee: fenced on the work claim and on the episode still running under
-- the same owner; a zombie whose lease was stolen writes nothing. The claim
-- row is updated (so locked) first, so a concurrent steal is ordered before
-- or after the whole write. step_no is unique per episode, so two writers can
-- never both record the same step.
WITH lease AS (
    UPDATE leasehold_work_claims AS c
    SET lease_until = greatest(c.lease_until,
                               now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond')),
        last_heartbeat_at = now()
    WHERE c.dedupe_key = sqlc.arg(claim_key)
      AND c.owner_node = sqlc.arg(owner_node)
      AND c.fence = sqlc.arg(fence)
      AND c.state = 'claimed'
    RETURNING 1
), episode AS (
    UPDATE leasehold_episodes AS e
    SET last_step_at = now()
    WHERE e.id = sqlc.arg(id)
      AND e.status = 'running'
      AND e.owner_node = sqlc.arg(owner_node)
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING e.id
)
INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
SELECT episode.id, sqlc.arg(step_no), sqlc.arg(fence), sqlc.narg(data)
FROM episode
RETURNING step_no;

-- name: FinishEpisode :one
-- Ends a run: the episode's terminal status and the claim's final state are
-- written by one statement, so neither can land without the other. A queued
-- episode can be finished too (recovery failing an orphan, a cancel).
--
-- Guarantee: fenced; the claim UPDATE matches only the caller's live grant,
-- and the episode UPDATE runs only if it did. A duplicate finish, or one from
-- a grant that was stolen, changes nothing (no row back); in a caller's
-- transaction the adapter then runs DoomTransaction, so that transaction
-- cannot commit either.
--
-- step_no > 0 also journals the run's last step (step_data) in the same
-- statement, under the same fence, saving the commit of a separate
-- AppendStep for the step that finished the run.
WITH claim AS (
    UPDATE leasehold_work_claims AS c
    SET state        = sqlc.arg(claim_state),
        finished_at  = now(),
        lease_until  = now(),
        error_detail = sqlc.narg(error_detail)
    WHERE c.dedupe_key = sqlc.arg(claim_key)
      AND c.owner_node = sqlc.arg(owner_node)
      AND c.fence = sqlc.arg(fence)
      AND c.state = 'claimed'
      AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
                  WHERE r.id = sqlc.arg(id) AND r.status IN ('queued', 'running'))
    RETURNING c.dedupe_key
), step AS (
    INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
    SELECT sqlc.arg(id), sqlc.arg(step_no)::integer, sqlc.arg(fence), sqlc.narg(step_data)::jsonb
    FROM claim
    WHERE sqlc.arg(step_no)::integer > 0
    RETURNING 1
)
UPDATE leasehold_episodes AS e
SET status       = sqlc.arg(status),
    phase        = NULL,
    run_after    = NULL,
    result       = sqlc.narg(result),
    error_class  = sqlc.narg(error_class),
    error_detail = sqlc.narg(error_detail),
    finished_at  = now(),
    last_step_at = CASE WHEN sqlc.arg(step_no)::integer > 0 THEN now() ELSE e.last_step_at END
WHERE e.id = sqlc.arg(id)
  AND e.status IN ('queued', 'running')
  AND EXISTS (SELECT 1 FROM claim)
RETURNING e.id;

-- name: DoomTransaction :exec
-- Ends the caller's transaction for good after FinishEpisode, run in it
-- (Run.CompleteTx, Run.FailTx: the adapter bound to the caller's pgx.Tx),
-- matched no row: the run's grant is gone, and what the caller wrote beside
-- the finish is a zombie's effect. leasehold_lease_lost (migration 00011)
-- raises SQLSTATE LH001, as leasehold_hold does for a lost grant, and any
-- error aborts a Postgres transaction: every later statement in it fails
-- (25P02) and its COMMIT rolls back, so a caller that ignores
-- claims.ErrLeaseLost and commits lands nothing.
--
-- Guarantee: unconditional; the adapter runs it only after a fenced finish
-- in the caller's transaction matched nothing, whatever the cause (a
-- takeover, a release, a finish already made, an episode ended elsewhere).
-- A ROLLBACK TO a savepoint taken before the finish undoes it, with the
-- finish.
SELECT leasehold_lease_lost(sqlc.arg(claim_key)::text, sqlc.arg(owner_node)::text, sqlc.arg(fence)::bigint);

-- name: FinishEpisodes :many
-- Grouped finishing: the terminal writes of many runs of one node in one
-- statement, one commit. rows is a JSON array, one object per run:
-- {"id", "claim_key", "fence", "status", "claim_state", "result",
-- "error_class", "error_detail", "step_no", "step_data"}, as FinishEpisode's
-- arguments. The ids of the episodes finished come back; a run whose row
-- is missing from the result lost its grant (claims.ErrLeaseLost).
--
-- Guarantee: each row is FinishEpisode's, conditioned on its own claim
-- (key, owner_node, fence, claimed) and on its episode still open, in the
-- same statement: a claim row that does not match writes nothing for its
-- run, and neither its step nor its episode is written (they join on the
-- claims that matched). Rows of one batch name distinct claims (one live
-- grant per key; the runner sends each run once).
WITH finish AS (
    SELECT (j ->> 'id')::bigint AS id, (j ->> 'claim_key')::text AS claim_key,
        (j ->> 'fence')::bigint AS fence, (j ->> 'status')::text AS status,
        (j ->> 'claim_state')::text AS claim_state, nullif(j -> 'result', 'null'::jsonb) AS result,
        (j ->> 'error_class')::text AS error_class, nullif(j -> 'error_detail', 'null'::jsonb) AS error_detail,
        coalesce((j ->> 'step_no')::integer, 0) AS step_no, nullif(j -> 'step_data', 'null'::jsonb) AS step_data
    FROM jsonb_array_elements(sqlc.arg(rows)::jsonb) AS j
), claim AS (
    UPDATE leasehold_work_claims AS c
    SET state        = f.claim_state,
        finished_at  = now(),
        lease_until  = now(),
        error_detail = f.error_detail
    FROM finish AS f
    WHERE c.dedupe_key = f.claim_key
      AND c.owner_node = sqlc.arg(owner_node)::text
      AND c.fence = f.fence
      AND c.state = 'claimed'
      AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
                  WHERE r.id = f.id AND r.status IN ('queued', 'running'))
    RETURNING c.dedupe_key, c.fence
), matched AS (
    SELECT f.id, f.fence, f.status, f.result, f.error_class, f.error_detail, f.step_no, f.step_data
    FROM finish AS f
    JOIN claim ON claim.dedupe_key = f.claim_key AND claim.fence = f.fence
), step AS (
    INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
    SELECT m.id, m.step_no, m.fence, m.step_data
    FROM matched AS m
    WHERE m.step_no > 0
    RETURNING 1
)
UPDATE leasehold_episodes AS e
SET status       = m.status,
    phase        = NULL,
    run_after    = NULL,
    result       = m.result,
    error_class  = m.error_class,
    error_detail = m.error_detail,
    finished_at  = now(),
    last_step_at = CASE WHEN m.step_no > 0 THEN now() ELSE e.last_step_at END
FROM matched AS m
WHERE e.id = m.id
  AND e.status IN ('queued', 'running')
RETURNING e.id;

-- name: RetryEpisode :one
-- Ends a failed attempt that may run again, in one statement: the claim is
-- released, the attempt's error is journaled (step_no, step_data) and kept
-- on the episode (error_class, error_detail), the episode is queued again
-- as its next attempt (attempts + 1, phase retrying, no owner) and made
-- available, due at now() + backoff_ms on the database clock (run_after),
-- so whichever full node has a free slot for the actor then takes it
-- (ClaimAvailable). The dedupe key stays with the episode: the same
-- trigger fired meanwhile is a duplicate.
--
-- Guarantee: fenced like FinishEpisode; the claim UPDATE matches only the
-- caller's live grant, and everything else runs only if it did. A retry from
-- a grant that was stolen, or a duplicate, changes nothing (no row back).
-- The claim it releases is not live, so the available episode keeps the
-- invariant of available.sql. With a cancel request the episode ends
-- canceled instead and is not made available.
WITH claim AS (
    UPDATE leasehold_work_claims AS c
    SET state        = 'released',
        finished_at  = now(),
        lease_until  = now(),
        error_detail = sqlc.narg(error_detail)
    WHERE c.dedupe_key = sqlc.arg(claim_key)
      AND c.owner_node = sqlc.arg(owner_node)
      AND c.fence = sqlc.arg(fence)
      AND c.state = 'claimed'
      AND EXISTS (SELECT 1 FROM leasehold_episodes AS r
                  WHERE r.id = sqlc.arg(id) AND r.status IN ('queued', 'running'))
    RETURNING c.dedupe_key
), step AS (
    INSERT INTO leasehold_episode_steps (episode_id, step_no, fence, data)
    SELECT sqlc.arg(id), sqlc.arg(step_no)::integer, sqlc.arg(fence), sqlc.narg(step_data)::jsonb
    FROM claim
    WHERE sqlc.arg(step_no)::integer > 0
    RETURNING 1
), episode AS (
    UPDATE leasehold_episodes AS e
    SET status       = CASE WHEN e.cancel_requested_at IS NULL THEN 'queued' ELSE 'canceled' END,
        phase        = CASE WHEN e.cancel_requested_at IS NULL THEN 'retrying' END,
        attempts     = CASE WHEN e.cancel_requested_at IS NULL THEN e.attempts + 1 ELSE e.attempts END,
        owner_node   = NULL,
        error_class  = CASE WHEN e.cancel_requested_at IS NULL THEN sqlc.narg(error_class)::text ELSE 'canceled' END,
        error_detail = sqlc.narg(error_detail),
        finished_at  = CASE WHEN e.cancel_requested_at IS NULL THEN NULL ELSE now() END,
        last_step_at = now(),
        run_after    = CASE WHEN e.cancel_requested_at IS NULL
                            THEN now() + (sqlc.arg(backoff_ms)::bigint * interval '1 millisecond') END
    WHERE e.id = sqlc.arg(id)
      AND e.status IN ('queued', 'running')
      AND EXISTS (SELECT 1 FROM claim)
    RETURNING e.id, e.attempts, e.status, e.run_after
)
SELECT episode.id, episode.attempts, episode.status::text AS status,
    coalesce(episode.run_after, now())::timestamptz AS run_after
FROM episode;

-- name: CancelEpisode :one
-- Cancels an episode from anywhere in the cluster. One nobody holds a live
-- lease on (available work, or an orphan whose lease expired) ends
-- canceled at once, in this statement: it leaves the available set
-- (run_after cleared) and an expired grant is fenced out (failed, fence +
-- 1), so no poller takes it and no zombie writes after it. One held live (running, or queued in its holder's slot queue)
-- gets cancel_requested_at instead: its holder reads ListCancelRequests
-- once per heartbeat interval and cancels the run, which ends canceled by
-- its own fenced FinishEpisode. Either way cancel_requested_at is set, so
-- an attempt that fails or is recovered meanwhile ends canceled instead of
-- running again (RetryEpisode, RequeueOrphan). Status canceled in the
-- result: ended here; queued or running: requested. No row: the episode
-- is unknown, archived or already terminal.
--
-- Guarantee: decided on the latest committed rows, under their locks, in
-- the writers' lock order: claim row, then episode row.
-- "Held live" is the claim in state claimed with lease_until > now() on the
-- database clock, read on the locked row, so a grant that commits first is
-- seen and a grant that comes after finds the episode terminal (StartEpisode
-- refuses it).
WITH claim_row AS (
    SELECT x.dedupe_key, (x.state = 'claimed' AND x.lease_until > now()) AS live
    FROM leasehold_work_claims AS x
    WHERE x.dedupe_key = (SELECT coalesce(e0.dedupe_key, 'episode:' || e0.id)
                          FROM leasehold_episodes AS e0 WHERE e0.id = sqlc.arg(id))
    FOR UPDATE
), target AS (
    SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key,
        EXISTS (SELECT 1 FROM claim_row WHERE claim_row.live) AS held
    FROM leasehold_episodes AS e
    WHERE e.id = sqlc.arg(id)
      AND e.status IN ('queued', 'running')
      AND e.archived_at IS NULL
    FOR UPDATE
), fenced AS (
    UPDATE leasehold_work_claims AS c
    SET state = 'failed', fence = c.fence + 1, lease_until = now(), finished_at = now()
    FROM target
    WHERE c.dedupe_key = target.claim_key
      AND NOT target.held
      AND c.state = 'claimed'
      AND c.lease_until <= now()
    RETURNING c.dedupe_key
), episode AS (
    UPDATE leasehold_episodes AS e
    SET status              = CASE WHEN target.held THEN e.status ELSE 'canceled' END,
        phase               = CASE WHEN target.held THEN e.phase END,
        error_class         = CASE WHEN target.held THEN e.error_class ELSE 'canceled' END,
        error_detail        = CASE WHEN target.held THEN e.error_detail ELSE sqlc.narg(error_detail)::jsonb END,
        finished_at         = CASE WHEN target.held THEN e.finished_at ELSE now() END,
        run_after           = CASE WHEN target.held THEN e.run_after END,
        cancel_requested_at = coalesce(e.cancel_requested_at, now())
    FROM target
    WHERE e.id = target.id
    RETURNING e.id, e.status, e.cancel_requested_at
)
SELECT episode.id, episode.status::text AS status, episode.cancel_requested_at::timestamptz AS cancel_requested_at
FROM episode;

-- name: ListCancelRequests :many
-- The episodes owner_node holds live (claim in state claimed under its
-- name) that have a pending cancel request: the holder cancels each run
-- (or its wait in the slot queue) and ends it canceled with its own fenced
-- FinishEpisode. Read-only, served by the partial index on
-- cancel_requested_at, so its cost follows the requests, not the history.
SELECT e.id, c.fence
FROM leasehold_episodes AS e
JOIN leasehold_work_claims AS c
  ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.cancel_requested_at IS NOT NULL
  AND e.status IN ('queued', 'running')
  AND c.owner_node = sqlc.arg(owner_node)::text
  AND c.state = 'claimed';

-- name: RequeueEpisode :one
-- Runs a failed or canceled episode again, for an operator: it becomes
-- available as its next attempt (attempts + 1, phase retrying, no owner,
-- its cancel request cleared), available and due at once, so whichever
-- full node has a free slot for its actor takes it (ClaimAvailable). max_attempts grows to
-- admit that attempt when the episode had used them all. The dedupe key
-- stays with the episode, as it always did.
--
-- Guarantee: only a terminal failed or canceled episode that is not
-- archived is requeued (its own finish wrote a claim that is not live, so
-- the available invariant holds, and the poll grants a fresh fence); the row lock of the UPDATE orders two
-- operators, and the second matches nothing (no row back).
WITH episode AS (
    UPDATE leasehold_episodes AS e
    SET status              = 'queued',
        phase               = 'retrying',
        attempts            = e.attempts + 1,
        max_attempts        = greatest(e.max_attempts, e.attempts + 2),
        owner_node          = NULL,
        finished_at         = NULL,
        cancel_requested_at = NULL,
        last_step_at        = now(),
        run_after           = now()
    WHERE e.id = sqlc.arg(id)
      AND e.status IN ('failed', 'canceled')
      AND e.archived_at IS NULL
    RETURNING e.id, e.attempts, e.run_after
)
SELECT episode.id, episode.attempts, episode.run_after::timestamptz AS run_after
FROM episode;

-- name: GetEpisode :one
SELECT id, actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key,
    status, phase, attempts, max_attempts, budget, source_stack, source_env,
    owner_node, payload, result, error_class, error_detail, queued_at,
    started_at, finished_at, last_step_at, archived_at, created_at, trace_parent
FROM leasehold_episodes
WHERE id = sqlc.arg(id);

-- name: ListSteps :many
SELECT episode_id, step_no, fence, data, created_at
FROM leasehold_episode_steps
WHERE episode_id = sqlc.arg(episode_id)
ORDER BY step_no;
