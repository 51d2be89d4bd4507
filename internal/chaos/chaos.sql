-- Test-only statements of the chaos suite. None of them coordinates
-- anything in leasehold: the ledger tables stand for an application's own
-- table written on behalf of a run, and the reads return what the database
-- recorded so that each invariant the suite reports can be checked against
-- the statement behind it. Loaded by name (chaos_test.go, query).

-- name: CreateLedger :exec
-- The strategy's side effect, one row per episode when all is well. No
-- unique constraint on purpose: a second row must be visible, not refused.
CREATE TABLE ledger (
    episode_id bigint      NOT NULL,
    owner      text        NOT NULL,
    fence      bigint      NOT NULL,
    trigger    text        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);

-- name: CreateLedgerWrites :exec
-- Every ledger write that landed, in admission order: seq is drawn while the
-- write holds its claim row FOR SHARE, and a new grant of that claim must
-- wait for the lock, so a later grant's writes always get a higher seq.
CREATE TABLE ledger_writes (
    seq        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    episode_id bigint      NOT NULL,
    owner      text        NOT NULL,
    fence      bigint      NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: CreateGrantEnds :exec
-- The end of every grant that a later grant of the same claim superseded,
-- as the database recorded it: the old row's lease_until is the instant from
-- which that later grant could be made (an expired lease: its last renewal's
-- deadline; a released one: the release). The overlap the suite reports is
-- a run's last local activity minus this. Filled by the trigger below.
CREATE TABLE grant_ends (
    dedupe_key  text        NOT NULL,
    fence       bigint      NOT NULL,
    owner_node  text        NOT NULL,
    state       text        NOT NULL,
    lease_until timestamptz NOT NULL,
    next_owner  text        NOT NULL,
    next_fence  bigint      NOT NULL,
    next_kind   text        NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (dedupe_key, fence)
);

-- name: CreateGrantEndsFunction :exec
-- A new grant is an UPDATE of the claim row that moves its fence (a steal,
-- a re-claim, a recovery claim; an INSERT ... ON CONFLICT DO UPDATE fires
-- UPDATE triggers too), whatever statement makes it: the suite does not
-- have to know leasehold's statements to see every grant.
CREATE FUNCTION chaos_grant_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO grant_ends (dedupe_key, fence, owner_node, state, lease_until, next_owner, next_fence, next_kind)
    VALUES (OLD.dedupe_key, OLD.fence, OLD.owner_node, OLD.state, OLD.lease_until,
            NEW.owner_node, NEW.fence, NEW.grant_kind);
    RETURN NULL;
END
$$;

-- name: CreateGrantEndsTrigger :exec
CREATE TRIGGER chaos_grant_end
    AFTER UPDATE ON leasehold_work_claims
    FOR EACH ROW
    WHEN (OLD.fence IS DISTINCT FROM NEW.fence)
    EXECUTE FUNCTION chaos_grant_end();

-- name: InsertLedger :exec
-- The strategy's side effect: a plain insert, the application's own write,
-- made in the run's transaction after Run.Hold (leasehold_hold locks the
-- claim row FOR SHARE and refuses a grant that is not the current one) and
-- committed with Run.CompleteTx's fenced finish. A stolen grant's
-- transaction commits neither, so there is exactly one ledger row per
-- episode by construction, not by an idempotent upsert. Every insert that
-- lands is also appended to ledger_writes, its seq drawn under the claim
-- row's lock. $1 episode, $2 owner, $3 fence, $4 trigger.
WITH inserted AS (
    INSERT INTO ledger (episode_id, owner, fence, trigger)
    VALUES ($1, $2, $3, $4::text)
    RETURNING episode_id
)
INSERT INTO ledger_writes (episode_id, owner, fence)
SELECT episode_id, $2, $3
FROM inserted;

-- name: DatabaseNow :one
-- The moment a fault was applied, on the clock claimed_at uses.
SELECT now();

