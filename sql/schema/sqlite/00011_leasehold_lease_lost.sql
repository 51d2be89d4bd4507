-- leasehold schema, version 11 (SQLite): a write that makes the caller's
-- transaction fail at COMMIT.
--
-- A fenced write in the caller's transaction that matched no row (Run.Hold,
-- Run.CompleteTx, Run.FailTx: HoldClaim or FinishEpisode through
-- Store.WithTx) has found the run's grant gone: whatever the caller wrote
-- beside it is a zombie's effect and must not commit, even when the caller
-- ignores claims.ErrLeaseLost and commits. Postgres aborts the transaction
-- with an error (LH001: leasehold_hold, or leasehold_lease_lost of its
-- migration 11, which its adapter runs as DoomTransaction) and SQL Server
-- THROWs, which
-- XACT_ABORT turns into a rollback; a failed statement does not end an
-- SQLite transaction, so the adapter writes a row here instead
-- (DoomTransaction, in sql/queries/sqlite/episodes.sql).
--
-- No row of this table can ever commit: doom must name a row of the same
-- table whose id is negative, and every id is positive; the foreign key is
-- checked at COMMIT (DEFERRABLE INITIALLY DEFERRED), so that COMMIT fails
-- with SQLITE_CONSTRAINT_FOREIGNKEY, and modernc.org/sqlite rolls the
-- transaction back (the connection goes back to the pool outside any
-- transaction). The table is always empty outside such a transaction.
-- dedupe_key is the claim whose fenced write matched nothing, for the
-- doomed transaction's own reads.
--
-- It needs foreign keys on, which Open's DSN requires (_foreign_keys=1); on
-- a connection without them the row would commit, and so would the caller's
-- writes. Postgres's migration 11 creates leasehold_lease_lost instead;
-- SQL Server's is a no-op that keeps the version numbers in step.

-- +goose Up
CREATE TABLE leasehold_doomed_transactions (
    id          INTEGER PRIMARY KEY CHECK (id > 0),
    dedupe_key  TEXT    NOT NULL,
    doom        INTEGER NOT NULL DEFAULT -1 CHECK (doom < 0),
    CONSTRAINT leasehold_doomed_transactions_doom_fkey FOREIGN KEY (doom)
        REFERENCES leasehold_doomed_transactions (id) DEFERRABLE INITIALLY DEFERRED
);

-- +goose Down
DROP TABLE leasehold_doomed_transactions;
