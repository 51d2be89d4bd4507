-- leasehold schema, version 14 (SQLite): the cluster's dedupe key version.
-- The translation of sql/schema/postgres/00014, whose header says what the
-- version is and why the database holds it.
--
-- leasehold_key_version holds the version (one row; 2 for a file that has
-- never held a node or an episode, else 1). leasehold_episodes.key_version
-- is the version the row's dedupe_key is a key of (NULL: written by an
-- older node, a version 1 key), leasehold_nodes.key_version the newest a
-- node computes (NULL: version 1 only).
--
-- The guard is a trigger that aborts the insert of a key that is not a key
-- of the file's version. Every write runs under SQLite's one write lock
-- (BEGIN IMMEDIATE, or a deferred transaction that upgrades, which fails
-- SQLITE_BUSY_SNAPSHOT when the file changed since it read), so the
-- trigger's read of the version and the switch's UPDATE are never
-- concurrent: no version 1 key is inserted once the switch has committed.
-- SQLite triggers cannot set a SQLSTATE; the abort's message starts with
-- "leasehold: key version", which the adapter maps to
-- episodes.ErrKeyVersion.

-- +goose Up
CREATE TABLE leasehold_key_version (
    singleton    INTEGER NOT NULL PRIMARY KEY CHECK (singleton = 1),
    version      INTEGER NOT NULL CHECK (version IN (1, 2)),
    switched_at  INTEGER
);

INSERT INTO leasehold_key_version (singleton, version)
SELECT 1, CASE WHEN EXISTS (SELECT 1 FROM leasehold_episodes) OR EXISTS (SELECT 1 FROM leasehold_nodes)
               THEN 1 ELSE 2 END;

ALTER TABLE leasehold_episodes
    ADD COLUMN key_version INTEGER CHECK (key_version IN (1, 2));

ALTER TABLE leasehold_nodes
    ADD COLUMN key_version INTEGER;

-- +goose StatementBegin
CREATE TRIGGER leasehold_episodes_key_version
BEFORE INSERT ON leasehold_episodes
WHEN NEW.dedupe_key IS NOT NULL
    AND NEW.key_version IS NOT 2
    AND coalesce(NEW.key_version, 1) <> (SELECT v.version FROM leasehold_key_version AS v)
BEGIN
    SELECT RAISE(ABORT, 'leasehold: key version: the dedupe key is not a key of the version this database uses; the node must hash it again');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER leasehold_episodes_key_version;
ALTER TABLE leasehold_nodes DROP COLUMN key_version;
ALTER TABLE leasehold_episodes DROP COLUMN key_version;
DROP TABLE leasehold_key_version;
