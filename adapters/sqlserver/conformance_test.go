package sqlserver_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/conformance"
)

// skipBanner is printed (visible with go test -v, or when go test runs in
// this directory without package arguments) and is the skip message, so no
// run can be mistaken for SQL Server coverage.
const skipBanner = "=== SQL SERVER CONFORMANCE SUITE SKIPPED: MSSQL_URL is not set; " +
	"the T-SQL was checked statically only ==="

// TestConformanceClaims runs the shared work-claim suite on a real SQL
// Server named by MSSQL_URL (sqlserver://user:pass@host:1433?...; the login
// needs CREATE DATABASE). It runs twice: with READ_COMMITTED_SNAPSHOT OFF
// (boxed SQL Server's default) and ON (Azure SQL Database's default), since
// the batches must be correct under both.
//
// Isolation: every backend gets a database of its own, lh_test_<hex>,
// created, migrated with Migrate, and dropped when its test ends. A schema
// per backend would be cheaper but SQL Server resolves unqualified names
// through the user's default schema, not a per-session search path, so it
// would need a user per backend; a database per backend isolates completely
// with one DSN change (database=).
func TestConformanceClaims(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	for _, rcsi := range []bool{false, true} {
		t.Run(fmt.Sprintf("RCSI=%v", rcsi), func(t *testing.T) {
			t.Parallel()
			conformance.RunClaims(t, func(t *testing.T) conformance.ClaimsBackend {
				db := freshDatabase(t, admin, dsn, rcsi)
				store, err := sqlserver.New(db)
				require.NoError(t, err)
				return conformance.ClaimsBackend{
					Store:  store,
					Expire: func(t testing.TB, key string) { expireClaim(t, db, key) },
					Row:    func(t testing.TB, key string) (conformance.ClaimRow, bool) { return claimRow(t, db, key) },
					Count: func(t testing.TB) int {
						t.Helper()
						var n int
						require.NoError(t, db.QueryRowContext(context.Background(),
							`SELECT COUNT(*) FROM leasehold_work_claims`).Scan(&n))
						return n
					},
				}
			})
		})
	}
}

// freshDatabase creates lh_test_<hex>, migrates it and returns a pool on it;
// the database is dropped when t ends.
func freshDatabase(t *testing.T, admin *sql.DB, dsn string, rcsi bool) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := emptyDatabase(t, admin, dsn, rcsi)
	require.NoError(t, sqlserver.Migrate(ctx, db), "migrate database")
	return db
}

// emptyDatabase creates lh_test_<hex> and returns a pool on it, not
// migrated; the database is dropped when t ends.
func emptyDatabase(t *testing.T, admin *sql.DB, dsn string, rcsi bool) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "lh_test_" + hex.EncodeToString(b)
	_, err := admin.ExecContext(ctx, "CREATE DATABASE ["+name+"]")
	require.NoError(t, err, "create database %s", name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// SINGLE_USER ... ROLLBACK IMMEDIATE ends any connection still open.
		_, err := admin.ExecContext(ctx, "ALTER DATABASE ["+name+"] SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE ["+name+"];")
		if err != nil {
			t.Logf("sqlserver test: drop database %s: %v", name, err)
		}
	})
	if rcsi {
		_, err = admin.ExecContext(ctx, "ALTER DATABASE ["+name+"] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE")
		require.NoError(t, err)
	}

	dbDSN, err := withDatabase(dsn, name)
	require.NoError(t, err)
	db, err := sqlserver.Open(dbDSN)
	require.NoError(t, err)
	db.SetMaxOpenConns(40) // enough for the 32-way races
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// withDatabase returns dsn connecting to database name instead: the
// database query parameter of a sqlserver:// URL, or a database= key
// appended to an ADO or odbc: string (go-mssqldb keeps the last of repeated
// keys). The result is parsed back to check.
func withDatabase(dsn, name string) (string, error) {
	var out string
	if strings.HasPrefix(strings.ToLower(dsn), "sqlserver://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		q := u.Query()
		q.Set("database", name)
		u.RawQuery = q.Encode()
		out = u.String()
	} else {
		out = strings.TrimRight(dsn, "; ") + ";database=" + name
	}
	cfg, err := msdsn.Parse(out)
	if err != nil {
		return "", err
	}
	if cfg.Database != name {
		return "", fmt.Errorf("MSSQL_URL: could not point it at database %s (parsed %q)", name, cfg.Database)
	}
	return out, nil
}

