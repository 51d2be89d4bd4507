package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/testbound"
)

// migrators is how many processes start at once in the concurrency tests
// (the reproduction used 4; a fresh schema crashed 5 runs in 20).
const migrators = 6

// Many nodes starting together on a fresh schema all migrate it: each waits
// for the migration lock, and every migration is applied exactly once.
// "empty" is a schema with nothing in it; "version table only" is one where
// only goose's version table exists, as `leasehold migrate status` leaves a
// fresh schema. Several rounds each, each on a new schema, because an
// unlocked run crashes on most rounds but not on all.
func TestMigrateConcurrentFreshSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		rounds int
		status bool
	}{{"empty", 4, false}, {"version table only", 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for round := range tc.rounds {
				name := freshSchema(t)
				if tc.status {
					p, err := postgres.NewMigrator(schemaDB(t, name))
					require.NoError(t, err)
					_, err = p.Status(t.Context())
					require.NoError(t, err)
				}
				errs := migrateAtOnce(t, name, migrators)
				for i, err := range errs {
					require.NoError(t, err, "round %d, migrator %d", round, i)
				}
				requireAppliedOnce(t, name)
			}
		})
	}
}

// A rolling deploy: the schema is one migration behind (the old binary's
// version), and several new binaries start at once. The last migration is
// applied once, and nobody fails.
func TestMigrateRollingDeploy(t *testing.T) {
	t.Parallel()
	for round := range 2 {
		name := freshSchema(t)
		db := schemaDB(t, name)
		p, err := postgres.NewMigrator(db)
		require.NoError(t, err)
		src := p.ListSources()
		require.GreaterOrEqual(t, len(src), 2, "a rolling deploy needs two migrations")
		previous := src[len(src)-2].Version
		_, err = p.UpTo(t.Context(), previous)
		require.NoError(t, err)
		current, err := p.GetDBVersion(t.Context())
		require.NoError(t, err)
		require.Equal(t, previous, current)

		errs := migrateAtOnce(t, name, migrators)
		for i, err := range errs {
			require.NoError(t, err, "round %d, migrator %d", round, i)
		}
		requireAppliedOnce(t, name)
	}
}

// A migration waits for the schema's migration lock and gives up when its
// context ends, saying what it waited for; a migration of another schema in
// the same database does not wait for it.
func TestMigrateLockIsPerSchema(t *testing.T) {
	t.Parallel()
	name, other := freshSchema(t), freshSchema(t)
	conn, err := schemaDB(t, name).Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	// The key of migrate.sql's MigrationSchema, held as a migrator would.
	const key = "hashtextextended('leasehold.migrate:' || current_schema(), 0)"
	var locked bool
	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT pg_try_advisory_lock("+key+")").Scan(&locked))
	require.True(t, locked)

	require.NoError(t, postgres.Migrate(t.Context(), schemaDB(t, other)), "another schema's lock held this one up")
	requireAppliedOnce(t, other)

	// Long enough for the statements before the lock on a loaded host (at
	// 1.5 s, make test-loaded once timed out finding the schema).
	ctx, cancel := context.WithTimeout(t.Context(), 2*testbound.Margin)
	defer cancel()
	err = postgres.Migrate(ctx, schemaDB(t, name))
	require.ErrorContains(t, err, "take the leasehold migration lock")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	var unlocked bool
	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT pg_advisory_unlock("+key+")").Scan(&unlocked))
	require.True(t, unlocked)
	require.NoError(t, postgres.Migrate(t.Context(), schemaDB(t, name)))
	requireAppliedOnce(t, name)
}

// migrateAtOnce runs n Migrate calls on schema, each on a pool of its own
// (as n processes would), released together once every pool has a
// connection open, and returns their errors.
func migrateAtOnce(t *testing.T, schema string, n int) []error {
	t.Helper()
	dbs := make([]*sql.DB, n)
	for i := range dbs {
		dbs[i] = schemaDB(t, schema)
		require.NoError(t, dbs[i].PingContext(t.Context()))
	}
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Go(func() {
			<-start
			errs[i] = postgres.Migrate(t.Context(), db)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// requireAppliedOnce checks that leasehold_schema_version in schema records
// goose's zero version and every embedded migration exactly once.
func requireAppliedOnce(t *testing.T, schema string) {
	t.Helper()
	db := schemaDB(t, schema)
	p, err := postgres.NewMigrator(db)
	require.NoError(t, err)
	want := map[int64]int{0: 1}
	for _, s := range p.ListSources() {
		want[s.Version] = 1
	}
	rows, err := db.QueryContext(t.Context(),
		"SELECT version_id, count(*) FROM leasehold_schema_version WHERE is_applied GROUP BY version_id")
	require.NoError(t, err)
	defer rows.Close()
	got := map[int64]int{}
	for rows.Next() {
		var v int64
		var n int
		require.NoError(t, rows.Scan(&v, &n))
		got[v] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got, "rows per version in %s.leasehold_schema_version", schema)
}

// freshSchema creates an empty schema (no leasehold table, no version
// table), dropped when t ends.
func freshSchema(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "lh_migrate_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoErrorf(t, err, "cannot reach Postgres at %s", pgtest.URL())
	defer admin.Close(context.Background())
	_, err = admin.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			t.Logf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// schemaDB opens a small pool of its own whose search_path is schema alone.
func schemaDB(t *testing.T, schema string) *sql.DB {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close(); pool.Close() })
	return db
}
