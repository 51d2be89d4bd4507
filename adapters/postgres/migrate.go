package postgres

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/sql/schema"
)

// The migration lock is goose's session-level advisory lock
// (lock.NewPostgresSessionLocker: pg_try_advisory_lock, pg_advisory_unlock),
// taken before anything reads or writes leasehold_schema_version, so N
// processes migrating one schema at once apply each migration once, one
// after the other, instead of racing on the catalog (`duplicate key value
// violates unique constraint "pg_type_typname_nsp_index"`). Its key is one
// per schema, computed on the migration's own connection (MigrationSchema
// in migrate.sql):
//
//	hashtextextended('leasehold.migrate:' || current_schema(), 0)
//
// current_schema() is where the migrations' unqualified CREATE TABLEs land,
// so two spellings of one search_path ("app" and "app, public") share the
// key and two leasehold schemas of one database never wait for each other.
// The prefix keeps the key apart from goose's default (crc32 of "goose"),
// so an application's own goose migrations and leasehold's never wait on
// each other either. While a migration runs, pg_locks lists the lock as
// locktype 'advisory', with that key split into classid (high 32 bits) and
// objid (low 32 bits).
//
// The lock is polled every second for up to five minutes; a waiter starts
// at most a second after the holder is done. A migrator that dies releases
// it with its session.
const (
	lockPollSeconds = 1
	lockPolls       = 300
	unlockPolls     = 5
)

//go:embed migrate.sql
var migrateSQL embed.FS

// migrationSchema is MigrationSchema of migrate.sql.
var migrationSchema = queries.Statement(migrateSQL, "migrate.sql", "MigrationSchema")

// NewMigrator returns a goose Provider over leasehold's embedded Postgres
// migrations, tracking versions in leasehold_schema_version (never the
// application's goose table). Use it for status, down, or a target version.
// The tables go into the schema the connection's search_path selects.
//
// Up, Down, Status and their variants first check that the connection can
// use that schema (a role without USAGE on it is named, rather than goose
// reporting leasehold_schema_version missing), then hold that schema's
// migration lock on the connection they run on, so concurrent migrators
// take turns. The lock needs no privilege, so a role without DDL rights can
// still run Up on a current schema and learn there is nothing to do.
func NewMigrator(db *sql.DB) (*goose.Provider, error) {
	query, err := migrationSchema()
	if err != nil {
		return nil, err
	}
	vs, err := database.NewStore(goose.DialectPostgres, schema.VersionTable)
	if err != nil {
		return nil, err
	}
	ext, ok := vs.(database.StoreExtender)
	if !ok {
		return nil, fmt.Errorf("postgres: goose's Postgres store cannot check that %s exists", schema.VersionTable)
	}
	return goose.NewProvider(goose.DialectCustom, db, schema.Postgres(),
		goose.WithStore(checkedStore{StoreExtender: ext, query: query}),
		goose.WithSessionLocker(&migrationSession{query: query}))
}

// Migrate applies every pending leasehold migration. db may come from the pgx
// stdlib driver, e.g. stdlib.OpenDBFromPool(pool). Any number of processes
// may call it at once: they take turns (see NewMigrator), and each
// migration is applied once.
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

// checkedStore is goose's Postgres version-table store, with the schema
// check before its first statement: goose looks for the version table
// first on every path, the ones that take no lock included (Up checks for
// pending migrations before it locks; GetDBVersion never locks).
type checkedStore struct {
	database.StoreExtender
	query string // MigrationSchema
}

func (s checkedStore) TableExists(ctx context.Context, db database.DBTxConn) (bool, error) {
	if _, err := checkSchema(ctx, db, s.query); err != nil {
		return false, err
	}
	return s.StoreExtender.TableExists(ctx, db)
}

// migrationSession is the migrator's goose SessionLocker: the schema check,
// then goose's advisory lock under the schema's key, both on the connection
// goose migrates on. A Provider calls SessionLock and SessionUnlock in turn,
// never concurrently (it holds its own mutex from one to the other), so
// held needs no lock of its own.
type migrationSession struct {
	query string // MigrationSchema
	held  lock.SessionLocker
	key   int64
}

func (m *migrationSession) SessionLock(ctx context.Context, conn *sql.Conn) error {
	key, err := checkSchema(ctx, conn, m.query)
	if err != nil {
		return err
	}
	l, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(key),
		lock.WithLockTimeout(lockPollSeconds, lockPolls),
		lock.WithUnlockTimeout(lockPollSeconds, unlockPolls),
	)
	if err != nil {
		return err
	}
	if err := l.SessionLock(ctx, conn); err != nil {
		return fmt.Errorf("take the leasehold migration lock (advisory lock %d): %w", key, err)
	}
	m.held, m.key = l, key
	return nil
}

func (m *migrationSession) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	if m.held == nil {
		return nil
	}
	l := m.held
	m.held = nil
	if err := l.SessionUnlock(ctx, conn); err != nil {
		return fmt.Errorf("release the leasehold migration lock (advisory lock %d): %w", m.key, err)
	}
	return nil
}

// checkSchema returns the migration lock key of the schema the session
// would migrate. It fails, naming the role, the schema and the missing
// privilege, when the session's search_path lists a schema it may not use
// ahead of that one, or selects no schema at all.
func checkSchema(ctx context.Context, conn database.DBTxConn, query string) (lockKey int64, err error) {
	var (
		role, searchPath string
		current, denied  sql.NullString
		key              sql.NullInt64
	)
	if err := conn.QueryRowContext(ctx, query).Scan(&role, &searchPath, &current, &key, &denied); err != nil {
		return 0, fmt.Errorf("find the schema to migrate (MigrationSchema): %w", err)
	}
	switch {
	case denied.Valid:
		return 0, fmt.Errorf("role %q has no USAGE privilege on schema %q, which its search_path (%s) selects, "+
			"so Postgres skips that schema and the leasehold tables in it are invisible: "+
			"GRANT USAGE ON SCHEMA %s TO %s, or connect as a role that has it",
			role, denied.String, searchPath, pgx.Identifier{denied.String}.Sanitize(), pgx.Identifier{role}.Sanitize())
	case !current.Valid || !key.Valid:
		return 0, fmt.Errorf("search_path (%s) of role %q selects no existing schema, so there is nowhere to "+
			"find or create the leasehold tables: create the schema, or set search_path to the one they live in",
			searchPath, role)
	}
	return key.Int64, nil
}
