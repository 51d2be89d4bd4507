-- leasehold schema, version 12 (SQLite): what each node can run. The
-- translation of sql/schema/postgres/00012.
--
-- leasehold_nodes.runnable holds the (actor, expectation) pairs a node's
-- poller asks work for: the same JSON array of {"actor_id",
-- "expectation_id"} objects as ClaimTriggerRequests' runnable parameter
-- (episodes.RunnableJSON), as text, checked to be JSON (Postgres stores
-- jsonb). RegisterNode and HeartbeatNode write it; ListWaitingForNode reads
-- it with json_each. Advisory, like the rest of the row. Rows written
-- before this migration list nothing until their node registers again. A
-- constant default, so SQLite's ADD COLUMN accepts NOT NULL and fills
-- existing rows.

-- +goose Up
ALTER TABLE leasehold_nodes
    ADD COLUMN runnable TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(runnable));

-- +goose Down
ALTER TABLE leasehold_nodes DROP COLUMN runnable;
