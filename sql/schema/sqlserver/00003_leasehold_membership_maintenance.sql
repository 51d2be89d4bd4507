-- leasehold schema, version 3 (SQL Server): node membership and maintenance
-- bookkeeping.
--
-- The table, column and index of
-- sql/schema/postgres/00003_leasehold_membership_maintenance.sql, in the
-- types and conventions of version 1 (00001_leasehold_init.sql, whose header
-- applies here too): datetime2(6) written from SYSUTCDATETIME(), nvarchar
-- text, the binary collation Latin1_General_100_BIN2 on identity columns
-- (node, stack, env), bit for booleans, unset stack and env as N'' NOT NULL,
-- and the Postgres names on constraints, defaults and indexes.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more; docs/sqlserver.md lists
-- what only a real server can confirm. The session SET options listed in
-- 00001 are required here as well: the index below is filtered.

-- +goose Up

-- Advisory membership: which nodes are up, in which stack, env and mode, and
-- when each last showed life (heartbeat_at, database time). Operators and
-- placement read it; nothing decides authority from it: only a lease and its
-- fence do. A node upserts its row on start and with its heartbeat, marks it
-- draining when it drains and deletes it when drained; maintenance deletes
-- rows of nodes that vanished without draining.
--
-- The key is clustered: one nvarchar(255) is at most 510 bytes, within the
-- 900-byte clustered key limit.
CREATE TABLE leasehold_nodes (
    node_id       nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    stack         nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_nodes_stack_default DEFAULT N'',
    env           nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_nodes_env_default DEFAULT N'',
    mode          nvarchar(16)  NOT NULL,
    draining      bit           NOT NULL
        CONSTRAINT leasehold_nodes_draining_default DEFAULT 0,
    started_at    datetime2(6)  NOT NULL
        CONSTRAINT leasehold_nodes_started_at_default DEFAULT SYSUTCDATETIME(),
    heartbeat_at  datetime2(6)  NOT NULL
        CONSTRAINT leasehold_nodes_heartbeat_at_default DEFAULT SYSUTCDATETIME(),
    CONSTRAINT leasehold_nodes_pkey PRIMARY KEY CLUSTERED (node_id),
    CONSTRAINT leasehold_nodes_mode_check CHECK (mode IN (N'full', N'trigger_only', N'disabled'))
);

-- Set once maintenance has deleted every journal row of an archived
-- episode, so the purge scans only archived episodes that still have a
-- journal (the filtered index below), not all of history. The default is a
-- named constraint so that Down can drop it before the column.
--
-- Adding a NOT NULL column with a constant default is a metadata-only change
-- on Enterprise edition and Azure SQL; on other editions it writes every
-- existing episode row, under a schema lock, for as long as that takes.
ALTER TABLE leasehold_episodes
    ADD journal_purged bit NOT NULL
        CONSTRAINT leasehold_episodes_journal_purged_default DEFAULT 0;

-- The purge's and MarkJournalsPurged's scan: archived episodes whose journal
-- is not known to be empty. The statements repeat the filter literally
-- (archived_at IS NOT NULL AND journal_purged = 0) so the optimizer can
-- match it. goose sends this statement as its own batch, after the ALTER
-- above, so the new column is known when it compiles.
CREATE NONCLUSTERED INDEX leasehold_episodes_unpurged_idx
    ON leasehold_episodes (archived_at)
    WHERE archived_at IS NOT NULL AND journal_purged = 0;

-- +goose Down
DROP INDEX leasehold_episodes_unpurged_idx ON leasehold_episodes;
ALTER TABLE leasehold_episodes DROP CONSTRAINT leasehold_episodes_journal_purged_default;
ALTER TABLE leasehold_episodes DROP COLUMN journal_purged;
DROP TABLE leasehold_nodes;
