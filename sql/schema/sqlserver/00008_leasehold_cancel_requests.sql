-- leasehold schema, version 8 (SQL Server): cancel requests that reach the
-- owner.
--
-- The column and index of
-- sql/schema/postgres/00008_leasehold_cancel_requests.sql, in the
-- conventions of version 1 (00001_leasehold_init.sql, whose header applies
-- here too: the session SET options it lists are required, the index below
-- is filtered). cancel_requested_at (database time, SYSUTCDATETIME()) is
-- when an operator asked a live episode to stop; its holder reads it once
-- per heartbeat interval (ListCancelRequests) and ends the run canceled.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
ALTER TABLE leasehold_episodes ADD cancel_requested_at datetime2(6) NULL;

-- The holders' read: only live episodes with a pending cancel request. goose
-- sends each statement as its own batch, so the new column is known when
-- this one compiles.
CREATE NONCLUSTERED INDEX leasehold_episodes_cancel_requested_idx
    ON leasehold_episodes (id)
    WHERE cancel_requested_at IS NOT NULL AND status IN (N'queued', N'running');

-- +goose Down
DROP INDEX leasehold_episodes_cancel_requested_idx ON leasehold_episodes;
ALTER TABLE leasehold_episodes DROP COLUMN cancel_requested_at;
