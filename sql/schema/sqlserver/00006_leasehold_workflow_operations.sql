-- leasehold schema, version 6 (SQL Server): operating workflows.
--
-- The constraint and column of
-- sql/schema/postgres/00006_leasehold_workflow_operations.sql, in the
-- conventions of version 1 (00001_leasehold_init.sql, whose header applies
-- here too): an instance may be canceled by an operator, and parked_reason
-- says why an instance's advance could not apply the registered definition
-- (a rolling deploy that renamed a step); the next advance that succeeds
-- clears it.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
ALTER TABLE leasehold_workflow_instances DROP CONSTRAINT leasehold_workflow_instances_status_check;
ALTER TABLE leasehold_workflow_instances ADD CONSTRAINT leasehold_workflow_instances_status_check
    CHECK (status IN (N'running', N'done', N'failed', N'canceled'));
ALTER TABLE leasehold_workflow_instances ADD parked_reason nvarchar(max) NULL;

-- +goose Down
-- Canceled instances, if any, keep their status: the older check is
-- restored WITH NOCHECK so the rollback does not rewrite history.
ALTER TABLE leasehold_workflow_instances DROP COLUMN parked_reason;
ALTER TABLE leasehold_workflow_instances DROP CONSTRAINT leasehold_workflow_instances_status_check;
ALTER TABLE leasehold_workflow_instances WITH NOCHECK ADD CONSTRAINT leasehold_workflow_instances_status_check
    CHECK (status IN (N'running', N'done', N'failed'));
