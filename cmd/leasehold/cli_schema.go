package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgconn"
	mssql "github.com/microsoft/go-mssqldb"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/leasehold/leasehold/sql/schema"
)

// schemaError is a leasehold schema that is missing or older than this
// binary's migrations: exit code 3. Retrying cannot help; migrating can.
type schemaError struct{ msg string }

func (e schemaError) Error() string { return e.msg }

// requireSchema fails with a schemaError unless the database holds every
// leasehold migration this binary embeds. A schema newer than the binary is
// only a warning on stderr: the commands that call this only read, so the
// worst case is a query that fails on a changed column, and that error is
// then reported as it is.
func requireSchema(ctx context.Context, conn *dbConn, stderr io.Writer, cmd string) error {
	p, err := conn.migrator()
	if err != nil {
		return err
	}
	// The needed version comes from the embedded migrations, so a new
	// migration file raises it without a change here. Only ListSources is
	// used: every Provider method that reads the database first creates the
	// version table when it is missing, and these commands must not write.
	sources := p.ListSources()
	if len(sources) == 0 {
		return errors.New("this binary embeds no leasehold migrations")
	}
	needed := sources[len(sources)-1].Version
	current, err := conn.version(ctx)
	if err != nil {
		return err
	}
	warning, err := compareSchema(current, needed, conn.where)
	if warning != "" {
		fmt.Fprintf(stderr, "leasehold %s: warning: %s\n", cmd, warning)
	}
	return err
}

// compareSchema judges the database's leasehold version, current (0: none
// applied or no version table), against needed, the newest migration this
// binary embeds. where names the database and schema for the message.
func compareSchema(current, needed int64, where string) (warning string, err error) {
	switch {
	case current <= 0:
		return "", schemaError{fmt.Sprintf("leasehold schema not found in %s: run `leasehold migrate up`", where)}
	case current < needed:
		return "", schemaError{fmt.Sprintf("leasehold schema is at version %d, this binary needs %d: run `leasehold migrate up`", current, needed)}
	case current > needed:
		return fmt.Sprintf("leasehold schema is at version %d, this binary knows only up to %d: the binary is "+
			"older than the schema; reading anyway, but use a leasehold release at least as new as your nodes'",
			current, needed), nil
	}
	return "", nil
}

// versionReader returns a read-only lookup of the highest leasehold
// migration applied in db: 0 when the version table is missing or empty. It
// runs goose's own version-table queries for dialect d, on the table the
// adapters' migrators use, so the CLI carries no SQL for it.
// undefinedTable recognizes the dialect's "no such table" error.
func versionReader(d goose.Dialect, db *sql.DB, undefinedTable func(error) bool) (func(context.Context) (int64, error), error) {
	vs, err := database.NewStore(d, schema.VersionTable)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (int64, error) {
		v, err := vs.GetLatestVersion(ctx, db)
		switch {
		case errors.Is(err, database.ErrVersionNotFound), err != nil && undefinedTable(err):
			return 0, nil
		case err != nil:
			return 0, fmt.Errorf("read the leasehold schema version (%s): %w", schema.VersionTable, err)
		}
		return v, nil
	}, nil
}

// pgUndefinedTable is Postgres's undefined_table (42P01), also what a
// search_path naming no existing schema yields.
func pgUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// mssqlInvalidObject is SQL Server's error 208, "Invalid object name".
func mssqlInvalidObject(err error) bool {
	var me mssql.Error
	if !errors.As(err, &me) {
		return false
	}
	if me.Number == 208 {
		return true
	}
	for _, e := range me.All {
		if e.Number == 208 {
			return true
		}
	}
	return false
}

// openChecked resolves rawURL, opens the database and requires its schema
// (requireSchema): the preamble of every command that reads or acts on a
// migrated schema. The caller closes the connection.
func openChecked(ctx context.Context, rawURL string, stderr io.Writer, cmd string) (*dbConn, error) {
	raw, err := resolveURL(rawURL)
	if err != nil {
		return nil, err
	}
	conn, err := openDB(ctx, raw, false)
	if err != nil {
		return nil, err
	}
	if err := requireSchema(ctx, conn, stderr, cmd); err != nil {
		conn.close()
		return nil, err
	}
	return conn, nil
}
