-- leasehold schema, version 2 (SQL Server): deferred trigger requests and
-- findings.
--
-- The tables, columns and constraints of
-- sql/schema/postgres/00002_leasehold_deferred_findings.sql, in the types and
-- conventions of version 1 (00001_leasehold_init.sql, whose header applies
-- here too): datetime2(6) written from SYSUTCDATETIME(), nvarchar text, the
-- binary collation Latin1_General_100_BIN2 on every column compared for
-- identity (keys, actors, owners, env, stack, class), JSON in nvarchar(max)
-- without an ISJSON check (opts and data may be any JSON value), unset env and
-- stack as N'' NOT NULL, never NULL, and the Postgres names on constraints,
-- defaults and indexes.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more; docs/sqlserver.md lists
-- what only a real server can confirm. The session SET options listed in
-- 00001 are required here as well: both tables carry a filtered index.
--
-- No LISTEN/NOTIFY. The Postgres migration adds an insert trigger that
-- notifies listening pollers at commit; SQL Server has no equivalent the
-- library uses (Service Broker and query notifications are heavyweight and
-- often disabled), so SQL Server pollers simply poll on their interval. No
-- trigger is created, which also keeps the adapter's direct OUTPUT clauses
-- legal (OUTPUT without INTO is error 334 on a table with an enabled trigger).

-- +goose Up

-- A deferred execution: a trigger_only node created the episode (unclaimed)
-- and this row asks a full node to run it. Written in the same transaction
-- as the episode (CreateDeferredEpisode), so neither exists without the
-- other. status: pending, claimed (until claim_until), completed (handed to
-- a full node's work claim), expired (its episode was canceled). fence grows
-- on every poller claim; the hand-over is conditioned on it.
--
-- The UNIQUE constraint on episode_id also indexes the foreign key, which
-- SQL Server does not do by itself, so the cascade from leasehold_episodes
-- seeks instead of scanning.
CREATE TABLE leasehold_trigger_requests (
    id              bigint IDENTITY(1, 1) NOT NULL,
    episode_id      bigint        NOT NULL,
    actor_id        nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    expectation_id  nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    source_node     nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    source_stack    nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_trigger_requests_source_stack_default DEFAULT N'',
    source_env      nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_trigger_requests_source_env_default DEFAULT N'',
    opts            nvarchar(max) NULL,
    status          nvarchar(16)  NOT NULL
        CONSTRAINT leasehold_trigger_requests_status_default DEFAULT N'pending',
    claimed_by      nvarchar(255) COLLATE Latin1_General_100_BIN2 NULL,
    claim_until     datetime2(6)  NULL,
    fence           bigint        NOT NULL
        CONSTRAINT leasehold_trigger_requests_fence_default DEFAULT 0,
    created_at      datetime2(6)  NOT NULL
        CONSTRAINT leasehold_trigger_requests_created_at_default DEFAULT SYSUTCDATETIME(),
    claimed_at      datetime2(6)  NULL,
    finished_at     datetime2(6)  NULL,
    CONSTRAINT leasehold_trigger_requests_pkey PRIMARY KEY CLUSTERED (id),
    CONSTRAINT leasehold_trigger_requests_episode_fkey FOREIGN KEY (episode_id)
        REFERENCES leasehold_episodes (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_trigger_requests_episode_key UNIQUE (episode_id),
    CONSTRAINT leasehold_trigger_requests_status_check
        CHECK (status IN (N'pending', N'claimed', N'completed', N'expired'))
);

-- Pollers (ClaimTriggerRequests) and the expiry scan (ExpireTriggerRequests)
-- read the open requests of one env, oldest first; closed requests leave the
-- index, so its size follows the backlog. The filter is the Postgres partial
-- index's predicate (IN is allowed in a filtered index predicate, OR is
-- not); the statements repeat status IN (N'pending', N'claimed') literally so
-- the optimizer can match it. The clustered key (id) rides along in every
-- entry, so the index also yields the (created_at, id) order the claim uses.
CREATE NONCLUSTERED INDEX leasehold_trigger_requests_open_idx
    ON leasehold_trigger_requests (source_env, created_at)
    WHERE status IN (N'pending', N'claimed');

-- A finding is a fact an episode raised until an episode clears it. At most
-- one active finding per key per env: the unique index below is filtered on
-- status = N'active', so cleared rows are history and raise -> clear ->
-- raise -> clear never collides with them. env is N'' when unset, never
-- NULL: a SQL Server unique index treats NULLs as equal, Postgres as
-- distinct, and N'' makes both engines agree that the unset env is one env.
CREATE TABLE leasehold_findings (
    id                  bigint IDENTITY(1, 1) NOT NULL,
    finding_key         nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL,
    env                 nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_findings_env_default DEFAULT N'',
    status              nvarchar(16)  NOT NULL
        CONSTRAINT leasehold_findings_status_default DEFAULT N'active',
    class               nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_findings_class_default DEFAULT N'',
    severity            nvarchar(32)  NOT NULL
        CONSTRAINT leasehold_findings_severity_default DEFAULT N'',
    summary             nvarchar(max) NOT NULL
        CONSTRAINT leasehold_findings_summary_default DEFAULT N'',
    data                nvarchar(max) NULL,
    actor_id            nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    source_stack        nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_findings_source_stack_default DEFAULT N'',
    raised_by_episode   bigint        NOT NULL,
    updated_by_episode  bigint        NOT NULL,
    cleared_by_episode  bigint        NULL,
    -- How many raises this active finding absorbed (1 when first raised).
    raise_count         int           NOT NULL
        CONSTRAINT leasehold_findings_raise_count_default DEFAULT 1,
    raised_at           datetime2(6)  NOT NULL
        CONSTRAINT leasehold_findings_raised_at_default DEFAULT SYSUTCDATETIME(),
    updated_at          datetime2(6)  NOT NULL
        CONSTRAINT leasehold_findings_updated_at_default DEFAULT SYSUTCDATETIME(),
    cleared_at          datetime2(6)  NULL,
    CONSTRAINT leasehold_findings_pkey PRIMARY KEY CLUSTERED (id),
    CONSTRAINT leasehold_findings_key_nonempty CHECK (finding_key <> N''),
    CONSTRAINT leasehold_findings_status_check CHECK (status IN (N'active', N'cleared'))
);

-- The arbiter of "one active finding per (env, key)". RaiseFinding's upsert
-- seeks it under UPDLOCK, HOLDLOCK, so the key range of an absent finding
-- stays locked until its insert commits. Key size: env (up to 510 bytes) and
-- finding_key (up to 1024) together stay under the 1700-byte limit of a
-- nonclustered key (SQL Server 2016 and later).
CREATE UNIQUE NONCLUSTERED INDEX leasehold_findings_active_key_idx
    ON leasehold_findings (env, finding_key)
    WHERE status = N'active';

-- +goose Down
DROP TABLE leasehold_findings;
DROP TABLE leasehold_trigger_requests;
