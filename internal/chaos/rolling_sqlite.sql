-- The statements of rolling.sql under the same names, in SQLite's dialect
-- (times in INTEGER milliseconds since the Unix epoch, parameters ?1, ?2,
-- ...). Loaded by name (rollingLite).

-- name: CreateRollingCalls :exec
CREATE TABLE rolling_calls (
    episode_id INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    owner      TEXT    NOT NULL,
    fence      INTEGER NOT NULL,
    called_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
);

-- name: InsertRollingCall :exec
INSERT INTO rolling_calls (episode_id, attempt, owner, fence) VALUES (?1, ?2, ?3, ?4);

-- name: RollingEpisodes :many
SELECT id, trigger_type, actor_id, expectation_id,
    coalesce(payload ->> 'trigger', '') AS "trigger",
    status, attempts, created_at
FROM leasehold_episodes
ORDER BY id;

-- name: RollingCalls :many
SELECT episode_id, attempt, owner, called_at FROM rolling_calls ORDER BY called_at;

-- name: RollingLedger :many
SELECT episode_id, owner, fence FROM ledger;

-- name: RollingEpisodesIn :many
SELECT id FROM leasehold_episodes
WHERE actor_id = ?1 AND expectation_id = ?2 AND status = ?3
ORDER BY id;
