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
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// interleave runs op while a competing transaction holds rows op's
// statement checks: it begins a transaction, runs the competing writes
// (uncommitted), starts op, and commits the competitor once op waits for
// its row locks (pg_blocking_pids) or has already returned. A statement
// that locks what it checks (FOR UPDATE, FOR SHARE) waits and then decides
// on the committed change; one whose lock was removed decides on its
// snapshot, before the change, and the caller's assertions see it. Removing
// a lock changes nothing in a sequential test; this is the interleaving
// that tells (issue 30: tests that can see a missing lock).
func interleave(t *testing.T, pool *pgxpool.Pool, compete func(tx pgx.Tx), op func() error) (waited bool, err error) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var pid int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	compete(tx)
	done := make(chan error, 1)
	go func() { done <- op() }()
	for {
		select {
		case err := <-done:
			require.NoError(t, tx.Commit(ctx))
			return false, err
		default:
		}
		// The database says when op waits for the competitor's locks.
		var blocked bool
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, pid).Scan(&blocked))
		if blocked {
			require.NoError(t, tx.Commit(ctx))
			return true, <-done
		}
	}
}

// startedEpisode creates an episode of key, started under owner's grant
// (a minute's lease).
func startedEpisode(t *testing.T, s *postgres.Store, key, owner string) episodes.Created {
	t.Helper()
	return createOwned(t, s, key, owner, true)
}

// grantedEpisode creates an episode of key, still queued, with owner's
// grant (a minute's lease): the state between a grant and its start.
func grantedEpisode(t *testing.T, s *postgres.Store, key, owner string) episodes.Created {
	t.Helper()
	o := createOwned(t, s, key, owner, false)
	require.Equal(t, episodes.StatusQueued, o.Episode.Status)
	return o
}

func createOwned(t *testing.T, s *postgres.Store, key, owner string, start bool) episodes.Created {
	t.Helper()
	o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
		DedupeKey: key, MaxAttempts: 3, Owner: owner, Lease: time.Minute, Start: start})
	require.NoError(t, err)
	return o
}

// writes returns a competitor for interleave that runs stmts, each with
// its args, and requires each to change a row.
func writes(t *testing.T, stmts []string, args ...[]any) func(tx pgx.Tx) {
	return func(tx pgx.Tx) {
		for i, stmt := range stmts {
			tag, err := tx.Exec(t.Context(), stmt, args[i]...)
			require.NoError(t, err)
			require.NotZero(t, tag.RowsAffected(), "the competing write %q matched nothing", stmt)
		}
	}
}

// ownersFinish is the holder's fenced finish as interleave's competitor:
// the claim done, then the episode done, in the writers' lock order
// (arguments: the claim key, the episode id).
var ownersFinish = []string{
	`UPDATE leasehold_work_claims SET state = 'done', finished_at = now() WHERE dedupe_key = $1`,
	`UPDATE leasehold_episodes SET status = 'done', finished_at = now() WHERE id = $1`,
}

// StartEpisode's check of the grant (FOR SHARE on the claim row) against a
// steal that commits between its check and its write: the stale holder
// must not start the episode.
func TestStartEpisodeWaitsForAStealOfItsClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := grantedEpisode(t, s, "start-race", "node-a")

	waited, err := interleave(t, pool,
		writes(t, []string{`UPDATE leasehold_work_claims SET owner_node = 'node-b', fence = fence + 1 WHERE dedupe_key = $1`}, []any{o.Claim.Key}),
		func() error { _, err := s.StartEpisode(t.Context(), o.Episode.ID, o.Claim.Token); return err })
	require.True(t, waited, "StartEpisode did not wait for the steal's row lock")
	require.ErrorIs(t, err, claims.ErrLeaseLost, "a stolen grant started the episode")
	got, err := s.GetEpisode(t.Context(), o.Episode.ID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, got.Status)
}