-- name: HeldBy :one
-- What node $1 still holds of the work it had at $2 (a fault's moment), and
-- what it left available. held: unfinished episodes whose claim it holds
-- (live or expired), or released while the episode is not available work
-- (a drain's or a failed write's hand-over to recovery, which a sweep
-- takes). A takeover (recovery's grant, a poll's grant) changes the owner,
-- so held reaches 0 once every such episode belongs to someone else or has
-- finished: the takeover bound. available: queued episodes whose released
-- claim it was the last to hold and that are available work (run_after
-- set: a retry in its backoff), held by nobody, that any poller with a free
-- slot takes (its wait is the cluster's throughput, which the final phase
-- bounds). Grants after $2 (a cut-off node back at work) are not counted.
-- what: each held episode and what holds it (for a report on a takeover
-- past its bound).
SELECT count(*) FILTER (WHERE h.held)     AS held,
       count(*) FILTER (WHERE NOT h.held) AS available,
       coalesce(string_agg(h.what, ', ') FILTER (WHERE h.held), '') AS what
FROM (
    SELECT e.id || ': ' || CASE
            WHEN c.state = 'claimed' THEN 'claim held, ' || CASE WHEN c.lease_until > now() THEN 'lease live' ELSE 'lease expired ' || round(extract(epoch FROM now() - c.lease_until)::numeric, 2) || 's ago' END
            ELSE 'claim ' || c.state || ', episode ' || e.status || ', ' || CASE WHEN e.run_after IS NULL THEN 'not available' ELSE 'available' END END AS what,
        coalesce((c.state = 'claimed' AND c.owner_node = $1 AND c.claimed_at <= $2)
        OR (c.state = 'released' AND c.owner_node = $1 AND c.claimed_at <= $2 AND e.run_after IS NULL), false) AS held,
           coalesce((c.state = 'released' AND c.owner_node = $1 AND c.claimed_at <= $2
            AND e.status = 'queued' AND e.run_after IS NOT NULL), false) AS available
    FROM leasehold_episodes AS e
    JOIN leasehold_work_claims AS c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
    WHERE e.status IN ('queued', 'running')
) AS h
WHERE h.held OR h.available;

-- name: HolderSessions :one
-- For a takeover past its bound: the database sessions of worker $1 (its
-- pool sets application_name to its id), each with its state, how long its
-- transaction and its state have lasted, what it waits for, and its
-- statement. A SIGKILLed client's backend ends only when it next reads its
-- socket: one still active or in a transaction holds its row locks, and a
-- sweeper's requeue (NOWAIT) skips the rows it holds until it ends.
SELECT coalesce(string_agg(format('pid %s %s, transaction %ss, state %ss, wait %s: %s', a.pid, a.state,
           coalesce(round(extract(epoch FROM now() - a.xact_start)::numeric, 2)::text, '-'),
           round(extract(epoch FROM now() - a.state_change)::numeric, 2),
           coalesce(a.wait_event_type || ':' || a.wait_event, '-'),
           left(regexp_replace(a.query, '\s+', ' ', 'g'), 100)), '; '), 'none')
FROM pg_stat_activity AS a
WHERE a.application_name = $1;

-- name: BusySessions :one
-- For a run that stops answering: every session of the server that is not
-- idle, oldest transaction first, with what it waits for and the pids that
-- block it. A session idle in a transaction for seconds holds its row locks
-- against everyone behind it.
SELECT coalesce(string_agg(format('pid %s %s (%s), transaction %ss, state %ss, wait %s, blocked by %s: %s', a.pid, a.state,
           coalesce(nullif(a.application_name, ''), '-'),
           coalesce(round(extract(epoch FROM now() - a.xact_start)::numeric, 2)::text, '-'),
           round(extract(epoch FROM now() - a.state_change)::numeric, 2),
           coalesce(a.wait_event_type || ':' || a.wait_event, '-'),
           coalesce(nullif(array_to_string(pg_blocking_pids(a.pid), ','), ''), 'none'),
           left(regexp_replace(a.query, '\s+', ' ', 'g'), 100)), '; ' ORDER BY a.xact_start NULLS LAST), 'none')
FROM pg_stat_activity AS a
WHERE a.backend_type = 'client backend' AND a.state <> 'idle' AND a.pid <> pg_backend_pid();

-- name: Unsettled :one
-- Episodes not yet in a terminal state; the suite waits for 0.
SELECT count(*) FROM leasehold_episodes WHERE status IN ('queued', 'running', 'blocked');

-- name: UnsettledBreakdown :many
-- The unsettled episodes grouped by what they wait on (for a report when
-- the suite's wait for 0 runs out): actor/expectation, status, the claim's
-- state and whether its lease is live, its owner, and whether it is
-- available work and due.
SELECT e.actor_id || '/' || e.expectation_id || ' ' || e.status
        || ', claim ' || coalesce(c.state || CASE WHEN c.state = 'claimed' THEN CASE WHEN c.lease_until > now() THEN ' (live)' ELSE ' (expired)' END ELSE '' END
            || ' by ' || c.owner_node, 'none')
        || CASE WHEN e.run_after IS NULL THEN '' WHEN e.run_after > now() THEN ', available (not due)' ELSE ', available' END AS what,
    count(*) AS n
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.status IN ('queued', 'running', 'blocked')
GROUP BY 1
ORDER BY 2 DESC, 1
LIMIT 20;

-- name: EpisodeAudit :many
-- One row per episode with everything the invariants compare: its trigger
-- and status, its claim row (the last grant), its journal (steps, fence of
-- the last step, steps whose fence is lower than an earlier step's), its
-- ledger rows (each one's grant too, for the report) and its ledger writes (count, grants that wrote, writes whose
-- fence is lower than an earlier-admitted write's).
SELECT e.id,
    coalesce(e.payload ->> 'trigger', '')    AS trigger,
    e.status,
    coalesce(e.error_class, '')              AS error_class,
    coalesce(e.error_detail::text, '')       AS error_detail,
    e.attempts,
    coalesce(e.owner_node, '')               AS owner_node,
    coalesce(c.state, '')                    AS claim_state,
    coalesce(c.owner_node, '')               AS claim_owner,
    coalesce(c.fence, 0)                     AS claim_fence,
    coalesce(j.steps, 0)                     AS steps,
    coalesce(j.last_fence, 0)                AS last_step_fence,
    coalesce(j.regressions, 0)               AS step_regressions,
    coalesce(l.rows, 0)                      AS ledger_rows,
    coalesce(l.owner, '')                    AS ledger_owner,
    coalesce(l.fence, 0)                     AS ledger_fence,
    coalesce(l.trigger, '')                  AS ledger_trigger,
    coalesce(l.all_rows, '')                 AS ledger_all_rows,
    coalesce(w.writes, 0)                    AS ledger_writes,
    coalesce(w.grants, 0)                    AS ledger_grants,
    coalesce(w.stale, 0)                     AS stale_writes
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c
    ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
LEFT JOIN (
    SELECT episode_id, count(*) AS steps,
        (array_agg(fence ORDER BY step_no DESC))[1] AS last_fence,
        count(*) FILTER (WHERE fence < prev_max) AS regressions
    FROM (SELECT episode_id, step_no, fence,
                 max(fence) OVER (PARTITION BY episode_id ORDER BY step_no
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
          FROM leasehold_episode_steps) AS s
    GROUP BY episode_id
) AS j ON j.episode_id = e.id
LEFT JOIN (
    SELECT episode_id, count(*) AS rows, min(owner) AS owner, min(fence) AS fence,
        min(trigger) AS trigger,
        string_agg(owner || ' fence ' || fence, '; ' ORDER BY written_at) AS all_rows
    FROM ledger
    GROUP BY episode_id
) AS l ON l.episode_id = e.id
LEFT JOIN (
    SELECT episode_id, count(*) AS writes, count(DISTINCT fence) AS grants,
        count(*) FILTER (WHERE fence < prev_max) AS stale
    FROM (SELECT episode_id, fence,
                 max(fence) OVER (PARTITION BY episode_id ORDER BY seq
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
          FROM ledger_writes) AS x
    GROUP BY episode_id
) AS w ON w.episode_id = e.id
ORDER BY e.id;

-- name: StrayLedgerRows :one
-- Ledger rows and ledger writes for an episode that does not exist.
SELECT (SELECT count(*) FROM ledger AS l
        WHERE NOT EXISTS (SELECT 1 FROM leasehold_episodes AS e WHERE e.id = l.episode_id))
     + (SELECT count(*) FROM ledger_writes AS w
        WHERE NOT EXISTS (SELECT 1 FROM leasehold_episodes AS e WHERE e.id = w.episode_id));

-- name: OpenClaims :many
-- Claims still claimed or released (none should be, once every episode is
-- terminal), with whether the lease is live on the database clock.
SELECT dedupe_key, state, owner_node, lease_until > now() AS live
FROM leasehold_work_claims
WHERE state IN ('claimed', 'released')
ORDER BY dedupe_key;

-- name: GrantEnds :many
-- Every superseded grant (see CreateGrantEnds), oldest first.
SELECT dedupe_key, fence, owner_node, state, lease_until, next_owner, next_fence, next_kind
FROM grant_ends
ORDER BY granted_at;

-- name: GrantOfKey :one
-- The current grant of one claim and its episode's status: how the driver
-- sees a frozen episode taken over (a later fence, then done) or finished
-- by the frozen grant itself (its fence, done).
SELECT c.owner_node, c.fence, c.state, coalesce(e.status, '') AS status
FROM leasehold_work_claims AS c
LEFT JOIN leasehold_episodes AS e ON coalesce(e.dedupe_key, 'episode:' || e.id) = c.dedupe_key
WHERE c.dedupe_key = $1;

-- name: GrantWrites :one
-- The journal steps and ledger writes of one grant ($1 key, $2 fence) that
-- landed: counted before and after a frozen worker resumes, they show
-- whether it wrote anything once thawed.
SELECT
    (SELECT count(*) FROM leasehold_episode_steps AS s
     JOIN leasehold_episodes AS e ON e.id = s.episode_id
     WHERE coalesce(e.dedupe_key, 'episode:' || e.id) = $1 AND s.fence = $2) AS steps,
    (SELECT count(*) FROM ledger_writes AS w
     JOIN leasehold_episodes AS e ON e.id = w.episode_id
     WHERE coalesce(e.dedupe_key, 'episode:' || e.id) = $1 AND w.fence = $2) AS ledger_writes;

-- name: DoneBySlot :many
-- Done episodes per worker slot (identities are worker-<slot>-<generation>):
-- the shares the cluster's workers ran.
SELECT split_part(owner_node, '-', 2) AS slot, count(*) AS done
FROM leasehold_episodes
WHERE status = 'done'
GROUP BY 1
ORDER BY 1;

-- name: RetriedAttempts :one
-- Attempts that failed and were retried (RetryEpisode journals each one's
-- error as a step), and the episodes they belong to.
SELECT count(*) AS attempts, count(DISTINCT episode_id) AS episodes
FROM leasehold_episode_steps
WHERE data ? 'error';

-- name: ClaimKeys :many
-- The claim key of every episode (its dedupe key, or episode:{id}), for the
-- recorded claims operations that name an episode rather than a key (a
-- recovery claim or a dispatch that failed before it returned its claim).
SELECT id, coalesce(dedupe_key, 'episode:' || id)::text AS claim_key
FROM leasehold_episodes;
