-- Read-only queries behind the demo's summary (leasehold demo). They decide
-- nothing: the demo prints what the database recorded, so a reader can
-- check each claim of the summary against these statements. The SQLite demo
-- runs the same statements, in SQLite's SQL, from demo_report_sqlite.sql.

-- name: DemoStatusCounts :many
SELECT actor_id, status, count(*) FROM leasehold_episodes GROUP BY actor_id, status;

-- name: DemoVictimHeld :many
SELECT e.id, e.actor_id, e.status,
       (SELECT count(*) FROM leasehold_episode_steps AS s WHERE s.episode_id = e.id)
FROM leasehold_episodes AS e
JOIN leasehold_work_claims AS c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE c.owner_node = $1 AND c.state = 'claimed' AND e.status IN ('queued', 'running')
ORDER BY e.id;

-- name: DemoNotDone :many
SELECT e.id, e.actor_id, e.status, coalesce(e.owner_node, ''),
       coalesce(c.state || ' by ' || c.owner_node || ', fence ' || c.fence, 'none')
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.actor_id = $1 AND e.status <> 'done' ORDER BY e.id;

-- name: DemoEpisodesPerActor :many
SELECT actor_id, count(*), count(DISTINCT dedupe_key)
FROM leasehold_episodes GROUP BY actor_id ORDER BY actor_id;

-- name: DemoDoneByOwner :many
SELECT coalesce(owner_node, ''), actor_id, count(*)
FROM leasehold_episodes WHERE status = 'done' GROUP BY 1, 2;

-- name: DemoRecoveredEpisodes :many
SELECT e.id, e.actor_id, e.status, e.attempts, coalesce(e.owner_node, ''),
       coalesce(c.fence, 0), coalesce(c.grant_kind, ''),
       (SELECT count(*) FROM leasehold_episode_steps AS s WHERE s.episode_id = e.id),
       coalesce((SELECT array_to_string(array_agg(DISTINCT s.fence ORDER BY s.fence), ',')
                 FROM leasehold_episode_steps AS s WHERE s.episode_id = e.id), '')
FROM leasehold_episodes AS e
LEFT JOIN leasehold_work_claims AS c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
WHERE e.attempts > 0
ORDER BY e.id;

-- name: DemoDuplicateKeys :one
SELECT count(*) FROM (
	SELECT dedupe_key FROM leasehold_episodes
	WHERE dedupe_key IS NOT NULL GROUP BY dedupe_key HAVING count(*) > 1
) AS d;

-- name: DemoOverJournaled :many
WITH per_fence AS (
	SELECT episode_id, fence, count(*) AS n
	FROM leasehold_episode_steps GROUP BY episode_id, fence
), journal AS (
	SELECT episode_id, sum(n) AS total, max(n) AS max_per_fence, count(*) AS fences
	FROM per_fence GROUP BY episode_id
), expected AS (
	SELECT e.id, e.actor_id, e.status, coalesce(e.owner_node, '') AS owner, e.attempts,
	       CASE e.actor_id WHEN $1::text THEN $2::int WHEN $3::text THEN $4::int ELSE 0 END AS steps
	FROM leasehold_episodes AS e
)
SELECT x.id, x.actor_id, x.status, x.owner
FROM expected AS x JOIN journal AS j ON j.episode_id = x.id
WHERE j.max_per_fence > x.steps
   OR (j.total > x.steps AND (j.fences < 2 OR x.attempts = 0))
ORDER BY x.id;
