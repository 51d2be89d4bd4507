package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/maintenance"
)

func TestConformanceMaintenance(t *testing.T) {
	t.Parallel()
	conformance.RunMaintenance(t, func(t *testing.T) conformance.MaintenanceBackend {
		pool := pgtest.Schema(t)
		return conformance.MaintenanceBackend{
			Store: postgres.New(pool),
			AgeEpisode: func(t testing.TB, id int64, d time.Duration) {
				n := pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET created_at = created_at - $2::interval,
					queued_at = queued_at - $2::interval, started_at = started_at - $2::interval,
					last_step_at = last_step_at - $2::interval, finished_at = finished_at - $2::interval
					WHERE id = $1`, id, d)
				require.EqualValues(t, 1, n, "no episode %d", id)
			},
			AgeClaim: func(t testing.TB, key string, d time.Duration) {
				n := pgtest.Exec(t, pool, `UPDATE leasehold_work_claims SET claimed_at = claimed_at - $2::interval,
					last_heartbeat_at = last_heartbeat_at - $2::interval, lease_until = lease_until - $2::interval,
					finished_at = finished_at - $2::interval
					WHERE dedupe_key = $1`, key, d)
				require.EqualValues(t, 1, n, "no claim %q", key)
			},
			AgeAvailable: func(t testing.TB, id int64, d time.Duration) {
				n := pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET run_after = run_after - $2::interval,
					created_at = created_at - $2::interval WHERE id = $1`, id, d)
				require.EqualValues(t, 1, n, "no episode %d", id)
			},
			AgeNode: func(t testing.TB, id string, d time.Duration) {
				n := pgtest.Exec(t, pool, `UPDATE leasehold_nodes SET started_at = started_at - $2::interval,
					heartbeat_at = heartbeat_at - $2::interval WHERE node_id = $1`, id, d)
				require.EqualValues(t, 1, n, "no node %q", id)
			},
			HoldLock: func(t testing.TB) func() { return holdLock(t, pool) },
			ClaimExists: func(t testing.TB, key string) bool {
				var ok bool
				require.NoError(t, pool.QueryRow(context.Background(),
					`SELECT EXISTS (SELECT 1 FROM leasehold_work_claims WHERE dedupe_key = $1)`, key).Scan(&ok))
				return ok
			},
		}
	})
}

// holdLock takes the maintenance lock as another node's run would: in a
// transaction on a connection of another pool, with the statement the
// adapter runs (TryMaintenanceLock). release rolls the transaction back.
func holdLock(t testing.TB, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	other := pgtest.Another(t, pool)
	tx, err := other.Begin(context.Background())
	require.NoError(t, err)
	got, err := db.New().TryMaintenanceLock(context.Background(), tx)
	require.NoError(t, err)
	require.True(t, got, "the maintenance lock was already held")
	var once sync.Once
	release = func() {
		once.Do(func() { require.NoError(t, tx.Rollback(context.Background())) })
	}
	t.Cleanup(release)
	return release
}

func TestMaintainLockIsPerSchema(t *testing.T) {
	t.Parallel()
	a, b := pgtest.Schema(t), pgtest.Schema(t)
	holdLock(t, a)
	res, err := postgres.New(a).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.False(t, res.Ran)
	res, err = postgres.New(b).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.True(t, res.Ran, "installations in other schemas of the database do not exclude each other")
}

func TestMaintainInACallersTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	res, err := postgres.New(tx).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.True(t, res.Ran)

	// The run's savepoint is released into tx, which keeps the lock until
	// it ends.
	other, err := postgres.New(pgtest.Another(t, pool)).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.False(t, other.Ran)
	require.NoError(t, tx.Commit(t.Context()))
	other, err = postgres.New(pool).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.True(t, other.Ran)
}

func TestMaintainRejects(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	// A DBTX that cannot begin a transaction.
	_, err := postgres.New(struct{ db.DBTX }{pool}).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.ErrorContains(t, err, "begins transactions")

	for _, p := range []maintenance.Plan{
		{Batch: 0},
		{Batch: maintenance.MaxBatch + 1},
		{Batch: 1, Retention: -time.Second},
		{Batch: 1, ClaimHorizon: -time.Second},
	} {
		_, err := postgres.New(pool).Maintain(t.Context(), p)
		require.ErrorIs(t, err, maintenance.ErrInvalid, "%+v", p)
	}
}

func TestMaintainCancelledEndsTheTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := postgres.New(pool).Maintain(ctx, maintenance.DefaultConfig().Plan())
	require.ErrorIs(t, err, context.Canceled)
	res, err := postgres.New(pool).Maintain(t.Context(), maintenance.DefaultConfig().Plan())
	require.NoError(t, err)
	require.True(t, res.Ran, "no lock left behind")
}

// DeleteSpentClaims picks old finished rows from its snapshot, then locks
// them. A row re-granted and finished again meanwhile (here: released, as a
// draining node does) is fresh: the delete must re-check the age on the
// locked row, not only the state.
func TestDeleteSpentClaimsRechecksAgeUnderTheRowLock(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	c, err := s.Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(t.Context(), c.Token))
	pgtest.Exec(t, pool, `UPDATE leasehold_work_claims SET claimed_at = claimed_at - interval '40 days',
		lease_until = lease_until - interval '40 days', finished_at = finished_at - interval '40 days'`)

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var pid int32
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid))
	again, err := postgres.New(tx).Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-b", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, postgres.New(tx).Release(t.Context(), again.Token))

	type outcome struct {
		res maintenance.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.Maintain(context.Background(), maintenance.DefaultConfig().Plan())
		done <- outcome{res, err}
	}()
	// The database says when the run waits for tx's row lock.
	for blocked := false; !blocked; {
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, pid).Scan(&blocked))
	}
	require.NoError(t, tx.Commit(t.Context()))
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, maintenance.Result{Ran: true}, got.res, "the released grant is seconds old")
	var fence int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT fence FROM leasehold_work_claims WHERE dedupe_key = 'k'`).Scan(&fence))
	require.EqualValues(t, 2, fence)
}
