-- leasehold schema, version 5: the definitions every node records.
--
-- Each node upserts, when it starts (runner.Node.Start, PutAgentDefinition),
-- the recovery policy and max attempts of every expectation it registers,
-- so that a sweeper on a node that lacks an actor's code (a rolling deploy
-- that adds an actor, two services sharing a database) and the operator CLI
-- know the policy the nodes apply, instead of guessing `fail`.

-- +goose Up
ALTER TABLE leasehold_agent_definitions ADD COLUMN max_attempts integer;
ALTER TABLE leasehold_agent_definitions ADD CONSTRAINT leasehold_agent_definitions_max_attempts_check
    CHECK (max_attempts IS NULL OR max_attempts >= 0);

-- +goose Down
ALTER TABLE leasehold_agent_definitions DROP CONSTRAINT leasehold_agent_definitions_max_attempts_check;
ALTER TABLE leasehold_agent_definitions DROP COLUMN max_attempts;
