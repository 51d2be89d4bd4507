-- leasehold schema, version 15 (SQL Server): the live-lease index names the
-- key too. The index of sql/schema/postgres/00015, in the conventions of
-- version 1 (00001_leasehold_init.sql, whose header applies here too: the
-- index is filtered, and the statements repeat its filter as the literal
-- state = N'claimed'). A fenced write's check (dedupe_key, owner_node,
-- fence, state) then reaches its one row through either index, never
-- through every live lease of the owner. Key size: owner_node (510 bytes)
-- and dedupe_key (1,024) stay under the 1,700 bytes of a nonclustered key.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
DROP INDEX leasehold_work_claims_claimed_owner_idx ON leasehold_work_claims;
CREATE NONCLUSTERED INDEX leasehold_work_claims_claimed_owner_idx
    ON leasehold_work_claims (owner_node, dedupe_key)
    WHERE state = N'claimed';

-- +goose Down
DROP INDEX leasehold_work_claims_claimed_owner_idx ON leasehold_work_claims;
CREATE NONCLUSTERED INDEX leasehold_work_claims_claimed_owner_idx
    ON leasehold_work_claims (owner_node)
    WHERE state = N'claimed';
