package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/workflows"
)

// A failed connect sent nothing, so it is retryable: a 200 ms server
// restart must not throw live work away.
func TestConnectErrorIsRetryable(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = postgres.New(pool).Acquire(context.Background(), claims.AcquireParams{Key: "k", Owner: "a", Lease: time.Minute})
	var connectErr *pgconn.ConnectError
	require.ErrorAs(t, err, &connectErr)
	require.ErrorIs(t, err, claims.ErrRetryable)
}

// ownedEpisode creates an episode claimed by owner and started.
func ownedEpisode(t *testing.T, s *postgres.Store, key, owner string) (episodes.Episode, claims.Claim) {
	t.Helper()
	n := episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent, DedupeKey: key,
		MaxAttempts: 3, Owner: owner, Lease: time.Minute}
	res, err := s.CreateEpisode(context.Background(), n)
	require.NoError(t, err)
	require.True(t, res.Created)
	_, err = s.StartEpisode(context.Background(), res.Episode.ID, res.Claim.Token)
	require.NoError(t, err)
	return res.Episode, res.Claim
}

// A takeover statement waits for a row lock at most the bound on its
// context, then fails retryable (55P03), so a sweeper or poller moves on
// instead of hanging behind a holder frozen in a transaction it does not
// control; the setting does not outlive the statement.
func TestTakeoverWaitsAtMostTheBound(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	ep, _ := ownedEpisode(t, s, "frozen-elsewhere", "node-a")
	pgtest.ExpireClaim(t, pool, "frozen-elsewhere")

	// A caller's own transaction, frozen while it holds the claim row.
	holder, err := pgtest.Another(t, pool).Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.Background()) }()
	_, err = holder.Exec(context.Background(), `SELECT 1 FROM leasehold_work_claims WHERE dedupe_key = 'frozen-elsewhere' FOR UPDATE`)
	require.NoError(t, err)

	const bound = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(claims.WithTxBound(context.Background(), bound), 20*time.Second)
	defer cancel()
	for name, takeover := range map[string]func() error{
		"ClaimForRecovery": func() error {
			_, _, err := s.ClaimForRecovery(ctx, ep.ID, "sweeper", time.Minute, time.Minute)
			return err
		},
		"AcquireClaim": func() error {
			_, err := s.Acquire(ctx, claims.AcquireParams{Key: "frozen-elsewhere", Owner: "thief", Lease: time.Minute})
			return err
		},
	} {
		began := time.Now()
		err := takeover()
		took := time.Since(began)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		require.Equal(t, "55P03", pgErr.Code, name)
		require.ErrorIs(t, err, claims.ErrRetryable, name)
		require.GreaterOrEqual(t, took, bound, name)
		require.Less(t, took, bound+testbound.Margin, name) // the server ends the wait at the bound
	}
	for range 4 { // every pooled connection: the LOCAL setting ended with the statement
		var lt string
		require.NoError(t, pool.QueryRow(context.Background(), `SHOW lock_timeout`).Scan(&lt))
		require.Equal(t, "0", lt)
	}
}

