-- Deferred execution: a trigger_only node creates the episode and a trigger
-- request; a full node's poller claims the request and takes the episode's
-- work claim. All times are now(), the database clock.
--
-- Scope: a poller sees one env by strict equality (the empty env being the
-- unset env's own world) and either every stack (an empty source_stack
-- argument) or its stack plus unstamped rows, the rule of the recovery sweep.

-- name: CreateDeferredEpisode :one
-- One episode per trigger, created unclaimed, and its trigger request, in
-- one statement: neither row can exist without the other, so no crash
-- leaves a deferred episode that no poller will ever see. Deduplicated on
-- dedupe_key exactly like CreateEpisode (the same index and predicate); a
-- duplicate writes nothing and returns created = false with the live
-- episode's id as CreateEpisode reads it (0 when its snapshot began before
-- that episode committed; the adapter then reads FindLiveEpisode). The
-- request is due at
-- now() + delay_ms on the database clock (0: at once): no poller claims it
-- earlier, whatever the nodes' clocks say. key_version as CreateEpisode's:
-- a key of a version the database no longer uses is refused (LH002).
WITH created AS (
    INSERT INTO leasehold_episodes (
        actor_id, expectation_id, trigger_type, trigger_ref, dedupe_key, status,
        max_attempts, budget, source_stack, source_env, payload, queued_at,
        trace_parent, key_version
    ) VALUES (
        sqlc.arg(actor_id), sqlc.arg(expectation_id), sqlc.arg(trigger_type),
        sqlc.narg(trigger_ref), sqlc.narg(dedupe_key), 'queued',
        sqlc.arg(max_attempts), sqlc.narg(budget), sqlc.arg(source_stack),
        sqlc.arg(source_env), sqlc.narg(payload), now(), sqlc.narg(trace_parent)::text,
        sqlc.arg(key_version)::smallint
    )
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
    DO NOTHING
    RETURNING id, created_at, actor_id, expectation_id, source_stack, source_env
), request AS (
    INSERT INTO leasehold_trigger_requests (
        episode_id, actor_id, expectation_id, source_node, source_stack,
        source_env, opts, status, created_at, run_after
    )
    SELECT created.id, created.actor_id, created.expectation_id,
        sqlc.arg(source_node)::text, created.source_stack, created.source_env,
        sqlc.narg(opts)::jsonb, 'pending', created.created_at,
        created.created_at + (sqlc.arg(delay_ms)::bigint * interval '1 millisecond')
    FROM created
    RETURNING id, episode_id
), existing AS (
    SELECT e.id
    FROM leasehold_episodes AS e
    WHERE e.dedupe_key = sqlc.narg(dedupe_key)::text
      AND e.archived_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM created)
    LIMIT 1
)
SELECT true AS created, created.id, created.created_at, request.id AS request_id
FROM created
JOIN request ON request.episode_id = created.id
UNION ALL
SELECT false, coalesce((SELECT id FROM existing), 0)::bigint, now(), 0::bigint
WHERE NOT EXISTS (SELECT 1 FROM created);

-- name: CreateDeferredEpisodes :many
-- A batch of triggers of one expectation (Node.FireBatch, FireBatchTx): one
-- available episode per item and its trigger request, in one statement,
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
-- its episode and request, or a duplicate with the id of the live episode
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
        trace_parent, key_version
    )
    SELECT sqlc.arg(actor_id), sqlc.arg(expectation_id), sqlc.arg(trigger_type),
        i.trigger_ref, i.dedupe_key, 'queued',
        sqlc.arg(max_attempts), sqlc.narg(budget), sqlc.arg(source_stack),
        sqlc.arg(source_env), i.payload, now(), i.trace_parent, i.key_version
    FROM input AS i
    ORDER BY i.ord
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL
    DO NOTHING
    RETURNING id, created_at, dedupe_key, actor_id, expectation_id, source_stack, source_env
), request AS (
    INSERT INTO leasehold_trigger_requests (
        episode_id, actor_id, expectation_id, source_node, source_stack,
        source_env, status, created_at, run_after
    )
    SELECT created.id, created.actor_id, created.expectation_id,
        sqlc.arg(source_node)::text, created.source_stack, created.source_env,
        'pending', created.created_at,
        created.created_at + (sqlc.arg(delay_ms)::bigint * interval '1 millisecond')
    FROM created
    RETURNING id, episode_id
)
SELECT true AS created, created.id, created.created_at, created.dedupe_key::text AS dedupe_key, request.id AS request_id
FROM created
JOIN request ON request.episode_id = created.id
UNION ALL
SELECT false, coalesce(e.id, 0)::bigint, now(), i.dedupe_key, 0::bigint
FROM input AS i
LEFT JOIN leasehold_episodes AS e ON e.dedupe_key = i.dedupe_key AND e.archived_at IS NULL
WHERE NOT EXISTS (SELECT 1 FROM created AS c WHERE c.dedupe_key = i.dedupe_key);

