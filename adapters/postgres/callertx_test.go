package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/episodes"
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

// doneBeforeDoom is the caller's transaction as the adapter sees it when
// the run's context ends between a finish that matched nothing and the
// statement that dooms the transaction: that statement finds its context
// done, so pgx sends nothing.
type doneBeforeDoom struct{ pgx.Tx }

func (d doneBeforeDoom) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.HasPrefix(sql, "-- name: DoomTransaction ") {
		done, cancel := context.WithCancel(ctx)
		cancel()
		ctx = done
	}
	return d.Tx.Exec(ctx, sql, args...)
}

// A finish in the caller's transaction that matched nothing leaves that
// transaction unable to commit even when the run's context ended before
// the doom could be sent (the lease's local deadline, a slow link): the
// adapter closes the transaction's connection instead of waiting on a
// context of its own, so the caller is not kept past its lease either.
func TestALostFinishDoomsTheTransactionAfterItsContextEnded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	pgtest.Exec(t, pool, `CREATE TABLE caller_effects (n bigint NOT NULL)`)
	ctx := context.Background()
	s := postgres.New(pool)
	ep, c := ownedEpisode(t, s, "manual:pay:1", "node-a")
	require.NoError(t, s.Release(ctx, c.Token))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO caller_effects VALUES (1)`)
	require.NoError(t, err)
	err = postgres.New(doneBeforeDoom{tx}).FinishEpisode(ctx, ep.ID, c.Token, episodes.Finish{Status: episodes.StatusDone})
	require.ErrorIs(t, err, claims.ErrLeaseLost)
	require.True(t, tx.Conn().IsClosed(), "the transaction's connection was closed: %v", err)
	require.Error(t, tx.Commit(ctx), "a commit after ignoring ErrLeaseLost must fail")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM caller_effects`).Scan(&n))
	require.Zero(t, n, "nothing of the caller's transaction landed")
}
