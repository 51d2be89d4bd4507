package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// endEpisode ends an episode the way no statement of leasehold's does: its
// status only, its claim left as it is (an operator's UPDATE, a writer of
// another version). The finishing statements check the episode themselves,
// not only its claim, so that such a writer is not overwritten.
const endEpisode = `UPDATE leasehold_episodes SET status = 'canceled', finished_at = now() WHERE id = $1`

// endingWrites are the statements that end an attempt under its grant, as
// one run's call each: FinishEpisode, FinishEpisodes (a run missing from
// its answer lost its grant) and RetryEpisode. Each returns episodes.ErrLeaseLost when it
// wrote nothing for o.
func endingWrites(t *testing.T) map[string]func(s *postgres.Store, o episodes.Created) error {
	return map[string]func(s *postgres.Store, o episodes.Created) error{
		"FinishEpisode": func(s *postgres.Store, o episodes.Created) error {
			return s.FinishEpisode(t.Context(), o.Episode.ID, o.Claim.Token, episodes.Finish{Status: episodes.StatusDone})
		},
		"FinishEpisodes": func(s *postgres.Store, o episodes.Created) error {
			ids, err := s.FinishEpisodes(t.Context(), o.Claim.Owner, []episodes.FinishItem{
				{ID: o.Episode.ID, Token: o.Claim.Token, Finish: episodes.Finish{Status: episodes.StatusDone}},
			})
			if err == nil && len(ids) == 0 {
				err = episodes.ErrLeaseLost
			}
			return err
		},
		"RetryEpisode": func(s *postgres.Store, o episodes.Created) error {
			_, err := s.RetryEpisode(t.Context(), o.Episode.ID, o.Claim.Token, episodes.Retry{ErrorClass: "boom", Backoff: time.Second})
			return err
		},
	}
}

// An ended episode whose grant is still claimed: a finish or a retry under
// that grant writes nothing, neither the claim nor the episode nor a
// request. Open episodes with a lower and a higher id are there so that a
// check of the wrong episode (another id, a range of ids) is seen.
func TestFinishAndRetryLeaveAnEndedEpisodeAndItsGrantAlone(t *testing.T) {
	t.Parallel()
	for name, op := range endingWrites(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			startedEpisode(t, s, "open-below", "node-a")
			o := startedEpisode(t, s, "ended", "node-a")
			startedEpisode(t, s, "open-above", "node-a")
			_, err := pool.Exec(t.Context(), endEpisode, o.Episode.ID)
			require.NoError(t, err)

			require.ErrorIs(t, op(s, o), episodes.ErrLeaseLost, "a write for an ended episode matched")
			var (
				state string
				fence int64
			)
			require.NoError(t, pool.QueryRow(t.Context(),
				`SELECT state, fence FROM leasehold_work_claims WHERE dedupe_key = $1`, o.Claim.Key).Scan(&state, &fence))
			require.Equal(t, "claimed", state, "the ended episode's claim was written")
			require.Equal(t, o.Claim.Fence, fence)
			requireStaysEnded(t, s, pool, o)
		})
	}
}

// An episode that another transaction ends while a finish or a retry runs:
// the statement's check saw the episode open (its snapshot); its write of
// the episode waits for the row and must decide on the committed change,
// not resurrect or overwrite the ended episode.
func TestFinishAndRetryWaitForAnEpisodeEndedMeanwhile(t *testing.T) {
	t.Parallel()
	for name, op := range endingWrites(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			o := startedEpisode(t, s, "ended-meanwhile", "node-a")
			waited, err := interleave(t, pool, writes(t, []string{endEpisode}, []any{o.Episode.ID}),
				func() error { return op(s, o) })
			require.True(t, waited, "%s did not wait for the episode's row lock", name)
			require.ErrorIs(t, err, episodes.ErrLeaseLost, "%s wrote the episode another transaction ended", name)
			requireStaysEnded(t, s, pool, o)
		})
	}
}

