-- Available work: an episode row with run_after set (migration 00016). A
-- trigger_only node's trigger, an overflow, a delayed run, a retry in its
-- backoff, a recovered orphan and an operator's retry are all this one
-- state: status queued, run_after the instant it falls due on the database
-- clock, nobody holding a live grant on it. A full node's poller takes it
-- with ClaimAvailable, which grants the work claim and starts the episode
-- in the same statement. All times are now(), the database clock.
--
-- Invariant, kept by every statement that writes run_after: it is set only
-- on a queued, unarchived episode that nobody holds a live grant on, and
-- it is cleared by the write that grants and starts that episode
-- (ClaimAvailable), by any other start or finish (StartEpisode,
-- FinishEpisode(s): a claims user that acquired the episode's key directly
-- and ran it), and by the writes that end it otherwise (CancelEpisode,
-- ExpireAvailable). Recovery's statements require run_after IS NULL, and
-- CreateEpisode's grant is for the row it inserts.
--
-- Scope: a poller sees one env by strict equality (the empty env being the
-- unset env's own world) and either every stack (an empty source_stack
-- argument) or its stack plus unstamped rows, the rule of the recovery sweep.

-- name: CreateDeferredEpisode :one
-- One episode per trigger, created available (queued, unclaimed, due at
-- run_after): one row, so no crash leaves a deferred episode that no
-- poller will ever see. Deduplicated on
-- dedupe_key exactly like CreateEpisode (the same index and predicate); a
-- duplicate writes nothing and returns created = false with the live
-- episode's id as CreateEpisode reads it (0 when its snapshot began before
-- that episode committed; the adapter then reads FindLiveEpisode). The
-- episode is due at
-- now() + delay_ms on the database clock (0: at once): no poller claims it
-- earlier, whatever the nodes' clocks say. key_version as CreateEpisode's:
-- a key of a version the database no longer uses is refused (LH002).
WITH created AS (
    INSERT INTO leasehold_episodes (
        actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
        max_attempts, budget, source_stack, source_env, payload, queued_at,
        trace_parent, key_version, run_after, opts
    ) VALUES (
        sqlc.arg(actor_id), sqlc.arg(expectation_id), sqlc.arg(trigger_type),
        sqlc.narg(trigger_ref), sqlc.narg(dedupe_key), 'queued',
        sqlc.arg(max_attempts), sqlc.narg(budget), sqlc.arg(source_stack),
        sqlc.arg(source_env), sqlc.narg(payload), now(), sqlc.narg(trace_parent)::text,
        sqlc.arg(key_version)::smallint,
        now() + (sqlc.arg(delay_ms)::bigint * interval '1 millisecond'),
        sqlc.narg(opts)::jsonb
    )
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
    DO NOTHING
    RETURNING id, created_at
), existing AS (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.dedupe_key = sqlc.narg(dedupe_key)::text
      AND e.archived_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM created)
    LIMIT 1
)
SELECT true AS created, created.id, created.created_at
FROM created
UNION ALL
SELECT false, coalesce((SELECT id FROM existing), 0)::bigint, now()
WHERE NOT EXISTS (SELECT 1 FROM created);

