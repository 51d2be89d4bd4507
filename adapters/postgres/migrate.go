package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"

	"github.com/leasehold/leasehold/sql/schema"
)

// NewMigrator returns a goose Provider over leasehold's embedded Postgres
// migrations, tracking versions in leasehold_schema_version (never the
// application's goose table). Use it for status, down, or a target version.
// The tables go into the schema the connection's search_path selects.
func NewMigrator(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectPostgres, db, schema.Postgres(),
		goose.WithTableName(schema.VersionTable))
}

// Migrate applies every pending leasehold migration. db may come from the pgx
// stdlib driver, e.g. stdlib.OpenDBFromPool(pool).
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
