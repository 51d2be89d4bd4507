package sqlserver

import (
	"context"
	"embed"

	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/sql/schema"
)

//go:embed schema.sql
var schemaSQL embed.FS

var schemaVersion = queries.Statement(schemaSQL, "schema.sql", "SchemaVersion")

// errInvalidObject is SQL Server's "Invalid object name": the version table
// does not exist, so the schema was never migrated.
const errInvalidObject = 208

// CheckSchema reports, wrapping schema.ErrSchema, when the leasehold schema
// of the connection's default schema is missing or older than the
// migrations this binary embeds. runner.Node.Start calls it; health probes
// may (health.Schema). It only reads.
func (s *Store) CheckSchema(ctx context.Context) error {
	q, err := schemaVersion()
	if err != nil {
		return err
	}
	var current int64
	err = s.db.QueryRowContext(ctx, q).Scan(&current)
	if hasNumber(err, errInvalidObject) {
		current, err = 0, nil
	}
	if err != nil {
		return dbError("SchemaVersion", err)
	}
	return schema.Check(current, schema.Latest(schema.SQLServer()), "")
}
