package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// demoReportNames checks that every summary statement the demo's Go code
// names exists in each dialect's file (demo_report.sql, and
// demo_report_sqlite.sql), and that every statement there is used.
func demoReportNames(t *testing.T) {
	t.Helper()
	src, err := os.ReadFile("report.go")
	require.NoError(t, err)
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\.query(?:Row)?\(ctx, "(\w+)"`).FindAllStringSubmatch(string(src), -1) {
		used[m[1]] = true
	}
	require.NotEmpty(t, used)
	require.Len(t, demoQueries, len(demoReportFiles))
	for dialect, qs := range demoQueries {
		for name := range used {
			require.Contains(t, qs, name, "%s has no %s", demoReportFiles[dialect], name)
		}
		for name, q := range qs {
			require.True(t, used[name], "%s: %s is never used", demoReportFiles[dialect], name)
			require.Equal(t, demoQueries[demoPostgres][name].Kind, q.Kind, "%s: %s", demoReportFiles[dialect], name)
		}
	}
}

// TestDemoReportQueries checks the summary's statements by name, and that
// Postgres accepts each of demo_report.sql against the current schema
// (prepared, so columns and types are checked without running it).
func TestDemoReportQueries(t *testing.T) {
	demoReportNames(t)
	pool := pgtest.Schema(t)
	conn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	for name, q := range demoQueries[demoPostgres] {
		_, err := conn.Conn().Prepare(t.Context(), name, q.SQL)
		require.NoError(t, err, "%s does not prepare", name)
	}
}

// TestDemoReportQueriesSQLite: SQLite accepts each statement of
// demo_report_sqlite.sql against the current schema (prepared, so tables
// and columns are checked without running it).
func TestDemoReportQueriesSQLite(t *testing.T) {
	t.Parallel()
	demoReportNames(t)
	db := sqlitetest.DB(t)
	for name, q := range demoQueries[demoSQLite] {
		st, err := db.PrepareContext(t.Context(), q.SQL)
		require.NoError(t, err, "%s does not prepare", name)
		require.NoError(t, st.Close())
	}
}
