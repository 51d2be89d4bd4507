-- Test-only statements of the rolling-deploy test (rolling_test.go) on
-- Postgres; rolling_sqlite.sql has the same names in SQLite's dialect. The
-- test also uses chaos.sql's ledger (the strategy's effect, one row per
-- episode) and its ClaimKeys and Unsettled. Loaded by name (rollingPG).

-- name: CreateRollingCalls :exec
-- One row per call of a strategy's Init: the episode, attempt and grant
-- that ran it, on the database clock. Not fenced: a call is recorded even
-- if its grant is lost later, so an episode that failed or spent an
-- attempt without any call is visible.
CREATE TABLE rolling_calls (
    episode_id bigint      NOT NULL,
    attempt    integer     NOT NULL,
    owner      text        NOT NULL,
    fence      bigint      NOT NULL,
    called_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: InsertRollingCall :exec
-- $1 episode, $2 attempt, $3 owner, $4 fence.
INSERT INTO rolling_calls (episode_id, attempt, owner, fence) VALUES ($1, $2, $3, $4);

-- name: RollingEpisodes :many
-- Every episode, with what the invariants compare.
SELECT id, trigger_type, actor_id, expectation_id,
    coalesce(payload ->> 'trigger', '') AS trigger,
    status, attempts, created_at
FROM leasehold_episodes
ORDER BY id;

-- name: RollingCalls :many
SELECT episode_id, attempt, owner, called_at FROM rolling_calls ORDER BY called_at;

-- name: RollingLedger :many
SELECT episode_id, owner, fence FROM ledger;

-- name: RollingEpisodesIn :many
-- The episodes of one pair ($1 actor, $2 expectation) in one status ($3).
SELECT id FROM leasehold_episodes
WHERE actor_id = $1 AND expectation_id = $2 AND status = $3
ORDER BY id;
