-- leasehold schema, version 7 (SQL Server): work that is due later.
--
-- The column and index of sql/schema/postgres/00007_leasehold_run_after.sql,
-- in the conventions of version 1 (00001_leasehold_init.sql, whose header
-- applies here too: the session SET options it lists are required, the
-- index below is filtered). run_after (database time, SYSUTCDATETIME()) is
-- when a trigger request becomes due; pollers claim only due requests.
-- Requests open when this migration runs get its time: they are due at
-- once, as they were.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
ALTER TABLE leasehold_trigger_requests ADD run_after datetime2(6) NOT NULL
    CONSTRAINT leasehold_trigger_requests_run_after_default DEFAULT SYSUTCDATETIME();

-- The pollers' claim: open requests of one env, due first. goose sends each
-- statement as its own batch, so the new column is known when this one
-- compiles.
CREATE NONCLUSTERED INDEX leasehold_trigger_requests_due_idx
    ON leasehold_trigger_requests (source_env, run_after)
    WHERE status IN (N'pending', N'claimed');

-- +goose Down
DROP INDEX leasehold_trigger_requests_due_idx ON leasehold_trigger_requests;
ALTER TABLE leasehold_trigger_requests DROP CONSTRAINT leasehold_trigger_requests_run_after_default;
ALTER TABLE leasehold_trigger_requests DROP COLUMN run_after;
