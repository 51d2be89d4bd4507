-- leasehold schema, version 3 (Postgres): node membership and maintenance
-- bookkeeping.

-- +goose Up

-- Advisory membership: which nodes are up, in which stack, env and mode, and
-- when each last showed life (heartbeat_at, database time). Operators and
-- placement read it; nothing decides authority from it: only a lease and its
-- fence do. A node upserts its row on start and with its heartbeat, marks it
-- draining when it drains and deletes it when drained; maintenance deletes
-- rows of nodes that vanished without draining.
CREATE TABLE leasehold_nodes (
    node_id       varchar(255) NOT NULL,
    stack         varchar(255) NOT NULL DEFAULT '',
    env           varchar(255) NOT NULL DEFAULT '',
    mode          varchar(16)  NOT NULL,
    draining      boolean      NOT NULL DEFAULT false,
    started_at    timestamptz  NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz  NOT NULL DEFAULT now(),
    CONSTRAINT leasehold_nodes_pkey PRIMARY KEY (node_id),
    CONSTRAINT leasehold_nodes_mode_check CHECK (mode IN ('full', 'trigger_only', 'disabled'))
);

-- Set once maintenance has deleted every journal row of an archived
-- episode, so the purge scans only archived episodes that still have a
-- journal (the partial index below), not all of history.
ALTER TABLE leasehold_episodes
    ADD COLUMN journal_purged boolean NOT NULL DEFAULT false;

CREATE INDEX leasehold_episodes_unpurged_idx
    ON leasehold_episodes (archived_at)
    WHERE archived_at IS NOT NULL AND NOT journal_purged;

-- +goose Down
DROP INDEX leasehold_episodes_unpurged_idx;
ALTER TABLE leasehold_episodes DROP COLUMN journal_purged;
DROP TABLE leasehold_nodes;