-- name: CreateDeferredEpisodes :many
-- A batch of triggers of one expectation (Node.FireBatch, FireBatchTx): one
-- available episode per item, one row each, in one statement,
-- each item deduplicated on its own dedupe_key exactly like
-- CreateDeferredEpisode (the same index and predicate). The items arrive
-- as parallel arrays, one element per item in order (dedupe_keys,
-- key_versions, trigger_refs, payloads, trace_parents; an absent document
-- or trace is '' and becomes NULL, as a JSON null does): unnested in the
-- select list they zip row by row, and binary arrays cost the server less
-- than parsing a JSON document of the batch (measured: 68,000 against
-- 61,000 units/s in batches of 500; a COPY into a staging table first,
-- 62,000, was no faster). key_version as CreateEpisode's, per item (one
-- refused key fails the whole batch, LH002); keys are distinct within a
-- batch (the caller folds repeats). One row back per item: created with
-- its episode, or a duplicate with the id of the live episode
-- that holds its key as the statement's snapshot shows it (0 when that
-- episode committed after the snapshot began).
WITH input AS (
    SELECT generate_series(1, cardinality(sqlc.arg(dedupe_keys)::text[])) AS ord,
        unnest(sqlc.arg(dedupe_keys)::text[]) AS dedupe_key,
        unnest(sqlc.arg(key_versions)::smallint[]) AS key_version,
        nullif(nullif(unnest(sqlc.arg(trigger_refs)::text[]), '')::jsonb, 'null'::jsonb) AS trigger_ref,
        nullif(nullif(unnest(sqlc.arg(payloads)::text[]), '')::jsonb, 'null'::jsonb) AS payload,
        nullif(unnest(sqlc.arg(trace_parents)::text[]), '') AS trace_parent
), created AS (
    INSERT INTO leasehold_episodes (
        actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
        max_attempts, budget, source_stack, source_env, payload, queued_at,
        trace_parent, key_version, run_after
    )
    SELECT sqlc.arg(actor_id), sqlc.arg(expectation_id), sqlc.arg(trigger_type),
        i.trigger_ref, i.dedupe_key, 'queued',
        sqlc.arg(max_attempts), sqlc.narg(budget), sqlc.arg(source_stack),
        sqlc.arg(source_env), i.payload, now(), i.trace_parent, i.key_version,
        now() + (sqlc.arg(delay_ms)::bigint * interval '1 millisecond')
    FROM input AS i
    ORDER BY i.ord
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
    DO NOTHING
    RETURNING id, created_at, dedupe_key
)
SELECT true AS created, created.id, created.created_at, created.dedupe_key::text AS dedupe_key
FROM created
UNION ALL
SELECT false, coalesce(e.id, 0)::bigint, now(), i.dedupe_key
FROM input AS i
LEFT JOIN leasehold_episodes AS e ON e.dedupe_key = i.dedupe_key AND e.archived_at IS NULL
WHERE NOT EXISTS (SELECT 1 FROM created AS c WHERE c.dedupe_key = i.dedupe_key);

