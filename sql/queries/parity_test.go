package queries_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/sql/queries"
)

// dialectQueries parses every dialect's folder: Postgres's from disk (sqlc
// compiles it; nothing embeds it), the others as the adapters load them.
func dialectQueries(t *testing.T) map[string]map[string]queries.Query {
	t.Helper()
	pg, err := queries.Parse(os.DirFS("."), queries.DialectPostgres+"/*.sql")
	require.NoError(t, err)
	ms, err := queries.SQLServer()
	require.NoError(t, err)
	lite, err := queries.SQLite()
	require.NoError(t, err)
	return map[string]map[string]queries.Query{
		queries.DialectPostgres:  pg,
		queries.DialectSQLServer: ms,
		queries.DialectSQLite:    lite,
	}
}

// TestParity: the three dialects declare the same statement names with the
// same kinds, except the statements queries.DialectOnly lists, which exactly
// the dialects it names declare. A failure lists every missing, extra or
// mismatched statement at once.
func TestParity(t *testing.T) {
	t.Parallel()
	all := dialectQueries(t)
	only := map[string]queries.Only{}
	for _, o := range queries.DialectOnly {
		only[o.Name] = o
	}
	names := map[string]bool{}
	for _, qs := range all {
		for name := range qs {
			names[name] = true
		}
	}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		kinds := map[string][]string{} // kind -> dialects
		for _, d := range queries.Dialects {
			want := true
			if o, listed := only[name]; listed {
				want = o.In(d)
			}
			q, has := all[d][name]
			switch {
			case want && !has:
				problems = append(problems, fmt.Sprintf("%s: missing from sql/queries/%s", name, d))
			case !want && has:
				problems = append(problems, fmt.Sprintf("%s: declared in sql/queries/%s/%s, but queries.DialectOnly says %s has no such statement",
					name, d, strings.TrimPrefix(q.File, d+"/"), d))
			}
			if has {
				kinds[q.Kind] = append(kinds[q.Kind], d)
			}
		}
		if len(kinds) > 1 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(kinds)) {
				parts = append(parts, k+" in "+strings.Join(kinds[k], ", "))
			}
			problems = append(problems, fmt.Sprintf("%s: kinds differ: %s", name, strings.Join(parts, "; ")))
		}
	}
	require.Empty(t, problems, "%d parity problems:\n%s", len(problems), strings.Join(problems, "\n"))
}

// TestDialectOnlyIsWellFormed: each entry names a statement that some
// dialect declares, lists known dialects (not all of them: then it is no
// exception), says why and what the others do instead, and appears once.
func TestDialectOnlyIsWellFormed(t *testing.T) {
	t.Parallel()
	all := dialectQueries(t)
	seen := map[string]bool{}
	for _, o := range queries.DialectOnly {
		require.False(t, seen[o.Name], "%s is listed twice", o.Name)
		seen[o.Name] = true
		require.NotEmpty(t, o.Dialects, o.Name)
		require.Less(t, len(o.Dialects), len(queries.Dialects), "%s: every dialect has it, it is no exception", o.Name)
		for _, d := range o.Dialects {
			require.Contains(t, queries.Dialects, d, o.Name)
			_, ok := all[d][o.Name]
			require.True(t, ok, "%s is listed as declared in %s, which does not declare it", o.Name, d)
		}
		require.NotEmpty(t, o.Why, o.Name)
		require.NotEmpty(t, o.Fallback, o.Name)
		// A step's operation is a statement of Postgres (the reference) and
		// of the step's own dialects.
		for _, parent := range o.PartOf {
			for _, d := range append([]string{queries.DialectPostgres}, o.Dialects...) {
				_, ok := all[d][parent]
				require.True(t, ok, "%s is listed as a step of %s, which sql/queries/%s does not declare", o.Name, parent, d)
			}
		}
	}
	require.Contains(t, queries.MissingFrom(queries.DialectSQLite), "ListenTriggerRequests")
	require.NotContains(t, queries.MissingFrom(queries.DialectPostgres), "ListenTriggerRequests")
}
