package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/pgtest"
)

func TestConformanceDeferred(t *testing.T) {
	t.Parallel()
	conformance.RunDeferred(t, func(t *testing.T) conformance.DeferredBackend {
		pool := pgtest.Schema(t)
		return conformance.DeferredBackend{
			Store: postgres.New(pool),
			AgeAvailable: func(t testing.TB, id int64, d time.Duration) {
				n := pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET run_after = run_after - $2::interval,
					created_at = created_at - $2::interval WHERE id = $1`, id, d)
				require.EqualValues(t, 1, n, "no episode %d", id)
			},
			ExpireClaim: func(t testing.TB, key string) { pgtest.ExpireClaim(t, pool, key) },
			Archive: func(t testing.TB, id int64) {
				pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET archived_at = now() WHERE id = $1`, id)
			},
			DropClaim: func(t testing.TB, key string) {
				pgtest.Exec(t, pool, `DELETE FROM leasehold_work_claims WHERE dedupe_key = $1`, key)
			},
			Age: func(t testing.TB, id int64, d time.Duration) {
				pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET created_at = created_at - $2::interval,
					started_at = started_at - $2::interval, last_step_at = last_step_at - $2::interval WHERE id = $1`, id, d)
			},
		}
	})
}
