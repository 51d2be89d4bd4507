-- leasehold schema, version 7 (SQLite): work that is due later. The
-- translation of sql/schema/postgres/00007.
--
-- A trigger request is the cluster's queue of available work: an episode
-- that no node runs yet waits, queued and unclaimed, with a pending request
-- that any full node's poller may claim. run_after (database time) is when
-- it becomes due: its creation for work deferred by a trigger_only node or
-- overflowing a saturated node, later for a delayed run. Pollers claim only
-- due requests, in run_after order. Requests open when this migration runs
-- get its time: they are due at once, as they were.
--
-- SQLite's ADD COLUMN refuses a NOT NULL column whose default is an
-- expression (the clock), so the Up rebuilds the table with the column
-- (create, copy with run_after = the migration's clock, drop, rename),
-- inside goose's transaction. No table references leasehold_trigger_requests,
-- so dropping the old copy cascades nowhere. The AUTOINCREMENT counter is
-- carried over, so no request id is ever reused.

-- +goose Up
CREATE TABLE leasehold_trigger_requests_v7 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    episode_id      INTEGER NOT NULL,
    actor_id        TEXT    NOT NULL CHECK (length(actor_id) <= 255),
    expectation_id  TEXT    NOT NULL CHECK (length(expectation_id) <= 255),
    source_node     TEXT    NOT NULL CHECK (length(source_node) <= 255),
    source_stack    TEXT    NOT NULL DEFAULT '' CHECK (length(source_stack) <= 255),
    source_env      TEXT    NOT NULL DEFAULT '' CHECK (length(source_env) <= 255),
    opts            TEXT    CHECK (opts IS NULL OR json_valid(opts)),
    status          TEXT    NOT NULL DEFAULT 'pending' CHECK (length(status) <= 16),
    claimed_by      TEXT    CHECK (length(claimed_by) <= 255),
    claim_until     INTEGER,
    -- Grows on every poller claim; the hand-over is conditioned on it, so a
    -- poller whose claim expired and was taken by another cannot hand over.
    fence           INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    claimed_at      INTEGER,
    finished_at     INTEGER,
    run_after       INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    CONSTRAINT leasehold_trigger_requests_episode_fkey FOREIGN KEY (episode_id)
        REFERENCES leasehold_episodes (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_trigger_requests_episode_key UNIQUE (episode_id),
    CONSTRAINT leasehold_trigger_requests_status_check
        CHECK (status IN ('pending', 'claimed', 'completed', 'expired'))
);

INSERT INTO leasehold_trigger_requests_v7
    (id, episode_id, actor_id, expectation_id, source_node, source_stack, source_env, opts,
     status, claimed_by, claim_until, fence, created_at, claimed_at, finished_at, run_after)
SELECT id, episode_id, actor_id, expectation_id, source_node, source_stack, source_env, opts,
     status, claimed_by, claim_until, fence, created_at, claimed_at, finished_at,
     CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
FROM leasehold_trigger_requests;

DELETE FROM sqlite_sequence WHERE name = 'leasehold_trigger_requests_v7';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'leasehold_trigger_requests_v7', seq FROM sqlite_sequence WHERE name = 'leasehold_trigger_requests';

DROP TABLE leasehold_trigger_requests;
ALTER TABLE leasehold_trigger_requests_v7 RENAME TO leasehold_trigger_requests;

-- Version 2's index, dropped with the old copy of the table.
CREATE INDEX leasehold_trigger_requests_open_idx
    ON leasehold_trigger_requests (source_env, created_at)
    WHERE status IN ('pending', 'claimed');

-- The pollers' claim: open requests of one env, due first; closed requests
-- leave the index, so its size follows the backlog.
CREATE INDEX leasehold_trigger_requests_due_idx
    ON leasehold_trigger_requests (source_env, run_after)
    WHERE status IN ('pending', 'claimed');

-- +goose Down
DROP INDEX leasehold_trigger_requests_due_idx;
ALTER TABLE leasehold_trigger_requests DROP COLUMN run_after;