// expireClaim backdates key's lease on the database clock, as if its holder
// had stopped renewing long ago.
func expireClaim(t testing.TB, db *sql.DB, key string) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `
UPDATE leasehold_work_claims
SET lease_until = DATEADD(second, -1, SYSUTCDATETIME()),
    claimed_at  = CASE WHEN claimed_at < DATEADD(second, -1, SYSUTCDATETIME())
                       THEN claimed_at ELSE DATEADD(second, -1, SYSUTCDATETIME()) END
OUTPUT inserted.dedupe_key
WHERE dedupe_key = @key;`, sql.Named("key", key))
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, 1, n, "no claim %q to expire", key)
}

func claimRow(t testing.TB, db *sql.DB, key string) (conformance.ClaimRow, bool) {
	t.Helper()
	var (
		r      conformance.ClaimRow
		state  string
		fin    sql.NullTime
		detail sql.NullString
	)
	err := db.QueryRowContext(context.Background(), `
SELECT dedupe_key, state, owner_node, attempt, fence, lease_until, finished_at, error_detail
FROM leasehold_work_claims WHERE dedupe_key = @key;`, sql.Named("key", key)).
		Scan(&r.Key, &state, &r.Owner, &r.Attempt, &r.Fence, &r.LeaseUntil, &fin, &detail)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false
	}
	require.NoError(t, err)
	// The same reading of a zone-less datetime2 as the Store's: UTC wall clock.
	lu := r.LeaseUntil
	r.LeaseUntil = time.Date(lu.Year(), lu.Month(), lu.Day(), lu.Hour(), lu.Minute(), lu.Second(), lu.Nanosecond(), time.UTC)
	r.State, r.Finished = claims.State(state), fin.Valid
	if detail.Valid {
		require.NoError(t, json.Unmarshal([]byte(detail.String), &r.ErrorDetail))
	}
	return r, true
}

// TestConformanceEpisodes runs the shared episode, journal and recovery
// suite on the SQL Server MSSQL_URL names, like TestConformanceClaims.
func TestConformanceEpisodes(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	conformance.RunEpisodes(t, func(t *testing.T) conformance.EpisodesBackend {
		db := freshDatabase(t, admin, dsn, false)
		store, err := sqlserver.New(db)
		require.NoError(t, err)
		exec := func(t testing.TB, stmt string, args ...any) {
			t.Helper()
			_, err := db.ExecContext(context.Background(), stmt, args...)
			require.NoError(t, err)
		}
		return conformance.EpisodesBackend{
			Store:       store,
			ExpireClaim: func(t testing.TB, key string) { expireClaim(t, db, key) },
			Archive: func(t testing.TB, id int64) {
				exec(t, `UPDATE leasehold_episodes SET archived_at = SYSUTCDATETIME() WHERE id = @id`, sql.Named("id", id))
			},
			Age: func(t testing.TB, id int64, d time.Duration) { ageEpisode(t, db, id, d) },
		}
	})
}

// mssqlAdmin returns a pool on the server MSSQL_URL names, or skips loudly:
// every SQL Server conformance test starts with it.
func mssqlAdmin(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := os.Getenv("MSSQL_URL")
	if dsn == "" {
		fmt.Println(skipBanner)
		t.Skip(skipBanner)
	}
	admin, err := sqlserver.Open(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoErrorf(t, admin.PingContext(ctx), "cannot reach the SQL Server MSSQL_URL names")
	return admin, dsn
}

// ageEpisode moves an episode's created_at, started_at and last_step_at
// back by d (whole seconds) on the database clock.
func ageEpisode(t testing.TB, db *sql.DB, id int64, d time.Duration) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), `UPDATE leasehold_episodes
		SET created_at = DATEADD(second, -@s, created_at),
		    started_at = DATEADD(second, -@s, started_at),
		    last_step_at = DATEADD(second, -@s, last_step_at)
		WHERE id = @id`, sql.Named("s", int(d.Seconds())), sql.Named("id", id))
	require.NoError(t, err)
}