// requireStaysEnded checks that o's episode is still as endEpisode left it:
// canceled, its attempts unchanged, not available.
func requireStaysEnded(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, o episodes.Created) {
	t.Helper()
	got, err := s.GetEpisode(t.Context(), o.Episode.ID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusCanceled, got.Status, "the ended episode was written")
	require.Equal(t, o.Episode.Attempts, got.Attempts)
	var available bool
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT run_after IS NOT NULL FROM leasehold_episodes WHERE id = $1`, o.Episode.ID).Scan(&available))
	require.False(t, available, "the ended episode was made available to run again")
}

// StartEpisode decides on the claim's state, not only on its lease: a
// grant that ended (done, released) while its lease_until is still ahead
// of the start's clock starts nothing. Every ending sets lease_until to
// its own transaction's now(), so this is a finish whose transaction
// began after the start's statement did and committed before the start
// read the row: its clock is ahead of the start's.
func TestStartEpisodeRefusesAnEndedGrantWhoseLeaseLooksLive(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"done", "released", "failed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			o := grantedEpisode(t, s, "ended-"+state, "node-a")
			_, err := pool.Exec(t.Context(), `UPDATE leasehold_work_claims
				SET state = $2, lease_until = now() + interval '1 second', finished_at = now()
				WHERE dedupe_key = $1`, o.Claim.Key, state)
			require.NoError(t, err)
			_, err = s.StartEpisode(t.Context(), o.Episode.ID, o.Claim.Token)
			require.ErrorIs(t, err, episodes.ErrLeaseLost, "started under a %s grant", state)
			got, err := s.GetEpisode(t.Context(), o.Episode.ID)
			require.NoError(t, err)
			require.Equal(t, episodes.StatusQueued, got.Status)
		})
	}
}

// A lease whose end is the statement's now() is over, for a start as for a
// steal: AcquireClaim takes a lease with lease_until <= now(), so a start
// must need lease_until > now(), or the same instant admits both. In one
// transaction now() is one instant, which makes the boundary exact.
func TestStartEpisodeTreatsALeaseEndingNowAsOver(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	o := grantedEpisode(t, postgres.New(pool), "ends-now", "node-a")
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), `UPDATE leasehold_work_claims SET lease_until = now() WHERE dedupe_key = $1`, o.Claim.Key)
	require.NoError(t, err)
	_, err = postgres.New(tx).StartEpisode(t.Context(), o.Episode.ID, o.Claim.Token)
	require.ErrorIs(t, err, episodes.ErrLeaseLost, "started on a lease that ends now")
}

// CancelEpisode decides "held live" on the claim's state and the database
// clock, as a start does: a grant that ended (released, failed) while its
// lease_until is still ahead is not held, so the cancel ends the available
// work at once; a lease that ends at the statement's now() is over, so its
// grant is fenced out. A grant that already ended is left as it ended: only
// a claimed, expired grant is fenced out (failed, fence + 1).
func TestCancelDecidesOnTheClaimsStateAndTheDatabaseClock(t *testing.T) {
	t.Parallel()
	claimRow := func(t *testing.T, q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, key string) (state string, fence int64) {
		t.Helper()
		require.NoError(t, q.QueryRow(t.Context(),
			`SELECT state, fence FROM leasehold_work_claims WHERE dedupe_key = $1`, key).Scan(&state, &fence))
		return state, fence
	}
	for _, state := range []string{"released", "failed"} {
		t.Run("an ended grant whose lease looks live/"+state, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			o := grantedEpisode(t, s, "cancel-ended-"+state, "node-a")
			_, err := pool.Exec(t.Context(), `UPDATE leasehold_work_claims
				SET state = $2, lease_until = now() + interval '1 second', finished_at = now()
				WHERE dedupe_key = $1`, o.Claim.Key, state)
			require.NoError(t, err)
			c, err := s.CancelEpisode(t.Context(), o.Episode.ID, nil)
			require.NoError(t, err)
			require.True(t, c.Ended, "a %s grant was taken for a live holder: %+v", state, c)
			got, fence := claimRow(t, pool, o.Claim.Key)
			require.Equal(t, state, got)
			require.Equal(t, o.Claim.Fence, fence)
		})
		t.Run("an ended grant is left as it ended/"+state, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			o := grantedEpisode(t, s, "cancel-left-"+state, "node-a")
			_, err := pool.Exec(t.Context(), `UPDATE leasehold_work_claims
				SET state = $2, lease_until = now() - interval '1 second', finished_at = now()
				WHERE dedupe_key = $1`, o.Claim.Key, state)
			require.NoError(t, err)
			c, err := s.CancelEpisode(t.Context(), o.Episode.ID, nil)
			require.NoError(t, err)
			require.True(t, c.Ended)
			got, fence := claimRow(t, pool, o.Claim.Key)
			require.Equal(t, state, got, "an ended grant was rewritten")
			require.Equal(t, o.Claim.Fence, fence, "an ended grant was fenced again")
		})
	}
	// A cancel that ends an available episode takes it out of the
	// available set in the same write: no poll takes it afterwards.
	t.Run("an available episode leaves the available set", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Schema(t)
		s := postgres.New(pool)
		d, err := s.CreateDeferredEpisode(t.Context(), episodes.Deferred{New: episodes.New{ActorID: "a", ExpectationID: "e",
			TriggerType: episodes.TriggerEvent, DedupeKey: "cancel-available", MaxAttempts: 3}})
		require.NoError(t, err)
		c, err := s.CancelEpisode(t.Context(), d.Episode.ID, nil)
		require.NoError(t, err)
		require.True(t, c.Ended)
		var available bool
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT run_after IS NOT NULL FROM leasehold_episodes WHERE id = $1`, d.Episode.ID).Scan(&available))
		require.False(t, available, "a canceled episode is still available")
		ds, err := s.ClaimAvailable(t.Context(), episodes.AvailableQuery{Owner: "node-b", Lease: time.Minute,
			Runnable: []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}, Limit: 4})
		require.NoError(t, err)
		require.Empty(t, ds, "a poll took a canceled episode")
	})
	t.Run("a lease ending now", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Schema(t)
		o := grantedEpisode(t, postgres.New(pool), "cancel-ends-now", "node-a")
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = tx.Exec(t.Context(), `UPDATE leasehold_work_claims SET lease_until = now() WHERE dedupe_key = $1`, o.Claim.Key)
		require.NoError(t, err)
		c, err := postgres.New(tx).CancelEpisode(t.Context(), o.Episode.ID, nil)
		require.NoError(t, err)
		require.True(t, c.Ended, "a lease that ends now was taken for a live holder: %+v", c)
		got, fence := claimRow(t, tx, o.Claim.Key)
		require.Equal(t, "failed", got, "the expired grant was not fenced out")
		require.Equal(t, o.Claim.Fence+1, fence)
	})
}

