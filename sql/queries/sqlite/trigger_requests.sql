-- Deferred execution (SQLite): a trigger_only node creates the episode and a
-- trigger request; a full node's poller claims the request and takes the
-- episode's work claim.
--
-- The statements of sql/queries/postgres/trigger_requests.sql, under the
-- same names and kinds, with the same guarantees (ListenTriggerRequests is
-- Postgres-only: SQLite has no notifications, pollers poll on their
-- interval; see sql/queries/dialects.go). Where Postgres writes two tables
-- in one statement, the adapter sends the statements below in one BEGIN
-- IMMEDIATE transaction (Store.atomically; a SAVEPOINT of the caller's
-- transaction for FireTx) and rolls it back unless they all
-- matched. SQLite's single write lock, held from the first statement of
-- the transaction (or of an autocommit statement) to its end, replaces
-- Postgres's row locks and FOR UPDATE SKIP LOCKED: concurrent pollers, in
-- any number of processes, run one after another, each on the latest
-- committed rows.
--
-- Clock: CAST(round(unixepoch('subsec') * 1000) AS INTEGER), milliseconds,
-- read in the deciding statement.
--
-- Scope: a poller sees one env by strict equality (the empty env being the
-- unset env's own world) and either every stack (an empty source_stack
-- argument) or its stack plus unstamped rows, the rule of the recovery sweep.

-- name: CreateDeferredEpisode :one
-- One episode per trigger, created unclaimed (queued), deduplicated on
-- dedupe_key exactly like CreateEpisode (the same index and predicate): a
-- duplicate writes nothing and returns no row (the adapter reads the live
-- episode's id with FindLiveEpisode in the same transaction).
-- CreateDeferredEpisodeRequest follows in the transaction: neither row can
-- exist without the other, so no crash leaves a deferred episode that no
-- poller will ever see. key_version as CreateEpisode's: a key of a version
-- the file no longer uses is aborted ("leasehold: key version").
INSERT INTO leasehold_episodes (
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
    max_attempts, budget, source_stack, source_env, payload, queued_at,
    trace_parent, key_version
) VALUES (
    CAST(@actor_id AS TEXT), CAST(@expectation_id AS TEXT), CAST(@trigger_type AS TEXT),
    sqlc.narg(trigger_ref), sqlc.narg(dedupe_key), 'queued',
    CAST(@max_attempts AS INTEGER), sqlc.narg(budget), CAST(@source_stack AS TEXT),
    CAST(@source_env AS TEXT), sqlc.narg(payload), CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    sqlc.narg(trace_parent), CAST(@key_version AS INTEGER)
)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
DO NOTHING
RETURNING id, created_at;

-- name: CreateDeferredEpisodeRequest :one
-- The trigger request of the episode CreateDeferredEpisode (or
-- CreateDeferredEpisodes) just created, in its transaction: pending, due at
-- the episode's created_at + delay_ms on the database clock (0: at once),
-- so no poller claims it earlier, whatever the nodes' clocks say.
INSERT INTO leasehold_trigger_requests (
    episode_id, actor_id, expectation_id, source_node, source_stack,
    source_env, opts, status, created_at, run_after
)
SELECT e.id, e.actor_id, e.expectation_id, CAST(@source_node AS TEXT), e.source_stack,
    e.source_env, sqlc.narg(opts), 'pending', e.created_at,
    e.created_at + CAST(@delay_ms AS INTEGER)
FROM leasehold_episodes AS e
WHERE e.id = CAST(@episode_id AS INTEGER)
RETURNING id;

-- name: CreateDeferredEpisodes :many
-- A batch of triggers of one expectation (Node.FireBatch, FireBatchTx): one
-- available episode per item, each deduplicated on its own dedupe_key
-- exactly like CreateDeferredEpisode (the same index and predicate). items
-- is a JSON array of {"dedupe_key", "key_version", "trigger_ref",
-- "payload", "trace_parent"} (key_version as CreateEpisode's, per item: one
-- aborted key fails the whole batch); keys are distinct within a batch (the caller folds
-- repeats). One row back per episode created, with its key; a key without
-- a row was a duplicate (the adapter reads its live episode with
-- FindLiveEpisode in the same transaction). CreateDeferredEpisodesRequests
-- then writes the created episodes' requests in the same transaction.
-- WHERE true: SQLite's grammar needs a WHERE in INSERT ... SELECT before
-- ON CONFLICT.
INSERT INTO leasehold_episodes (
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
    max_attempts, budget, source_stack, source_env, payload, queued_at,
    trace_parent, key_version
)
SELECT CAST(@actor_id AS TEXT), CAST(@expectation_id AS TEXT), CAST(@trigger_type AS TEXT),
    nullif(i.value -> '$.trigger_ref', 'null'), i.value ->> '$.dedupe_key', 'queued',
    CAST(@max_attempts AS INTEGER), sqlc.narg(budget), CAST(@source_stack AS TEXT),
    CAST(@source_env AS TEXT), nullif(i.value -> '$.payload', 'null'),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER), i.value ->> '$.trace_parent',
    i.value ->> '$.key_version'
