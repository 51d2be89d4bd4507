-- leasehold schema, version 9 (SQLite): the fence, callable from the user's
-- SQL. The counterpart of sql/schema/postgres/00009.
--
-- On Postgres this migration creates leasehold_hold(key, owner, fence), a
-- function a run calls in its own transaction before its own write, which
-- locks the claim row FOR SHARE and raises LH001 when the grant is no longer
-- current. SQLite has no stored functions (an application-defined function
-- lives in one process's connection, not in the database file) and no row
-- locks, so nothing is created here. The hold is the statement HoldClaim of
-- sql/queries/sqlite/claims.sql, which the adapter's Store.HoldClaim runs in
-- the caller's transaction (Store.WithTx) and which an application can run
-- itself: a no-op fenced write of the claim row,
--
--     UPDATE leasehold_work_claims SET fence = fence
--     WHERE dedupe_key = ? AND owner_node = ? AND fence = ? AND state = 'claimed'
--     RETURNING lease_until;
--
-- No row back means the lease is lost (roll back). Being a write, it holds
-- SQLite's database write lock until the transaction ends, so no takeover
-- commits before the caller's own writes do. Like leasehold_hold it does not
-- read the clock.
--
-- The version is kept so that the version numbers (and CheckSchema) mean
-- the same on every dialect; goose needs a statement, so it runs a no-op.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