// The expiry leaves an episode to the node that holds its claim live, and
// a live claim is one in state claimed whose lease has not ended on the
// database clock: an ended grant whose lease_until is still ahead of the
// expiry's now() (its writer's clock ran ahead) holds nothing, and the
// expired available episode is canceled.
func TestExpiryDecidesOnTheClaimsState(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"released", "done", "failed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			key := "expire-ended-" + state
			d, err := s.CreateDeferredEpisode(t.Context(), episodes.Deferred{New: episodes.New{ActorID: "a", ExpectationID: "e",
				TriggerType: episodes.TriggerEvent, DedupeKey: key, MaxAttempts: 3}})
			require.NoError(t, err)
			endedAhead(t, s, pool, key, state)
			pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET run_after = run_after - interval '2 hours' WHERE id = $1`, d.Episode.ID)

			expired, err := s.ExpireAvailable(t.Context(), episodes.ExpireQuery{TTL: time.Hour})
			require.NoError(t, err)
			require.Equal(t, []int64{d.Episode.ID}, expired, "a %s grant was taken for a live holder", state)
		})
	}
}

// A creation that starts its episode (Start with an owner) starts it unless
// the key's claim is held live: an ended grant of the key whose lease_until
// is still ahead of the statement's clock holds nothing, and the new
// episode runs under the grant the creation makes.
func TestCreateStartsOverAnEndedGrantThatLooksLive(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"released", "done", "failed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			key := "create-over-" + state
			endedAhead(t, s, pool, key, state)
			o := createOwned(t, s, key, "node-b", true)
			require.True(t, o.Created)
			require.Equal(t, episodes.StatusRunning, o.Episode.Status, "a %s grant was taken for a live holder", state)
			require.Equal(t, "node-b", o.Claim.Owner)
		})
	}
}

// endedAhead grants key to node-a, then ends the grant in state with its
// lease_until a minute ahead of the database clock: an ended grant that
// looks live to a statement that reads the lease alone.
func endedAhead(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, key, state string) {
	t.Helper()
	_, err := s.Acquire(t.Context(), claims.AcquireParams{Key: key, Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	pgtest.Exec(t, pool, `UPDATE leasehold_work_claims
		SET state = $2, lease_until = now() + interval '1 minute', finished_at = now()
		WHERE dedupe_key = $1`, key, state)
}
