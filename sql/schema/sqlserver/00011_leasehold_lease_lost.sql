-- leasehold schema, version 11 (SQL Server): nothing.
--
-- Postgres's migration 11 creates leasehold_lease_lost, which raises
-- LH001, and SQLite's a table whose rows can never commit: what their
-- adapters run in the caller's transaction after a fenced FinishEpisode
-- there (Run.CompleteTx, Run.FailTx) matched no row, so that the caller's
-- transaction cannot commit. SQL Server needs neither: FinishEpisode
-- (sql/queries/sqlserver/episodes.sql) THROWs 51001 inside a caller's
-- transaction when it matched nothing, and XACT_ABORT rolls the whole
-- transaction back; an application's own T-SQL can THROW 51001 likewise.
--
-- The version is kept so that the version numbers (and CheckSchema) mean
-- the same on every dialect; goose needs a statement, so it runs a no-op.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