FROM json_each(@items) AS i
WHERE true
ORDER BY i.key
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
DO NOTHING
RETURNING id, created_at, dedupe_key;

-- name: CreateDeferredEpisodesRequests :many
-- The trigger requests of the episodes CreateDeferredEpisodes just created
-- (episode_ids, a JSON array of their ids), in its transaction, as
-- CreateDeferredEpisodeRequest writes one: pending, due at created_at +
-- delay_ms.
INSERT INTO leasehold_trigger_requests (
    episode_id, actor_id, expectation_id, source_node, source_stack,
    source_env, status, created_at, run_after
)
SELECT e.id, e.actor_id, e.expectation_id, CAST(@source_node AS TEXT), e.source_stack,
    e.source_env, 'pending', e.created_at, e.created_at + CAST(@delay_ms AS INTEGER)
FROM leasehold_episodes AS e
WHERE e.id IN (SELECT j.value FROM json_each(@episode_ids) AS j)
RETURNING id, episode_id;

-- name: ClaimTriggerRequests :many
-- Claims up to max_rows open requests for owner_node, due first: pending
-- ones whose run_after has come (database clock), and claimed ones whose
-- poller let the claim lapse (it died between claiming and handing over).
-- Only requests for the (actor, expectation) pairs this node runs in full
-- mode are taken (runnable, a JSON array of {"actor_id", "expectation_id"}
-- objects): a node of another version, without an expectation or its actor,
-- never claims work it cannot run, so it never starts it nor spends an
-- attempt on it; the work waits for a node that can. A node asks for no
-- more than it has free slots for, so work flows to the nodes with
-- capacity.
--
-- Guarantee: each request goes to exactly one poller per claim. One
-- statement, holding the write lock from its start to its end: where
-- Postgres locks the picked rows FOR UPDATE SKIP LOCKED so that concurrent
-- pollers take disjoint sets, here concurrent pollers run one after the
-- other and each picks among the rows the previous ones left claimable.
-- The UPDATE re-checks the claimable condition on each row. Every claim
-- bumps fence, which the hand-over is conditioned on.
UPDATE leasehold_trigger_requests
SET status      = 'claimed',
    claimed_by  = CAST(@owner_node AS TEXT),
    claimed_at  = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    claim_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    fence       = fence + 1