-- name: ClaimTriggerRequests :many
-- Claims up to max_rows open requests for owner_node, due first: pending
-- ones whose run_after has come (database clock), and claimed ones whose
-- poller let the claim lapse (it died between claiming and handing over).
-- Only requests for the (actor, expectation) pairs this node runs in full
-- mode are taken (runnable, a JSON array of {"actor_id", "expectation_id"}
-- objects, the same in every dialect): a node of another
-- version, without an expectation or its actor, never claims work it cannot
-- run, so it never starts it nor spends an attempt on it; the work waits
-- for a node that can. A node asks for no more than it has free slots for,
-- so work flows to the nodes with capacity instead of waiting in one node's
-- memory.
--
-- Guarantee: each request goes to exactly one poller per claim. FOR UPDATE
-- SKIP LOCKED locks the picked rows, so concurrent pollers take disjoint
-- sets and never wait on each other; the UPDATE re-checks the claimable
-- condition on the locked row. Every claim bumps fence, which the hand-over
-- is conditioned on.
--
-- The UPDATE writes exactly the picked rows: picked locked each one and
-- checked the claimable condition on its latest version (a row another
-- poller changed meanwhile is skipped or re-checked there), and the lock
-- holds until this statement's transaction ends, so nothing can change a
-- picked row before the UPDATE writes it.
--
-- Plan: the pick reads the due index in due order (source_env, run_after)
-- and stops once it has max_rows claimable rows: ties keep the index's
-- order, which is insertion order; an ORDER BY the index cannot give made
-- the planner, guessing from a never analyzed table, read and sort every
-- due request on every poll (measured: 17,000 rows, 47 ms, per poll of a
-- 20,000 unit backlog). The picked ids reach the UPDATE as an array
-- (= ANY (ARRAY(...))) and the UPDATE has no other condition, so the
-- primary key is the only way to them: a condition that implied the due
-- index's predicate let the planner scan the whole index instead, and a
-- join against the CTE could become a nested loop over every open request
-- per picked row (measured: 2.4 s for 500 of 10,000).
WITH picked AS (
    SELECT r.id
    FROM leasehold_trigger_requests AS r
    WHERE r.status IN ('pending', 'claimed')
      AND ((r.status = 'pending' AND r.run_after <= now()) OR r.claim_until <= now())
      AND r.source_env = sqlc.arg(source_env)::text
      AND (sqlc.arg(source_stack)::text = '' OR r.source_stack IN (sqlc.arg(source_stack)::text, ''))
      AND EXISTS (
            SELECT 1
            FROM jsonb_to_recordset(sqlc.arg(runnable)::text::jsonb) AS k (actor_id text, expectation_id text)
            WHERE k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
    ORDER BY r.run_after
    LIMIT sqlc.arg(max_rows)::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE leasehold_trigger_requests AS r
SET status      = 'claimed',
    claimed_by  = sqlc.arg(owner_node)::text,
    claimed_at  = now(),
    claim_until = now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
    fence       = r.fence + 1
WHERE r.id = ANY (ARRAY(SELECT picked.id FROM picked))
RETURNING r.id, r.episode_id, r.actor_id, r.expectation_id, r.source_node,
    r.fence, r.opts;

-- name: DispatchTriggerRequest :one
-- Hands a claimed request over to its episode's work claim, in one
-- statement: the request becomes completed and, if the episode is still
-- queued and nobody holds a live lease on it, its work claim is granted to
-- owner_node with AcquireClaim's rules (fence + 1) and the episode is
-- started under that grant (StartEpisode's write: running, owner, started
-- and last step on the database clock), so the run begins without another
-- round trip. From then on the episode is an ordinary running episode: if
-- this node dies, recovery finds it (running, lease expired) exactly as it
-- finds any other.
--
-- Guarantee: fenced on the request claim (id, claimed_by, fence, claimed);
-- no row back means the request claim lapsed and another poller owns it.
-- fence 0 in the result means the request is completed but the episode is
-- not this node's to run: it already ran or is held live elsewhere. The
-- start is conditioned on the grant made here and re-checks queued and
-- unarchived on the locked episode row: started false with a fence means
-- the episode changed between this statement's snapshot and its write (a
-- cancel), and the caller releases the grant.
--
-- Plan: as DispatchTriggerRequests', every row by its primary key alone
-- (the episode looked up by id, then locked, then checked).
--
-- Bound: bound_ms > 0 sets lock_timeout, LOCAL, before any row is locked
-- (every row this statement writes is reached through a join with bound),
-- so a frozen holder of the work claim makes it fail after bound_ms (55P03,
-- retryable) instead of hanging; 0, inside a caller's transaction, leaves
-- its setting alone (see AcquireClaim).
WITH bound AS MATERIALIZED (
    SELECT CASE WHEN sqlc.arg(bound_ms)::bigint > 0
                THEN set_config('lock_timeout', sqlc.arg(bound_ms)::bigint || 'ms', true)
           END AS lock_timeout
), request AS (
    UPDATE leasehold_trigger_requests AS r
    SET status = 'completed', finished_at = now()
    FROM bound
    WHERE r.id = sqlc.arg(id)
      AND r.claimed_by = sqlc.arg(owner_node)::text
      AND r.fence = sqlc.arg(fence)
      AND r.status = 'claimed'
    RETURNING r.id, r.episode_id
), episode AS (
    SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key
    FROM request
    CROSS JOIN LATERAL (
        SELECT e.id, e.dedupe_key, e.status, e.archived_at
        FROM leasehold_episodes AS e
        WHERE e.id = request.episode_id
        OFFSET 0
    ) AS e
    WHERE e.status = 'queued'
      AND e.archived_at IS NULL
), granted AS (
    INSERT INTO leasehold_work_claims AS c (
        dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
        attempt, fence, grant_kind, work_type
    )
    SELECT episode.claim_key, 'claimed', sqlc.arg(owner_node)::text,
        now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
        now(), now(), 1, 1, 'fresh', 'episode'
    FROM episode, bound
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
), start_row AS (
    SELECT e.id
    FROM episode
    JOIN granted ON granted.dedupe_key = episode.claim_key
    CROSS JOIN LATERAL (
        SELECT e.id, e.status, e.archived_at
        FROM leasehold_episodes AS e
        WHERE e.id = episode.id
        OFFSET 0
        FOR UPDATE
    ) AS e
    WHERE e.status = 'queued'
      AND e.archived_at IS NULL
), started AS (
    UPDATE leasehold_episodes AS e
    SET status       = 'running',
        phase        = NULL,
        owner_node   = sqlc.arg(owner_node)::text,
        started_at   = coalesce(e.started_at, now()),
        last_step_at = now()
    WHERE e.id = (SELECT start_row.id FROM start_row)
    RETURNING e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref, e.dedupe_key,
        e.attempts, e.max_attempts, e.source_stack, e.source_env, e.payload, e.result,
        e.error_class, e.error_detail, e.created_at, e.started_at, e.last_step_at, e.trace_parent
)
SELECT request.id AS request_id, request.episode_id,
    coalesce(granted.dedupe_key, '')::text AS claim_key,
    coalesce(granted.fence, 0)::bigint AS claim_fence,
    coalesce(granted.attempt, 0)::integer AS attempt,
    coalesce(granted.lease_until, now())::timestamptz AS lease_until,
    coalesce(granted.claimed_at, now())::timestamptz AS claimed_at,
    coalesce(granted.grant_kind, '')::text AS grant_kind,
    (started.id IS NOT NULL)::boolean AS started,
    (SELECT coalesce(max(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = request.episode_id)::integer AS next_step_no,
    started.actor_id, started.expectation_id, started.trigger_type, started.trigger_ref,
    started.dedupe_key, started.attempts, started.max_attempts, started.source_stack,
    started.source_env, started.payload, started.result, started.error_class,
    started.error_detail, started.created_at, started.started_at, started.last_step_at,
    started.trace_parent
FROM request
LEFT JOIN granted ON true
LEFT JOIN started ON true;

-- name: DispatchTriggerRequests :many
-- DispatchTriggerRequest for a batch of one poller's claimed requests, in
-- one statement (a poll's hand-overs: one commit for the batch instead of
-- one per request). items is a JSON array of {"id", "fence"}, the
-- poller's claims; each row is handed over exactly as DispatchTriggerRequest
-- hands over one, conditioned on its own request claim (id, claimed_by,
-- fence, claimed), its episode queued and unarchived, and its work claim
-- not live, and started under the grant made here.
--
-- One row back per request that was still this poller's: the grant (fence
-- 0: the episode is not this node's to run) and the started episode. A
-- request with no row back was not handed over by this statement: its
-- claim lapsed and another poller owns it. Work claims are granted in key
-- order, so two batches never wait on each other in opposite orders.
--
-- Plan: every row is reached by its primary key, whatever the planner
-- guesses of the tables: a request or an episode is looked up by id alone
-- (a LATERAL subquery per id, which OFFSET 0 keeps every other condition
-- out of), locked where it is written, and only then checked (mine,
-- start_row: on the latest version, under the lock, which holds until the
-- statement's transaction ends); the UPDATEs then write exactly those ids
-- (= ANY (ARRAY(...)), no other condition). A condition beside the id that
-- implied a partial index's predicate (status = 'queued', 'claimed') let
-- the planner, misled by a never analyzed table, scan that whole index per
-- hand-over (measured: 20,000 rows, 50 ms, per batch of 64 in a 20,000
-- unit burn-down), and a join against a whole table could become a nested
-- loop over it (4.6 s for 500 hand-overs among 10,000 queued episodes).
-- The runner sends at most 64 requests per statement, which keeps the
-- joins between the CTEs below small.
--
-- Bound: as DispatchTriggerRequest's.
WITH bound AS MATERIALIZED (
    SELECT CASE WHEN sqlc.arg(bound_ms)::bigint > 0
                THEN set_config('lock_timeout', sqlc.arg(bound_ms)::bigint || 'ms', true)
           END AS lock_timeout
), input AS (
    -- Joined with bound, so no input row (and no lock) exists before the
    -- bound is set.
    SELECT (j ->> 'id')::bigint AS id, (j ->> 'fence')::bigint AS fence
    FROM bound, jsonb_array_elements(sqlc.arg(items)::jsonb) AS j
), mine AS (
    SELECT r.id
    FROM input
    CROSS JOIN LATERAL (
        SELECT r.id, r.claimed_by, r.fence, r.status
        FROM leasehold_trigger_requests AS r
        WHERE r.id = input.id
        OFFSET 0
        FOR UPDATE
    ) AS r
    WHERE r.claimed_by = sqlc.arg(owner_node)::text
      AND r.fence = input.fence
      AND r.status = 'claimed'
), request AS (
    UPDATE leasehold_trigger_requests AS r
    SET status = 'completed', finished_at = now()
    WHERE r.id = ANY (ARRAY(SELECT mine.id FROM mine))
    RETURNING r.id, r.episode_id
), episode AS (
    SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key
    FROM request
    CROSS JOIN LATERAL (
        SELECT e.id, e.dedupe_key, e.status, e.archived_at
        FROM leasehold_episodes AS e
        WHERE e.id = request.episode_id
        OFFSET 0
    ) AS e
    WHERE e.status = 'queued'
      AND e.archived_at IS NULL
), granted AS (
    INSERT INTO leasehold_work_claims AS c (
        dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
        attempt, fence, grant_kind, work_type
    )
    SELECT episode.claim_key, 'claimed', sqlc.arg(owner_node)::text,
        now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
        now(), now(), 1, 1, 'fresh', 'episode'
    FROM episode, bound
    ORDER BY episode.claim_key
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
), start_row AS (
    SELECT e.id
    FROM episode
    JOIN granted ON granted.dedupe_key = episode.claim_key
    CROSS JOIN LATERAL (
        SELECT e.id, e.status, e.archived_at
        FROM leasehold_episodes AS e
        WHERE e.id = episode.id
        OFFSET 0
        FOR UPDATE
    ) AS e
    WHERE e.status = 'queued'
      AND e.archived_at IS NULL
), started AS (
    UPDATE leasehold_episodes AS e
    SET status       = 'running',
        phase        = NULL,
        owner_node   = sqlc.arg(owner_node)::text,
        started_at   = coalesce(e.started_at, now()),
        last_step_at = now()
    WHERE e.id = ANY (ARRAY(SELECT start_row.id FROM start_row))
    RETURNING e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref, e.dedupe_key,
        e.attempts, e.max_attempts, e.source_stack, e.source_env, e.payload, e.result,
        e.error_class, e.error_detail, e.created_at, e.started_at, e.last_step_at, e.trace_parent
)
SELECT request.id AS request_id, request.episode_id,
    coalesce(granted.dedupe_key, '')::text AS claim_key,
    coalesce(granted.fence, 0)::bigint AS claim_fence,
    coalesce(granted.attempt, 0)::integer AS attempt,
    coalesce(granted.lease_until, now())::timestamptz AS lease_until,
    coalesce(granted.claimed_at, now())::timestamptz AS claimed_at,
    coalesce(granted.grant_kind, '')::text AS grant_kind,
    (started.id IS NOT NULL)::boolean AS started,
    (SELECT coalesce(max(s.step_no), 0) + 1 FROM leasehold_episode_steps AS s
     WHERE s.episode_id = request.episode_id)::integer AS next_step_no,
    started.actor_id, started.expectation_id, started.trigger_type, started.trigger_ref,
    started.dedupe_key, started.attempts, started.max_attempts, started.source_stack,
    started.source_env, started.payload, started.result, started.error_class,
    started.error_detail, started.created_at, started.started_at, started.last_step_at,
    started.trace_parent
FROM request
LEFT JOIN episode ON episode.id = request.episode_id
LEFT JOIN granted ON granted.dedupe_key = episode.claim_key
LEFT JOIN started ON started.id = request.episode_id
ORDER BY request.id;

-- name: ExpireTriggerRequests :many
-- Expires the open requests of one env (and stack scope) due (run_after)
-- more than ttl_ms ago that no poller holds live (a delayed run is never
-- expired before it was even due), and cancels their episodes (error
-- class trigger_expired) when they are still queued and unclaimed, so an
-- expired request never leaves an episode queued forever. An episode whose
-- claim is live (a node took it) is left to that node. all_envs (database
-- maintenance) ignores source_env and source_stack.
--
-- Plan: the episodes are reached by primary key through an array of the
-- expired requests' episode ids, and the answer tests membership in the
-- canceled set (a hashed subplan), never a join between the two sets, which
-- the planner may run as a nested loop (measured: 10.7 s for 10,000 stale
-- requests after an outage).
WITH expired AS (
    UPDATE leasehold_trigger_requests AS r
    SET status = 'expired', finished_at = now()
    WHERE r.status IN ('pending', 'claimed')
      AND (r.status = 'pending' OR r.claim_until <= now())
      AND (sqlc.arg(all_envs)::boolean OR r.source_env = sqlc.arg(source_env)::text)
      AND (sqlc.arg(all_envs)::boolean OR sqlc.arg(source_stack)::text = ''
           OR r.source_stack IN (sqlc.arg(source_stack)::text, ''))
      AND r.run_after < now() - (sqlc.arg(ttl_ms)::bigint * interval '1 millisecond')
    RETURNING r.id, r.episode_id
), canceled AS (
    UPDATE leasehold_episodes AS e
    SET status = 'canceled', phase = NULL, error_class = 'trigger_expired',
        finished_at = now()
    WHERE e.id = ANY (ARRAY(SELECT expired.episode_id FROM expired))
      AND e.status = 'queued'
      AND NOT EXISTS (
          SELECT 1 FROM leasehold_work_claims AS c
          WHERE c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
            AND c.state = 'claimed'
            AND c.lease_until > now())
    RETURNING e.id
)
SELECT expired.id, expired.episode_id,
    (expired.episode_id IN (SELECT canceled.id FROM canceled))::boolean AS episode_canceled
FROM expired;

-- name: ListTriggerRequests :many
-- Operator and test listing of one env's requests, newest first; no
-- coordination role. status '' means any.
SELECT r.id, r.episode_id, r.actor_id, r.expectation_id, r.source_node,
    r.source_stack, r.source_env, r.status, coalesce(r.claimed_by, '')::text AS claimed_by,
    r.fence, r.opts, r.created_at, r.claimed_at, r.claim_until, r.finished_at
FROM leasehold_trigger_requests AS r
WHERE r.source_env = sqlc.arg(source_env)::text
  AND (sqlc.arg(status)::text = '' OR r.status = sqlc.arg(status)::text)
ORDER BY r.id DESC
LIMIT sqlc.arg(max_rows)::integer;

-- name: ListenTriggerRequests :exec
-- Subscribes the session to the notification the insert trigger on
-- leasehold_trigger_requests sends at commit. A wake-up only: pollers still
-- claim with ClaimTriggerRequests, and poll on an interval as a fallback.
LISTEN leasehold_trigger_requests;

-- name: ReleaseTriggerRequests :many
-- Gives claimed requests back that their poller will not hand over (it is
-- draining, or a hand-over failed): each becomes pending again, due as it
-- was, so another poller claims it at once instead of after the claim
-- lease. items is a JSON array of {"id", "fence"}, the poller's claims.
--
-- Guarantee: fenced per row on the request claim (id, claimed_by, fence,
-- claimed), as the hand-over is: a claim that lapsed and was taken by
-- another poller (fence + 1), or one already handed over (completed), is
-- left alone. The fence is kept: the next claim bumps it, so the releasing
-- poller's claim can never hand the request over afterwards. The ids
-- released come back. It wakes the LISTENing pollers as an insert does,
-- so work given back by a leaving node starts on another at once.
WITH input AS (
    SELECT (j ->> 'id')::bigint AS id, (j ->> 'fence')::bigint AS fence
    FROM jsonb_array_elements(sqlc.arg(items)::jsonb) AS j
), released AS (
    UPDATE leasehold_trigger_requests AS r
    SET status      = 'pending',
        claimed_by  = NULL,
        claimed_at  = NULL,
        claim_until = NULL
    FROM input
    WHERE r.id = input.id
      AND r.claimed_by = sqlc.arg(owner_node)::text
      AND r.fence = input.fence
      AND r.status = 'claimed'
    RETURNING r.id
)
SELECT released.id
FROM released
CROSS JOIN (SELECT pg_notify('leasehold_trigger_requests', '') AS woken) AS notify
ORDER BY released.id;

-- name: NextTriggerRequestDue :one
-- How long until the next open request of a poller's scope (source_env,
-- source_stack, runnable, as ClaimTriggerRequests) becomes claimable, in
-- milliseconds on the database clock: the earliest run_after of a pending
-- request that is not due yet (a delayed run, a retry's backoff), or the
-- claim_until of a claimed one whose poller may still let it lapse. -1 when
-- there is none.
--
-- A read that decides nothing: the poller sleeps that long (at most its
-- interval) instead of until its next tick, and ClaimTriggerRequests
-- re-checks due-ness on the database clock when it wakes, so a timer that
-- fires early claims nothing and asks again, and one that fires late only
-- starts the work late. The partial index leasehold_trigger_requests_due_idx
-- (source_env, run_after) serves the pending branch.
SELECT coalesce(ceil(extract(epoch FROM (min(d.due) - now())) * 1000), -1)::bigint AS wait_ms
FROM (
    SELECT min(r.run_after) AS due
    FROM leasehold_trigger_requests AS r
    WHERE r.status = 'pending'
      AND r.run_after > now()
      AND r.source_env = sqlc.arg(source_env)::text
      AND (sqlc.arg(source_stack)::text = '' OR r.source_stack IN (sqlc.arg(source_stack)::text, ''))
      AND EXISTS (
            SELECT 1
            FROM jsonb_to_recordset(sqlc.arg(runnable)::text::jsonb) AS k (actor_id text, expectation_id text)
            WHERE k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
    UNION ALL
    SELECT min(r.claim_until)
    FROM leasehold_trigger_requests AS r
    WHERE r.status = 'claimed'
      AND r.claim_until > now()
      AND r.source_env = sqlc.arg(source_env)::text
      AND (sqlc.arg(source_stack)::text = '' OR r.source_stack IN (sqlc.arg(source_stack)::text, ''))
      AND EXISTS (
            SELECT 1
            FROM jsonb_to_recordset(sqlc.arg(runnable)::text::jsonb) AS k (actor_id text, expectation_id text)
            WHERE k.actor_id = r.actor_id
              AND k.expectation_id = r.expectation_id)
) AS d;