// ClaimForRecovery against the owner's finish (claim done, episode done)
// committing between its check and its write: recovery must not take over
// work that finished meanwhile, nor reopen its finished claim.
func TestClaimForRecoveryWaitsForTheOwnersFinish(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := startedEpisode(t, s, "recovery-race", "zombie")
	pgtest.ExpireClaim(t, pool, o.Claim.Key)

	waited, err := interleave(t, pool,
		writes(t, ownersFinish, []any{o.Claim.Key}, []any{o.Episode.ID}),
		func() error {
			_, _, err := s.ClaimForRecovery(t.Context(), o.Episode.ID, "sweeper", time.Minute, time.Minute)
			return err
		})
	require.True(t, waited, "ClaimForRecovery did not wait for the finish's row locks")
	require.ErrorIs(t, err, claims.ErrBusy, "recovery took over finished work")
	var state string
	var fence int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT state, fence FROM leasehold_work_claims WHERE dedupe_key = $1`, o.Claim.Key).Scan(&state, &fence))
	require.Equal(t, "done", state, "the finished claim was reopened")
	require.Equal(t, o.Claim.Fence, fence)
}

// RequeueOrphan against the owner's finish: it finds the claim row locked
// and gives up at once (RequeueOrphanLock's NOWAIT; the next sweep looks
// again), and a finished episode is never made available again.
func TestRequeueOrphanGivesWayToTheOwnersFinish(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := startedEpisode(t, s, "requeue-race", "zombie")
	pgtest.ExpireClaim(t, pool, o.Claim.Key)

	waited, err := interleave(t, pool,
		writes(t, ownersFinish, []any{o.Claim.Key}, []any{o.Episode.ID}),
		func() error {
			_, err := s.RequeueOrphan(t.Context(), o.Episode.ID, 0, "sweeper", time.Minute)
			return err
		})
	require.False(t, waited, "RequeueOrphan queued for the finish's row locks instead of giving up")
	require.ErrorIs(t, err, claims.ErrBusy, "recovery requeued finished work")
	var state string
	var fence int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT state, fence FROM leasehold_work_claims WHERE dedupe_key = $1`, o.Claim.Key).Scan(&state, &fence))
	require.Equal(t, "done", state, "the finished claim was fenced out")
	require.Equal(t, o.Claim.Fence, fence)
	var available bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT run_after IS NOT NULL FROM leasehold_episodes
		WHERE id = $1`, o.Episode.ID).Scan(&available))
	require.False(t, available, "a finished episode was made available again")
}

// A finding written for a run (raise, update, clear) is checked against the
// run's grant FOR SHARE: a zombie's finding write never lands after a steal
// that commits between its check and its write.
func TestFindingWritesWaitForAStealOfTheirClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		write func(s *postgres.Store, tok claims.Token, id int64) error
	}{
		{"raise", func(s *postgres.Store, tok claims.Token, id int64) error {
			_, err := s.RaiseFinding(t.Context(), tok, id, findings.Raise{Key: "zombie-raise", Class: "c", Severity: "high"})
			return err
		}},
		{"update", func(s *postgres.Store, tok claims.Token, id int64) error {
			_, err := s.UpdateFinding(t.Context(), tok, id, "existing", findings.Update{Severity: "zombie"})
			return err
		}},
		{"clear", func(s *postgres.Store, tok claims.Token, id int64) error {
			_, err := s.ClearFinding(t.Context(), tok, id, "existing")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
				DedupeKey: "finding-race", MaxAttempts: 3, Owner: "node-a", Lease: time.Minute, Start: true})
			require.NoError(t, err)
			_, err = s.RaiseFinding(t.Context(), o.Claim.Token, o.Episode.ID, findings.Raise{Key: "existing", Class: "c", Severity: "low"})
			require.NoError(t, err)

			waited, err := interleave(t, pool,
				writes(t, []string{`UPDATE leasehold_work_claims SET owner_node = 'node-b', fence = fence + 1 WHERE dedupe_key = $1`}, []any{o.Claim.Key}),
				func() error { return tc.write(s, o.Claim.Token, o.Episode.ID) })
			require.True(t, waited, "the finding write did not wait for the steal's row lock")
			require.ErrorIs(t, err, findings.ErrLeaseLost, "a stolen grant's finding write landed")
			var active int
			var severity string
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*), max(severity) FROM leasehold_findings WHERE status = 'active'`).Scan(&active, &severity))
			require.Equal(t, 1, active, "only the finding raised under the live grant is active")
			require.Equal(t, "low", severity, "the zombie changed nothing")
		})
	}
}

