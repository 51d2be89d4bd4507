// Package pgtest gives each test its own migrated Postgres schema on a real
// server. It never skips: a test that needs Postgres and cannot reach it
// fails, saying which URL it tried and how to provide one.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
)

// DefaultURL is used when neither TEST_DATABASE_URL nor DATABASE_URL is set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// URL returns the server tests connect to.
func URL() string {
	for _, v := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(v); u != "" {
			return u
		}
	}
	return DefaultURL
}

// schemaTimeout bounds creating and migrating one test schema.
const schemaTimeout = 2 * time.Minute

// Options tunes the pool Schema returns.
type Options struct {
	// MaxConns bounds the pool. Default 40, enough for 32 truly concurrent
	// callers in the race scenarios.
	MaxConns int32
	// URL is the server, default URL().
	URL string
	// UpTo stops the migrations at this version (0: every migration), for
	// tests that seed a database as an older release left it and then
	// upgrade it (postgres.Migrate).
	UpTo int64
}

// Schema creates a fresh schema, applies leasehold's migrations to it, and
// returns a pool whose search_path is that schema alone, so a query that
// relied on "public" would fail. The schema is dropped when t ends.
func Schema(t testing.TB, opts ...Options) *pgxpool.Pool {
	t.Helper()
	pool, drop, err := NewSchema(context.Background(), opts...)
	require.NoErrorf(t, err, "pgtest: cannot reach Postgres at %s or migrate a schema there; start one or set TEST_DATABASE_URL (make test starts a throwaway server)", URL())
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return pool
}

// NewSchema is Schema for code without a testing.TB (runnable examples):
// a fresh, migrated schema and a pool on it, and drop, which closes the
// pool and drops the schema.
func NewSchema(ctx context.Context, opts ...Options) (pool *pgxpool.Pool, drop func() error, err error) {
	o := Options{MaxConns: 40, URL: URL()}
	if len(opts) > 0 && opts[0].MaxConns > 0 {
		o.MaxConns = opts[0].MaxConns
	}
	if len(opts) > 0 && opts[0].URL != "" {
		o.URL = opts[0].URL
	}
	if len(opts) > 0 {
		o.UpTo = opts[0].UpTo
	}
	// A failure detector, not a bound on anything leasehold promises:
	// migrating a schema (eleven transactions, each fsynced) took 1.2-21 s
	// on the 2-core CI machine with two CPU hogs beside the race-enabled
	// suite (2026-12-01, load 13, fsync on); 30 s failed tests there.
	ctx, cancel := context.WithTimeout(ctx, schemaTimeout)
	defer cancel()

	admin, err := pgx.Connect(ctx, o.URL)
	if err != nil {
		return nil, nil, err
	}
	defer admin.Close(context.Background())

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "lh_test_" + hex.EncodeToString(b)
	if _, err = admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return nil, nil, err
	}
	dropSchema := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, o.URL)
		if err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		return nil
	}

	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, nil, errors.Join(err, dropSchema())
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.MaxConns = o.MaxConns
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, errors.Join(err, dropSchema())
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	if err := migrate(ctx, sqlDB, o.UpTo); err != nil {
		pool.Close()
		return nil, nil, errors.Join(fmt.Errorf("migrate schema %s: %w", name, err), dropSchema())
	}
	if err := offsetIdentities(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, errors.Join(fmt.Errorf("offset the identities of schema %s: %w", name, err), dropSchema())
	}
	return pool, func() error { pool.Close(); return dropSchema() }, nil
}

// IdentityStride is how far apart offsetIdentities starts the identity
// sequences of a test schema: the k-th sequence (by name) starts at
// (k+1) * IdentityStride + k + 1.
const IdentityStride = 1_000_000

// offsetIdentities starts every identity sequence of the schema at its own
// offset, so that no two tables hand out the same id in a test: a statement
// that returned one table's id where another's was meant (two RETURNING
// columns swapped, a join on the wrong id) reads a row that does not exist
// and fails, instead of passing because both sequences started at 1.
func offsetIdentities(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_class AS c
		JOIN pg_namespace AS n ON n.oid = c.relnamespace
		WHERE c.relkind = 'S' AND n.nspname = current_schema() ORDER BY c.relname`)
	if err != nil {
		return err
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for k, seq := range seqs {
		start := int64(k+1)*IdentityStride + int64(k) + 1
		if _, err := pool.Exec(ctx, fmt.Sprintf("ALTER SEQUENCE %s RESTART WITH %d", pgx.Identifier{seq}.Sanitize(), start)); err != nil {
			return err
		}
	}
	return nil
}

// Exec runs a test-only statement (backdating rows, inspecting state) and
// returns the number of rows it affected.
func Exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	tag, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
	return tag.RowsAffected()
}

// ExpireClaim backdates the lease on key so it is past on the database
// clock, as if its holder had stopped renewing long ago. Tests use it instead
// of sleeping.
func ExpireClaim(t testing.TB, pool *pgxpool.Pool, key string) {
	t.Helper()
	n := Exec(t, pool, `UPDATE leasehold_work_claims
		SET lease_until = now() - interval '1 second',
		    claimed_at = least(claimed_at, now() - interval '1 second')
		WHERE dedupe_key = $1`, key)
	require.EqualValues(t, 1, n, "pgtest: no claim %q to expire", key)
}

// Another returns a second, independent pool on the same schema as pool, for
// tests that run several nodes against one database.
func Another(t testing.TB, pool *pgxpool.Pool, opts ...Options) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config()
	if len(opts) > 0 && opts[0].MaxConns > 0 {
		cfg.MaxConns = opts[0].MaxConns
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// migrate applies leasehold's migrations, all of them or up to upTo.
func migrate(ctx context.Context, db *sql.DB, upTo int64) error {
	if upTo == 0 {
		return postgres.Migrate(ctx, db)
	}
	p, err := postgres.NewMigrator(db)
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, upTo)
	return err
}
