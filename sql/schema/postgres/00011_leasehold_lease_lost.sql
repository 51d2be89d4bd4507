-- leasehold schema, version 11: a fenced write that matched no row ends
-- the transaction it ran in.
--
-- leasehold_lease_lost(key, owner, fence) raises SQLSTATE LH001, the code
-- leasehold_hold (migration 00009) raises for a grant that is no longer
-- current, unconditionally. The adapter runs it (DoomTransaction,
-- sql/queries/postgres/episodes.sql) in the caller's transaction after a
-- fenced FinishEpisode there (Run.CompleteTx, Run.FailTx) matched no row:
-- the run's grant is gone, so whatever the caller wrote beside the finish
-- is a zombie's effect, and any error aborts a Postgres transaction (its
-- later statements fail, its COMMIT rolls back), so a caller that ignores
-- claims.ErrLeaseLost and commits lands nothing. An application's own
-- fenced write that finds no row can call it the same way.
--
-- SQLite's migration 11 creates a table instead, whose rows can never
-- commit (a failed statement does not end an SQLite transaction); SQL
-- Server's is a no-op (its FinishEpisode THROWs inside a caller's
-- transaction, which XACT_ABORT rolls back).

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION leasehold_lease_lost(p_key text, p_owner text, p_fence bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'leasehold: lease lost: a fenced write for % by % under fence % matched no row; the transaction is aborted',
        p_key, p_owner, p_fence
        USING ERRCODE = 'LH001';
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION leasehold_lease_lost(text, text, bigint);
