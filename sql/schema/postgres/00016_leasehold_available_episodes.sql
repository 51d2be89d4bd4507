-- leasehold schema, version 16: available work is an episode row.
--
-- Until now every unit of available work (a trigger_only node's trigger,
-- an overflow, a delayed run, a retry in its backoff, a recovered orphan,
-- an operator's retry) had a second row, its trigger request, which a
-- poller claimed (one write) and handed over (another) before the episode
-- itself was granted and started. The request now folds into the episode:
--
--   run_after  NULL: not available (held, ended, or queued in its holder's
--              slot queue). Set: available work, due at run_after on the
--              database clock, and nobody holds a live grant on it. Only
--              ClaimAvailable takes it, and clears it in the write that
--              grants the work claim and starts the episode; a cancel or
--              an expiry clears it when it ends the episode.
--   opts       what a trigger_only node passes on to the node that runs it.
--
-- A poll is then one statement (ClaimAvailable: pick, grant, start), and an
-- available unit writes its episode three times and its claim twice, where
-- it wrote eight rows.
--
-- Live work moves: every open request (pending, or claimed by a poller)
-- whose episode is still queued, unarchived and held live by nobody makes
-- that episode available (run_after kept; a request a poller had claimed
-- is due at once) and is closed (completed). An old poller's hand-over of
-- a request it had claimed is fenced on the request's status, so it now
-- matches nothing. An open request whose episode is held live is closed
-- too: its holder runs the episode, or recovery takes it once the lease
-- ends, as the old hand-over would have left it.
--
-- What an older binary would still write under the old model, a new
-- trigger request, the database refuses (SQLSTATE LH003): an old node's
-- deferred trigger, retry or requeue fails loudly instead of leaving work
-- that no new poller would ever see. Deploy: drain the old nodes, migrate,
-- start the new ones (see the README's "Deploying a new version").

-- +goose Up
ALTER TABLE leasehold_episodes
    ADD COLUMN run_after timestamptz,
    ADD COLUMN opts jsonb;

-- Pollers read the due available work of one env in due order; the rows
-- leave the index when they are granted or ended, so its size follows the
-- backlog, not the history.
CREATE INDEX leasehold_episodes_available_idx
    ON leasehold_episodes (source_env, run_after)
    WHERE run_after IS NOT NULL;

UPDATE leasehold_episodes AS e
SET run_after = CASE WHEN r.status = 'pending' THEN r.run_after ELSE now() END,
    opts      = r.opts
FROM leasehold_trigger_requests AS r
WHERE r.episode_id = e.id
  AND r.status IN ('pending', 'claimed')
  AND e.status = 'queued'
  AND e.archived_at IS NULL
  AND NOT EXISTS (
        SELECT 1 FROM leasehold_work_claims AS c
        WHERE c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
          AND c.state = 'claimed'
          AND c.lease_until > now());

UPDATE leasehold_trigger_requests
SET status = 'completed', finished_at = now()
WHERE status IN ('pending', 'claimed');

-- Wakes LISTENing pollers when an episode becomes available (inserted so,
-- or made so by a retry, a requeue or an operator), at commit, as the
-- request insert's trigger did. Row triggers with a WHEN clause: an
-- episode that is not available (the local path's insert, every step and
-- finish) never calls the function.
-- +goose StatementBegin
CREATE FUNCTION leasehold_episodes_available_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('leasehold_trigger_requests', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER leasehold_episodes_available_insert
    AFTER INSERT ON leasehold_episodes
    FOR EACH ROW WHEN (NEW.run_after IS NOT NULL)
    EXECUTE FUNCTION leasehold_episodes_available_notify();

CREATE TRIGGER leasehold_episodes_available_update
    AFTER UPDATE OF run_after ON leasehold_episodes
    FOR EACH ROW WHEN (NEW.run_after IS NOT NULL AND OLD.run_after IS NULL)
    EXECUTE FUNCTION leasehold_episodes_available_notify();

-- +goose StatementBegin
CREATE FUNCTION leasehold_trigger_requests_retired() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'leasehold: trigger requests are episode rows since schema 16; this node runs a binary older than its database, upgrade it'
        USING ERRCODE = 'LH003';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER leasehold_trigger_requests_retired
    BEFORE INSERT ON leasehold_trigger_requests
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_trigger_requests_retired();

-- +goose Down
DROP TRIGGER leasehold_trigger_requests_retired ON leasehold_trigger_requests;
DROP FUNCTION leasehold_trigger_requests_retired();

-- Available episodes get their request back, pending and due as they were.
INSERT INTO leasehold_trigger_requests AS t (
    episode_id, actor_id, expectation_id, source_node, source_stack,
    source_env, opts, status, created_at, run_after
)
SELECT e.id, e.actor_id, e.expectation_id, '', e.source_stack, e.source_env,
    e.opts, 'pending', now(), e.run_after
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

DROP TRIGGER leasehold_episodes_available_update ON leasehold_episodes;
DROP TRIGGER leasehold_episodes_available_insert ON leasehold_episodes;
DROP FUNCTION leasehold_episodes_available_notify();
DROP INDEX leasehold_episodes_available_idx;
ALTER TABLE leasehold_episodes
    DROP COLUMN opts,
    DROP COLUMN run_after;
