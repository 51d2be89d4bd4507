package sqlserver_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/sql/queries"
)

// TestStaticSchemaCheck: the schema check's statement parses as one SELECT
// and has the Postgres adapter's twin (same name and kind).
func TestStaticSchemaCheck(t *testing.T) {
	t.Parallel()
	ours, err := queries.Parse(os.DirFS("."), "schema.sql")
	require.NoError(t, err)
	theirs, err := queries.Parse(os.DirFS("../postgres"), "schema.sql")
	require.NoError(t, err)
	require.Len(t, ours, len(theirs))
	for name, q := range theirs {
		require.Contains(t, ours, name)
		require.Equal(t, q.Kind, ours[name].Kind, name)
	}
	stmts := topStatements(mustParse(t, ours["SchemaVersion"].SQL))
	require.Len(t, stmts, 1)
	require.Equal(t, "SelectStatement", getString(stmts[0], "$type"))
	require.Contains(t, ours["SchemaVersion"].SQL, "leasehold_schema_version")
}
