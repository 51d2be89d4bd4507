package sqlite

import (
	"context"
	"embed"
	"strings"

	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/sql/schema"
)

//go:embed schema.sql
var schemaSQL embed.FS

var schemaVersion = queries.Statement(schemaSQL, "schema.sql", "SchemaVersion")

// codeError is SQLITE_ERROR, SQLite's result code for a statement that
// does not compile (a missing table among others).
const codeError = 1

// CheckSchema reports, wrapping schema.ErrSchema, when the leasehold schema
// of the database file is missing or older than the migrations this binary
// embeds. runner.Node.Start calls it; health probes may (health.Schema). It
// only reads.
func (s *Store) CheckSchema(ctx context.Context) error {
	q, err := schemaVersion()
	if err != nil {
		return err
	}
	var current int64
	err = s.conn.QueryRowContext(ctx, q).Scan(&current)
	if err != nil && sqliteCode(err) == codeError && strings.Contains(err.Error(), "no such table: "+schema.VersionTable) {
		current, err = 0, nil // never migrated
	}
	if err != nil {
		return dbError("SchemaVersion", err)
	}
	return schema.Check(current, schema.Latest(schema.SQLite()), "")
}
