-- leasehold schema, version 12 (SQL Server): what each node can run.
--
-- The column of sql/schema/postgres/00012_leasehold_node_runnable.sql, in
-- the conventions of version 1 (00001_leasehold_init.sql, whose header
-- applies here too): leasehold_nodes.runnable holds the (actor,
-- expectation) pairs a node's poller asks work for, the same JSON array of
-- {"actor_id", "expectation_id"} objects as ClaimTriggerRequests' @runnable
-- (episodes.RunnableJSON), as nvarchar(max) checked with ISJSON (Postgres
-- stores jsonb). RegisterNode and HeartbeatNode write it;
-- ListWaitingForNode reads it with OPENJSON. Advisory, like the rest of the
-- row. Rows written before this migration list nothing until their node
-- registers again. The default and the check are named constraints so that
-- Down can drop them before the column.
--
-- Adding a NOT NULL column with a constant default is a metadata-only change
-- on Enterprise edition and Azure SQL; on other editions it writes every
-- existing node row (a handful).
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
ALTER TABLE leasehold_nodes ADD runnable nvarchar(max) NOT NULL
    CONSTRAINT leasehold_nodes_runnable_default DEFAULT N'[]'
    CONSTRAINT leasehold_nodes_runnable_json CHECK (ISJSON(runnable) = 1);

-- +goose Down
ALTER TABLE leasehold_nodes DROP CONSTRAINT leasehold_nodes_runnable_json;
ALTER TABLE leasehold_nodes DROP CONSTRAINT leasehold_nodes_runnable_default;
ALTER TABLE leasehold_nodes DROP COLUMN runnable;
