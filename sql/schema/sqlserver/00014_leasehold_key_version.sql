-- leasehold schema, version 14 (SQL Server): the cluster's dedupe key
-- version, in the conventions of version 1 (00001_leasehold_init.sql, whose
-- header applies here too). sql/schema/postgres/00014 says what the version
-- is and why the database holds it.
--
-- SQL Server stays on version 1: leasehold_key_version_pinned pins it, and
-- there is no switch (queries.DialectOnly, SwitchKeyVersion: the guard that
-- makes a switch safe would be a T-SQL trigger that nothing here can run to
-- prove). The columns exist so that every dialect's statements write the
-- same rows: leasehold_episodes.key_version (the version the row's key is a
-- key of; NULL from an older node) and leasehold_nodes.key_version (the
-- newest version a node computes). Adding nullable columns is a
-- metadata-only change.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
CREATE TABLE leasehold_key_version (
    singleton    bit          NOT NULL CONSTRAINT leasehold_key_version_singleton_default DEFAULT 1,
    version      smallint     NOT NULL,
    switched_at  datetime2(6) NULL,
    CONSTRAINT leasehold_key_version_pkey PRIMARY KEY (singleton),
    CONSTRAINT leasehold_key_version_singleton CHECK (singleton = 1),
    CONSTRAINT leasehold_key_version_version CHECK (version IN (1, 2)),
    CONSTRAINT leasehold_key_version_pinned CHECK (version = 1)
);

INSERT INTO leasehold_key_version (singleton, version) VALUES (1, 1);

ALTER TABLE leasehold_episodes ADD key_version smallint NULL
    CONSTRAINT leasehold_episodes_key_version CHECK (key_version IN (1, 2));

ALTER TABLE leasehold_nodes ADD key_version smallint NULL;

-- +goose Down
ALTER TABLE leasehold_nodes DROP COLUMN key_version;
ALTER TABLE leasehold_episodes DROP CONSTRAINT leasehold_episodes_key_version;
ALTER TABLE leasehold_episodes DROP COLUMN key_version;
DROP TABLE leasehold_key_version;
