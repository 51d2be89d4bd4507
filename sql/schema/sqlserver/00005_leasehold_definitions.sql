-- leasehold schema, version 5 (SQL Server): the definitions every node
-- records.
--
-- The column and constraint of sql/schema/postgres/00005_leasehold_definitions.sql,
-- in the conventions of version 1 (00001_leasehold_init.sql, whose header
-- applies here too). Each node upserts, when it starts, the recovery policy
-- and max attempts of every expectation it registers (PutAgentDefinition),
-- so a sweeper without an actor's code and the operator CLI know them.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
ALTER TABLE leasehold_agent_definitions ADD max_attempts int NULL
    CONSTRAINT leasehold_agent_definitions_max_attempts_check CHECK (max_attempts IS NULL OR max_attempts >= 0);

-- +goose Down
ALTER TABLE leasehold_agent_definitions DROP CONSTRAINT leasehold_agent_definitions_max_attempts_check;
ALTER TABLE leasehold_agent_definitions DROP COLUMN max_attempts;
