-- leasehold schema, version 13 (SQL Server): workflow definitions are
-- versioned.
--
-- The table and column of sql/schema/postgres/00013_leasehold_workflow_versions.sql,
-- in the conventions of version 1 (00001_leasehold_init.sql, whose header
-- applies here too): leasehold_workflow_definitions holds every definition
-- a node registered, keyed by workflow and version (a hash of the
-- definition's canonical JSON, so a row never changes once written); the
-- definition is nvarchar(max) checked with ISJSON (Postgres stores jsonb);
-- recorded_at is SYSUTCDATETIME(). leasehold_workflow_instances.definition_version
-- is the version an instance was started with, N'' for instances created
-- before this migration (advanced, and parked, as before). The defaults and
-- the check are named constraints so that Down can drop them.
--
-- Adding a NOT NULL column with a constant default is a metadata-only change
-- on Enterprise edition and Azure SQL; on other editions it writes every
-- existing instance row.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
CREATE TABLE leasehold_workflow_definitions (
    workflow_id  nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
    version      nvarchar(64)  COLLATE Latin1_General_100_BIN2 NOT NULL,
    definition   nvarchar(max) NOT NULL
        CONSTRAINT leasehold_workflow_definitions_definition_json CHECK (ISJSON(definition) = 1),
    recorded_at  datetime2(6)  NOT NULL
        CONSTRAINT leasehold_workflow_definitions_recorded_at_default DEFAULT SYSUTCDATETIME(),
    recorded_by  nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL
        CONSTRAINT leasehold_workflow_definitions_recorded_by_default DEFAULT N'',
    CONSTRAINT leasehold_workflow_definitions_pkey PRIMARY KEY NONCLUSTERED (workflow_id, version)
);

ALTER TABLE leasehold_workflow_instances ADD definition_version nvarchar(64) COLLATE Latin1_General_100_BIN2 NOT NULL
    CONSTRAINT leasehold_workflow_instances_definition_version_default DEFAULT N'';

-- +goose Down
ALTER TABLE leasehold_workflow_instances DROP CONSTRAINT leasehold_workflow_instances_definition_version_default;
ALTER TABLE leasehold_workflow_instances DROP COLUMN definition_version;
DROP TABLE leasehold_workflow_definitions;
