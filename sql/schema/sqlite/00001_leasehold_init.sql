-- leasehold schema, version 1 (SQLite).
--
-- The SQLite translation of sql/schema/postgres/00001_leasehold_init.sql:
-- the same tables, columns (in the same order), constraint names, CHECKs and
-- indexes, partial-index predicates included. Types map as follows:
--
--   timestamptz          INTEGER: milliseconds since the Unix epoch (UTC),
--                        written from the database clock, the expression
--                        CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
--                        by the statements in sql/queries/sqlite; no node
--                        clock ever decides a lease, a cutoff or an expiry.
--   varchar(n), text     TEXT, with CHECK (length(col) <= n) for varchar(n)
--                        (SQLite enforces no declared length; length()
--                        counts characters, as varchar(n) does).
--   jsonb                TEXT holding JSON, with CHECK (json_valid(col)).
--   boolean              BOOLEAN (stored as INTEGER 0/1, NUMERIC affinity),
--                        with CHECK (col IN (0, 1)); Go sees bool.
--   bigint identity      INTEGER PRIMARY KEY AUTOINCREMENT: ids are never
--                        reused, even after the newest row is deleted, as a
--                        Postgres identity is never reused.
--
-- Unset stack and env are stored as '' (not NULL), as on Postgres and SQL
-- Server. Foreign keys need PRAGMA foreign_keys = ON on every connection,
-- which adapters/sqlite.Open sets.

-- +goose Up

-- One lease per dedupe key. The row is never deleted while a lease might be
-- live: fence only grows, so a zombie holding an old fence can never match.
--
-- Postgres creates this table WITH (fillfactor = 80) so that renewals are HOT
-- updates. SQLite has no fillfactor: a renewal rewrites the row in its b-tree
-- page in place when it fits, and lease_until is not indexed here either, so
-- a renewal writes no index entry.
CREATE TABLE leasehold_work_claims (
    dedupe_key        TEXT    NOT NULL CHECK (length(dedupe_key) <= 512),
    state             TEXT    NOT NULL CHECK (length(state) <= 16),
    owner_node        TEXT    NOT NULL CHECK (length(owner_node) <= 255),
    lease_until       INTEGER NOT NULL,
    claimed_at        INTEGER NOT NULL,
    last_heartbeat_at INTEGER,
    finished_at       INTEGER,
    attempt           INTEGER NOT NULL DEFAULT 1,
    fence             INTEGER NOT NULL DEFAULT 1,
    -- How the current grant was made: fresh (first insert), steal (an expired
    -- claimed lease), reclaim (after done, failed or released).
    grant_kind        TEXT    NOT NULL DEFAULT 'fresh' CHECK (length(grant_kind) <= 16),
    work_type         TEXT    NOT NULL DEFAULT '' CHECK (length(work_type) <= 128),
    error_detail      TEXT    CHECK (error_detail IS NULL OR json_valid(error_detail)),
    CONSTRAINT leasehold_work_claims_pkey PRIMARY KEY (dedupe_key),
    CONSTRAINT leasehold_work_claims_key_nonempty CHECK (dedupe_key <> ''),
    CONSTRAINT leasehold_work_claims_state_check
        CHECK (state IN ('claimed', 'done', 'failed', 'released')),
    CONSTRAINT leasehold_work_claims_grant_kind_check
        CHECK (grant_kind IN ('fresh', 'steal', 'reclaim')),
    CONSTRAINT leasehold_work_claims_fence_positive CHECK (fence > 0)
);

-- Live leases by owner (drain, operators) and the set ListExpiredClaims
-- filters. lease_until is deliberately not indexed, so renewals write no
-- index entries.
CREATE INDEX leasehold_work_claims_claimed_owner_idx
    ON leasehold_work_claims (owner_node)
    WHERE state = 'claimed';

