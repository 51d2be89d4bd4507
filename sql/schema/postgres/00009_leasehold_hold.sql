-- leasehold schema, version 9: the fence, callable from the user's SQL.
--
-- leasehold_hold(key, owner, fence) is what a run calls in its own
-- transaction before its own write (an order row, a charge, a ledger
-- entry), so that the write commits only while the run's grant is the
-- current one: it locks the work claim row FOR SHARE (a takeover's UPDATE
-- of the row waits for this transaction to end, and every takeover after
-- it sees the next fence) and raises SQLSTATE LH001 when the grant is no
-- longer current (stolen, released, finished, or never this owner's). A
-- transaction that got LH001 is aborted: nothing it wrote can commit.
--
-- The check is the fenced writes' own (sql/queries/postgres/episodes.sql):
-- key, owner, fence and state claimed. Like them it does not read the
-- clock: a grant whose lease ran out on the database but that nobody took
-- over is still the current one, and a takeover waits for this
-- transaction. It returns the grant's lease_until (database time).
--
-- Call it inside a transaction (BEGIN ... COMMIT): on its own, the lock
-- ends with the statement and guards nothing after it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION leasehold_hold(p_key text, p_owner text, p_fence bigint) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    held timestamptz;
BEGIN
    SELECT c.lease_until INTO held
    FROM leasehold_work_claims AS c
    WHERE c.dedupe_key = p_key
      AND c.owner_node = p_owner
      AND c.fence = p_fence
      AND c.state = 'claimed'
    FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leasehold: lease lost: % is not held by % under fence %', p_key, p_owner, p_fence
            USING ERRCODE = 'LH001';
    END IF;
    RETURN held;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION leasehold_hold(text, text, bigint);
