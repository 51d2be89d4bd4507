package sqlite_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// ageEpisode moves episode id's created_at, started_at and last_step_at
// back by d (milliseconds), on the database's own integer clock.
func ageEpisode(t testing.TB, db *sql.DB, id int64, d time.Duration) {
	t.Helper()
	sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET created_at = created_at - ?2,
		started_at = started_at - ?2, last_step_at = last_step_at - ?2 WHERE id = ?1`, id, d.Milliseconds())
}

func TestConformanceEpisodes(t *testing.T) {
	t.Parallel()
	conformance.RunEpisodes(t, func(t *testing.T) conformance.EpisodesBackend {
		db := sqlitetest.DB(t)
		return conformance.EpisodesBackend{
			Store:       sqlite.New(db),
			ExpireClaim: func(t testing.TB, key string) { sqlitetest.ExpireClaim(t, db, key) },
			Archive: func(t testing.TB, id int64) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET archived_at = `+sqlitetest.Now+` WHERE id = ?`, id)
			},
			Age: func(t testing.TB, id int64, d time.Duration) { ageEpisode(t, db, id, d) },
		}
	})
}
