package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"
	"sync"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/sql/schema"
)

// The migration lock's timings: each attempt waits on the server up to
// lockAttemptWait (so a waiter starts the moment the holder is done), and
// attempts repeat until lockTimeout, the wait goose's Postgres locker
// allows too.
const (
	lockAttemptWait = 5 * time.Second
	lockTimeout     = 5 * time.Minute
)

// The statements of migrate.sql.
const (
	acquireMigrationLock = "AcquireMigrationLock"
	releaseMigrationLock = "ReleaseMigrationLock"
)

//go:embed migrate.sql
var migrateSQL embed.FS

var migrateStatements = sync.OnceValues(func() (map[string]queries.Query, error) {
	qs, err := queries.Parse(migrateSQL, "migrate.sql")
	if err != nil {
		return nil, err
	}
	for _, name := range []string{acquireMigrationLock, releaseMigrationLock} {
		if _, ok := qs[name]; !ok {
			return nil, fmt.Errorf("sqlserver: statement %s missing from migrate.sql", name)
		}
	}
	return qs, nil
})

// NewMigrator returns a goose Provider over leasehold's embedded SQL Server
// migrations, tracking versions in leasehold_schema_version (never the
// application's goose table). Use it for status, down, or a target version.
// The tables go into the connection's default schema in the database the
// DSN names.
//
// Up, Down, Status and their variants hold a session-owned application lock
// (sp_getapplock, see migrate.sql) on the connection they run on, so
// concurrent migrators of one schema wait for each other (up to five
// minutes) and each migration is applied once. goose ships no SQL Server
// locker; this one implements goose's lock.SessionLocker.
func NewMigrator(db *sql.DB) (*goose.Provider, error) {
	qs, err := migrateStatements()
	if err != nil {
		return nil, err
	}
	l := &migrationLocker{
		acquire: qs[acquireMigrationLock].SQL,
		release: qs[releaseMigrationLock].SQL,
		wait:    lockAttemptWait,
		timeout: lockTimeout,
	}
	return goose.NewProvider(goose.DialectMSSQL, db, schema.SQLServer(),
		goose.WithTableName(schema.VersionTable),
		goose.WithSessionLocker(l))
}

// Migrate applies every pending leasehold migration. db should come from
// Open, so the migrations run with the session options the schema (its
// filtered indexes) requires. Any number of processes may call it at once:
// they take turns, and each migration is applied once.
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

// migrationLocker is goose's lock.SessionLocker on SQL Server: the
// session-owned application lock of migrate.sql.
type migrationLocker struct {
	acquire, release string        // the batches
	wait             time.Duration // each attempt's wait on the server
	timeout          time.Duration // all attempts'
}

var _ lock.SessionLocker = (*migrationLocker)(nil)

// sp_getapplock's results.
const (
	applockGranted       = 0
	applockGrantedWaited = 1
	applockTimedOut      = -1
	applockDeadlock      = -3 // applockCancelled is -2
)

// SessionLock takes the lock on conn, retrying attempts that timed out or
// lost a deadlock until l.timeout has passed or ctx is done.
func (l *migrationLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(l.timeout)
	for {
		var result int
		err := conn.QueryRowContext(ctx, l.acquire, sql.Named("wait_ms", l.wait.Milliseconds())).Scan(&result)
		if err != nil {
			return fmt.Errorf("take the leasehold migration lock (%s): %w", acquireMigrationLock, err)
		}
		switch result {
		case applockGranted, applockGrantedWaited:
			return nil
		case applockTimedOut, applockDeadlock:
			if !time.Now().Before(deadline) {
				return fmt.Errorf("take the leasehold migration lock: another session has held it for %s "+
					"(sys.dm_tran_locks, resource_type APPLICATION, names it)", l.timeout)
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("take the leasehold migration lock: %w", err)
			}
		default: // applockCancelled, or -999

			return fmt.Errorf("take the leasehold migration lock: sp_getapplock returned %d", result)
		}
	}
}

// SessionUnlock releases the lock. When that fails the connection is
// discarded instead of going back to the pool: its session ends, and with it
// every lock it owns, so no later user of the connection inherits the lock.
func (l *migrationLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var result int
	err := conn.QueryRowContext(ctx, l.release).Scan(&result)
	if err == nil && result == 0 {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("sp_releaseapplock returned %d", result)
	}
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	return fmt.Errorf("release the leasehold migration lock (%s; the connection was closed, which releases it): %w",
		releaseMigrationLock, err)
}
