-- leasehold schema, version 1 (SQL Server).
--
-- The same four tables, columns and constraints as sql/schema/postgres, in
-- SQL Server types. Tables are unqualified: they land in the default schema
-- of the login that runs the migration, and the statements in
-- sql/queries/sqlserver find them the same way.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more; docs/sqlserver.md lists
-- what only a real server can confirm.
--
-- Required session SET options. The filtered indexes below (the episode
-- dedupe index above all) need, when they are created, whenever a row they
-- cover is inserted, updated or deleted, and whenever a plan uses them:
--
--   ANSI_NULLS ON, QUOTED_IDENTIFIER ON, ANSI_PADDING ON, ANSI_WARNINGS ON,
--   ARITHABORT ON, CONCAT_NULL_YIELDS_NULL ON, NUMERIC_ROUNDABORT OFF.
--
-- A session with any other setting fails with error 1934 ("... failed
-- because the following SET options have incorrect settings"). The adapter
-- sets all of them on every connection (adapters/sqlserver SessionInitSQL,
-- run by go-mssqldb on each new and each reused pooled connection). A tool
-- that runs this file itself (the goose CLI, sqlcmd without -I) must set
-- them too.
--
-- Database requirements: compatibility level 130 or higher (SQL Server 2016)
-- for OPENJSON, which RenewClaims uses. The statements are written to be
-- correct with READ_COMMITTED_SNAPSHOT ON or OFF.
--
-- Choices that differ in form from Postgres, each for parity of behaviour:
--
--  * Time columns are datetime2(6), UTC by convention, written only from
--    SYSUTCDATETIME() (microseconds, like timestamptz).
--  * Text is nvarchar: go-mssqldb sends Go strings as nvarchar, and an
--    nvarchar parameter against a varchar column converts the column and
--    loses index seeks.
--  * Key and identity columns (dedupe keys, owners, actors, expectations,
--    stack, env) use the binary collation Latin1_General_100_BIN2, so that
--    equality and uniqueness are exact as on Postgres; under a database's
--    default case-insensitive collation 'Invoice:1' and 'invoice:1' would be
--    one dedupe key and two triggers would make one episode.
--  * Unset stack and env are N'' NOT NULL, never NULL, as on Postgres: a
--    unique index here treats NULLs as equal.
--  * JSON columns are nvarchar(max). Only trigger_ref and budget, which the
--    library always writes as JSON objects, carry an ISJSON check: before
--    SQL Server 2022, ISJSON(x) accepts objects and arrays only, while jsonb
--    (and the library) accept any JSON value, e.g. a step's data of 42.
--  * Constraints, defaults and indexes carry the Postgres names, so errors
--    name the same objects on both engines.
--
-- Key sizes: the claims key is nvarchar(512), up to 1024 bytes, as the
-- library allows 512-character keys. SQL Server limits a clustered index key
-- to 900 bytes but a nonclustered one to 1700 (SQL Server 2016 and later), so
-- the claims primary key is NONCLUSTERED on a heap, like the filtered dedupe
-- index on episodes: every valid key fits on both engines.

-- +goose Up

-- One lease per dedupe key. The row is never deleted while a lease might be
-- live: fence only grows, so a zombie holding an old fence can never match.
-- FILLFACTOR 80 leaves room on each leaf page of the key index for inserts
-- of new keys, which arrive in random order, so fewer page splits; renewals
-- change fixed-size heap columns only and touch no index.
CREATE TABLE leasehold_work_claims (
    dedupe_key        nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL,
    state             nvarchar(16)  NOT NULL,
    owner_node        nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    lease_until       datetime2(6)  NOT NULL,
    claimed_at        datetime2(6)  NOT NULL,
    last_heartbeat_at datetime2(6)  NULL,
    finished_at       datetime2(6)  NULL,
    attempt           int           NOT NULL
        CONSTRAINT leasehold_work_claims_attempt_default DEFAULT 1,
    fence             bigint        NOT NULL
        CONSTRAINT leasehold_work_claims_fence_default DEFAULT 1,
    -- How the current grant was made: fresh (first insert), steal (an expired
    -- claimed lease), reclaim (after done, failed or released).
    grant_kind        nvarchar(16)  NOT NULL
        CONSTRAINT leasehold_work_claims_grant_kind_default DEFAULT N'fresh',
    work_type         nvarchar(128) NOT NULL
        CONSTRAINT leasehold_work_claims_work_type_default DEFAULT N'',
    error_detail      nvarchar(max) NULL,
    CONSTRAINT leasehold_work_claims_pkey PRIMARY KEY NONCLUSTERED (dedupe_key)
        WITH (FILLFACTOR = 80),
    CONSTRAINT leasehold_work_claims_key_nonempty CHECK (dedupe_key <> N''),
    CONSTRAINT leasehold_work_claims_state_check
        CHECK (state IN (N'claimed', N'done', N'failed', N'released')),
    CONSTRAINT leasehold_work_claims_grant_kind_check
        CHECK (grant_kind IN (N'fresh', N'steal', N'reclaim')),
    CONSTRAINT leasehold_work_claims_fence_positive CHECK (fence > 0)
);

-- Live leases by owner (drain, operators) and the set ListExpiredClaims
-- filters. lease_until is deliberately not indexed: a renewal then writes
-- the heap row only, never an index entry, which keeps the heartbeat cheap. Filtered like the Postgres partial index; the statements repeat
-- the filter as the literal state = N'claimed' so the optimizer can match it.
CREATE NONCLUSTERED INDEX leasehold_work_claims_claimed_owner_idx
    ON leasehold_work_claims (owner_node)
    WHERE state = N'claimed';

CREATE TABLE leasehold_episodes (
    id              bigint IDENTITY(1, 1) NOT NULL,
    actor_id        nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    expectation_id  nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    trigger_type    nvarchar(32)  NOT NULL,
    trigger_ref     nvarchar(max) NULL,
    dedupe_key      nvarchar(512) COLLATE Latin1_General_100_BIN2 NULL,
    status          nvarchar(32)  NOT NULL
        CONSTRAINT leasehold_episodes_status_default DEFAULT N'queued',
    phase           nvarchar(64)  NULL,
    attempts        int           NOT NULL
        CONSTRAINT leasehold_episodes_attempts_default DEFAULT 0,
    max_attempts    int           NOT NULL
        CONSTRAINT leasehold_episodes_max_attempts_default DEFAULT 3,
    budget          nvarchar(max) NULL,
    source_stack    nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_episodes_source_stack_default DEFAULT N'',
    source_env      nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_episodes_source_env_default DEFAULT N'',
    owner_node      nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL,
    payload         nvarchar(max) NULL,
    result          nvarchar(max) NULL,
    error_class     nvarchar(64)  NULL,
    error_detail    nvarchar(max) NULL,
    queued_at       datetime2(6)  NULL,
    started_at      datetime2(6)  NULL,
    finished_at     datetime2(6)  NULL,
    last_step_at    datetime2(6)  NULL,
    archived_at     datetime2(6)  NULL,
    created_at      datetime2(6)  NOT NULL
        CONSTRAINT leasehold_episodes_created_at_default DEFAULT SYSUTCDATETIME(),
    CONSTRAINT leasehold_episodes_pkey PRIMARY KEY CLUSTERED (id),
    CONSTRAINT leasehold_episodes_status_check CHECK (status IN
        (N'queued', N'running', N'blocked', N'done', N'failed', N'partially_failed', N'canceled')),
    CONSTRAINT leasehold_episodes_trigger_type_check CHECK (trigger_type IN
        (N'schedule', N'event', N'manual', N'workflow')),
    CONSTRAINT leasehold_episodes_attempts_check CHECK (attempts >= 0 AND max_attempts >= 0),
    -- ISJSON(NULL) is NULL, which a CHECK lets through: both stay optional.
    CONSTRAINT leasehold_episodes_trigger_ref_json CHECK (ISJSON(trigger_ref) = 1),
    CONSTRAINT leasehold_episodes_budget_json CHECK (ISJSON(budget) = 1)
);

-- One live episode per trigger: N nodes insert the same dedupe_key and
-- exactly one insert wins; the others get error 2601, which CreateEpisode
-- turns into an empty result. Archived rows leave the index so a trigger can
-- run again. Filtering on IS NOT NULL is required here, not just an
-- optimisation: a unique index on SQL Server admits only one NULL.
CREATE UNIQUE NONCLUSTERED INDEX leasehold_episodes_dedupe_key_idx
    ON leasehold_episodes (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND archived_at IS NULL;

-- The recovery sweep scans running, unarchived episodes by recency; the
-- filtered index keeps that cost proportional to running work, not history.
CREATE NONCLUSTERED INDEX leasehold_episodes_running_idx
    ON leasehold_episodes (source_stack, source_env, last_step_at)
    WHERE status = N'running' AND archived_at IS NULL;

-- Queued episodes are picked per actor in FIFO order.
CREATE NONCLUSTERED INDEX leasehold_episodes_queued_idx
    ON leasehold_episodes (actor_id, created_at)
    WHERE status = N'queued';

-- Maintenance archives terminal episodes by age.
CREATE NONCLUSTERED INDEX leasehold_episodes_finished_idx
    ON leasehold_episodes (finished_at)
    WHERE archived_at IS NULL AND finished_at IS NOT NULL;

-- The step journal. step_no is unique per episode, so two writers can never
-- both journal "step 3" (a duplicate raises 2627); fence records which grant
-- wrote the step. The unique constraint's index, episode_id first, also
-- serves ListSteps and the cascade from leasehold_episodes (SQL Server does
-- not index foreign keys by itself).
CREATE TABLE leasehold_episode_steps (
    id          bigint IDENTITY(1, 1) NOT NULL,
    episode_id  bigint        NOT NULL,
    step_no     int           NOT NULL,
    fence       bigint        NOT NULL,
    data        nvarchar(max) NULL,
    created_at  datetime2(6)  NOT NULL
        CONSTRAINT leasehold_episode_steps_created_at_default DEFAULT SYSUTCDATETIME(),
    CONSTRAINT leasehold_episode_steps_pkey PRIMARY KEY CLUSTERED (id),
    CONSTRAINT leasehold_episode_steps_episode_fkey FOREIGN KEY (episode_id)
        REFERENCES leasehold_episodes (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_episode_steps_step_no_key UNIQUE (episode_id, step_no)
);

-- Recovery policy for actors defined at runtime rather than compiled in.
-- The primary key is nonclustered because its two nvarchar(255) columns can
-- reach 1020 bytes, over the 900-byte clustered key limit and within the
-- 1700-byte nonclustered one; the table is small and read by key only.
CREATE TABLE leasehold_agent_definitions (
    actor_id        nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    expectation_id  nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    recovery_policy nvarchar(16)  NOT NULL
        CONSTRAINT leasehold_agent_definitions_policy_default DEFAULT N'fail',
    created_at      datetime2(6)  NOT NULL
        CONSTRAINT leasehold_agent_definitions_created_at_default DEFAULT SYSUTCDATETIME(),
    updated_at      datetime2(6)  NOT NULL
        CONSTRAINT leasehold_agent_definitions_updated_at_default DEFAULT SYSUTCDATETIME(),
    CONSTRAINT leasehold_agent_definitions_pkey
        PRIMARY KEY NONCLUSTERED (actor_id, expectation_id),
    CONSTRAINT leasehold_agent_definitions_policy_check
        CHECK (recovery_policy IN (N'restart', N'fail'))
);

-- +goose Down
DROP TABLE leasehold_agent_definitions;
DROP TABLE leasehold_episode_steps;
DROP TABLE leasehold_episodes;
DROP TABLE leasehold_work_claims;
