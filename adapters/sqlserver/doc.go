// Package sqlserver is leasehold's SQL Server adapter: it implements the
// stores the core packages declare (claims.Store, runner.Store,
// recovery.Store) on database/sql with the go-mssqldb driver (driver name
// "sqlserver", native @name parameters).
//
// It adds no SQL of its own. Every statement is a named T-SQL batch embedded
// from sql/queries/sqlserver and loaded by name (queries.SQLServer); read the
// .sql files to audit what it does. Each batch is one atomic decision on the
// database clock (SYSUTCDATETIME()), takes @name parameters spelled like the
// Postgres statements' sqlc.arg names, and returns one result set with the
// columns, in the order, of the Postgres statement of the same name. An empty
// result means busy, not owner, lease lost or duplicate, as no row does in
// the Postgres adapter.
//
// Open sets the session options the batches rely on (ANSI_NULLS,
// QUOTED_IDENTIFIER and the rest that filtered indexes require, and
// XACT_ABORT ON so that any error rolls the whole batch back) on every
// connection through the connector's SessionInitSQL, which go-mssqldb runs
// on each new connection and each time a pooled one is reused. A *sql.DB not
// made by Open must set the same options itself (see SessionInitSQL).
//
// Deadlock victims (1205) and lock timeouts (1222) are retried inside the
// call, a few times with jittered backoff; when they persist, or when the
// connection failed before the batch was sent (on a pool made by Open: any
// error opening the connection), the error wraps claims.ErrRetryable.
//
// Lock waits are bounded on the server: the takeover batches (AcquireClaim,
// ClaimForRecovery, RequeueOrphan, ClaimAvailable) and every batch of
// InTx's and Maintain's transactions are sent with a bound of bounds.sql on
// top (SET LOCK_TIMEOUT to claims.TxBoundFrom(ctx)), in the same call,
// because a SET inside go-mssqldb's sp_executesql call reverts when the
// call returns. SQL Server cannot end a transaction whose client froze;
// docs/sqlserver.md ("Dialect limitations and their fallbacks") says what
// that means.
//
// Every method that grants a work claim (Acquire, CreateEpisode,
// ClaimForRecovery, ClaimAvailable) stamps it with the local time taken
// just before the granting batch was first sent
// (claims.Claim.SetLocalStart), so the run's local lease clock never starts
// after the lease did.
//
// Not executed in this repository's CI: CI has no SQL Server. The adapter is
// checked statically there (the T-SQL is parsed, its lock hints and @
// parameters are checked against the calls in this package, and the Go side
// is unit tested against a fake driver). Its conformance suite runs only where
// MSSQL_URL points at a server, and says loudly that it was skipped otherwise.
package sqlserver
