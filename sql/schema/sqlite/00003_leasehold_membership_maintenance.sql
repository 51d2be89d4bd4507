-- leasehold schema, version 3 (SQLite): node membership and maintenance
-- bookkeeping. The translation of sql/schema/postgres/00003.

-- +goose Up

-- Advisory membership: which nodes are up, in which stack, env and mode, and
-- when each last showed life (heartbeat_at, database time). Operators and
-- placement read it; nothing decides authority from it: only a lease and its
-- fence do. A node upserts its row on start and with its heartbeat, marks it
-- draining when it drains and deletes it when drained; maintenance deletes
-- rows of nodes that vanished without draining.
CREATE TABLE leasehold_nodes (
    node_id       TEXT    NOT NULL CHECK (length(node_id) <= 255),
    stack         TEXT    NOT NULL DEFAULT '' CHECK (length(stack) <= 255),
    env           TEXT    NOT NULL DEFAULT '' CHECK (length(env) <= 255),
    mode          TEXT    NOT NULL CHECK (length(mode) <= 16),
    draining      BOOLEAN NOT NULL DEFAULT 0 CHECK (draining IN (0, 1)),
    started_at    INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    heartbeat_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    CONSTRAINT leasehold_nodes_pkey PRIMARY KEY (node_id),
    CONSTRAINT leasehold_nodes_mode_check CHECK (mode IN ('full', 'trigger_only', 'disabled'))
);

-- Set once maintenance has deleted every journal row of an archived
-- episode, so the purge scans only archived episodes that still have a
-- journal (the partial index below), not all of history. A constant
-- default, so SQLite's ADD COLUMN accepts NOT NULL and fills existing rows.
ALTER TABLE leasehold_episodes
    ADD COLUMN journal_purged BOOLEAN NOT NULL DEFAULT 0 CHECK (journal_purged IN (0, 1));

CREATE INDEX leasehold_episodes_unpurged_idx
    ON leasehold_episodes (archived_at)
    WHERE archived_at IS NOT NULL AND NOT journal_purged;

-- +goose Down
DROP INDEX leasehold_episodes_unpurged_idx;
ALTER TABLE leasehold_episodes DROP COLUMN journal_purged;
DROP TABLE leasehold_nodes;
