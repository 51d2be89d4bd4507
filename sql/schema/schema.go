// Package schema ships leasehold's goose migrations, one folder per dialect.
// The same folders work with the goose CLI:
//
//	goose -dir sql/schema/postgres -table leasehold_schema_version postgres "$DATABASE_URL" up
//	goose -dir sql/schema/sqlserver -table leasehold_schema_version sqlserver "$MSSQL_URL" up
//	goose -dir sql/schema/sqlite -table leasehold_schema_version sqlite3 ./leasehold.db up
//
// (For SQLite, prefer adapters/sqlite.Migrate: it serializes concurrent
// migrators of one file, which the goose CLI does not.)
package schema

import (
	"embed"
	"io/fs"
)

// VersionTable is the goose version table leasehold uses, so that its
// migrations never mix with an application's own goose history.
const VersionTable = "leasehold_schema_version"

//go:embed postgres/*.sql
//go:embed sqlserver/*.sql
//go:embed sqlite/*.sql
var files embed.FS

// Postgres returns the Postgres migrations, files at the root.
func Postgres() fs.FS { return sub("postgres") }

// SQLServer returns the SQL Server (T-SQL) migrations, files at the root.
// They need the session SET options listed at the top of the migration.
func SQLServer() fs.FS { return sub("sqlserver") }

// SQLite returns the SQLite migrations, files at the root. They need
// foreign keys on (PRAGMA foreign_keys = ON), as adapters/sqlite.Open sets.
func SQLite() fs.FS { return sub("sqlite") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return f
}
