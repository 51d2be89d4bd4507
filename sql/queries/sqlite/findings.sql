-- Findings: facts raised and cleared by episodes, one active finding per key
-- per env (the partial unique index leasehold_findings_active_key_idx)
-- (SQLite).
--
-- The statements of sql/queries/postgres/findings.sql: same names and kinds,
-- plus FindingLeaseHeld, which UpdateFinding and ClearFinding need because
-- SQLite has no data-modifying CTE to count the fence check and the write in
-- one statement.
--
-- Every write is made on behalf of a running episode and is fenced on its
-- work claim (claim key, owner, fence, claimed): a zombie whose lease was
-- stolen raises, updates and clears nothing. The claim must be the episode's
-- own (its dedupe key, or episode:{id}) and the episode must run, unarchived,
-- under the same owner, as for AppendStep: a live claim on some other key
-- grants nothing here. A finding takes its env and stack from the episode
-- row, never from the caller, so an episode of env "rc" can only touch env
-- "rc".
--
-- Postgres locks the claim row FOR SHARE. Here every write holds the
-- database's one write lock from its first statement to its end (an
-- autocommit statement, or BEGIN IMMEDIATE), so no steal (a write to the
-- claim row) can land between the fence check and the finding write: the
-- check and the write read and change one state. All times are the
-- database clock in milliseconds, CAST(round(unixepoch('subsec') * 1000) AS
-- INTEGER), read inside the writing statement (SQLite holds 'now' constant
-- for one statement).

