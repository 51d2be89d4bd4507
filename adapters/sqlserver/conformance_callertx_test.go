package sqlserver_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/conformance"
)

// TestConformanceCallerTx runs the caller's-transaction suite on the SQL
// Server MSSQL_URL names, RCSI off and on, like TestConformanceClaims: a
// fenced finish in the caller's transaction that matched no row THROWs,
// and XACT_ABORT rolls that transaction back, so its commit fails.
func TestConformanceCallerTx(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	for _, rcsi := range []bool{false, true} {
		t.Run(fmt.Sprintf("RCSI=%v", rcsi), func(t *testing.T) {
			t.Parallel()
			conformance.RunCallerTx(t, func(t *testing.T) conformance.CallerTxBackend {
				db := freshDatabase(t, admin, dsn, rcsi)
				store, err := sqlserver.New(db)
				require.NoError(t, err)
				_, err = db.ExecContext(context.Background(), `CREATE TABLE caller_effects (n int NOT NULL)`)
				require.NoError(t, err)
				return conformance.CallerTxBackend{
					EpisodesBackend: conformance.EpisodesBackend{
						Store:       store,
						ExpireClaim: func(t testing.TB, key string) { expireClaim(t, db, key) },
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
						require.NoError(t, db.QueryRowContext(context.Background(), `SELECT count(*) FROM caller_effects`).Scan(&n))
						return n
					},
				}
			})
		})
	}
}