CREATE TABLE leasehold_episodes (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    actor_id        TEXT    NOT NULL CHECK (length(actor_id) <= 255),
    expectation_id  TEXT    NOT NULL CHECK (length(expectation_id) <= 255),
    trigger_type    TEXT    NOT NULL CHECK (length(trigger_type) <= 32),
    trigger_ref     TEXT    CHECK (trigger_ref IS NULL OR json_valid(trigger_ref)),
    dedupe_key      TEXT    CHECK (length(dedupe_key) <= 512),
    status          TEXT    NOT NULL DEFAULT 'queued' CHECK (length(status) <= 32),
    phase           TEXT    CHECK (length(phase) <= 64),
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL DEFAULT 3,
    budget          TEXT    CHECK (budget IS NULL OR json_valid(budget)),
    source_stack    TEXT    NOT NULL DEFAULT '' CHECK (length(source_stack) <= 255),
    source_env      TEXT    NOT NULL DEFAULT '' CHECK (length(source_env) <= 255),
    owner_node      TEXT    CHECK (length(owner_node) <= 255),
    payload         TEXT    CHECK (payload IS NULL OR json_valid(payload)),
    result          TEXT    CHECK (result IS NULL OR json_valid(result)),
    error_class     TEXT    CHECK (length(error_class) <= 64),
    error_detail    TEXT    CHECK (error_detail IS NULL OR json_valid(error_detail)),
    queued_at       INTEGER,
    started_at      INTEGER,
    finished_at     INTEGER,
    last_step_at    INTEGER,
    archived_at     INTEGER,
    created_at      INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    CONSTRAINT leasehold_episodes_status_check CHECK (status IN
        ('queued', 'running', 'blocked', 'done', 'failed', 'partially_failed', 'canceled')),
    CONSTRAINT leasehold_episodes_trigger_type_check CHECK (trigger_type IN
        ('schedule', 'event', 'manual', 'workflow')),
    CONSTRAINT leasehold_episodes_attempts_check CHECK (attempts >= 0 AND max_attempts >= 0)
);

-- One live episode per trigger: N nodes insert the same dedupe_key and exactly
-- one insert wins. Archived rows leave the index so a trigger can run again.
-- The ON CONFLICT clause of every dedupe insert must repeat this predicate
-- (SQLite, like Postgres, uses a partial index as the conflict target only
-- when the ON CONFLICT ... WHERE implies its predicate).
CREATE UNIQUE INDEX leasehold_episodes_dedupe_key_idx
    ON leasehold_episodes (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND archived_at IS NULL;

-- The recovery sweep scans running, unarchived episodes by recency; the
-- partial index keeps that cost proportional to running work, not history.
CREATE INDEX leasehold_episodes_running_idx
    ON leasehold_episodes (source_stack, source_env, last_step_at)
    WHERE status = 'running' AND archived_at IS NULL;

-- Queued episodes are picked per actor in FIFO order.
CREATE INDEX leasehold_episodes_queued_idx
    ON leasehold_episodes (actor_id, created_at)
    WHERE status = 'queued';

-- Maintenance archives terminal episodes by age.
CREATE INDEX leasehold_episodes_finished_idx
    ON leasehold_episodes (finished_at)
    WHERE archived_at IS NULL AND finished_at IS NOT NULL;

-- The step journal. step_no is unique per episode, so two writers can never
-- both journal "step 3"; fence records which grant wrote the step.
CREATE TABLE leasehold_episode_steps (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    episode_id  INTEGER NOT NULL,
    step_no     INTEGER NOT NULL,
    fence       INTEGER NOT NULL,
    data        TEXT    CHECK (data IS NULL OR json_valid(data)),
    created_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    CONSTRAINT leasehold_episode_steps_episode_fkey FOREIGN KEY (episode_id)
        REFERENCES leasehold_episodes (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_episode_steps_step_no_key UNIQUE (episode_id, step_no)
);

-- Recovery policy for actors defined at runtime rather than compiled in.
CREATE TABLE leasehold_agent_definitions (
    actor_id        TEXT    NOT NULL CHECK (length(actor_id) <= 255),
    expectation_id  TEXT    NOT NULL CHECK (length(expectation_id) <= 255),
    recovery_policy TEXT    NOT NULL DEFAULT 'fail' CHECK (length(recovery_policy) <= 16),
    created_at      INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    updated_at      INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    CONSTRAINT leasehold_agent_definitions_pkey PRIMARY KEY (actor_id, expectation_id),
    CONSTRAINT leasehold_agent_definitions_policy_check
        CHECK (recovery_policy IN ('restart', 'fail'))
);

-- +goose Down
DROP TABLE leasehold_agent_definitions;
DROP TABLE leasehold_episode_steps;
DROP TABLE leasehold_episodes;
DROP TABLE leasehold_work_claims;
