package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/pgtest"
)

func TestConformanceClaims(t *testing.T) {
	t.Parallel()
	conformance.RunClaims(t, func(t *testing.T) conformance.ClaimsBackend {
		pool := pgtest.Schema(t)
		return conformance.ClaimsBackend{
			Store:  postgres.New(pool),
			Expire: func(t testing.TB, key string) { pgtest.ExpireClaim(t, pool, key) },
			Row: func(t testing.TB, key string) (conformance.ClaimRow, bool) {
				t.Helper()
				var (
					r      conformance.ClaimRow
					state  string
					fin    *time.Time
					detail []byte
				)
				err := pool.QueryRow(context.Background(), `SELECT dedupe_key, state, owner_node, attempt, fence,
					lease_until, finished_at, error_detail FROM leasehold_work_claims WHERE dedupe_key = $1`, key).
					Scan(&r.Key, &state, &r.Owner, &r.Attempt, &r.Fence, &r.LeaseUntil, &fin, &detail)
				if errors.Is(err, pgx.ErrNoRows) {
					return r, false
				}
				require.NoError(t, err)
				r.State, r.Finished = claims.State(state), fin != nil
				if detail != nil {
					require.NoError(t, json.Unmarshal(detail, &r.ErrorDetail))
				}
				return r, true
			},
			Count: func(t testing.TB) int {
				var n int
				require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM leasehold_work_claims`).Scan(&n))
				return n
			},
		}
	})
}

func TestConformanceEpisodes(t *testing.T) {
	t.Parallel()
	conformance.RunEpisodes(t, func(t *testing.T) conformance.EpisodesBackend {
		pool := pgtest.Schema(t)
		return conformance.EpisodesBackend{
			Store:       postgres.New(pool),
			ExpireClaim: func(t testing.TB, key string) { pgtest.ExpireClaim(t, pool, key) },
			Archive: func(t testing.TB, id int64) {
				pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET archived_at = now() WHERE id = $1`, id)
			},
			Age: func(t testing.TB, id int64, d time.Duration) {
				pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET created_at = created_at - $2::interval,
					started_at = started_at - $2::interval, last_step_at = last_step_at - $2::interval WHERE id = $1`, id, d)
			},
		}
	})
}
