package sqlserver_test

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStaticDashboardReadsOnly: the dashboard's statements (dashboard.sql,
// both dialects) are reads that lock nothing, as their files say. Each
// T-SQL batch is one SELECT (a CTE's included) with no table hint at all;
// each Postgres statement is a SELECT with no row lock (FOR UPDATE, FOR
// SHARE, ...), no advisory lock and no write.
func TestStaticDashboardReadsOnly(t *testing.T) {
	t.Parallel()

	ms, pg := sqlServerQueries(t), postgresQueries(t)
	var n int
	for _, q := range byName(ms) {
		if filepath.Base(q.File) != "dashboard.sql" {
			continue
		}
		n++
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			top := topStatements(tree)
			require.Len(t, top, 1, "one statement")
			require.Equal(t, "SelectStatement", getString(top[0], "$type"))
			for _, ref := range tableRefs(tree, q.SQL) {
				require.Empty(t, ref.hints, "%s: a dashboard read takes no lock hint", ref.table)
				require.Empty(t, ref.written, "%s: a dashboard read takes no lock hint", ref.table)
			}
			p, ok := pg[q.Name]
			require.True(t, ok, "no Postgres twin")
			require.Equal(t, "dashboard.sql", filepath.Base(p.File), "the twin lives in postgres/dashboard.sql")
			code := pgCode(p.SQL)
			require.Regexp(t, `(?i)^\s*(SELECT|WITH)\b`, code)
			require.NotRegexp(t, `(?i)\bFOR\s+(NO\s+KEY\s+)?(UPDATE|SHARE|KEY\s+SHARE)\b`, code, "a row lock")
			require.NotRegexp(t, `(?i)\b(pg_advisory\w*|pg_try_advisory\w*|LOCK\s+TABLE)\b`, code, "an explicit lock")
			require.NotRegexp(t, `(?i)\b(INSERT|UPDATE|DELETE|MERGE|TRUNCATE)\b`, code, "a write")
		})
	}
	require.NotZero(t, n, "no statement in sql/queries/sqlserver/dashboard.sql")
	for _, q := range pg {
		if filepath.Base(q.File) == "dashboard.sql" {
			require.Contains(t, ms, q.Name, "postgres/dashboard.sql's %s has no T-SQL twin in sqlserver/dashboard.sql", q.Name)
		}
	}
}

// pgCode is a Postgres statement without its comments and string literals.
func pgCode(sql string) string {
	sql = regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(sql, "")
	return regexp.MustCompile(`'(?:[^']|'')*'`).ReplaceAllString(sql, "''")
}
