-- leasehold schema, version 2 (SQLite): deferred trigger requests and
-- findings. The translation of sql/schema/postgres/00002 (types as in
-- 00001_leasehold_init.sql).
--
-- Unset stack and env are '' (never NULL), as in version 1, so the filtered
-- unique index on findings treats the unset env as one value on every
-- dialect.

-- +goose Up

-- A deferred execution: a trigger_only node created the episode (unclaimed)
-- and this row asks a full node to run it. Written in the same transaction
-- as the episode (CreateDeferredEpisode), so neither exists without the
-- other.
--
-- status: pending (waiting for a full node), claimed (a poller holds it
-- until claim_until, then it is claimable again), completed (handed to a
-- full node: the episode's own work claim governs it from then on), expired
-- (nobody picked it up within the TTL; its episode was canceled).
CREATE TABLE leasehold_trigger_requests (
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
    CONSTRAINT leasehold_trigger_requests_episode_fkey FOREIGN KEY (episode_id)
        REFERENCES leasehold_episodes (id) ON DELETE CASCADE,
    CONSTRAINT leasehold_trigger_requests_episode_key UNIQUE (episode_id),
    CONSTRAINT leasehold_trigger_requests_status_check
        CHECK (status IN ('pending', 'claimed', 'completed', 'expired'))
);

-- Pollers and the expiry scan read open requests of one env, oldest first;
-- closed requests leave the index, so its size follows the backlog.
CREATE INDEX leasehold_trigger_requests_open_idx
    ON leasehold_trigger_requests (source_env, created_at)
    WHERE status IN ('pending', 'claimed');

-- Postgres adds here an AFTER INSERT trigger, leasehold_trigger_requests_notify,
-- that wakes LISTENing pollers with pg_notify at commit. SQLite has no
-- LISTEN/NOTIFY (and a trigger cannot reach another process), so there is
-- none: pollers find requests on their poll interval, which is the fallback
-- on Postgres too (ListenTriggerRequests is Postgres-only, see
-- sql/queries/dialects.go).

-- A finding is a fact an episode raised (a limit breached, a check failing)
-- until an episode clears it. At most one active finding per key per env:
-- the unique index is filtered on status = 'active', so cleared rows are
-- history and raise -> clear -> raise -> clear never collides with them.
CREATE TABLE leasehold_findings (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    finding_key         TEXT    NOT NULL CHECK (length(finding_key) <= 512),
    env                 TEXT    NOT NULL DEFAULT '' CHECK (length(env) <= 255),
    status              TEXT    NOT NULL DEFAULT 'active' CHECK (length(status) <= 16),
    class               TEXT    NOT NULL DEFAULT '' CHECK (length(class) <= 128),
    severity            TEXT    NOT NULL DEFAULT '' CHECK (length(severity) <= 32),
    summary             TEXT    NOT NULL DEFAULT '',
    data                TEXT    CHECK (data IS NULL OR json_valid(data)),
    actor_id            TEXT    NOT NULL CHECK (length(actor_id) <= 255),
    source_stack        TEXT    NOT NULL DEFAULT '' CHECK (length(source_stack) <= 255),
    raised_by_episode   INTEGER NOT NULL,
    updated_by_episode  INTEGER NOT NULL,
    cleared_by_episode  INTEGER,
    -- How many raises this active finding absorbed (1 when first raised).
    raise_count         INTEGER NOT NULL DEFAULT 1,
    raised_at           INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    updated_at          INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    cleared_at          INTEGER,
    CONSTRAINT leasehold_findings_key_nonempty CHECK (finding_key <> ''),
    CONSTRAINT leasehold_findings_status_check CHECK (status IN ('active', 'cleared'))
);

CREATE UNIQUE INDEX leasehold_findings_active_key_idx
    ON leasehold_findings (env, finding_key)
    WHERE status = 'active';

-- +goose Down
DROP TABLE leasehold_findings;
DROP TABLE leasehold_trigger_requests;
