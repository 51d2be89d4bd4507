-- leasehold schema, version 2 (Postgres): deferred trigger requests and
-- findings.
--
-- Unset stack and env are '' (never NULL), as in version 1, so the filtered
-- unique index on findings treats the unset env as one value on both
-- dialects.

-- +goose Up

-- A deferred execution: a trigger_only node created the episode (unclaimed)
-- and this row asks a full node to run it. Written in the same statement as
-- the episode (CreateDeferredEpisode), so neither exists without the other.
--
-- status: pending (waiting for a full node), claimed (a poller holds it
-- until claim_until, then it is claimable again), completed (handed to a
-- full node: the episode's own work claim governs it from then on), expired
-- (nobody picked it up within the TTL; its episode was canceled).
CREATE TABLE leasehold_trigger_requests (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    episode_id      bigint       NOT NULL,
    actor_id        varchar(255) NOT NULL,
    expectation_id  varchar(255) NOT NULL,
    source_node     varchar(255) NOT NULL,
    source_stack    varchar(255) NOT NULL DEFAULT '',
    source_env      varchar(255) NOT NULL DEFAULT '',
    opts            jsonb,
    status          varchar(16)  NOT NULL DEFAULT 'pending',
    claimed_by      varchar(255),
    claim_until     timestamptz,
    -- Grows on every poller claim; the hand-over is conditioned on it, so a
    -- poller whose claim expired and was taken by another cannot hand over.
    fence           bigint       NOT NULL DEFAULT 0,
    created_at      timestamptz  NOT NULL DEFAULT now(),
    claimed_at      timestamptz,
    finished_at     timestamptz,
    CONSTRAINT leasehold_trigger_requests_pkey PRIMARY KEY (id),
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

-- Wakes LISTENing pollers as soon as a request commits (NOTIFY is delivered
-- at commit, never for a rolled-back insert). The poll interval remains the
-- fallback, so a lost notification only delays pickup.
-- +goose StatementBegin
CREATE FUNCTION leasehold_trigger_requests_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('leasehold_trigger_requests', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER leasehold_trigger_requests_notify
    AFTER INSERT ON leasehold_trigger_requests
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_trigger_requests_notify();

-- A finding is a fact an episode raised (a limit breached, a check failing)
-- until an episode clears it. At most one active finding per key per env:
-- the unique index is filtered on status = 'active', so cleared rows are
-- history and raise -> clear -> raise -> clear never collides with them.
CREATE TABLE leasehold_findings (
    id                  bigint GENERATED ALWAYS AS IDENTITY,
    finding_key         varchar(512) NOT NULL,
    env                 varchar(255) NOT NULL DEFAULT '',
    status              varchar(16)  NOT NULL DEFAULT 'active',
    class               varchar(128) NOT NULL DEFAULT '',
    severity            varchar(32)  NOT NULL DEFAULT '',
    summary             text         NOT NULL DEFAULT '',
    data                jsonb,
    actor_id            varchar(255) NOT NULL,
    source_stack        varchar(255) NOT NULL DEFAULT '',
    raised_by_episode   bigint       NOT NULL,
    updated_by_episode  bigint       NOT NULL,
    cleared_by_episode  bigint,
    -- How many raises this active finding absorbed (1 when first raised).
    raise_count         integer      NOT NULL DEFAULT 1,
    raised_at           timestamptz  NOT NULL DEFAULT now(),
    updated_at          timestamptz  NOT NULL DEFAULT now(),
    cleared_at          timestamptz,
    CONSTRAINT leasehold_findings_pkey PRIMARY KEY (id),
    CONSTRAINT leasehold_findings_key_nonempty CHECK (finding_key <> ''),
    CONSTRAINT leasehold_findings_status_check CHECK (status IN ('active', 'cleared'))
);

CREATE UNIQUE INDEX leasehold_findings_active_key_idx
    ON leasehold_findings (env, finding_key)
    WHERE status = 'active';

-- +goose Down
DROP TABLE leasehold_findings;
DROP TRIGGER leasehold_trigger_requests_notify ON leasehold_trigger_requests;
DROP FUNCTION leasehold_trigger_requests_notify();
DROP TABLE leasehold_trigger_requests;
