-- leasehold schema, version 13: workflow definitions are versioned.
--
-- A workflow instance runs the steps of the definition it was started
-- with. leasehold_workflow_definitions holds every definition a node
-- registered, keyed by workflow and version: the version is a hash of the
-- definition's canonical JSON (workflows.Definition.Version: the first 16
-- hex characters of its SHA-256), so a row never changes once written and
-- two nodes that register the same definition write the same row
-- (PutWorkflowDefinition inserts, or does nothing when it is there).
-- recorded_at is the database clock, recorded_by the first node that
-- recorded it; both are for operators only.
--
-- leasehold_workflow_instances.definition_version is the version an
-- instance was started with (CreateWorkflowInstance). Advancing an instance
-- uses that definition, read back with GetWorkflowDefinition when the
-- advancing node registered another one (a rolling deploy), instead of
-- parking the instance. Instances created before this migration have ''
-- (no stored definition): they are advanced as before, with the definition
-- registered where they advance, and parked when it does not match their
-- steps. A constant default, so adding the column does not rewrite the
-- table.

-- +goose Up
CREATE TABLE leasehold_workflow_definitions (
    workflow_id  varchar(255) NOT NULL,
    version      varchar(64)  NOT NULL,
    definition   jsonb        NOT NULL,
    recorded_at  timestamptz  NOT NULL DEFAULT now(),
    recorded_by  varchar(255) NOT NULL DEFAULT '',
    CONSTRAINT leasehold_workflow_definitions_pkey PRIMARY KEY (workflow_id, version)
);

ALTER TABLE leasehold_workflow_instances
    ADD COLUMN definition_version varchar(64) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE leasehold_workflow_instances DROP COLUMN definition_version;
DROP TABLE leasehold_workflow_definitions;
