package sqlserver_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/conformance"
)

// TestConformanceKeyVersion runs the key version scenarios SQL Server has:
// it stays on version 1 (queries.DialectOnly: SwitchKeyVersion).
func TestConformanceKeyVersion(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	conformance.RunKeyVersion(t, false, func(t *testing.T) conformance.KeyVersionBackend {
		db := freshDatabase(t, admin, dsn, true)
		store, err := sqlserver.New(db)
		require.NoError(t, err)
		return conformance.KeyVersionBackend{
			Store: store,
			InsertAsOldNode: func(t testing.TB, key string) error {
				// CreateDeferredEpisode's insert as a node older than
				// migration 00014 sends it: no key_version.
				_, err := db.ExecContext(context.Background(), `INSERT INTO leasehold_episodes (
					actor_id, expectation_id, trigger_type, dedupe_key, status, max_attempts, source_stack, source_env, queued_at)
					VALUES (N'a', N'e', N'event', @key, N'queued', 3, N'', N'', SYSUTCDATETIME())`, sql.Named("key", key))
				return err
			},
			AgeNode: func(t testing.TB, id string, d time.Duration) { t.Fatal("not used on SQL Server") },
		}
	})
}
