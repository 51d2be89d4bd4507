package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/pgtest"
)

func TestConformanceCallerTx(t *testing.T) {
	t.Parallel()
	conformance.RunCallerTx(t, func(t *testing.T) conformance.CallerTxBackend {
		pool := pgtest.Schema(t)
		pgtest.Exec(t, pool, `CREATE TABLE caller_effects (n bigint NOT NULL)`)
		return conformance.CallerTxBackend{
			EpisodesBackend: conformance.EpisodesBackend{
				Store:       postgres.New(pool),
				ExpireClaim: func(t testing.TB, key string) { pgtest.ExpireClaim(t, pool, key) },
			},
			Begin: func(t testing.TB) conformance.CallerTx {
				tx, err := pool.Begin(context.Background())
				require.NoError(t, err)
				return conformance.CallerTx{
					Store: postgres.New(tx),
					Effect: func(ctx context.Context) error {
						_, err := tx.Exec(ctx, `INSERT INTO caller_effects VALUES (1)`)
						return err
					},
					Commit:   tx.Commit,
					Rollback: func(ctx context.Context) { _ = tx.Rollback(ctx) },
				}
			},
			Effects: func(t testing.TB) int {
				var n int
				require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM caller_effects`).Scan(&n))
				return n
			},
		}
	})
}
