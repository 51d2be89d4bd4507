-- leasehold schema, version 7: work that is due later.
--
-- A trigger request is the cluster's queue of available work: an episode
-- that no node runs yet waits, queued and unclaimed, with a pending request
-- that any full node's poller may claim. run_after (database time) is when
-- it becomes due: its creation for work deferred by a trigger_only node or
-- overflowing a saturated node, later for a delayed run. Pollers claim only
-- due requests, in run_after order. Requests open when this migration runs
-- get its time: they are due at once, as they were.

-- +goose Up
ALTER TABLE leasehold_trigger_requests ADD COLUMN run_after timestamptz NOT NULL DEFAULT now();

-- The pollers' claim: open requests of one env, due first; closed requests
-- leave the index, so its size follows the backlog.
CREATE INDEX leasehold_trigger_requests_due_idx
    ON leasehold_trigger_requests (source_env, run_after)
    WHERE status IN ('pending', 'claimed');

-- +goose Down
DROP INDEX leasehold_trigger_requests_due_idx;
ALTER TABLE leasehold_trigger_requests DROP COLUMN run_after;