// Every takeover bounds its own wait, with no statement of its own, on
// whichever row it meets locked: for recovery, the episode row, which a
// holder frozen in a transaction (a cancel, an operator's tool) keeps
// locked while the claim row is free; for a poll, which skips locked
// episode rows, the claim row of the episode it picked (a retried
// episode's, whose released claim a frozen transaction holds). Each fails
// retryable once it has waited the bound.
func TestTakeoverWaitsAtMostTheBoundOnTheRowItMeets(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	type setup = func(context.Context, *testing.T, *postgres.Store, *pgxpool.Pool) int64
	type takeover = func(ctx context.Context, s *postgres.Store, id int64) error
	// retried makes an available episode whose claim row exists: its first
	// attempt failed and was retried at once.
	var retried setup = func(ctx context.Context, t *testing.T, s *postgres.Store, _ *pgxpool.Pool) int64 {
		ep, tok := ownedEpisode(t, s, "bounded", "node-a")
		_, err := s.RetryEpisode(ctx, ep.ID, tok.Token, episodes.Retry{ErrorClass: "error"})
		require.NoError(t, err)
		return ep.ID
	}
	// orphan makes a started episode whose lease has expired.
	var orphan setup = func(_ context.Context, t *testing.T, s *postgres.Store, pool *pgxpool.Pool) int64 {
		ep, _ := ownedEpisode(t, s, "bounded", "node-a")
		pgtest.ExpireClaim(t, pool, "bounded")
		return ep.ID
	}
	// claimless makes a started episode with no claim row that has taken no
	// step for an hour: an orphan by staleness alone.
	var claimless setup = func(_ context.Context, t *testing.T, s *postgres.Store, pool *pgxpool.Pool) int64 {
		ep, _ := ownedEpisode(t, s, "bounded", "node-a")
		pgtest.Exec(t, pool, `DELETE FROM leasehold_work_claims WHERE dedupe_key = 'bounded'`)
		pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET started_at = now() - interval '1 hour',
			last_step_at = now() - interval '1 hour' WHERE id = $1`, ep.ID)
		return ep.ID
	}
	var claimForRecovery takeover = func(ctx context.Context, s *postgres.Store, id int64) error {
		_, _, err := s.ClaimForRecovery(ctx, id, "sweeper", time.Minute, time.Minute)
		return err
	}
	var requeueOrphan takeover = func(ctx context.Context, s *postgres.Store, id int64) error {
		_, err := s.RequeueOrphan(ctx, id, 0, "sweeper", time.Minute)
		return err
	}
	const (
		episodeRow = `SELECT 1 FROM leasehold_episodes WHERE id = $1 FOR UPDATE`
		claimRow   = `SELECT 1 FROM leasehold_work_claims WHERE dedupe_key = 'bounded' AND $1::bigint > 0 FOR UPDATE`
	)
	for _, c := range []struct {
		name     string
		make     setup
		lock     string
		takeover takeover
	}{
		{"ClaimForRecovery", orphan, episodeRow, claimForRecovery},
		{"RequeueOrphan", orphan, episodeRow, requeueOrphan},
		{"ClaimForRecovery claim-less", claimless, episodeRow, claimForRecovery},
		{"RequeueOrphan claim-less", claimless, episodeRow, requeueOrphan},
		{"ClaimAvailable", retried, claimRow, func(ctx context.Context, s *postgres.Store, _ int64) error {
			_, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "node-b", Lease: time.Minute,
				Runnable: []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}, Limit: 4})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(claims.WithTxBound(context.Background(), bound), 20*time.Second)
			defer cancel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			id := c.make(ctx, t, s, pool)
			holder, err := pgtest.Another(t, pool).Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = holder.Rollback(context.Background()) }()
			tag, err := holder.Exec(ctx, c.lock, id)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected(), "the row to hold exists")

			began := time.Now()
			err = c.takeover(ctx, s, id)
			took := time.Since(began)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "55P03", pgErr.Code)
			if strings.HasPrefix(c.name, "RequeueOrphan") {
				// Recovery's restart reports a locked orphan busy: the
				// next sweep looks again.
				require.ErrorIs(t, err, claims.ErrLocked)
			} else {
				require.ErrorIs(t, err, claims.ErrRetryable)
			}
			require.GreaterOrEqual(t, took, bound)
			require.Less(t, took, bound+testbound.Margin)
			for range 4 { // the LOCAL setting ended with the statement
				var lt string
				require.NoError(t, pool.QueryRow(context.Background(), `SHOW lock_timeout`).Scan(&lt))
				require.Equal(t, "0", lt)
			}
		})
	}
}

// Inside a caller's transaction a takeover leaves the transaction's own
// lock_timeout as the caller set it: a LOCAL setting made by the statement
// would outlive it, and bound the caller's later statements by a lease the
// caller never chose.
func TestTakeoverInACallersTransactionKeepsItsSettings(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	ctx := claims.WithTxBound(t.Context(), 300*time.Millisecond)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '7s'`)
	require.NoError(t, err)
	_, err = postgres.New(tx).Acquire(ctx, claims.AcquireParams{Key: "in-tx", Owner: "a", Lease: time.Minute})
	require.NoError(t, err)
	var lt string
	require.NoError(t, tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lt))
	require.Equal(t, "7s", lt)
}

// A holder frozen inside a leasehold transaction (the workflow finisher's)
// keeps the claim row locked; the server ends that transaction once it has
// sat idle for the bound, so the takeover completes instead of waiting for
// ever, and the frozen holder's finish never lands.
func TestFrozenTransactionDoesNotBlockTakeover(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	frozenStore := postgres.New(pgtest.Another(t, pool))
	ep, c := ownedEpisode(t, frozenStore, "frozen-in-tx", "node-a")
	pgtest.ExpireClaim(t, pool, "frozen-in-tx") // its lease ran out while it was frozen

	const bound = 300 * time.Millisecond
	finished := make(chan struct{})
	resume := make(chan struct{})
	// A failed assertion must still thaw the holder: its pool's Close
	// waits for the connection the holder keeps.
	thaw := sync.OnceFunc(func() { close(resume) })
	t.Cleanup(thaw)
	txDone := make(chan error, 1)
	go func() {
		ctx := claims.WithTxBound(context.Background(), bound)
		txDone <- frozenStore.InTx(ctx, func(tx workflows.Tx) error {
			if err := tx.FinishEpisode(ctx, ep.ID, c.Token, episodes.Finish{Status: episodes.StatusDone}); err != nil {
				return err
			}
			close(finished)
			<-resume // frozen (SIGSTOP, a GC pause) before COMMIT
			return nil
		})
	}()
	select {
	case <-finished:
	case err := <-txDone:
		t.Fatalf("the holder's transaction ended before its finish: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	// Retried as the sweeper would on its next pass.
	var rc claims.Claim
	for {
		require.NoError(t, ctx.Err(), "the takeover never completed")
		var err error
		_, rc, err = postgres.New(pool).ClaimForRecovery(ctx, ep.ID, "sweeper", time.Minute, time.Minute)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, claims.ErrRetryable, "waited for the frozen holder: %v", err)
	}
	took := time.Since(began)
	// The server ends the frozen transaction once it has sat idle for the
	// bound (it went idle before began); a claim that met its lock first
	// waited at most the bound for it (lock_timeout) and was retried.
	require.Less(t, took, 2*bound+testbound.Margin, "takeover blocked behind the frozen transaction")
	require.EqualValues(t, 2, rc.Fence)

	thaw()
	err := <-txDone
	require.Error(t, err, "the frozen holder's commit must fail: the server ended its transaction")
	require.False(t, errors.Is(err, context.Canceled))
	got, err := postgres.New(pool).GetEpisode(context.Background(), ep.ID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, got.Status, "the frozen finish did not land")
	require.Equal(t, "sweeper", got.OwnerNode)
}
