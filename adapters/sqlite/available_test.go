package sqlite_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// ClaimAvailable's three statements, as one poll: due available episodes
// of the poller's scope are picked in due order up to the limit, each
// granted and started under its grant (opts and the next step number come
// back); one whose claim is held live elsewhere (a broken invariant) comes
// back with fence 0, not started, and leaves the available set; a delayed
// one waits (NextAvailableDue), and other envs and pairs are not seen. A
// cancel ends an available episode and takes it out of the set, and
// recovery never takes an available one.
func TestClaimAvailableOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	deferred := func(key, env string, delay time.Duration, opts string) int64 {
		t.Helper()
		d := episodes.Deferred{New: episodes.New{ActorID: "mon", ExpectationID: "ping", TriggerType: episodes.TriggerEvent,
			DedupeKey: key, MaxAttempts: 3, SourceEnv: env}, Delay: delay}
		if opts != "" {
			d.Opts = json.RawMessage(opts)
		}
		out, err := s.CreateDeferredEpisode(ctx, d)
		require.NoError(t, err)
		require.True(t, out.Created)
		require.Equal(t, episodes.StatusQueued, out.Episode.Status)
		return out.Episode.ID
	}
	runAfter := func(id int64) *int64 {
		t.Helper()
		var ms *int64
		require.NoError(t, db.QueryRow(`SELECT run_after FROM leasehold_episodes WHERE id = ?`, id).Scan(&ms))
		return ms
	}

	first := deferred("k:first", "", 0, `{"region":"eu"}`)
	held := deferred("k:held", "", 0, "")
	delayed := deferred("k:delayed", "", time.Hour, "")
	elsewhere := deferred("k:elsewhere", "prod", 0, "")
	third := deferred("k:third", "", 0, "")
	dup, err := s.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "mon", ExpectationID: "ping",
		TriggerType: episodes.TriggerEvent, DedupeKey: "k:first", MaxAttempts: 3}})
	require.NoError(t, err)
	require.Equal(t, episodes.DeferredCreated{ExistingID: first}, dup)
	// first falls due before held, held before third.
	sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET run_after = run_after - 3000 WHERE id = ?`, first)
	sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET run_after = run_after - 2000 WHERE id = ?`, held)
	sqlitetest.Exec(t, db, `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, fence)
		VALUES ('k:held', 'claimed', 'other', `+sqlitetest.Now+` + 60000, `+sqlitetest.Now+`, 7)`)

	q := episodes.AvailableQuery{Owner: "full", Lease: time.Minute, Runnable: []episodes.Runnable{{ActorID: "mon", ExpectationID: "ping"}}, Limit: 2}
	none, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "full", Lease: time.Minute,
		Runnable: []episodes.Runnable{{ActorID: "mon", ExpectationID: "other"}}, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, none, "a pair the node does not run")

	before := time.Now()
	ds, err := s.ClaimAvailable(ctx, q)
	require.NoError(t, err)
	require.Len(t, ds, 2, "the limit, in due order")
	require.Equal(t, []int64{first, held}, []int64{ds[0].EpisodeID, ds[1].EpisodeID})

	got := ds[0]
	require.True(t, got.Started)
	require.Equal(t, "mon", got.ActorID)
	require.Equal(t, "ping", got.ExpectationID)
	require.JSONEq(t, `{"region":"eu"}`, string(got.Opts))
	require.Equal(t, claims.Token{Key: "k:first", Owner: "full", Fence: 1}, got.Claim.Token)
	require.Equal(t, claims.StateClaimed, got.Claim.State)
	require.Equal(t, claims.GrantKind("fresh"), got.Claim.Grant)
	require.EqualValues(t, 1, got.Claim.Attempt)
	require.False(t, got.Claim.LocalStart().Before(before), "the grant's clock starts after the poll was asked for")
	require.EqualValues(t, 1, got.NextStep)
	require.Equal(t, episodes.StatusRunning, got.Episode.Status)
	require.Equal(t, "full", got.Episode.OwnerNode)
	require.Equal(t, first, got.Episode.ID)
	require.NotNil(t, got.Episode.StartedAt)
	require.Nil(t, runAfter(first))

	skipped := ds[1]
	require.False(t, skipped.Started)
	require.Zero(t, skipped.Claim.Fence, "held live elsewhere: not granted")
	require.Nil(t, runAfter(held), "it left the available set all the same")
	ep, err := s.GetEpisode(ctx, held)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, ep.Status)

	q.Limit = 10
	ds, err = s.ClaimAvailable(ctx, q)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the delayed one waits, the other env's is not seen")
	require.Equal(t, third, ds[0].EpisodeID)
	require.True(t, ds[0].Started)
	require.NotNil(t, runAfter(delayed))
	require.NotNil(t, runAfter(elsewhere))
	wait, ok, err := s.NextAvailableDue(ctx, q)
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), time.Minute.Seconds())
	ds, err = s.ClaimAvailable(ctx, q)
	require.NoError(t, err)
	require.Empty(t, ds)

	// Recovery never takes available work; a cancel ends it at once.
	_, err = s.RequeueOrphan(ctx, delayed, 0, "sweeper", time.Millisecond)
	require.ErrorIs(t, err, claims.ErrBusy)
	_, _, err = s.ClaimForRecovery(ctx, delayed, "sweeper", time.Minute, time.Millisecond)
	require.ErrorIs(t, err, claims.ErrBusy)
	c, err := s.CancelEpisode(ctx, delayed, nil)
	require.NoError(t, err)
	require.True(t, c.Ended)
	require.Nil(t, runAfter(delayed))
	_, ok, err = s.NextAvailableDue(ctx, q)
	require.NoError(t, err)
	require.False(t, ok, "nothing left to wait for")

	// A requeue by an operator makes the canceled episode available again,
	// due at once; the next poll grants it a fresh fence.
	r, err := s.RequeueEpisode(ctx, delayed, "operator")
	require.NoError(t, err)
	require.EqualValues(t, 1, r.Attempts)
	require.NotNil(t, runAfter(delayed))
	ds, err = s.ClaimAvailable(ctx, q)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, delayed, ds[0].EpisodeID)
	require.True(t, ds[0].Started)
	require.EqualValues(t, 1, ds[0].Episode.Attempts)
}

