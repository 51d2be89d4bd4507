-- Statements of leasehold's SQL Server migrator (migrate.go), not of the
-- coordination: goose ships no SQL Server locker, so these two batches are
-- the session lock goose's Provider takes (lock.SessionLocker) before it
-- reads or writes leasehold_schema_version, on the connection it migrates
-- on, and releases afterwards. They decide nothing between nodes.
--
-- The lock is an application lock owned by the session (@LockOwner =
-- 'Session'), so it spans goose's several transactions, one per migration,
-- and the server drops it when the session ends: a migrator that dies
-- cannot leave it behind. The resource is scoped like TryMaintenanceLock's:
-- an application lock belongs to the current database already, and the
-- resource adds DB_NAME() for readers of sys.dm_tran_locks and
-- SCHEMA_NAME(), the user's default schema, where the unqualified
-- CREATE TABLEs of the migrations land. So installations in different
-- schemas of one database migrate independently, and one schema is
-- migrated by one session at a time, whatever spelling its users' DSNs use.

-- name: AcquireMigrationLock :one
-- Waits up to @wait_ms for the lock, on the server. result is
-- sp_getapplock's: 0 granted, 1 granted after waiting, -1 timed out, -2
-- cancelled, -3 chosen as deadlock victim, -999 a parameter or call error.
-- The caller retries -1 and -3 until its own deadline.
SET NOCOUNT ON;
DECLARE @result int;
DECLARE @wait int = CAST(@wait_ms AS int);
DECLARE @resource nvarchar(255) =
    LEFT(CONCAT(N'leasehold.migrate:', DB_NAME(), N'.', SCHEMA_NAME()), 255);
EXEC @result = sp_getapplock
    @Resource = @resource,
    @LockMode = N'Exclusive',
    @LockOwner = N'Session',
    @LockTimeout = @wait;
SELECT @result AS result;

-- name: ReleaseMigrationLock :one
-- result is sp_releaseapplock's: 0 released, -999 not held or a call error
-- (the server also raises error 1223 when it is not held).
SET NOCOUNT ON;
DECLARE @result int;
DECLARE @resource nvarchar(255) =
    LEFT(CONCAT(N'leasehold.migrate:', DB_NAME(), N'.', SCHEMA_NAME()), 255);
EXEC @result = sp_releaseapplock
    @Resource = @resource,
    @LockOwner = N'Session';
SELECT @result AS result;
