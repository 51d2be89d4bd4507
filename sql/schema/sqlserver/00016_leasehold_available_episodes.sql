-- leasehold schema, version 16 (SQL Server): available work is an episode
-- row. The columns, index, conversion and refusal of
-- sql/schema/postgres/00016_leasehold_available_episodes.sql (whose header
-- says why the trigger request folds into the episode), in the conventions
-- of version 1 (00001_leasehold_init.sql, whose header applies here too:
-- the session SET options it lists are required, the index below is
-- filtered and the statements repeat its filter, run_after IS NOT NULL,
-- literally so the optimizer can match it).
--
--   run_after  NULL: not available. Set: available work, due at run_after
--              on the database clock (SYSUTCDATETIME()), nobody holding a
--              live grant on it; ClaimAvailable
--              (sql/queries/sqlserver/available.sql) takes it.
--   opts       what a trigger_only node passes on to the node that runs it.
--
-- Live work moves as on Postgres: every open request (pending, or claimed
-- by a poller) whose episode is still queued, unarchived and held live by
-- nobody makes that episode available (run_after kept; a request a poller
-- had claimed is due at once), and every open request is closed
-- (completed). An old poller's hand-over is fenced on the request's status
-- claimed, so it now matches nothing.
--
-- Postgres's two notify triggers have no counterpart: SQL Server pollers
-- poll on their interval (ListenTriggerRequests is Postgres's alone). What
-- an older binary would still write under the old model, the INSTEAD OF
-- INSERT, UPDATE trigger refuses: it THROWs 51003 (the adapter's
-- RetiredRequestsError; Postgres raises SQLSTATE LH003) for any INSERT or
-- UPDATE statement, rows or none. Both, because the older T-SQL reopened
-- an episode's existing request with an UPDATE (a retry, an operator's
-- retry, a requeue) and inserted only when there was none: refusing
-- inserts alone would let an old node's retry leave its episode queued
-- with a pending request that no new poller reads. So an old node's
-- deferred trigger, retry, requeue, poll and cancel of available work fail
-- loudly and XACT_ABORT rolls the whole batch back. Nothing of this
-- release writes the table; maintenance's deletes (the episode's cascade)
-- still work. Deploy: drain the old nodes, migrate, start the new ones.
--
-- goose sends each statement as its own batch (CREATE TRIGGER must be
-- alone in one, hence StatementBegin/End), so the new columns are known
-- when the statements after ALTER TABLE compile.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
ALTER TABLE leasehold_episodes ADD
    run_after datetime2(6) NULL,
    opts      nvarchar(max) NULL;

-- Pollers read the due available work of one env in due order; rows leave
-- the index when they are granted or ended, so its size follows the
-- backlog, not the history.
CREATE NONCLUSTERED INDEX leasehold_episodes_available_idx
    ON leasehold_episodes (source_env, run_after)
    WHERE run_after IS NOT NULL;

UPDATE e
SET run_after = CASE WHEN r.status = N'pending' THEN r.run_after ELSE SYSUTCDATETIME() END,
    opts      = r.opts
FROM leasehold_episodes AS e
JOIN leasehold_trigger_requests AS r ON r.episode_id = e.id
WHERE r.status IN (N'pending', N'claimed')
  AND e.status = N'queued'
  AND e.archived_at IS NULL
  AND NOT EXISTS (
        SELECT 1 FROM leasehold_work_claims AS c
        WHERE c.dedupe_key = COALESCE(e.dedupe_key, CONCAT(N'episode:', e.id))
          AND c.state = N'claimed'
          AND c.lease_until > SYSUTCDATETIME());

UPDATE leasehold_trigger_requests
SET status = N'completed', finished_at = SYSUTCDATETIME()
WHERE status IN (N'pending', N'claimed');

-- +goose StatementBegin
CREATE TRIGGER leasehold_trigger_requests_retired
ON leasehold_trigger_requests
INSTEAD OF INSERT, UPDATE
AS
BEGIN
    SET NOCOUNT ON;
    THROW 51003, N'leasehold: trigger requests are episode rows since schema 16; this node runs a binary older than its database, upgrade it', 1;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER leasehold_trigger_requests_retired;

-- Available episodes get their request back, pending and due as they were:
-- the episode's row updated when it has one (unique per episode), else a
-- new one.
UPDATE r
SET status      = N'pending',
    opts        = e.opts,
    claimed_by  = NULL,
    claimed_at  = NULL,
    claim_until = NULL,
    finished_at = NULL,
    run_after   = e.run_after
FROM leasehold_trigger_requests AS r
JOIN leasehold_episodes AS e ON e.id = r.episode_id
WHERE e.run_after IS NOT NULL;

INSERT INTO leasehold_trigger_requests (
    episode_id, actor_id, expectation_id, source_node, source_stack,
    source_env, opts, status, created_at, run_after
)
SELECT e.id, e.actor_id, e.expectation_id, N'', e.source_stack, e.source_env,
    e.opts, N'pending', SYSUTCDATETIME(), e.run_after
FROM leasehold_episodes AS e
WHERE e.run_after IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM leasehold_trigger_requests AS r WHERE r.episode_id = e.id);

DROP INDEX leasehold_episodes_available_idx ON leasehold_episodes;
ALTER TABLE leasehold_episodes DROP COLUMN opts, run_after;
