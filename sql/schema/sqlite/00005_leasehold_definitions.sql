-- leasehold schema, version 5 (SQLite): the definitions every node records.
-- The translation of sql/schema/postgres/00005.
--
-- Each node upserts, when it starts (runner.Node.Start, PutAgentDefinition),
-- the recovery policy and max attempts of every expectation it registers,
-- so that a sweeper on a node that lacks an actor's code (a rolling deploy
-- that adds an actor, two services sharing a database) and the operator CLI
-- know the policy the nodes apply, instead of guessing `fail`.
--
-- SQLite cannot ADD CONSTRAINT to a table; the check is the new column's own
-- (named) column constraint instead, which ADD COLUMN accepts and which is
-- the same condition.

-- +goose Up
ALTER TABLE leasehold_agent_definitions ADD COLUMN max_attempts INTEGER
    CONSTRAINT leasehold_agent_definitions_max_attempts_check
    CHECK (max_attempts IS NULL OR max_attempts >= 0);

-- +goose Down
ALTER TABLE leasehold_agent_definitions DROP COLUMN max_attempts;
