package sqlite_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

func TestConformanceDeferred(t *testing.T) {
	t.Parallel()
	conformance.RunDeferred(t, func(t *testing.T) conformance.DeferredBackend {
		db := sqlitetest.DB(t)
		return conformance.DeferredBackend{
			Store: sqlite.New(db),
			LapseRequestClaim: func(t testing.TB, id int64) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_trigger_requests SET claim_until = `+sqlitetest.Now+` - 1000 WHERE id = ?`, id)
			},
			AgeRequest: func(t testing.TB, id int64, d time.Duration) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_trigger_requests SET created_at = created_at - ?2,
					run_after = run_after - ?2 WHERE id = ?1`, id, d.Milliseconds())
			},
			ExpireClaim: func(t testing.TB, key string) { sqlitetest.ExpireClaim(t, db, key) },
			Age:         func(t testing.TB, id int64, d time.Duration) { ageEpisode(t, db, id, d) },
			Archive: func(t testing.TB, id int64) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET archived_at = `+sqlitetest.Now+` WHERE id = ?`, id)
			},
			DropClaim: func(t testing.TB, key string) {
				sqlitetest.Exec(t, db, `DELETE FROM leasehold_work_claims WHERE dedupe_key = ?`, key)
			},
		}
	})
}