-- name: ClaimAvailable :many
-- A poll: takes up to max_rows due available episodes for owner_node and
-- starts each under a fresh grant of its work claim, in one statement. Due
-- first: run_after <= now() on the database clock, whatever the nodes'
-- clocks say. Only episodes of the (actor, expectation) pairs this node
-- runs in full mode are taken (runnable, a JSON array of {"actor_id",
-- "expectation_id"} objects, the same in every dialect): a node of another
-- version, without an expectation or its actor, never takes work it cannot
-- run, so it never starts it nor spends an attempt on it; the work waits
-- for a node that can. The runner asks for no more than the slots it has
-- reserved, so work flows to the nodes with capacity instead of waiting in
-- one node's memory.
--
-- Guarantee: each available episode is granted to exactly one poller, and
-- started under that grant. FOR UPDATE SKIP LOCKED locks the picked rows,
-- so concurrent pollers take disjoint sets and never wait on each other,
-- and the pick's conditions (queued, unarchived, due) are re-checked on
-- each locked row's latest version: a cancel or an expiry that committed
-- first is seen, and one that comes after waits for this statement and
-- then finds run_after cleared. The work claim is granted with
-- AcquireClaim's rules (a row nobody holds live: fence + 1, attempt and
-- grant kind as AcquireClaim counts them), in key order, so two polls
-- never wait on each other in opposite orders. Every picked episode leaves
-- the available set in this statement: the ones granted are started
-- (running, owner_node, started and last step on the database clock; no
-- StartEpisode), and one whose claim is held live elsewhere (a state the
-- invariant above rules out, kept for a database that broke it) only loses
-- run_after: its holder runs it, or recovery takes it once that lease ends.
-- Its row comes back with fence 0.
--
-- Locks: episode rows, then their claim rows; the other writers of an
-- available episode's rows take the claim row first (CancelEpisode), so a
-- cancel racing this grant can deadlock with it, and the server then
-- aborts one of the two (40P01, retryable) instead of both waiting.
--
-- Plan: the pick reads leasehold_episodes_available_idx in its own order
-- (source_env, run_after) and stops once it has max_rows rows; the UPDATEs
-- reach their rows by primary key alone (= ANY (ARRAY(...)), no other
-- condition), so no plan depends on the table's statistics: a condition
-- beside the id that implied a partial index's predicate let the planner,
-- misled by a never analyzed table, scan that whole index per write
-- (measured on the hand-over this statement replaced: 20,000 rows, 50 ms,
-- per batch of 64 in a 20,000 unit burn-down). The runner asks for at
-- most 64 rows per statement, which keeps the joins between the CTEs below
-- small whatever plan the server picks for them (a nested loop over two
-- CTEs of 500 rows compares 250,000 pairs).
--
-- Bound: bound_ms > 0 sets lock_timeout, LOCAL, before any claim row is
-- locked (the grant joins bound; the pick skips locked rows and never
-- waits), so a frozen holder of a claim row makes this fail after bound_ms
-- (55P03, retryable) instead of hanging; 0, inside a caller's transaction,
-- leaves its setting alone (see AcquireClaim).
WITH bound AS MATERIALIZED (
    SELECT CASE WHEN sqlc.arg(bound_ms)::bigint > 0
                THEN set_config('lock_timeout', sqlc.arg(bound_ms)::bigint || 'ms', true)
           END AS lock_timeout
), picked AS (
    SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key,
        e.actor_id, e.expectation_id, e.opts
    FROM leasehold_episodes AS e
    WHERE e.source_env = sqlc.arg(source_env)::text
      AND e.run_after <= now()
      AND e.status = 'queued'
      AND e.archived_at IS NULL
      AND (sqlc.arg(source_stack)::text = '' OR e.source_stack IN (sqlc.arg(source_stack)::text, ''))
      AND EXISTS (
            SELECT 1
            FROM jsonb_to_recordset(sqlc.arg(runnable)::text::jsonb) AS k (actor_id text, expectation_id text)
            WHERE k.actor_id = e.actor_id
              AND k.expectation_id = e.expectation_id)
    ORDER BY e.run_after
    LIMIT sqlc.arg(max_rows)::integer
    FOR UPDATE SKIP LOCKED
), granted AS (
    INSERT INTO leasehold_work_claims AS c (
        dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
        attempt, fence, grant_kind, work_type
    )
    SELECT picked.claim_key, 'claimed', sqlc.arg(owner_node)::text,
        now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
        now(), now(), 1, 1, 'fresh', 'episode'
    FROM picked, bound
    ORDER BY picked.claim_key
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
    RETURNING c.dedupe_key, c.fence, c.attempt, c.lease_until, c.claimed_at, c.grant_kind
), started AS (
    UPDATE leasehold_episodes AS e
    SET status       = 'running',
        phase        = NULL,
        run_after    = NULL,
        owner_node   = sqlc.arg(owner_node)::text,
        started_at   = coalesce(e.started_at, now()),
        last_step_at = now()
    WHERE e.id = ANY (ARRAY(SELECT picked.id FROM picked
                            WHERE picked.claim_key IN (SELECT granted.dedupe_key FROM granted)))
    RETURNING e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref, e.dedupe_key,
        e.attempts, e.max_attempts, e.source_stack, e.source_env, e.payload, e.result,
        e.error_class, e.error_detail, e.created_at, e.started_at, e.last_step_at, e.trace_parent
), held_elsewhere AS (
    UPDATE leasehold_episodes AS e
    SET run_after = NULL
    WHERE e.id = ANY (ARRAY(SELECT picked.id FROM picked
                            WHERE picked.claim_key NOT IN (SELECT granted.dedupe_key FROM granted)))
    RETURNING e.id
)
SELECT picked.id AS episode_id, picked.actor_id AS picked_actor_id,
    picked.expectation_id AS picked_expectation_id, picked.opts,
    coalesce(granted.dedupe_key, '')::text AS claim_key,
    coalesce(granted.fence, 0)::bigint AS claim_fence,
    coalesce(granted.attempt, 0)::integer AS attempt,
    coalesce(granted.lease_until, now())::timestamptz AS lease_until,
    coalesce(granted.claimed_at, now())::timestamptz AS claimed_at,
    coalesce(granted.grant_kind, '')::text AS grant_kind,
    (started.id IS NOT NULL)::boolean AS started,
    (SELECT coalesce(max(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = picked.id)::integer AS next_step_no,
    started.actor_id, started.expectation_id, started.trigger_type, started.trigger_ref,
    started.dedupe_key, started.attempts, started.max_attempts, started.source_stack,
    started.source_env, started.payload, started.result, started.error_class,
    started.error_detail, started.created_at, started.started_at, started.last_step_at,
    started.trace_parent
FROM picked
LEFT JOIN granted ON granted.dedupe_key = picked.claim_key
LEFT JOIN started ON started.id = picked.id
ORDER BY picked.id;

-- name: ExpireAvailable :many
-- Expires the available episodes of one env (and stack scope) due
-- (run_after) more than ttl_ms ago: each ends canceled, class
-- trigger_expired, and leaves the available set (a delayed run is never
-- expired before it was even due). all_envs (database maintenance) ignores
-- source_env and source_stack. The ids canceled come back.
--
-- Guarantee: the UPDATE locks each row and re-checks the conditions on its
-- latest version, so a poll that granted the episode first (run_after
-- cleared, running) is seen and the episode is left to its node, and a
-- poll that comes after skips the locked row and then finds it canceled.
-- An episode whose claim is held live (the invariant of this file rules
-- it out) is left alone.
UPDATE leasehold_episodes AS e
SET status = 'canceled', phase = NULL, error_class = 'trigger_expired',
    run_after = NULL, finished_at = now()
WHERE e.run_after < now() - (sqlc.arg(ttl_ms)::bigint * interval '1 millisecond')
  AND e.status = 'queued'
  AND e.archived_at IS NULL
  AND (sqlc.arg(all_envs)::boolean OR e.source_env = sqlc.arg(source_env)::text)
  AND (sqlc.arg(all_envs)::boolean OR sqlc.arg(source_stack)::text = ''
       OR e.source_stack IN (sqlc.arg(source_stack)::text, ''))
  AND NOT EXISTS (
      SELECT 1 FROM leasehold_work_claims AS c
      WHERE c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
        AND c.state = 'claimed'
        AND c.lease_until > now())
RETURNING e.id;

-- name: ListenTriggerRequests :exec
-- Subscribes the session to the notification the triggers on
-- leasehold_episodes send at commit when an episode becomes available
-- (migration 00016; the channel keeps its name). A wake-up only: pollers
-- still take work with ClaimAvailable, and poll on an interval as a
-- fallback.
LISTEN leasehold_trigger_requests;

-- name: NextAvailableDue :one
-- How long until the next available episode of a poller's scope
-- (source_env, source_stack, runnable, as ClaimAvailable) falls due, in
-- milliseconds on the database clock: the earliest run_after that has not
-- come yet (a delayed run, a retry's backoff). -1 when there is none.
--
-- A read that decides nothing: the poller sleeps that long (at most its
-- interval) instead of until its next tick, and ClaimAvailable re-checks
-- due-ness on the database clock when it wakes, so a timer that fires
-- early takes nothing and asks again, and one that fires late only starts
-- the work late. Served by leasehold_episodes_available_idx.
SELECT coalesce(ceil(extract(epoch FROM (min(e.run_after) - now())) * 1000), -1)::bigint AS wait_ms
FROM leasehold_episodes AS e
WHERE e.source_env = sqlc.arg(source_env)::text
  AND e.run_after > now()
  AND (sqlc.arg(source_stack)::text = '' OR e.source_stack IN (sqlc.arg(source_stack)::text, ''))
  AND EXISTS (
        SELECT 1
        FROM jsonb_to_recordset(sqlc.arg(runnable)::text::jsonb) AS k (actor_id text, expectation_id text)
        WHERE k.actor_id = e.actor_id
          AND k.expectation_id = e.expectation_id);
