-- leasehold schema, version 12: what each node can run.
--
-- leasehold_nodes.runnable holds the (actor, expectation) pairs a node's
-- poller asks work for: the same JSON array of {"actor_id",
-- "expectation_id"} objects as ClaimTriggerRequests' runnable parameter
-- (episodes.RunnableJSON), the pairs of the actors in mode full on that
-- node. RegisterNode and HeartbeatNode write it. It is advisory, like the
-- rest of the row: ListWaitingForNode (sql/queries/postgres/nodes.sql)
-- reads it to tell operators which queued work no live node can run, and
-- nothing is granted from it.
--
-- Rows written before this migration (and by a node of an older version,
-- which does not write the column) list nothing: such a node is counted as
-- running no pair until it registers again with this version. A constant
-- default, so adding the column does not rewrite the table.

-- +goose Up
ALTER TABLE leasehold_nodes
    ADD COLUMN runnable jsonb NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE leasehold_nodes DROP COLUMN runnable;
