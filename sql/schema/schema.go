// Package schema ships leasehold's goose migrations, one folder per dialect.
// The same folders work with the goose CLI:
//
//	goose -dir sql/schema/postgres -table leasehold_schema_version postgres "$DATABASE_URL" up
package schema

import (
	"embed"
	"io/fs"
)

// VersionTable is the goose version table leasehold uses, so that its
// migrations never mix with an application's own goose history.
const VersionTable = "leasehold_schema_version"

//go:embed postgres/*.sql
var files embed.FS

// Postgres returns the Postgres migrations, files at the root.
func Postgres() fs.FS { return sub("postgres") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return f
}
