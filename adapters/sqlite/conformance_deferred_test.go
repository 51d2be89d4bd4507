package sqlite_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

func TestConformanceDeferred(t *testing.T) {
	t.Parallel()
	conformance.RunDeferred(t, func(t *testing.T) conformance.DeferredBackend {
		db := sqlitetest.DB(t)
		return conformance.DeferredBackend{
			Store:        sqlite.New(db),
			AgeAvailable: func(t testing.TB, id int64, d time.Duration) { ageAvailable(t, db, id, d) },
			ExpireClaim:  func(t testing.TB, key string) { sqlitetest.ExpireClaim(t, db, key) },
			Age:          func(t testing.TB, id int64, d time.Duration) { ageEpisode(t, db, id, d) },
			Archive: func(t testing.TB, id int64) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET archived_at = `+sqlitetest.Now+` WHERE id = ?`, id)
			},
			DropClaim: func(t testing.TB, key string) {
				sqlitetest.Exec(t, db, `DELETE FROM leasehold_work_claims WHERE dedupe_key = ?`, key)
			},
		}
	})
}

// ageAvailable moves available episode id's run_after and created_at back
// by d: it fell due d earlier (run_after stays NULL on an episode that is
// not available).
func ageAvailable(t testing.TB, db *sql.DB, id int64, d time.Duration) {
	t.Helper()
	n := sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET created_at = created_at - ?2,
		run_after = run_after - ?2 WHERE id = ?1`, id, d.Milliseconds())
	require.EqualValues(t, 1, n, "no episode %d", id)
}
