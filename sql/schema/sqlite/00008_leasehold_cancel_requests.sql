-- leasehold schema, version 8 (SQLite): cancel requests that reach the
-- owner. The translation of sql/schema/postgres/00008.
--
-- An operator (or any node) cancels an episode through the database, not
-- through the node that runs it. CancelEpisode ends an episode nobody holds
-- a live lease on at once; for one held live it sets cancel_requested_at
-- (database time), and the holder, which reads its cancel requests once per
-- heartbeat interval (ListCancelRequests), cancels the run's context: the
-- run ends canceled by its own fenced FinishEpisode. An attempt that fails
-- or is recovered meanwhile ends canceled instead of running again
-- (RetryEpisode, RequeueOrphan). RequeueEpisode clears it.

-- +goose Up
ALTER TABLE leasehold_episodes ADD COLUMN cancel_requested_at INTEGER;

-- The holders' read: only live episodes with a pending cancel request are
-- in it, so its size follows the requests, not the history.
CREATE INDEX leasehold_episodes_cancel_requested_idx
    ON leasehold_episodes (id)
    WHERE cancel_requested_at IS NOT NULL AND status IN ('queued', 'running');

-- +goose Down
DROP INDEX leasehold_episodes_cancel_requested_idx;
ALTER TABLE leasehold_episodes DROP COLUMN cancel_requested_at;