WHERE id IN (
    SELECT r.id
    FROM leasehold_trigger_requests AS r
    WHERE r.status IN ('pending', 'claimed')
      AND ((r.status = 'pending' AND r.run_after <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
           OR r.claim_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
      AND r.source_env = CAST(@source_env AS TEXT)
      AND (CAST(@source_stack AS TEXT) = '' OR r.source_stack IN (CAST(@source_stack AS TEXT), ''))
      AND EXISTS (
            SELECT 1
            FROM json_each(@runnable) AS k
            WHERE json_extract(k.value, '$.actor_id') = r.actor_id
              AND json_extract(k.value, '$.expectation_id') = r.expectation_id)
    ORDER BY r.run_after, r.id
    LIMIT CAST(@max_rows AS INTEGER)
)
  AND ((status = 'pending' AND run_after <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
       OR (status = 'claimed' AND claim_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)))
RETURNING id, episode_id, actor_id, expectation_id, source_node, fence, opts;

-- name: DispatchTriggerRequest :one
-- Hands a claimed request over to its episode, first of up to three
-- statements in one transaction: the request becomes completed, fenced on
-- the request claim (id, claimed_by, fence, claimed). No row back means the
-- request claim lapsed and another poller owns it (claims.ErrLeaseLost);
-- nothing was written. DispatchTriggerRequestGrant and
-- DispatchTriggerRequestStart follow.
UPDATE leasehold_trigger_requests
SET status = 'completed', finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id = CAST(@id AS INTEGER)
  AND claimed_by = CAST(@owner_node AS TEXT)
  AND fence = CAST(@fence AS INTEGER)
  AND status = 'claimed'
RETURNING id, episode_id;

-- name: DispatchTriggerRequests :many
-- DispatchTriggerRequest's first statement for a batch of one poller's
-- claimed requests (a poll's hand-overs: one transaction, one commit for
-- the batch). items is a JSON array of {"id", "fence"}, the poller's
-- claims; each request is completed only under its own row's condition:
-- its id and fence in one item, claimed_by owner_node, status claimed. The
-- requests completed come back; the adapter then sends
-- DispatchTriggerRequestGrant and DispatchTriggerRequestStart for each, in
-- request id order, in the same transaction. A request with no row back
-- was not handed over: its claim lapsed and another poller owns it.
UPDATE leasehold_trigger_requests
SET status = 'completed', finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id IN (SELECT k.value ->> '$.id' FROM json_each(@items) AS k)
  AND claimed_by = CAST(@owner_node AS TEXT)
  AND status = 'claimed'
  AND EXISTS (SELECT 1 FROM json_each(@items) AS j
              WHERE j.value ->> '$.id' = leasehold_trigger_requests.id
                AND j.value ->> '$.fence' = leasehold_trigger_requests.fence)
RETURNING id, episode_id;

-- name: DispatchTriggerRequestGrant :one
-- The hand-over's second statement, after DispatchTriggerRequest(s)
-- completed the request: if its episode is still queued, not archived, and
-- nobody holds a live lease on it, its work claim is granted to owner_node
-- with AcquireClaim's rules (fence + 1). No row back (fence 0 in the
-- adapter's result): the request is completed (the transaction commits) but
-- the episode is not this node's to run: it already ran or is held live
-- elsewhere.
INSERT INTO leasehold_work_claims AS c (
    dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
    attempt, fence, grant_kind, work_type
)
SELECT coalesce(e.dedupe_key, 'episode:' || e.id), 'claimed', CAST(@owner_node AS TEXT),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + CAST(@lease_ms AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER), 1, 1, 'fresh', 'episode'
FROM leasehold_episodes AS e
WHERE e.id = CAST(@episode_id AS INTEGER)
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

-- name: DispatchTriggerRequestStart :one
-- The hand-over's last statement, after DispatchTriggerRequestGrant made a
-- grant: the episode is started under it (StartEpisode's write: running,
-- owner, started and last step on the database clock), so the run begins
-- without another round trip; the started row and the next free step
-- number (the second column) come back. From then on the episode is an
-- ordinary running episode: if this node dies, recovery finds it (running,
-- lease expired) exactly as it finds any other. Conditioned on the grant
-- just made (key, owner, fence, claimed) and re-checking queued and
-- unarchived; under the write lock both hold, so a grant is always started
-- here (no row back would mean the episode changed, and the caller releases
-- the grant, as on Postgres). The table name qualifies id (sqlc would
-- otherwise find it ambiguous with the journal's id in the RETURNING
-- subquery).
UPDATE leasehold_episodes
SET status       = 'running',
    phase        = NULL,
    owner_node   = CAST(@owner_node AS TEXT),
    started_at   = coalesce(started_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    last_step_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE leasehold_episodes.id = CAST(@episode_id AS INTEGER)
  AND status = 'queued'
  AND archived_at IS NULL
  AND EXISTS (SELECT 1 FROM leasehold_work_claims AS c
              WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
                AND c.owner_node = CAST(@owner_node AS TEXT)
                AND c.fence = CAST(@fence AS INTEGER)
                AND c.state = 'claimed')
RETURNING leasehold_episodes.id,
    (SELECT coalesce(max(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = leasehold_episodes.id),
    actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, attempts, max_attempts,
    source_stack, source_env, payload, result, error_class, error_detail, created_at,
    started_at, last_step_at, trace_parent;

-- name: ExpireTriggerRequests :many
-- Expires the open requests of one env (and stack scope) due (run_after)
-- more than ttl_ms ago that no poller holds live (a delayed run is never
-- expired before it was even due); ExpireTriggerRequestsCancel, next in the
-- transaction, cancels their episodes. all_envs (database maintenance)
-- ignores source_env and source_stack.
UPDATE leasehold_trigger_requests
SET status = 'expired', finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE status IN ('pending', 'claimed')
  AND (status = 'pending' OR claim_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
  AND (CAST(@all_envs AS INTEGER) = 1 OR source_env = CAST(@source_env AS TEXT))
  AND (CAST(@all_envs AS INTEGER) = 1 OR CAST(@source_stack AS TEXT) = ''
       OR source_stack IN (CAST(@source_stack AS TEXT), ''))
  AND run_after < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(@ttl_ms AS INTEGER)
RETURNING id, episode_id;

-- name: ExpireTriggerRequestsCancel :many
-- ExpireTriggerRequests' second statement: cancels the episodes of the
-- requests it expired (episode_ids, a JSON array) with error class
-- trigger_expired when they are still queued and unclaimed, so an expired
-- request never leaves an episode queued forever. An episode whose claim
-- is live (a node took it) is left to that node. The ids canceled come
-- back.
UPDATE leasehold_episodes
SET status = 'canceled', phase = NULL, error_class = 'trigger_expired',
    finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id IN (SELECT j.value FROM json_each(@episode_ids) AS j)
  AND status = 'queued'
  AND NOT EXISTS (
      SELECT 1 FROM leasehold_work_claims AS c
      WHERE c.dedupe_key = coalesce(leasehold_episodes.dedupe_key, 'episode:' || leasehold_episodes.id)
        AND c.state = 'claimed'
        AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
RETURNING id;

-- name: ListTriggerRequests :many
-- Operator and test listing of one env's requests, newest first; no
-- coordination role. status '' means any.
SELECT r.id, r.episode_id, r.actor_id, r.expectation_id, r.source_node,
    r.source_stack, r.source_env, r.status, coalesce(r.claimed_by, '') AS claimed_by,
    r.fence, r.opts, r.created_at, r.claimed_at, r.claim_until, r.finished_at
FROM leasehold_trigger_requests AS r
WHERE r.source_env = CAST(@source_env AS TEXT)
  AND (CAST(@status AS TEXT) = '' OR r.status = CAST(@status AS TEXT))
ORDER BY r.id DESC
LIMIT CAST(@max_rows AS INTEGER);

-- name: ReleaseTriggerRequests :many
-- Gives claimed requests back that their poller will not hand over (it is
-- draining, or a hand-over failed): each becomes pending again, due as it
-- was, so another poller claims it at once instead of after the claim
-- lease. items is a JSON array of {"id", "fence"}, the poller's claims.
--
-- Guarantee: one statement under the write lock, each request released
-- only under its own row's condition: its id and fence in one item,
-- claimed_by owner_node, status claimed (as the hand-over's). A claim that
-- lapsed and was taken by another poller (fence + 1), or one already handed
-- over (completed), is left alone. The fence is kept: the next claim bumps
-- it, so the releasing poller's claim can never hand the request over
-- afterwards. The ids released come back. There is no NOTIFY here: the
-- other processes' pollers find the request on their next poll.
UPDATE leasehold_trigger_requests
SET status      = 'pending',
    claimed_by  = NULL,
    claimed_at  = NULL,
    claim_until = NULL
WHERE id IN (SELECT k.value ->> '$.id' FROM json_each(@items) AS k)
  AND claimed_by = CAST(@owner_node AS TEXT)
  AND status = 'claimed'
  AND EXISTS (SELECT 1 FROM json_each(@items) AS j
              WHERE j.value ->> '$.id' = leasehold_trigger_requests.id
                AND j.value ->> '$.fence' = leasehold_trigger_requests.fence)
RETURNING id;

-- name: NextTriggerRequestDue :one
-- How long until the next open request of a poller's scope (source_env,
-- source_stack, runnable as ClaimTriggerRequests) becomes
-- claimable, in milliseconds on the database clock: the earliest run_after
-- of a pending request that is not due yet (a delayed run, a retry's
-- backoff), or the claim_until of a claimed one whose poller may still let
-- it lapse. -1 when there is none.
--
-- A read that decides nothing and takes no write lock: the poller sleeps
-- that long (at most its interval) instead of until its next tick, and
-- ClaimTriggerRequests re-checks due-ness on the database clock when it
-- wakes, so a timer that fires early claims nothing and asks again.
SELECT CAST(coalesce(min(d.due) - CAST(round(unixepoch('subsec') * 1000) AS INTEGER), -1) AS INTEGER) AS wait_ms
FROM (
    SELECT r.run_after AS due
    FROM leasehold_trigger_requests AS r
    WHERE r.status = 'pending'
      AND r.run_after > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
      AND r.source_env = CAST(@source_env AS TEXT)
      AND (CAST(@source_stack AS TEXT) = '' OR r.source_stack IN (CAST(@source_stack AS TEXT), ''))
      AND EXISTS (
            SELECT 1
            FROM json_each(@runnable) AS k
            WHERE json_extract(k.value, '$.actor_id') = r.actor_id
              AND json_extract(k.value, '$.expectation_id') = r.expectation_id)
    UNION ALL
    SELECT r.claim_until
    FROM leasehold_trigger_requests AS r
    WHERE r.status = 'claimed'
      AND r.claim_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
      AND r.source_env = CAST(@source_env AS TEXT)
      AND (CAST(@source_stack AS TEXT) = '' OR r.source_stack IN (CAST(@source_stack AS TEXT), ''))
      AND EXISTS (
            SELECT 1
            FROM json_each(@runnable) AS k
            WHERE json_extract(k.value, '$.actor_id') = r.actor_id
              AND json_extract(k.value, '$.expectation_id') = r.expectation_id)
) AS d;