-- name: RaiseFinding :one
-- Raises the finding finding_key in the episode's env: inserts it, or, when
-- it is already active, refreshes its details and counts the raise. One
-- statement: the SELECT yields the episode's row only when the fence check
-- passes, and the upsert either inserts it or absorbs it into the active
-- finding, returning the row either way. No row back means the fence check
-- failed and nothing was written (Postgres's lease_held 0).
--
-- Of concurrent raises of one (env, key) exactly one inserts and the others
-- update that row; none fails: they run one after the other under the write
-- lock, and ON CONFLICT on the partial unique index absorbs every later one.
INSERT INTO leasehold_findings (
    finding_key, env, status, class, severity, summary, data, actor_id,
    source_stack, raised_by_episode, updated_by_episode, raise_count,
    raised_at, updated_at
)
SELECT CAST(@finding_key AS TEXT), e.source_env, 'active',
    CAST(@class AS TEXT), CAST(@severity AS TEXT), CAST(@summary AS TEXT),
    sqlc.narg(data), e.actor_id, e.source_stack, e.id, e.id, 1,
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
FROM leasehold_episodes AS e
WHERE e.id = CAST(@episode_id AS INTEGER)
  AND e.status = 'running'
  AND e.archived_at IS NULL
  AND e.owner_node = CAST(@owner_node AS TEXT)
  AND coalesce(e.dedupe_key, 'episode:' || e.id) = CAST(@claim_key AS TEXT)
  AND EXISTS (
      SELECT 1 FROM leasehold_work_claims AS c
      WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
        AND c.owner_node = CAST(@owner_node AS TEXT)
        AND c.fence = CAST(@fence AS INTEGER)
        AND c.state = 'claimed')
ON CONFLICT (env, finding_key) WHERE status = 'active'
DO UPDATE SET
    class              = excluded.class,
    severity           = excluded.severity,
    summary            = excluded.summary,
    data               = excluded.data,
    updated_by_episode = excluded.updated_by_episode,
    raise_count        = raise_count + 1,
    updated_at         = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
RETURNING id, finding_key, env, status, class, severity, summary, data,
    actor_id, source_stack, raised_by_episode, updated_by_episode,
    raise_count, raised_at, updated_at;

-- name: UpdateFinding :one
-- Changes the details of the active finding finding_key in the episode's
-- env without counting a raise; nothing is created. Fenced in the statement
-- itself: the env comes from the episode row only when the fence check
-- passes, else it is NULL and matches no finding. No row back: either the
-- fence check failed or no such finding is active; the adapter tells which
-- with FindingLeaseHeld in the same BEGIN IMMEDIATE transaction.
UPDATE leasehold_findings
SET severity           = CAST(@severity AS TEXT),
    summary            = CAST(@summary AS TEXT),
    data               = sqlc.narg(data),
    updated_by_episode = CAST(@episode_id AS INTEGER),
    updated_at         = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE finding_key = CAST(@finding_key AS TEXT)
  AND status = 'active'
  AND env = (
      SELECT e.source_env
      FROM leasehold_episodes AS e
      WHERE e.id = CAST(@episode_id AS INTEGER)
        AND e.status = 'running'
        AND e.archived_at IS NULL
        AND e.owner_node = CAST(@owner_node AS TEXT)
        AND coalesce(e.dedupe_key, 'episode:' || e.id) = CAST(@claim_key AS TEXT)
        AND EXISTS (
            SELECT 1 FROM leasehold_work_claims AS c
            WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
              AND c.owner_node = CAST(@owner_node AS TEXT)
              AND c.fence = CAST(@fence AS INTEGER)
              AND c.state = 'claimed'))
RETURNING id;

-- name: ClearFinding :one
-- Clears the active finding finding_key in the episode's env; the row stays
-- as history and leaves the unique index, so the key can be raised again.
-- Fenced like UpdateFinding; no row back: the fence check failed or nothing
-- was active (FindingLeaseHeld tells which, in the same transaction).
UPDATE leasehold_findings
SET status             = 'cleared',
    cleared_by_episode = CAST(@episode_id AS INTEGER),
    cleared_at         = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    updated_at         = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE finding_key = CAST(@finding_key AS TEXT)
  AND status = 'active'
  AND env = (
      SELECT e.source_env
      FROM leasehold_episodes AS e
      WHERE e.id = CAST(@episode_id AS INTEGER)
        AND e.status = 'running'
        AND e.archived_at IS NULL
        AND e.owner_node = CAST(@owner_node AS TEXT)
        AND coalesce(e.dedupe_key, 'episode:' || e.id) = CAST(@claim_key AS TEXT)
        AND EXISTS (
            SELECT 1 FROM leasehold_work_claims AS c
            WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
              AND c.owner_node = CAST(@owner_node AS TEXT)
              AND c.fence = CAST(@fence AS INTEGER)
              AND c.state = 'claimed'))
RETURNING id;

-- name: FindingLeaseHeld :one
-- SQLite only: 1 when the fence check of UpdateFinding and ClearFinding
-- passes, 0 when it fails. Run after one of them changed no row, in the
-- same BEGIN IMMEDIATE transaction (so on the state that write saw), to
-- report a lost lease (findings.ErrLeaseLost) apart from a finding that is
-- not active. Read-only.
SELECT count(*) AS lease_held
FROM leasehold_episodes AS e
WHERE e.id = CAST(@episode_id AS INTEGER)
  AND e.status = 'running'
  AND e.archived_at IS NULL
  AND e.owner_node = CAST(@owner_node AS TEXT)
  AND coalesce(e.dedupe_key, 'episode:' || e.id) = CAST(@claim_key AS TEXT)
  AND EXISTS (
      SELECT 1 FROM leasehold_work_claims AS c
      WHERE c.dedupe_key = CAST(@claim_key AS TEXT)
        AND c.owner_node = CAST(@owner_node AS TEXT)
        AND c.fence = CAST(@fence AS INTEGER)
        AND c.state = 'claimed');

-- name: ListActiveFindings :many
-- The active findings of one env (strict equality; the empty env is the
-- unset env), optionally narrowed by class, actor and key; oldest first.
-- Read-only.
SELECT f.id, f.finding_key, f.env, f.status, f.class, f.severity, f.summary,
    f.data, f.actor_id, f.source_stack, f.raised_by_episode,
    f.updated_by_episode, f.raise_count, f.raised_at, f.updated_at
FROM leasehold_findings AS f
WHERE f.status = 'active'
  AND f.env = CAST(@env AS TEXT)
  AND (CAST(@class AS TEXT) = '' OR f.class = CAST(@class AS TEXT))
  AND (CAST(@actor_id AS TEXT) = '' OR f.actor_id = CAST(@actor_id AS TEXT))
  AND (CAST(@finding_key AS TEXT) = '' OR f.finding_key = CAST(@finding_key AS TEXT))
ORDER BY f.raised_at, f.id
LIMIT CAST(@max_rows AS INTEGER);
