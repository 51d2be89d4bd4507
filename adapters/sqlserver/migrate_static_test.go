package sqlserver_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/sql/queries"
)

// TestStaticMigrationLock: the two batches of migrate.sql parse as T-SQL,
// call sp_getapplock / sp_releaseapplock with a session-owned lock on one
// resource, and take exactly the parameters the locker passes (@wait_ms to
// acquire, none to release). Like every static test, it proves nothing
// about locking on a real server.
func TestStaticMigrationLock(t *testing.T) {
	t.Parallel()
	qs, err := queries.Parse(os.DirFS("."), "migrate.sql")
	require.NoError(t, err)
	require.Len(t, qs, 2)
	for name, want := range map[string]struct {
		proc   string
		params []string
	}{
		"AcquireMigrationLock": {"sp_getapplock", []string{"wait_ms"}},
		"ReleaseMigrationLock": {"sp_releaseapplock", nil},
	} {
		t.Run(name, func(t *testing.T) {
			q, ok := qs[name]
			require.True(t, ok)
			require.Equal(t, ":one", q.Kind)
			_, err := parseTSQL(q.SQL)
			require.NoError(t, err)
			got := batchParams(t, q.SQL)
			if len(want.params) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, want.params, got)
			}
			body := strings.ToLower(q.SQL)
			require.Contains(t, body, "exec @result = "+want.proc)
			require.Contains(t, body, "@lockowner = n'session'")
			require.Contains(t, body, "@resource = @resource")
			require.Contains(t, body, "concat(n'leasehold.migrate:', db_name(), n'.', schema_name())")
		})
	}
}
