package sqlite_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// As adapters/postgres' TestExpiryDecidesOnTheClaimsState: an ended grant
// whose lease_until is still ahead of the expiry's clock holds nothing,
// and the expired request's episode is canceled.
func TestStoreExpiryDecidesOnTheClaimsState(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"released", "done", "failed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			db := sqlitetest.Open(t, sqlitetest.Path(t))
			s := sqlite.New(db)
			key := "expire-ended-" + state
			d, err := s.CreateDeferredEpisode(t.Context(), episodes.Deferred{New: episodes.New{ActorID: "a", ExpectationID: "e",
				TriggerType: episodes.TriggerEvent, DedupeKey: key, MaxAttempts: 3}, SourceNode: "trigger-node"})
			require.NoError(t, err)
			endedAhead(t, s, db, key, state)
			sqlitetest.Exec(t, db, `UPDATE leasehold_trigger_requests SET run_after = run_after - 7200000 WHERE id = ?1`, d.RequestID)

			expired, err := s.ExpireTriggerRequests(t.Context(), episodes.ExpireQuery{TTL: time.Hour})
			require.NoError(t, err)
			require.Equal(t, []episodes.Expired{{RequestID: d.RequestID, EpisodeID: d.Episode.ID, EpisodeCanceled: true}}, expired,
				"a %s grant was taken for a live holder", state)
		})
	}
}

// As adapters/postgres' TestCreateStartsOverAnEndedGrantThatLooksLive.
func TestStoreCreateStartsOverAnEndedGrantThatLooksLive(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"released", "done", "failed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			db := sqlitetest.Open(t, sqlitetest.Path(t))
			s := sqlite.New(db)
			key := "create-over-" + state
			endedAhead(t, s, db, key, state)
			o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
				DedupeKey: key, MaxAttempts: 3, Owner: "node-b", Lease: time.Minute, Start: true})
			require.NoError(t, err)
			require.True(t, o.Created)
			require.Equal(t, episodes.StatusRunning, o.Episode.Status, "a %s grant was taken for a live holder", state)
			require.Equal(t, "node-b", o.Claim.Owner)
		})
	}
}

// endedAhead is adapters/postgres' endedAhead on SQLite.
func endedAhead(t *testing.T, s *sqlite.Store, db *sql.DB, key, state string) {
	t.Helper()
	_, err := s.Acquire(t.Context(), claims.AcquireParams{Key: key, Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	sqlitetest.Exec(t, db, `UPDATE leasehold_work_claims
		SET state = ?2, lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + 60000,
		    finished_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
		WHERE dedupe_key = ?1`, key, state)
}

// As adapters/postgres' TestStartEpisodeTreatsALeaseEndingNowAsOver: a
// grant whose lease ends at the start's own instant is over, so the run
// never starts on a lease another node may take in that same millisecond.
// SQLite's clock cannot be held still across two statements, so each try
// sets the lease to end at the current millisecond, starts at once, and
// reads the clock again: every start must be refused, and a try whose
// second reading is still the lease's millisecond proves the start read
// that millisecond too (the clock does not go back). A loaded host lands
// fewer tries in one millisecond, so the test tries until three have, or
// fails after its bound without one.
func TestStoreStartEpisodeTreatsALeaseEndingNowAsOver(t *testing.T) {
	t.Parallel()
	db := sqlitetest.Open(t, sqlitetest.Path(t))
	s := sqlite.New(db)
	o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
		DedupeKey: "ends-now", MaxAttempts: 3, Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, o.Episode.Status)
	deadline := time.Now().Add(30 * time.Second)
	landed, tries := 0, 0
	for ; landed < 3 && time.Now().Before(deadline); tries++ {
		var leaseEnd, after int64
		require.NoError(t, db.QueryRowContext(t.Context(), `UPDATE leasehold_work_claims
			SET lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) WHERE dedupe_key = ?1
			RETURNING lease_until`, o.Claim.Key).Scan(&leaseEnd))
		_, err := s.StartEpisode(t.Context(), o.Episode.ID, o.Claim.Token)
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`).Scan(&after))
		require.ErrorIs(t, err, episodes.ErrLeaseLost, "try %d: started on a lease that ends now (or ended)", tries)
		if after == leaseEnd {
			landed++
		}
	}
	require.Equal(t, 3, landed, "only %d of %d tries started within the lease's own millisecond in 30 s", landed, tries)
	t.Logf("%d tries, %d within one millisecond", tries, landed)
}
