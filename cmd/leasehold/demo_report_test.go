package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// TestDemoReportQueries checks that every summary statement the demo's Go
// code names exists in demo_report.sql, that every statement there is used,
// and that Postgres accepts each against the current schema (prepared, so
// columns and types are checked without running it).
func TestDemoReportQueries(t *testing.T) {
	src, err := os.ReadFile("report.go")
	require.NoError(t, err)
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`demoQuery\("(\w+)"\)`).FindAllStringSubmatch(string(src), -1) {
		used[m[1]] = true
	}
	require.NotEmpty(t, used)
	for name := range used {
		require.Contains(t, demoQueries, name)
	}
	for name := range demoQueries {
		require.True(t, used[name], "%s is never used", name)
	}

	pool := pgtest.Schema(t)
	conn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	for name, q := range demoQueries {
		_, err := conn.Conn().Prepare(t.Context(), name, q.SQL)
		require.NoError(t, err, "%s does not prepare", name)
	}
}