// CancelEpisode decides "held live" on the locked claim row: a grant that
// commits between its check and its write is seen, and the cancel becomes
// a request for the new holder instead of ending the episode under it.
func TestCancelEpisodeWaitsForAGrant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := startedEpisode(t, s, "cancel-race", "dead")
	pgtest.ExpireClaim(t, pool, o.Claim.Key)

	var c episodes.Canceled
	waited, err := interleave(t, pool,
		writes(t, []string{
			`UPDATE leasehold_work_claims SET owner_node = 'node-b', fence = fence + 1, lease_until = now() + interval '1 hour' WHERE dedupe_key = $1`,
			`UPDATE leasehold_episodes SET owner_node = 'node-b', last_step_at = now() WHERE id = $1`,
		}, []any{o.Claim.Key}, []any{o.Episode.ID}),
		func() (err error) { c, err = s.CancelEpisode(t.Context(), o.Episode.ID, nil); return err })
	require.True(t, waited, "CancelEpisode did not wait for the grant's row locks")
	require.NoError(t, err)
	require.False(t, c.Ended, "the episode was ended under a live grant")
	var state string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT state FROM leasehold_work_claims WHERE dedupe_key = $1`, o.Claim.Key).Scan(&state))
	require.Equal(t, "claimed", state, "the live grant was fenced out")
}

// CancelEpisode against the holder's finish committing between its check
// and its write: a finished episode stays finished.
func TestCancelEpisodeWaitsForTheOwnersFinish(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := startedEpisode(t, s, "cancel-finish-race", "node-a")

	waited, err := interleave(t, pool,
		writes(t, ownersFinish, []any{o.Claim.Key}, []any{o.Episode.ID}),
		func() error { _, err := s.CancelEpisode(t.Context(), o.Episode.ID, nil); return err })
	require.True(t, waited, "CancelEpisode did not wait for the finish's row locks")
	require.ErrorIs(t, err, episodes.ErrNotLive, "a finished episode was canceled")
	got, err := s.GetEpisode(t.Context(), o.Episode.ID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, got.Status)
}

// leasehold_hold (migration 00009) locks the claim row FOR SHARE in the
// caller's transaction: a steal of the grant must wait until that
// transaction ends, so the caller's writes commit under the grant they
// held, and the thief's grant comes after them with the next fence.
func TestHoldKeepsAStealWaitingUntilTheCallerCommits(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := startedEpisode(t, s, "hold-race", "node-a")
	pgtest.ExpireClaim(t, pool, o.Claim.Key) // stealable, but still node-a's grant until someone takes it

	var stolen claims.Claim
	waited, err := interleave(t, pool,
		func(tx pgx.Tx) {
			_, err := postgres.New(tx).HoldClaim(t.Context(), o.Claim.Token)
			require.NoError(t, err, "the hold of the current grant")
		},
		func() (err error) {
			stolen, err = s.Acquire(t.Context(), claims.AcquireParams{Key: o.Claim.Key, Owner: "thief", Lease: time.Minute, WorkType: "episode"})
			return err
		})
	require.True(t, waited, "the steal did not wait for the holding transaction")
	require.NoError(t, err)
	require.Equal(t, o.Claim.Fence+1, stolen.Fence)
}

// A poll never waits for an available episode another transaction has
// locked, and never starts one that transaction changed: an episode a
// competitor holds locked (a cancel, or a start elsewhere, not yet
// committed) is skipped (SKIP LOCKED), and once the competitor commits the
// next poll re-checks the row's latest version (queued) and takes nothing.
func TestPollSkipsAndRechecksWhatACompetitorChanges(t *testing.T) {
	t.Parallel()
	competitors := []struct {
		name   string
		stmt   string
		status episodes.Status
		owner  string
	}{
		{"canceled", `UPDATE leasehold_episodes SET status = 'canceled', finished_at = now() WHERE id = $1`, episodes.StatusCanceled, ""},
		{"started elsewhere", `UPDATE leasehold_episodes SET status = 'running', owner_node = 'node-b', started_at = now() WHERE id = $1`, episodes.StatusRunning, "node-b"},
	}
	for _, c := range competitors {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			s := postgres.New(pool)
			made := availableEpisode(t.Context(), t, s, "poll-race")
			poll := func() ([]episodes.Dispatched, error) {
				return s.ClaimAvailable(t.Context(), episodes.AvailableQuery{Owner: "node-a", Lease: time.Minute,
					Runnable: []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}, Limit: 4})
			}
			var got []episodes.Dispatched
			waited, err := interleave(t, pool, writes(t, []string{c.stmt}, []any{made.Episode.ID}),
				func() (err error) { got, err = poll(); return err })
			require.False(t, waited, "the poll waited for a locked episode instead of skipping it")
			require.NoError(t, err)
			require.Empty(t, got, "the poll took an episode a competitor held")
			again, err := poll()
			require.NoError(t, err)
			require.Empty(t, again, "the poll took an episode that was %s", c.status)
			ep, err := s.GetEpisode(t.Context(), made.Episode.ID)
			require.NoError(t, err)
			require.Equal(t, c.status, ep.Status)
			require.Equal(t, c.owner, ep.OwnerNode, "the poll took the episode over")
		})
	}
}

// availableEpisode makes an available episode of actor a, expectation e
// under key, as a trigger_only node would.
func availableEpisode(ctx context.Context, t *testing.T, s *postgres.Store, key string) episodes.DeferredCreated {
	t.Helper()
	made, err := s.CreateDeferredEpisode(ctx, episodes.Deferred{
		New: episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent, DedupeKey: key, MaxAttempts: 3}})
	require.NoError(t, err)
	require.True(t, made.Created)
	return made
}

// CreateEpisode against a competing creation of the same key that commits
// while the statement waits on the unique index: the statement's snapshot
// predates the winner, so its own read of the live episode finds nothing,
// and the duplicate is named by FindLiveEpisode, which must read the
// winner (its key exactly), whatever other live episodes exist.
func TestCreateNamesTheWinnerOfARace(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	for _, key := range []string{"race-a", "race-z"} { // live keys on both sides
		_, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
			DedupeKey: key, MaxAttempts: 3})
		require.NoError(t, err)
	}
	var winner int64
	var got episodes.Created
	waited, err := interleave(t, pool, func(tx pgx.Tx) {
		require.NoError(t, tx.QueryRow(t.Context(), `INSERT INTO leasehold_episodes
			(actor_id, expectation_id, trigger_type, dedupe_key, key_version, status, max_attempts, source_stack, source_env)
			VALUES ('a', 'e', 'event', 'race-m', 2, 'queued', 3, '', '') RETURNING id`).Scan(&winner))
	}, func() (err error) {
		got, err = s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
			DedupeKey: "race-m", MaxAttempts: 3, Owner: "node-a", Lease: time.Minute, Start: true})
		return err
	})
	require.True(t, waited, "the create did not wait for the competing insert")
	require.NoError(t, err)
	require.False(t, got.Created)
	require.Equal(t, winner, got.ExistingID, "the duplicate names the episode that won the key")
	require.Zero(t, got.Claim.Fence, "a duplicate grants nothing")
}
