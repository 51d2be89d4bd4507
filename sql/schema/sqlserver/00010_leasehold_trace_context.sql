-- leasehold schema, version 10 (SQL Server): the trace an episode belongs
-- to.
--
-- The column of sql/schema/postgres/00010_leasehold_trace_context.sql, in
-- the conventions of version 1 (00001_leasehold_init.sql): the W3C trace
-- context of the span that fired the episode's trigger, so every attempt
-- continues that trace. NULL: no trace. It decides nothing.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
ALTER TABLE leasehold_episodes ADD trace_parent nvarchar(1024) NULL;

-- +goose Down
ALTER TABLE leasehold_episodes DROP COLUMN trace_parent;