// As Postgres's TestPollAndExpiryLeaveAnOldBinarysLeftoversAlone: a node
// older than migration 00016 can take over an available episode and end
// it, or run it, leaving run_after set; a poll and the expiry leave such an
// episode alone (the status test), never running a failed episode again
// nor canceling running work.
func TestPollAndExpiryLeaveAnOldBinarysLeftoversAlone(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	leftover := func(key, status, claim string) int64 {
		t.Helper()
		d, err := s.CreateDeferredEpisode(ctx, episodes.Deferred{New: episodes.New{ActorID: "mon", ExpectationID: "ping",
			TriggerType: episodes.TriggerEvent, DedupeKey: key, MaxAttempts: 3}})
		require.NoError(t, err)
		now := time.Now().UnixMilli()
		sqlitetest.Exec(t, db, `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, fence, work_type)
			VALUES (?, ?, 'old-node', ?, ?, 1, 'episode')`, key, claim, now-1000, now-60000)
		sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET status = ?, owner_node = 'old-node',
			run_after = run_after - 7200000 WHERE id = ?`, status, d.Episode.ID)
		return d.Episode.ID
	}
	failed := leftover("old-failed", "failed", "failed")
	running := leftover("old-running", "running", "claimed")

	ds, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "new-node", Lease: time.Minute,
		Runnable: []episodes.Runnable{{ActorID: "mon", ExpectationID: "ping"}}, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, ds, "a poll took an episode an older binary ended or runs")
	expired, err := s.ExpireAvailable(ctx, episodes.ExpireQuery{TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, expired, "the expiry canceled an episode an older binary ended or runs")
	for id, status := range map[int64]episodes.Status{failed: episodes.StatusFailed, running: episodes.StatusRunning} {
		ep, err := s.GetEpisode(ctx, id)
		require.NoError(t, err)
		require.Equal(t, status, ep.Status)
		require.Equal(t, "old-node", ep.OwnerNode)
	}
}
