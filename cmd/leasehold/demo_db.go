package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// demoBackend is the demo's throwaway database: a new SQLite file in a new
// temporary directory, or a new schema on a Postgres server, migrated.
type demoBackend struct {
	reads    *demoDB  // the parent's connection, for progress and the summary
	where    string   // what it is, printed first ("" when already said)
	name     string   // what it is, in the summary's heading
	nodeArgs []string // the demo-node flags that lead a node to it
	kept     string   // printed instead of removing it (-keep)
	close    func()   // closes the parent's connections only (-keep)
	// remove closes the parent's connections and deletes the database,
	// saying so on stdout.
	remove func(context.Context) error
}

// openDemoDB creates and migrates the demo's database: SQLite, or Postgres
// on the server at url.
func openDemoDB(ctx context.Context, dialect, url string) (*demoBackend, error) {
	if dialect == demoSQLite {
		return openSQLiteDemo(ctx)
	}
	return openPostgresDemo(ctx, url)
}

// openSQLiteDemo creates demo.db in a new temporary directory. The nodes,
// separate processes, open the same file: SQLite's single writer lock
// (BEGIN IMMEDIATE) serializes their writes, WAL lets the parent read
// meanwhile.
func openSQLiteDemo(ctx context.Context) (*demoBackend, error) {
	dir, err := os.MkdirTemp("", "leasehold-demo-")
	if err != nil {
		return nil, fmt.Errorf("create the demo's directory: %w", err)
	}
	path := filepath.Join(dir, "demo.db")
	db, err := sqlite.Open(ctx, path)
	if err == nil {
		err = sqlite.Migrate(ctx, db)
		if err != nil {
			_ = db.Close()
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("create the demo's database %s: %w", path, err), os.RemoveAll(dir))
	}
	u := sqliteURL(path)
	return &demoBackend{
		reads:    &demoDB{dialect: demoSQLite, db: db},
		where:    fmt.Sprintf("SQLite file %s (new, in a temporary directory)", path),
		name:     "SQLite file " + path,
		nodeArgs: []string{"-url", u},
		kept: fmt.Sprintf("\nkept %s; see it in the dashboard with\n  leasehold ui -url '%s'\nand remove it afterwards with rm -r %s\n",
			path, u, dir),
		close: func() { _ = db.Close() },
		remove: func(context.Context) error {
			err := errors.Join(db.Close(), os.RemoveAll(dir))
			if err != nil {
				return fmt.Errorf("remove %s: %w", dir, err)
			}
			fmt.Printf("removed %s\n", dir)
			return nil
		},
	}, nil
}

// openPostgresDemo creates a new schema on the server at url, and migrates
// it; the nodes connect to the server with the schema as their search_path.
func openPostgresDemo(ctx context.Context, url string) (_ *demoBackend, err error) {
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(url), err)
	}
	schema, err := createDemoSchema(ctx, admin)
	if err != nil {
		admin.Close()
		return nil, err
	}
	fmt.Printf("schema %s on %s\n", schema, redact(url))
	drop := func(ctx context.Context) error {
		defer admin.Close()
		if err := dropDemoSchema(ctx, admin, schema); err != nil {
			return err
		}
		fmt.Printf("dropped schema %s\n", schema)
		return nil
	}
	pool, err := openSchemaPool(ctx, url, schema, 4)
	if err != nil {
		return nil, errors.Join(err, drop(context.WithoutCancel(ctx)))
	}
	db := stdlib.OpenDBFromPool(pool)
	closeAll := func() { _ = db.Close(); pool.Close() }
	if err := postgres.Migrate(ctx, db); err != nil {
		closeAll()
		return nil, errors.Join(err, drop(context.WithoutCancel(ctx)))
	}
	return &demoBackend{
		reads:    &demoDB{dialect: demoPostgres, db: db},
		name:     "schema " + schema,
		nodeArgs: []string{"-url", url, "-schema", schema},
		kept: fmt.Sprintf("\nkept schema %s; see it in the dashboard with\n  leasehold ui -url '%s'\nand drop it afterwards with DROP SCHEMA %s CASCADE\n",
			schema, redact(demoSchemaURL(url, schema)), pgx.Identifier{schema}.Sanitize()),
		close: func() { closeAll(); admin.Close() },
		remove: func(ctx context.Context) error {
			closeAll()
			return drop(ctx)
		},
	}, nil
}

// demoStore is what a demo node needs from an adapter.
type demoStore interface {
	runner.Store
	recovery.Store
}

// openDemoStore opens the store a demo node runs on: the SQLite file of a
// sqlite: URL, else the Postgres server at url in schema.
func openDemoStore(ctx context.Context, url, schema string) (demoStore, func(), error) {
	if isSQLiteURL(url) {
		path, params, err := sqlitePath(url)
		if err != nil {
			return nil, nil, err
		}
		if params != "" {
			path += "?" + params
		}
		db, err := sqlite.Open(ctx, path)
		if err != nil {
			return nil, nil, err
		}
		return sqlite.New(db), func() { _ = db.Close() }, nil
	}
	pool, err := openSchemaPool(ctx, url, schema, 10)
	if err != nil {
		return nil, nil, err
	}
	return postgres.New(pool), pool.Close, nil
}
