-- leasehold schema, version 1 (Postgres).
--
-- Tables are unqualified: they live in whatever schema the connection's
-- search_path selects. Every time column is timestamptz and is written from the
-- database clock (now()) by the statements in sql/queries/postgres; no node
-- clock ever decides a lease, a staleness cutoff or an expiry.
--
-- Unset stack and env are stored as '' (not NULL) so that equality, unique
-- indexes and scoping behave the same on Postgres (NULLs distinct) and SQL
-- Server (NULLs equal).

-- +goose Up

-- One lease per dedupe key. The row is never deleted while a lease might be
-- live: fence only grows, so a zombie holding an old fence can never match.
CREATE TABLE leasehold_work_claims (
    dedupe_key        varchar(512) NOT NULL,
    state             varchar(16)  NOT NULL,
    owner_node        varchar(255) NOT NULL,
    lease_until       timestamptz  NOT NULL,
    claimed_at        timestamptz  NOT NULL,
    last_heartbeat_at timestamptz,
    finished_at       timestamptz,
    attempt           integer      NOT NULL DEFAULT 1,
    fence             bigint       NOT NULL DEFAULT 1,
    -- How the current grant was made: fresh (first insert), steal (an expired
    -- claimed lease), reclaim (after done, failed or released).
    grant_kind        varchar(16)  NOT NULL DEFAULT 'fresh',
    work_type         varchar(128) NOT NULL DEFAULT '',
    error_detail      jsonb,
    CONSTRAINT leasehold_work_claims_pkey PRIMARY KEY (dedupe_key),
    CONSTRAINT leasehold_work_claims_key_nonempty CHECK (dedupe_key <> ''),
    CONSTRAINT leasehold_work_claims_state_check
        CHECK (state IN ('claimed', 'done', 'failed', 'released')),
    CONSTRAINT leasehold_work_claims_grant_kind_check
        CHECK (grant_kind IN ('fresh', 'steal', 'reclaim')),
    CONSTRAINT leasehold_work_claims_fence_positive CHECK (fence > 0)
) WITH (fillfactor = 80);

-- Live leases by owner (drain, operators) and the set ListExpiredClaims
-- filters. lease_until is deliberately not indexed: renewals change only
-- unindexed columns, so with the fillfactor's free space they are HOT updates
-- that write no index entries, which keeps the heartbeat cheap.
CREATE INDEX leasehold_work_claims_claimed_owner_idx
    ON leasehold_work_claims (owner_node)
    WHERE state = 'claimed';

CREATE TABLE leasehold_episodes (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    actor_id        varchar(255) NOT NULL,
    expectation_id  varchar(255) NOT NULL,
    trigger_type    varchar(32)  NOT NULL,
    trigger_ref     jsonb,
    dedupe_key      varchar(512),
    status          varchar(32)  NOT NULL DEFAULT 'queued',
    phase           varchar(64),
    attempts        integer      NOT NULL DEFAULT 0,
    max_attempts    integer      NOT NULL DEFAULT 3,
    budget          jsonb,
    source_stack    varchar(255) NOT NULL DEFAULT '',
    source_env      varchar(255) NOT NULL DEFAULT '',
    owner_node      varchar(255),
    payload         jsonb,
    result          jsonb,
    error_class     varchar(64),
    error_detail    jsonb,
    queued_at       timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz,
    last_step_at    timestamptz,
    archived_at     timestamptz,
    created_at      timestamptz  NOT NULL DEFAULT now(),
    CONSTRAINT leasehold_episodes_pkey PRIMARY KEY (id),
    CONSTRAINT leasehold_episodes_status_check CHECK (status IN
        ('queued', 'running', 'blocked', 'done', 'failed', 'partially_failed', 'canceled')),
    CONSTRAINT leasehold_episodes_trigger_type_check CHECK (trigger_type IN
        ('schedule', 'event', 'manual', 'workflow')),
    CONSTRAINT leasehold_episodes_attempts_check CHECK (attempts >= 0 AND max_attempts >= 0)
);

-- One live episode per trigger: N nodes insert the same dedupe_key and exactly
-- one insert wins. Archived rows leave the index so a trigger can run again.
-- The ON CONFLICT clause of every dedupe insert must repeat this predicate.
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
    id          bigint GENERATED ALWAYS AS IDENTITY,
    episode_id  bigint      NOT NULL,
    step_no     integer     NOT NULL,
    fence       bigint      NOT NULL,
    data        jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT leasehold_episode_steps_pkey PRIMARY KEY (id),
    CONSTRAINT leasehold_episode_steps_episode_fkey FOREIGN KEY (episode_id)
        REFERENCES leasehold_episodes (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_episode_steps_step_no_key UNIQUE (episode_id, step_no)
);

-- Recovery policy for actors defined at runtime rather than compiled in.
CREATE TABLE leasehold_agent_definitions (
    actor_id        varchar(255) NOT NULL,
    expectation_id  varchar(255) NOT NULL,
    recovery_policy varchar(16)  NOT NULL DEFAULT 'fail',
    created_at      timestamptz  NOT NULL DEFAULT now(),
    updated_at      timestamptz  NOT NULL DEFAULT now(),
    CONSTRAINT leasehold_agent_definitions_pkey PRIMARY KEY (actor_id, expectation_id),
    CONSTRAINT leasehold_agent_definitions_policy_check
        CHECK (recovery_policy IN ('restart', 'fail'))
);

-- +goose Down
DROP TABLE leasehold_agent_definitions;
DROP TABLE leasehold_episode_steps;
DROP TABLE leasehold_episodes;
DROP TABLE leasehold_work_claims;
