package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"

	"github.com/leasehold/leasehold/sql/schema"
)

// NewMigrator returns a goose Provider over leasehold's embedded SQL Server
// migrations, tracking versions in leasehold_schema_version (never the
// application's goose table). Use it for status, down, or a target version.
// The tables go into the connection's default schema in the database the
// DSN names. goose has no migration lock for SQL Server: run migrations from
// one process at a time.
func NewMigrator(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectMSSQL, db, schema.SQLServer(),
		goose.WithTableName(schema.VersionTable))
}

// Migrate applies every pending leasehold migration. db should come from
// Open, so the migrations run with the session options the schema (its
// filtered indexes) requires.
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
