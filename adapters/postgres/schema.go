package postgres

import (
	"context"
	"embed"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/sql/schema"
)

//go:embed schema.sql
var schemaSQL embed.FS

var schemaVersion = queries.Statement(schemaSQL, "schema.sql", "SchemaVersion")

// CheckSchema reports, wrapping schema.ErrSchema, when the leasehold schema
// the connection's search_path selects is missing or older than the
// migrations this binary embeds. runner.Node.Start calls it; health probes
// may (health.Schema). It only reads.
func (s *Store) CheckSchema(ctx context.Context) error {
	q, err := schemaVersion()
	if err != nil {
		return err
	}
	var current int64
	err = s.conn.QueryRow(ctx, q).Scan(&current)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		current, err = 0, nil
	}
	if err != nil {
		return dbError("SchemaVersion", err)
	}
	return schema.Check(current, schema.Latest(schema.Postgres()), "")
}
