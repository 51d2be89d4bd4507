// Package sqlitetest gives tests a real, migrated SQLite database file of
// their own: no server, nothing to clean up but t.TempDir.
package sqlitetest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
)

// DB returns a *sql.DB (from sqlite.Open: WAL, busy_timeout, foreign keys,
// BEGIN IMMEDIATE) on a fresh database file in t.TempDir(), migrated to the
// latest version, closed when the test ends.
func DB(t testing.TB) *sql.DB {
	t.Helper()
	return Open(t, Path(t))
}

// Path returns the path of a new database file in t.TempDir() (not created
// yet), for tests that open it themselves, several times, or migrate it.
func Path(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "leasehold.db")
}

// Open opens the database file at path with sqlite.Open and migrates it; it
// is closed when the test ends. Two Opens of one path are two independent
// pools on one file, as two processes would have.
func Open(t testing.TB, path string) *sql.DB {
	t.Helper()
	db := OpenUnmigrated(t, path)
	require.NoError(t, sqlite.Migrate(context.Background(), db))
	require.NoError(t, OffsetIdentities(context.Background(), db))
	return db
}

// IdentityStride is how far apart OffsetIdentities starts the ids of the
// AUTOINCREMENT tables: the k-th table (by name) hands out ids from
// (k+1) * IdentityStride + k + 1.
const IdentityStride = 1_000_000

// OffsetIdentities starts every AUTOINCREMENT table of a fresh database at
// its own offset (sqlite_sequence), so that no two tables hand out the same
// id in a test: a statement that returned one table's id where another's
// was meant reads a row that does not exist and fails, instead of passing
// because both counted from 1. A counter already past its offset is kept.
func OffsetIdentities(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master
		WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%' ORDER BY name`)
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close()
			return err
		}
		tables = append(tables, name)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for k, table := range tables {
		seq := int64(k+1)*IdentityStride + int64(k)
		if _, err := db.ExecContext(ctx, `DELETE FROM sqlite_sequence WHERE name = ?1 AND seq < ?2`, table, seq); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO sqlite_sequence (name, seq)
			SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)`, table, seq); err != nil {
			return err
		}
	}
	return nil
}

// OpenUnmigrated is Open without the migration.
func OpenUnmigrated(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Another returns a second, independent pool on the file of db, for tests
// that run several nodes (or what would be several processes) on one file.
func Another(t testing.TB, db *sql.DB) *sql.DB {
	t.Helper()
	var file string
	require.NoError(t, db.QueryRow(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file))
	require.NotEmpty(t, file, "sqlitetest: the database has no file")
	return OpenUnmigrated(t, file)
}

// Exec runs a test-only statement (backdating rows, inspecting state) and
// returns the number of rows it affected.
func Exec(t testing.TB, db *sql.DB, sql string, args ...any) int64 {
	t.Helper()
	res, err := db.Exec(sql, args...)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	return n
}

// Now is the database clock expression every statement uses: milliseconds
// since the Unix epoch, UTC.
const Now = `CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`

// ExpireClaim backdates the lease on key so it is past on the database
// clock, as if its holder had stopped renewing long ago. Tests use it instead
// of sleeping.
func ExpireClaim(t testing.TB, db *sql.DB, key string) {
	t.Helper()
	n := Exec(t, db, `UPDATE leasehold_work_claims
		SET lease_until = `+Now+` - 1000,
		    claimed_at = min(claimed_at, `+Now+` - 1000)
		WHERE dedupe_key = ?`, key)
	require.EqualValues(t, 1, n, "sqlitetest: no claim %q to expire", key)
}

// Time converts a time column's milliseconds to a UTC time, as the adapter
// does.
func Time(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
