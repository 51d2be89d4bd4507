-- leasehold schema, version 6 (Postgres): operating workflows.
--
-- An operator can cancel a running instance (status canceled), and an
-- instance whose advance cannot apply the definition this node registered
-- (a rolling deploy that renamed a step) is parked: it stays running, its
-- step's episode keeps its finish, and parked_reason says why nothing moved,
-- for Reconcile and `leasehold workflows ls` to report. The next advance
-- that succeeds (a node with a matching definition) clears it.

-- +goose Up
ALTER TABLE leasehold_workflow_instances DROP CONSTRAINT leasehold_workflow_instances_status_check;
ALTER TABLE leasehold_workflow_instances ADD CONSTRAINT leasehold_workflow_instances_status_check
    CHECK (status IN ('running', 'done', 'failed', 'canceled'));
ALTER TABLE leasehold_workflow_instances ADD COLUMN parked_reason text;

-- +goose Down
-- Canceled instances, if any, keep their status: the older check is
-- restored NOT VALID so the rollback does not rewrite history.
ALTER TABLE leasehold_workflow_instances DROP COLUMN parked_reason;
ALTER TABLE leasehold_workflow_instances DROP CONSTRAINT leasehold_workflow_instances_status_check;
ALTER TABLE leasehold_workflow_instances ADD CONSTRAINT leasehold_workflow_instances_status_check
    CHECK (status IN ('running', 'done', 'failed')) NOT VALID;
