package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/leasehold/leasehold/sql/schema"
)

// The migration lock. Several processes may start on one fresh database
// file at once (the demo starts three), and each migrates it: goose reads
// the applied versions, then applies the missing ones one transaction each,
// so two unserialized migrators would both apply version 1 and the second
// would fail ("table leasehold_work_claims already exists").
//
// The lock cannot be a transaction on the database itself: goose applies
// the migrations on the connection it locked, each in a transaction of its
// own, and a write transaction held on any other connection would block
// them. It is instead an exclusive lock on a sidecar file beside the
// database, <database>-migrate.lock, taken through SQLite's own file locking
// (BEGIN EXCLUSIVE on that file, opened as an SQLite database of its own in
// rollback-journal mode, nothing ever written to it): the operating system
// releases it when its holder exits or is killed, it works on every platform
// SQLite runs on, and between the goroutines of one process as between
// processes. A waiter polls every lockPoll, for at most lockWait (as long as
// the Postgres migrator waits), or until its context ends. A database
// without a file (":memory:") takes no lock: no other process can see it.
const (
	lockSuffix = "-migrate.lock"
	lockPoll   = 50 * time.Millisecond
	lockWait   = 5 * time.Minute
)

// NewMigrator returns a goose Provider over leasehold's embedded SQLite
// migrations (schema.SQLite), tracking versions in leasehold_schema_version
// (never the application's goose table). Use it for status, down, or a
// target version. db should come from Open (foreign keys on).
//
// Up, Down and their variants hold the migration lock (see lockSuffix) while
// they run, so concurrent migrators of one file take turns and each
// migration is applied once.
func NewMigrator(db *sql.DB) (*goose.Provider, error) {
	vs, err := database.NewStore(goose.DialectSQLite3, schema.VersionTable)
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectCustom, db, schema.SQLite(),
		goose.WithStore(vs),
		goose.WithSessionLocker(&migrationLock{}))
}

// Migrate applies every pending leasehold migration to db (from Open). Any
// number of processes may call it at once on one file: they take turns (see
// NewMigrator), and each migration is applied once.
func Migrate(ctx context.Context, db *sql.DB) error {
	p, err := NewMigrator(db)
	if err != nil {
		return fmt.Errorf("leasehold migrate: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("leasehold migrate: %w", err)
	}
	return nil
}

// migrationLock is the migrator's goose SessionLocker. A Provider calls
// SessionLock and SessionUnlock in turn, never concurrently (it holds its
// own mutex from one to the other), so its fields need no lock.
type migrationLock struct {
	db   *sql.DB   // the lock file, opened as an SQLite database
	conn *sql.Conn // the connection holding BEGIN EXCLUSIVE on it
	path string
}

// SessionLock finds the file of the database conn is on and takes the lock
// beside it.
func (m *migrationLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	file, err := mainFile(ctx, conn)
	if err != nil || file == "" {
		return err
	}
	m.path = file + lockSuffix
	// Rollback-journal mode (the default for a new file): BEGIN EXCLUSIVE
	// takes the file's exclusive lock at once. No busy timeout: the wait
	// is the loop below, which the context can end.
	ldb, err := sql.Open(DriverName, m.path+"?_busy_timeout=0")
	if err != nil {
		return fmt.Errorf("open the leasehold migration lock %s: %w", m.path, err)
	}
	ldb.SetMaxOpenConns(1)
	lconn, err := ldb.Conn(ctx)
	if err != nil {
		_ = ldb.Close()
		return fmt.Errorf("open the leasehold migration lock %s: %w", m.path, err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		_, err = lconn.ExecContext(ctx, "BEGIN EXCLUSIVE")
		if err == nil {
			m.db, m.conn = ldb, lconn
			return nil
		}
		if !isRetryable(err) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(lockPoll):
			continue
		}
		break
	}
	_ = lconn.Close()
	_ = ldb.Close()
	return fmt.Errorf("take the leasehold migration lock %s: %w", m.path, err)
}

// SessionUnlock releases the lock: ROLLBACK of the empty transaction, and
// the lock file's connection closed. The file stays, for the next migrator.
func (m *migrationLock) SessionUnlock(ctx context.Context, _ *sql.Conn) error {
	if m.conn == nil {
		return nil
	}
	conn, ldb := m.conn, m.db
	m.conn, m.db = nil, nil
	_, err := conn.ExecContext(ctx, "ROLLBACK")
	err = errors.Join(err, conn.Close(), ldb.Close())
	if err != nil {
		return fmt.Errorf("release the leasehold migration lock %s: %w", m.path, err)
	}
	return nil
}

// mainFile returns the path of the file of conn's main database, "" for an
// in-memory or temporary one.
func mainFile(ctx context.Context, conn *sql.Conn) (string, error) {
	rows, err := conn.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return "", fmt.Errorf("find the database file to migrate: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq        int
			name, file string
		)
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", fmt.Errorf("find the database file to migrate: %w", err)
		}
		if name == "main" {
			return file, rows.Err()
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("find the database file to migrate: %w", err)
	}
	return "", nil
}
