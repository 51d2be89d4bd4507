package sqlite_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

func TestConformanceCallerTx(t *testing.T) {
	t.Parallel()
	conformance.RunCallerTx(t, func(t *testing.T) conformance.CallerTxBackend {
		db := sqlitetest.DB(t)
		sqlitetest.Exec(t, db, `CREATE TABLE caller_effects (n INTEGER NOT NULL)`)
		store := sqlite.New(db)
		return conformance.CallerTxBackend{
			EpisodesBackend: conformance.EpisodesBackend{
				Store:       store,
				ExpireClaim: func(t testing.TB, key string) { sqlitetest.ExpireClaim(t, db, key) },
			},
			Begin: func(t testing.TB) conformance.CallerTx {
				tx, err := db.BeginTx(context.Background(), nil)
				require.NoError(t, err)
				return conformance.CallerTx{
					Store: store.WithTx(tx),
					Effect: func(ctx context.Context) error {
						_, err := tx.ExecContext(ctx, `INSERT INTO caller_effects VALUES (1)`)
						return err
					},
					Commit:   func(context.Context) error { return tx.Commit() },
					Rollback: func(context.Context) { _ = tx.Rollback() },
				}
			},
			Effects: func(t testing.TB) int {
				var n int
				require.NoError(t, db.QueryRow(`SELECT count(*) FROM caller_effects`).Scan(&n))
				return n
			},
		}
	})
}
