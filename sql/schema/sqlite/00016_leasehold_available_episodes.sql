-- leasehold schema, version 16 (SQLite): available work is an episode row.
-- The translation of sql/schema/postgres/00016, whose header says what
-- changes and why: the trigger request folds into the episode.
--
--   run_after  NULL: not available (held, ended, or queued in its holder's
--              slot queue). Set: available work, due at run_after
--              (milliseconds, the database clock), and nobody holds a live
--              grant on it. Only ClaimAvailable takes it, and clears it in
--              the transaction that grants the work claim and starts the
--              episode; a cancel or an expiry clears it when it ends the
--              episode.
--   opts       what a trigger_only node passes on to the node that runs it
--              (JSON text).
--
-- Live work moves as on Postgres: every open request (pending, or claimed
-- by a poller) whose episode is still queued, unarchived and held live by
-- nobody makes that episode available (run_after kept; a request a poller
-- had claimed is due at once) and is closed (completed); an open request
-- whose episode is held live is closed too (its holder runs the episode,
-- or recovery takes it once the lease ends). The migration runs in goose's
-- transaction, under the write lock, so no poller moves a request between
-- the two writes.
--
-- What an older binary would still write under the old model, a new
-- trigger request (a deferred trigger, a retry, a requeue, whose requests
-- it writes with INSERT, ON CONFLICT DO UPDATE included: a BEFORE INSERT
-- trigger fires before the conflict is found), the file refuses: the
-- trigger leasehold_trigger_requests_retired aborts the insert. SQLite
-- triggers cannot set a SQLSTATE (Postgres raises LH003); the abort's
-- message starts with "leasehold: trigger requests are episode rows since
-- schema 16". Deploy: stop the old processes, migrate, start the new ones.
--
-- SQLite's ADD COLUMN takes both columns as they are (nullable, no
-- default), so no table is rebuilt. The data moves are correlated
-- subqueries: sqlc, which reads these migrations, has no UPDATE ... FROM
-- in its SQLite grammar.

-- +goose Up
ALTER TABLE leasehold_episodes ADD COLUMN run_after INTEGER;
ALTER TABLE leasehold_episodes ADD COLUMN opts TEXT CHECK (opts IS NULL OR json_valid(opts));

-- Pollers read the due available work of one env in due order; the rows
-- leave the index when they are granted or ended, so its size follows the
-- backlog, not the history.
CREATE INDEX leasehold_episodes_available_idx
    ON leasehold_episodes (source_env, run_after)
    WHERE run_after IS NOT NULL;

-- At most one request per episode (leasehold_trigger_requests_episode_key),
-- so each subquery reads one row.
UPDATE leasehold_episodes
SET run_after = (SELECT CASE WHEN r.status = 'pending' THEN r.run_after
                             ELSE CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END
                 FROM leasehold_trigger_requests AS r
                 WHERE r.episode_id = leasehold_episodes.id
                   AND r.status IN ('pending', 'claimed')),
    opts      = (SELECT r.opts
                 FROM leasehold_trigger_requests AS r
                 WHERE r.episode_id = leasehold_episodes.id
                   AND r.status IN ('pending', 'claimed'))
WHERE status = 'queued'
  AND archived_at IS NULL
  AND EXISTS (SELECT 1 FROM leasehold_trigger_requests AS r
              WHERE r.episode_id = leasehold_episodes.id
                AND r.status IN ('pending', 'claimed'))
  AND NOT EXISTS (
        SELECT 1 FROM leasehold_work_claims AS c
        WHERE c.dedupe_key = coalesce(leasehold_episodes.dedupe_key, 'episode:' || leasehold_episodes.id)
          AND c.state = 'claimed'
          AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER));

UPDATE leasehold_trigger_requests
SET status = 'completed', finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE status IN ('pending', 'claimed');

-- Postgres adds here the triggers that wake LISTENing pollers when an
-- episode becomes available; SQLite has no LISTEN/NOTIFY (see version 2),
-- so pollers find available episodes on their poll interval.

-- +goose StatementBegin
CREATE TRIGGER leasehold_trigger_requests_retired
BEFORE INSERT ON leasehold_trigger_requests
BEGIN
    SELECT RAISE(ABORT, 'leasehold: trigger requests are episode rows since schema 16; this node runs a binary older than its database, upgrade it');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER leasehold_trigger_requests_retired;

-- Available episodes get their request back, pending and due as they were.
INSERT INTO leasehold_trigger_requests AS t (
    episode_id, actor_id, expectation_id, source_node, source_stack,
    source_env, opts, status, created_at, run_after
)
SELECT e.id, e.actor_id, e.expectation_id, '', e.source_stack, e.source_env,
    e.opts, 'pending', CAST(round(unixepoch('subsec') * 1000) AS INTEGER), e.run_after
FROM leasehold_episodes AS e
WHERE e.run_after IS NOT NULL
ON CONFLICT (episode_id) DO UPDATE SET
    status      = 'pending',
    opts        = excluded.opts,
    claimed_by  = NULL,
    claimed_at  = NULL,
    claim_until = NULL,
    finished_at = NULL,
    run_after   = excluded.run_after;

DROP INDEX leasehold_episodes_available_idx;
ALTER TABLE leasehold_episodes DROP COLUMN opts;
ALTER TABLE leasehold_episodes DROP COLUMN run_after;
