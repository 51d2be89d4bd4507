package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

func TestConformanceKeyVersion(t *testing.T) {
	t.Parallel()
	conformance.RunKeyVersion(t, true, func(t *testing.T) conformance.KeyVersionBackend {
		db := sqlitetest.DB(t)
		return conformance.KeyVersionBackend{
			Store: sqlite.New(db),
			StartAt: func(t testing.TB, v int) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_key_version SET version = ?, switched_at = NULL`, v)
			},
			InsertAsOldNode: func(t testing.TB, key string) error {
				// CreateDeferredEpisode's insert as a node older than
				// migration 00014 sends it: no key_version.
				_, err := db.ExecContext(context.Background(), `INSERT INTO leasehold_episodes (
					actor_id, expectation_id, trigger_type, dedupe_key, status, max_attempts, source_stack, source_env, queued_at)
					VALUES ('a', 'e', 'event', ?, 'queued', 3, '', '', `+sqlitetest.Now+`)
					ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL AND archived_at IS NULL DO NOTHING`, key)
				return err
			},
			AgeNode: func(t testing.TB, id string, d time.Duration) {
				n := sqlitetest.Exec(t, db, `UPDATE leasehold_nodes SET started_at = started_at - ?2,
					heartbeat_at = heartbeat_at - ?2 WHERE node_id = ?1`, id, d.Milliseconds())
				require.EqualValues(t, 1, n, "no node %q", id)
			},
		}
	})
}
