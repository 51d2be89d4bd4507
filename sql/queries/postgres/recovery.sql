-- Recovery: finding orphaned episodes and taking each over exactly once.
--
-- An episode is orphaned when nobody holds a live lease on it:
--   * running, and its claim expired or was released, or it has no claim at
--     all and its last sign of life (last_step_at, else started_at) is older
--     than stale_after;
--   * queued, and its claim expired or was released: the node that held it
--     in its slot queue is gone. A queued episode whose claim is live is
--     waiting for a slot and is never touched;
--   * running or queued, and its claim is done or failed. FinishEpisode
--     writes the episode's terminal status and the claim's final state in
--     one statement, so such a claim was finished by another grant of the
--     same key (a direct claims user that held the key when the episode was
--     created, or stole it later) and nobody will ever finish the episode:
--     without this rule it would stay queued for ever and block its trigger.
--
-- Never an orphan, whatever its claim: an available episode (run_after
-- set; see available.sql). It belongs to the pollers: a deferred or overflowing episode (perhaps reusing an archived
-- episode's key, whose claim is done), or one a failed attempt requeued
-- (RetryEpisode released its claim and made it due after its backoff;
-- recovery taking it would skip the backoff and count the attempt twice).
-- All cut-offs are computed from now(), the database clock.
--
-- What a restart counts. An attempt is a run that counts against
-- max_attempts (attempts is how many did; Attempt() = attempts + 1 is the
-- current run's number). A requeue counts the orphan's run as an attempt
-- (attempts + 1) unless its holder gave the grant back itself: the claim is
-- 'released' (a fenced ReleaseClaim(s): a drain's hand-over, a run whose
-- journal write or start failed, a run whose lease passed its local
-- deadline because its host or the database was slow, a dispatch that
-- found no slot), or the episode is still 'queued': no grant started it
-- since it was last queued (StartEpisode, which a run passes before its
-- strategy is called, never landed; its holder was too slow to start it
-- and then to give it back, or died first), so nothing ran. Such a run
-- did nothing wrong or nothing at all, and the next run is the same
-- attempt again. Everything else counts: a started episode's grant that
-- expired while claimed (the holder crashed, hung, or could not even give
-- it back), one finished by another grant, a claim-less stale episode.
-- So a poison episode that crashes its node uses up its attempts and
-- fails. So does
-- one whose runs keep giving their grant back: a hand-back is free only
-- while the key's grants (the claim's attempt, one per grant) are at most
-- attempts + max_attempts, i.e. at most max_attempts runs of an episode go
-- uncounted. ListOrphanedEpisodes reports that as given_back, so the
-- sweeper knows which attempt a restart starts; RequeueOrphan decides it
-- again on the locked claim row.
--
-- Scope: a sweep sees its own stack plus unstamped rows (source_stack = ''),
-- or every stack when it names none; env is matched by strict equality, the
-- unset env ('') being its own world.

-- name: ListOrphanedEpisodes :many
-- Read-only listing; ClaimForRecovery re-checks everything under the row
-- lock. Each branch is served by its partial index (running, queued), and
-- each episode's claim is one primary-key lookup: the LATERAL ... LIMIT 1
-- keeps the planner from hashing the whole claims table (which keeps every
-- finished claim), so the cost follows the live work, not the history.
SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
    e.max_attempts, e.source_stack, e.source_env, e.owner_node,
    coalesce(e.last_step_at, e.started_at, e.created_at)::timestamptz AS last_seen_at,
    -- No claim row: claim_state '' (the lease column then repeats created_at).
    coalesce(c.state, '')::text AS claim_state,
    coalesce(c.owner_node, '')::text AS claim_owner,
    coalesce(c.lease_until, e.created_at)::timestamptz AS claim_lease_until,
    -- Its holder gave the grant back, within the free hand-backs: a restart
    -- starts the same attempt again (see the top of this file).
    coalesce(c.state = 'released' AND c.attempt <= e.attempts + e.max_attempts, false)::boolean AS given_back
FROM leasehold_episodes AS e
LEFT JOIN LATERAL (
    SELECT x.dedupe_key, x.state, x.owner_node, x.lease_until, x.attempt
    FROM leasehold_work_claims AS x
    WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
    LIMIT 1
) AS c ON true
WHERE e.status = 'running'
  AND e.archived_at IS NULL
  AND (sqlc.arg(source_stack)::text = '' OR e.source_stack IN (sqlc.arg(source_stack)::text, ''))
  AND e.source_env = sqlc.arg(source_env)::text
  AND CASE
        WHEN c.dedupe_key IS NULL THEN coalesce(e.last_step_at, e.started_at, e.created_at)
            < now() - (sqlc.arg(stale_after_ms)::bigint * interval '1 millisecond')
        ELSE (c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed')
      END
  AND e.run_after IS NULL
UNION ALL
SELECT e.id, e.actor_id, e.expectation_id, e.status, e.dedupe_key, e.attempts,
    e.max_attempts, e.source_stack, e.source_env, e.owner_node,
    coalesce(e.last_step_at, e.started_at, e.created_at)::timestamptz AS last_seen_at,
    -- No claim row: claim_state '' (the lease column then repeats created_at).
    coalesce(c.state, '')::text AS claim_state,
    coalesce(c.owner_node, '')::text AS claim_owner,
    coalesce(c.lease_until, e.created_at)::timestamptz AS claim_lease_until,
    -- Queued: no grant ever started it since it was last queued (given back,
    -- expired or finished elsewhere, nothing ran), so within the free
    -- hand-backs a restart starts the same attempt again (see the top of
    -- this file).
    coalesce(c.attempt <= e.attempts + e.max_attempts, false)::boolean AS given_back
FROM leasehold_episodes AS e
JOIN LATERAL (
    SELECT x.dedupe_key, x.state, x.owner_node, x.lease_until, x.attempt
    FROM leasehold_work_claims AS x
    WHERE x.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
    LIMIT 1
) AS c ON true
WHERE e.status = 'queued'
  AND e.archived_at IS NULL
  AND (sqlc.arg(source_stack)::text = '' OR e.source_stack IN (sqlc.arg(source_stack)::text, ''))
  AND e.source_env = sqlc.arg(source_env)::text
  AND ((c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed'))
  AND e.run_after IS NULL
LIMIT sqlc.arg(max_rows)::integer;

-- name: ClaimForRecovery :one
-- Takes one orphan over for owner_node: grants its work claim (fence + 1,
-- attempt + 1) and marks the episode queued for recovery, attempts + 1.
--
-- Guarantee: exactly one caller wins per orphan, and work that finished
-- during the sweep is never reopened. Everything that decides is re-checked
-- on the latest committed rows, under their locks, in lock order claim row
-- then episode row (the order of StartEpisode, AppendStep and
-- FinishEpisode, so recovery and a writer never deadlock):
--   * claim_row locks the episode's claim row (FOR UPDATE waits for a writer
--     in progress, then reads its committed version);
--   * orphan locks the episode row and re-checks it is still running or
--     queued, not archived, and not available (run_after IS NULL: available
--     work is the pollers'; see above): a zombie that finished the episode while
--     this statement waited made it terminal, and nothing is granted;
--   * the claim upsert takes over only a grant nobody can still use: an
--     expired or released one, or a done or failed one of a non-terminal
--     episode (finished by another grant of the key; see above). A second sweeper, or the original owner whose
--     journal writes extend its lease, makes it match nothing; an episode
--     already being recovered holds a live lease and is excluded the same
--     way. A claim-less episode must still be stale here.
-- The new grant belongs to the sweeper, so a restarted run holds the claim
-- itself and never finds it busy.
--
-- Bound: bound_ms > 0 sets lock_timeout, LOCAL, before either row is
-- locked (both locking reads join bound, and a row is locked only once the
-- join has produced it), so a frozen holder of either row makes this fail
-- after bound_ms (55P03, retryable) instead of hanging; 0, inside a
-- caller's transaction, leaves its setting alone (see AcquireClaim).
WITH bound AS MATERIALIZED (
    SELECT CASE WHEN sqlc.arg(bound_ms)::bigint > 0
                THEN set_config('lock_timeout', sqlc.arg(bound_ms)::bigint || 'ms', true)
           END AS lock_timeout
), claim_row AS (
    SELECT x.dedupe_key
    FROM leasehold_work_claims AS x, bound
    WHERE x.dedupe_key = (SELECT coalesce(e0.dedupe_key, 'episode:' || e0.id)
                          FROM leasehold_episodes AS e0 WHERE e0.id = sqlc.arg(id))
    FOR UPDATE OF x
), orphan AS (
    SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key
    FROM leasehold_episodes AS e, bound
    WHERE e.id = sqlc.arg(id)
      AND e.archived_at IS NULL
      AND e.status IN ('running', 'queued')
      AND (
        EXISTS (SELECT 1 FROM claim_row)
        OR (e.status = 'running'
            AND coalesce(e.last_step_at, e.started_at, e.created_at)
                < now() - (sqlc.arg(stale_after_ms)::bigint * interval '1 millisecond'))
      )
      AND e.run_after IS NULL
    FOR UPDATE OF e
), grant_row AS (
    INSERT INTO leasehold_work_claims AS c (
        dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at,
        attempt, fence, grant_kind, work_type
    )
    SELECT orphan.claim_key, 'claimed', sqlc.arg(owner_node)::text,
        now() + (sqlc.arg(lease_ms)::bigint * interval '1 millisecond'),
        now(), now(), 1, 1, 'fresh', 'episode'
    FROM orphan
    ON CONFLICT (dedupe_key) DO UPDATE SET
        state             = 'claimed',
        owner_node        = excluded.owner_node,
        lease_until       = excluded.lease_until,
        claimed_at        = excluded.claimed_at,
        last_heartbeat_at = excluded.claimed_at,
        finished_at       = NULL,
        error_detail      = NULL,
        attempt           = c.attempt + 1,
        fence             = c.fence + 1,
        grant_kind        = CASE WHEN c.state = 'claimed' THEN 'steal' ELSE 'reclaim' END,
        work_type         = excluded.work_type
    -- Safe for done and failed too: the episode row is locked and was seen
    -- non-terminal on its latest version, so this is not the owner's own
    -- finish (which ends the episode in the same statement).
    WHERE (c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed')
    RETURNING c.dedupe_key, c.owner_node, c.fence, c.attempt, c.lease_until, c.claimed_at, c.grant_kind
)
UPDATE leasehold_episodes AS e
SET status     = 'queued',
    phase      = 'recovering',
    attempts   = e.attempts + 1,
    owner_node = grant_row.owner_node
FROM grant_row
WHERE e.id = sqlc.arg(id)
  AND e.status IN ('running', 'queued')
  AND e.archived_at IS NULL
RETURNING e.id, e.actor_id, e.expectation_id, e.trigger_type, e.trigger_ref, e.dedupe_key,
    e.attempts, e.max_attempts, e.source_stack, e.source_env, e.payload,
    e.created_at, grant_row.dedupe_key AS claim_key, grant_row.fence,
    grant_row.attempt AS claim_attempt, grant_row.lease_until, grant_row.claimed_at,
    grant_row.grant_kind;

-- name: RequeueOrphanLock :exec
-- RequeueOrphan's first statement, sent with it in one implicit
-- transaction (the adapter's pipelined takeover): locks the orphan's claim
-- row before RequeueOrphan takes its snapshot, so that RequeueOrphan sees
-- everything a requeue of the same orphan committed before (the episode
-- row's run_after, which RequeueOrphan also re-checks under its own lock,
-- is what a requeue that did not count an attempt leaves). NOWAIT: when the row is locked
-- (another sweeper requeuing it, a holder finishing, a holder frozen inside
-- its transaction), this fails at once with lock_not_available (55P03), the
-- transaction is rolled back before RequeueOrphan runs, and the adapter
-- reports the orphan busy: the next sweep looks again. Waiting instead
-- (until the lock_timeout bound) made every sweeper queue behind the
-- others on the same orphans: on a loaded host, sweeps of 40 orphans took
-- 12-25 s, most of them waits that ended in "already requeued". No claim
-- row: nothing to lock (see RequeueOrphan).
SELECT x.dedupe_key
FROM leasehold_work_claims AS x
WHERE x.dedupe_key = (SELECT coalesce(e0.dedupe_key, 'episode:' || e0.id)
                      FROM leasehold_episodes AS e0 WHERE e0.id = sqlc.arg(id))
FOR UPDATE NOWAIT;

-- name: RequeueOrphan :one
-- Recovery's restart: makes one orphan available work again instead of
-- running it on the sweeping node, so recovered episodes flow to whichever
-- full nodes have free slots for their actor (ClaimAvailable), never past
-- an actor's MaxConcurrent. The
-- orphan's grant is fenced out (released, fence + 1: a zombie still
-- running it writes nothing more), the episode is queued (phase
-- recovering, no owner) as its next attempt (attempts + 1), or as the same
-- attempt again when its holder gave the grant back (given_back, decided
-- on the locked claim row; see the top of this file), and available, due
-- at once (run_after). An orphan with a cancel request ends canceled
-- instead (class canceled) and is not made available.
--
-- Guarantee: exactly one caller requeues each orphan, and work that
-- finished during the sweep is never reopened: the rows are locked and
-- re-checked as in ClaimForRecovery (claim row, then episode row; the grant
-- taken over must be one nobody can still use; a claim-less episode must
-- still be stale; an available episode is the pollers' already).
-- Unlike ClaimForRecovery's, this takeover leaves no live grant behind: a
-- second sweeper is stopped by the episode row instead, whose latest
-- version (available, run_after set) the orphan step re-checks under its
-- lock, and before that by RequeueOrphanLock, which gives up at once while
-- the first holds the claim row, so sweepers never queue behind each
-- other; either way this statement matches nothing, whether or not the
-- first requeue counted an attempt. A claim-less
-- orphan has no claim row to wait on: attempts, the count the sweeper
-- listed, is compared on the locked episode row, whose latest version the
-- first requeue changed (a claim-less orphan's run always counts). The
-- attempt it would start must be within max_attempts (attempts + 2 <=
-- max_attempts, the attempt after Attempt(); attempts + 1 when given
-- back): an exhausted orphan is not requeued but failed, through
-- ClaimForRecovery and FinishEpisode. No row back: not an orphan (any
-- more), taken by another sweeper, or exhausted meanwhile.
--
-- Bound: as ClaimForRecovery's; the claim row is RequeueOrphanLock's
-- already, so the wait it bounds is the episode row's.
WITH bound AS MATERIALIZED (
    SELECT CASE WHEN sqlc.arg(bound_ms)::bigint > 0
                THEN set_config('lock_timeout', sqlc.arg(bound_ms)::bigint || 'ms', true)
           END AS lock_timeout
), claim_row AS (
    SELECT x.dedupe_key, x.state, x.attempt
    FROM leasehold_work_claims AS x, bound
    WHERE x.dedupe_key = (SELECT coalesce(e0.dedupe_key, 'episode:' || e0.id)
                          FROM leasehold_episodes AS e0 WHERE e0.id = sqlc.arg(id))
    FOR UPDATE OF x
), orphan AS (
    SELECT e.id, coalesce(e.dedupe_key, 'episode:' || e.id) AS claim_key, b.given_back
    FROM leasehold_episodes AS e
    CROSS JOIN bound
    CROSS JOIN LATERAL (
        SELECT coalesce((SELECT (cr.state = 'released' OR e.status = 'queued')
                                AND cr.attempt <= e.attempts + e.max_attempts
                         FROM claim_row AS cr), false) AS given_back
    ) AS b
    WHERE e.id = sqlc.arg(id)
      AND e.archived_at IS NULL
      AND e.status IN ('running', 'queued')
      AND e.attempts = sqlc.arg(attempts)::integer
      AND e.attempts + CASE WHEN b.given_back THEN 1 ELSE 2 END <= e.max_attempts
      AND (
        EXISTS (SELECT 1 FROM claim_row)
        OR (e.status = 'running'
            AND coalesce(e.last_step_at, e.started_at, e.created_at)
                < now() - (sqlc.arg(stale_after_ms)::bigint * interval '1 millisecond'))
      )
      AND e.run_after IS NULL
    FOR UPDATE OF e
), fenced AS (
    UPDATE leasehold_work_claims AS c
    SET state       = 'released',
        owner_node  = sqlc.arg(owner_node)::text,
        lease_until = now(),
        finished_at = now(),
        fence       = c.fence + 1,
        grant_kind  = CASE WHEN c.state = 'claimed' THEN 'steal' ELSE 'reclaim' END
    FROM orphan
    WHERE c.dedupe_key = orphan.claim_key
      AND ((c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed'))
    RETURNING c.dedupe_key
), taken AS (
    SELECT orphan.id, orphan.given_back
    FROM orphan
    WHERE EXISTS (SELECT 1 FROM fenced) OR NOT EXISTS (SELECT 1 FROM claim_row)
), episode AS (
    UPDATE leasehold_episodes AS e
    SET status      = CASE WHEN e.cancel_requested_at IS NOT NULL THEN 'canceled' ELSE 'queued' END,
        phase       = CASE WHEN e.cancel_requested_at IS NOT NULL THEN NULL ELSE 'recovering' END,
        attempts    = CASE WHEN e.cancel_requested_at IS NOT NULL OR taken.given_back THEN e.attempts
                           ELSE e.attempts + 1 END,
        owner_node  = NULL,
        error_class = CASE WHEN e.cancel_requested_at IS NOT NULL THEN 'canceled' ELSE e.error_class END,
        finished_at = CASE WHEN e.cancel_requested_at IS NOT NULL THEN now() END,
        run_after   = CASE WHEN e.cancel_requested_at IS NULL THEN now() END
    FROM taken
    WHERE e.id = taken.id
    RETURNING e.id, e.attempts, e.max_attempts, e.status
)
SELECT episode.id, episode.status::text AS status, episode.attempts, episode.max_attempts
FROM episode;

-- name: GetAgentRecoveryPolicy :one
-- The recovery policy of an expectation, as the nodes that run it recorded
-- it when they started (or as set for a dynamic actor), if any. A sweeper
-- on a node without the actor's code applies it; without a row it leaves
-- the orphan for a node that knows the policy.
SELECT recovery_policy
FROM leasehold_agent_definitions
WHERE actor_id = sqlc.arg(actor_id) AND expectation_id = sqlc.arg(expectation_id);

-- name: PutAgentDefinition :exec
-- Records (or changes) an expectation's recovery policy and max attempts:
-- every node upserts those of its registered expectations when it starts,
-- the last start winning (nodes of one deploy register the same actors).
INSERT INTO leasehold_agent_definitions (actor_id, expectation_id, recovery_policy, max_attempts)
VALUES (sqlc.arg(actor_id), sqlc.arg(expectation_id), sqlc.arg(recovery_policy), sqlc.arg(max_attempts))
ON CONFLICT (actor_id, expectation_id) DO UPDATE
SET recovery_policy = excluded.recovery_policy, max_attempts = excluded.max_attempts, updated_at = now();
