-- Findings: facts raised and cleared by episodes, one active finding per key
-- per env (the filtered unique index leasehold_findings_active_key_idx).
--
-- Every write is made on behalf of a running episode and is fenced on its
-- work claim (claim key, owner, fence, claimed), which it locks FOR SHARE
-- like the journal writes: a zombie whose lease was stolen raises, updates
-- and clears nothing. The claim must be the episode's own (its dedupe key,
-- or episode:{id}) and the episode must run under the same owner, as for
-- AppendStep: a live claim on some other key grants nothing here. A finding
-- takes its env and stack from the episode row, never from the caller, so an
-- episode of env "rc" can only touch env "rc".

-- name: RaiseFinding :one
-- Raises the finding finding_key in the episode's env: inserts it, or, when
-- it is already active, refreshes its details and counts the raise.
-- lease_held 0 means the fence check failed and nothing was written.
WITH lease AS (
    SELECT 1 FROM leasehold_work_claims AS c
    WHERE c.dedupe_key = sqlc.arg(claim_key)
      AND c.owner_node = sqlc.arg(owner_node)::text
      AND c.fence = sqlc.arg(fence)
      AND c.state = 'claimed'
    FOR SHARE
), episode AS (
    SELECT e.id, e.actor_id, e.source_stack, e.source_env
    FROM leasehold_episodes AS e
    WHERE e.id = sqlc.arg(episode_id)
      AND e.status = 'running'
      AND e.archived_at IS NULL
      AND e.owner_node = sqlc.arg(owner_node)::text
      AND coalesce(e.dedupe_key, 'episode:' || e.id) = sqlc.arg(claim_key)
      AND EXISTS (SELECT 1 FROM lease)
), raised AS (
    INSERT INTO leasehold_findings AS f (
        finding_key, env, status, class, severity, summary, data, actor_id,
        source_stack, raised_by_episode, updated_by_episode, raise_count,
        raised_at, updated_at
    )
    SELECT sqlc.arg(finding_key)::text, episode.source_env, 'active',
        sqlc.arg(class)::text, sqlc.arg(severity)::text, sqlc.arg(summary)::text,
        sqlc.narg(data)::jsonb, episode.actor_id, episode.source_stack,
        episode.id, episode.id, 1, now(), now()
    FROM episode
    ON CONFLICT (env, finding_key) WHERE status = 'active'
    DO UPDATE SET
        class              = excluded.class,
        severity           = excluded.severity,
        summary            = excluded.summary,
        data               = excluded.data,
        updated_by_episode = excluded.updated_by_episode,
        raise_count        = f.raise_count + 1,
        updated_at         = now()
    RETURNING f.id, f.finding_key, f.env, f.status, f.class, f.severity,
        f.summary, f.data, f.actor_id, f.source_stack, f.raised_by_episode,
        f.updated_by_episode, f.raise_count, f.raised_at, f.updated_at
)
SELECT (SELECT count(*) FROM episode)::integer AS lease_held,
    raised.id, raised.finding_key, raised.env, raised.status, raised.class,
    raised.severity, raised.summary, raised.data, raised.actor_id,
    raised.source_stack, raised.raised_by_episode, raised.updated_by_episode,
    raised.raise_count, raised.raised_at, raised.updated_at
FROM (SELECT 1) AS one
LEFT JOIN raised ON true;

-- name: UpdateFinding :one
-- Changes the details of the active finding finding_key in the episode's
-- env without counting a raise. lease_held 0: fence check failed; updated 0:
-- no such active finding. Nothing is created.
WITH lease AS (
    SELECT 1 FROM leasehold_work_claims AS c
    WHERE c.dedupe_key = sqlc.arg(claim_key)
      AND c.owner_node = sqlc.arg(owner_node)::text
      AND c.fence = sqlc.arg(fence)
      AND c.state = 'claimed'
    FOR SHARE
), episode AS (
    SELECT e.id, e.source_env
    FROM leasehold_episodes AS e
    WHERE e.id = sqlc.arg(episode_id)
      AND e.status = 'running'
      AND e.archived_at IS NULL
      AND e.owner_node = sqlc.arg(owner_node)::text
      AND coalesce(e.dedupe_key, 'episode:' || e.id) = sqlc.arg(claim_key)
      AND EXISTS (SELECT 1 FROM lease)
), updated AS (
    UPDATE leasehold_findings AS f
    SET severity           = sqlc.arg(severity)::text,
        summary            = sqlc.arg(summary)::text,
        data               = sqlc.narg(data)::jsonb,
        updated_by_episode = episode.id,
        updated_at         = now()
    FROM episode
    WHERE f.env = episode.source_env
      AND f.finding_key = sqlc.arg(finding_key)::text
      AND f.status = 'active'
    RETURNING f.id
)
SELECT (SELECT count(*) FROM episode)::integer AS lease_held,
    (SELECT count(*) FROM updated)::integer AS updated;

-- name: ClearFinding :one
-- Clears the active finding finding_key in the episode's env; the row stays
-- as history and leaves the unique index, so the key can be raised again.
-- lease_held 0: fence check failed; cleared 0: nothing was active.
WITH lease AS (
    SELECT 1 FROM leasehold_work_claims AS c
    WHERE c.dedupe_key = sqlc.arg(claim_key)
      AND c.owner_node = sqlc.arg(owner_node)::text
      AND c.fence = sqlc.arg(fence)
      AND c.state = 'claimed'
    FOR SHARE
), episode AS (
    SELECT e.id, e.source_env
    FROM leasehold_episodes AS e
    WHERE e.id = sqlc.arg(episode_id)
      AND e.status = 'running'
      AND e.archived_at IS NULL
      AND e.owner_node = sqlc.arg(owner_node)::text
      AND coalesce(e.dedupe_key, 'episode:' || e.id) = sqlc.arg(claim_key)
      AND EXISTS (SELECT 1 FROM lease)
), cleared AS (
    UPDATE leasehold_findings AS f
    SET status             = 'cleared',
        cleared_by_episode = episode.id,
        cleared_at         = now(),
        updated_at         = now()
    FROM episode
    WHERE f.env = episode.source_env
      AND f.finding_key = sqlc.arg(finding_key)::text
      AND f.status = 'active'
    RETURNING f.id
)
SELECT (SELECT count(*) FROM episode)::integer AS lease_held,
    (SELECT count(*) FROM cleared)::integer AS cleared;

-- name: ListActiveFindings :many
-- The active findings of one env (strict equality; the empty env is the
-- unset env), optionally narrowed by class, actor and key; oldest first.
-- Read-only.
SELECT f.id, f.finding_key, f.env, f.status, f.class, f.severity, f.summary,
    f.data, f.actor_id, f.source_stack, f.raised_by_episode,
    f.updated_by_episode, f.raise_count, f.raised_at, f.updated_at
FROM leasehold_findings AS f
WHERE f.status = 'active'
  AND f.env = sqlc.arg(env)::text
  AND (sqlc.arg(class)::text = '' OR f.class = sqlc.arg(class)::text)
  AND (sqlc.arg(actor_id)::text = '' OR f.actor_id = sqlc.arg(actor_id)::text)
  AND (sqlc.arg(finding_key)::text = '' OR f.finding_key = sqlc.arg(finding_key)::text)
ORDER BY f.raised_at, f.id
LIMIT sqlc.arg(max_rows)::integer;
