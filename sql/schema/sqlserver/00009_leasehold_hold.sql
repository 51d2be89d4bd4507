-- leasehold schema, version 9 (SQL Server): the fence, callable from the
-- user's T-SQL.
--
-- The twin of sql/schema/postgres/00009_leasehold_hold.sql. EXEC
-- leasehold_hold @key, @owner, @fence in the caller's own transaction,
-- before its own write: the work claim row is read WITH (UPDLOCK, HOLDLOCK,
-- ROWLOCK), so its update lock is held until the caller's transaction ends
-- (a takeover's UPDATE of the row waits for it, and every takeover after it
-- sees the next fence); when the grant is no longer current (stolen,
-- released, finished, or never this owner's) it THROWs error 51001, which
-- XACT_ABORT turns into a rollback of the whole transaction. Outside a
-- transaction (@@TRANCOUNT = 0) the lock would end with the statement and
-- guard nothing: it THROWs 51002 instead. It answers one row, the grant's
-- lease_until (database time).
--
-- The check is the fenced writes' own: key, owner, fence and state
-- claimed; like them it does not read the clock.
--
-- NOT EXECUTED IN THIS REPOSITORY'S CI: there is no SQL Server on the build
-- machine. This file is parsed by a T-SQL parser in go test
-- (adapters/sqlserver/static_test.go), nothing more.

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE leasehold_hold
    @key   nvarchar(512),
    @owner nvarchar(255),
    @fence bigint
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @held TABLE (lease_until datetime2(6) NOT NULL);
    IF @@TRANCOUNT = 0
        THROW 51002, N'leasehold_hold must be called inside a transaction', 1;
    INSERT INTO @held (lease_until)
    SELECT c.lease_until
    FROM leasehold_work_claims AS c WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
    WHERE c.dedupe_key = @key
      AND c.owner_node = @owner
      AND c.fence = @fence
      AND c.state = N'claimed';
    IF NOT EXISTS (SELECT 1 FROM @held)
        THROW 51001, N'leasehold: lease lost: the grant is not the current one', 1;
    SELECT lease_until FROM @held;
END;
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE leasehold_hold;
