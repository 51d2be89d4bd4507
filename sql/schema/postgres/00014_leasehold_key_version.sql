-- leasehold schema, version 14: the cluster's dedupe key version.
--
-- An event fired without an event id is keyed by the hash of its payload's
-- canonical JSON, and that form has versions (dedupe.KeyVersion): 1 keeps
-- numbers as written, 2 is RFC 8785's form (1, 1.0 and 1e0 are one key).
-- Nodes deduplicate one trigger only when they hash it alike, so the
-- version is the database's: leasehold_key_version holds it, one row.
-- A database that has never held a node or an episode starts at 2; one
-- that has starts at 1 (its nodes, old versions among them, write version 1
-- keys), and moves to 2 only by leasehold_switch_key_version, once.
--
-- leasehold_episodes.key_version is the version the row's dedupe_key is a
-- key of: 1 or 2 for a payload whose two forms differ, 2 for a key every
-- version shares (a schedule, an event id, a payload both forms agree on),
-- NULL for a row written by a node older than this migration, whose key is
-- a version 1 key. The trigger below refuses a row whose key is not the
-- database's version (SQLSTATE LH002): after the switch no version 1 key is
-- ever inserted again, so the live episodes that hold one are a fixed set
-- (shrinking as they are archived), and a node that hashes a payload under
-- version 2 looks its version 1 key up there first (FindLiveEpisode): the
-- same trigger never makes a second episode across the switch, whichever
-- node, old or new, fired it before.
--
-- leasehold_nodes.key_version is the newest version a node computes (NULL:
-- a node older than this migration, version 1 only); the switch refuses
-- while a live node cannot compute version 2. Advisory: the trigger, not
-- the membership row, is what keeps an old node's write out.

-- +goose Up
CREATE TABLE leasehold_key_version (
    singleton    boolean     NOT NULL DEFAULT true,
    version      smallint    NOT NULL,
    switched_at  timestamptz,
    CONSTRAINT leasehold_key_version_pkey PRIMARY KEY (singleton),
    CONSTRAINT leasehold_key_version_singleton CHECK (singleton),
    CONSTRAINT leasehold_key_version_version CHECK (version IN (1, 2))
);

INSERT INTO leasehold_key_version (version)
SELECT CASE WHEN EXISTS (SELECT 1 FROM leasehold_episodes) OR EXISTS (SELECT 1 FROM leasehold_nodes)
            THEN 1 ELSE 2 END;

ALTER TABLE leasehold_episodes
    ADD COLUMN key_version smallint CONSTRAINT leasehold_episodes_key_version CHECK (key_version IN (1, 2));

ALTER TABLE leasehold_nodes
    ADD COLUMN key_version smallint;

-- The guard. It runs only for a row whose key is not a version 2 key (the
-- trigger's WHEN): an old node's row, or a version 1 key of a payload whose
-- forms differ. A read committed transaction reads the version afresh (the
-- switch holds a lock on leasehold_episodes that conflicts with every
-- insert, so no insert that read version 1 commits after the switch); a
-- repeatable read or serializable one reads its snapshot's version, which
-- may predate the switch, so it locks the row FOR SHARE, which fails it
-- with a serialization error (40001) when the switch's UPDATE committed
-- after that snapshot (FOR KEY SHARE would not: it does not conflict with
-- an update of a non-key column).
-- +goose StatementBegin
CREATE FUNCTION leasehold_check_key_version() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    current smallint;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        SELECT v.version INTO current FROM leasehold_key_version AS v;
    ELSE
        SELECT v.version INTO current FROM leasehold_key_version AS v FOR SHARE;
    END IF;
    IF coalesce(NEW.key_version, 1) <> current THEN
        RAISE EXCEPTION 'leasehold: key version: % is a version % key, and this database uses version %; the node must hash it again',
            NEW.dedupe_key, coalesce(NEW.key_version, 1), current
            USING ERRCODE = 'LH002';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER leasehold_episodes_key_version
    BEFORE INSERT ON leasehold_episodes
    FOR EACH ROW
    WHEN (NEW.dedupe_key IS NOT NULL
          AND NEW.key_version IS DISTINCT FROM 2
    )
    EXECUTE FUNCTION leasehold_check_key_version();
-- +goose StatementEnd

-- The switch to version 2, once. It locks leasehold_episodes against every
-- insert (SHARE ROW EXCLUSIVE: an insert in flight commits first, and one
-- that starts meanwhile waits and then reads the new version), bounded by
-- p_lock_wait_ms so that a long transaction holding the table makes the
-- switch fail instead of stalling the cluster's inserts behind it. It
-- refuses (returns the version unchanged) while a node whose heartbeat is
-- within p_live_ms on the database clock cannot compute version 2. Returns
-- the version after the call.
-- +goose StatementBegin
CREATE FUNCTION leasehold_switch_key_version(p_live_ms bigint, p_lock_wait_ms bigint) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    after smallint;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait_ms || 'ms', true);
    LOCK TABLE leasehold_episodes IN SHARE ROW EXCLUSIVE MODE;
    UPDATE leasehold_key_version AS v
    SET version = 2, switched_at = now()
    WHERE v.version = 1
      AND NOT EXISTS (SELECT 1 FROM leasehold_nodes AS n
                      WHERE n.heartbeat_at > now() - p_live_ms * interval '1 millisecond'
                        AND coalesce(n.key_version, 1) < 2);
    SELECT v.version INTO after FROM leasehold_key_version AS v;
    RETURN after;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION leasehold_switch_key_version(bigint, bigint);
DROP TRIGGER leasehold_episodes_key_version ON leasehold_episodes;
DROP FUNCTION leasehold_check_key_version();
ALTER TABLE leasehold_nodes DROP COLUMN key_version;
ALTER TABLE leasehold_episodes DROP COLUMN key_version;
DROP TABLE leasehold_key_version;
