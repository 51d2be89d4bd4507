package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
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
			BackdateSwitch: func(t testing.TB, d time.Duration) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_key_version SET switched_at = switched_at - ?`, d.Milliseconds())
			},
			AgeNode: func(t testing.TB, id string, d time.Duration) {
				n := sqlitetest.Exec(t, db, `UPDATE leasehold_nodes SET started_at = started_at - ?2,
					heartbeat_at = heartbeat_at - ?2 WHERE node_id = ?1`, id, d.Milliseconds())
				require.EqualValues(t, 1, n, "no node %q", id)
			},
		}
	})
}

// Migration 00014 on a file that held work starts it at version 1; one
// that held nothing at 2 (as on Postgres: adapters/postgres'
// TestKeyVersionMigration). Down and up again restores it.
func TestKeyVersionMigration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		seed string
		want dedupe.KeyVersion
	}{
		{"with an episode", `INSERT INTO leasehold_episodes (actor_id, expectation_id, trigger_type, dedupe_key) VALUES ('a', 'e', 'event', 'event:a:e:before-14')`, dedupe.KeyV1},
		{"with a node", `INSERT INTO leasehold_nodes (node_id, mode) VALUES ('node-old', 'full')`, dedupe.KeyV1},
		{"empty", ``, dedupe.KeyV2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := sqlitetest.OpenUnmigrated(t, sqlitetest.Path(t))
			p, err := sqlite.NewMigrator(db)
			require.NoError(t, err)
			_, err = p.UpTo(t.Context(), 13)
			require.NoError(t, err)
			if tc.seed != "" {
				sqlitetest.Exec(t, db, tc.seed)
			}
			_, err = p.Up(t.Context())
			require.NoError(t, err)
			s := sqlite.New(db)
			v, at, err := s.KeyVersion(t.Context())
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
			require.Nil(t, at)
			if tc.want == dedupe.KeyV1 {
				_, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
					DedupeKey: "event:a:e:after-14", KeyVersion: 1, MaxAttempts: 3})
				require.NoError(t, err, "a version 1 key on a version 1 file")
			}
			_, err = p.DownTo(t.Context(), 13)
			require.NoError(t, err)
			_, err = p.Up(t.Context())
			require.NoError(t, err)
		})
	}
}
