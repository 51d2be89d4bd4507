// Package sqlite is leasehold's SQLite adapter, on modernc.org/sqlite (pure
// Go, no cgo; driver name "sqlite"): it implements the stores the core
// packages declare (claims.Store, membership.Store and the rest) on
// database/sql, with the statements sqlc compiled from sql/queries/sqlite
// into package db/sqlitedb. Read the .sql files to audit what it does; the
// only SQL beside them is schema.sql (the schema version CheckSchema reads).
//
// # Clock
//
// The only clock is SQLite's, read inside the deciding statement as
//
//	CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
//
// milliseconds since the Unix epoch, UTC: every time column is an INTEGER
// of such milliseconds (millisecond resolution, as SQLite's 'subsec' has),
// and callers pass durations in milliseconds, never times. SQLite keeps
// 'now' constant for the whole of one statement, so one statement reads one
// instant, as now() does on Postgres. The clock is the host's: every process
// on the file reads the same one.
//
// # Lock
//
// SQLite has one writer per database file, and its database write lock is
// leasehold's lock. A write statement takes it when it starts and holds it
// to its end (in autocommit) or to COMMIT, so each statement decides on the
// latest committed state with no other writer in between: where Postgres
// relies on row locks (ON CONFLICT, UPDATE, FOR UPDATE, FOR SHARE, SKIP
// LOCKED), the write lock covers every row at once, and the statements say
// so. Open sets _txlock=immediate, so every transaction the Store (or a
// caller, on a pool from Open) begins is BEGIN IMMEDIATE: it holds the write
// lock from its first statement, and an operation that is one statement on
// Postgres may be several statements in one such transaction here, every
// deciding condition (fence, owner, lease against the clock, status) still
// in SQL. Run.Hold's HoldClaim is a fenced no-op write of the claim row, so
// a caller's transaction keeps the lock, and every takeover out, until it
// ends.
//
// The journal is WAL: readers never wait for the writer nor it for them,
// and the processes on one host share the file. busy_timeout (BusyTimeout,
// ten seconds) bounds every wait for the write lock: a statement that did
// not get it fails SQLITE_BUSY having applied nothing, reported as
// claims.ErrRetryable. Commits are synchronous=FULL, and foreign keys are
// on. Open's pool has MaxOpenConns connections, so a process's writers
// queue for a connection in Go, in order, rather than all spinning in
// SQLite's busy handler, which has no queue.
//
// A Store bound to a caller's transaction (WithTx) runs an operation of
// several statements inside a SAVEPOINT of it, rolled back to when the
// operation fails, so the caller's transaction goes on without its writes;
// except that a fenced write there that matched no row (FinishEpisode from
// Run.CompleteTx or Run.FailTx, HoldClaim from Run.Hold: the grant is
// gone) dooms the caller's transaction, as an error aborts one on Postgres.
// A failed statement does not end an SQLite transaction, so the Store
// then writes, outside its savepoint, a row of
// leasehold_doomed_transactions (DoomTransaction, migration 00011) whose
// foreign key no row can satisfy and which is DEFERRABLE INITIALLY
// DEFERRED: the COMMIT fails (SQLITE_CONSTRAINT_FOREIGNKEY),
// modernc.org/sqlite rolls the transaction back, and its connection goes
// back to the pool outside any transaction; so a caller that ignores
// claims.ErrLeaseLost and commits lands nothing. It needs foreign keys on
// (Open's DSN); a ROLLBACK TO a savepoint taken before the write undoes it.
// Maintain waits for the write lock (up to busy_timeout) where Postgres
// skips a run whose lock is held, and takes no lock when nothing is due
// (MaintenanceDue).
//
// # Limits
//
// One host, many processes: every process of every node on that host opens
// the same file (a local file system; not a network share, where SQLite's
// locks are unreliable). Nodes on several hosts need Postgres or SQL Server.
//
// There are no per-row locks and no server to end a stuck session: a
// process frozen (SIGSTOP, a hung VM) inside a write transaction blocks
// every writer of the file, each of which fails claims.ErrRetryable after
// busy_timeout and retries, until the frozen process exits (the operating
// system releases its lock) or resumes. Postgres's BoundTransaction and
// BoundLockWait have no equivalent (sql/queries/dialects.go); keep
// transactions short.
//
// There is no LISTEN/NOTIFY: pollers find trigger requests on their poll
// interval, as they do on Postgres when a notification is lost.
//
// Migrate (and NewMigrator) serialize the processes migrating one file at
// once with a lock on a file beside it (see migrate.go).
package sqlite
