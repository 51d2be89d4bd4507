package sqlite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// As adapters/postgres' TestExpiryDecidesOnTheClaimsState: an ended grant
// whose lease_until is still ahead of the expiry's clock holds nothing,
// and the expired available episode is canceled.
func TestStoreExpiryDecidesOnTheClaimsState(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"released", "done", "failed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			db := sqlitetest.Open(t, sqlitetest.Path(t))
			s := sqlite.New(db)
			key := "expire-ended-" + state
			d, err := s.CreateDeferredEpisode(t.Context(), episodes.Deferred{New: episodes.New{ActorID: "a", ExpectationID: "e",
				TriggerType: episodes.TriggerEvent, DedupeKey: key, MaxAttempts: 3}})
			require.NoError(t, err)
			endedAhead(t, s, db, key, state)
			sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET run_after = run_after - 7200000 WHERE id = ?1`, d.Episode.ID)

			expired, err := s.ExpireAvailable(t.Context(), episodes.ExpireQuery{TTL: time.Hour})
			require.NoError(t, err)
			require.Equal(t, []int64{d.Episode.ID}, expired, "a %s grant was taken for a live holder", state)
			ep, err := s.GetEpisode(t.Context(), d.Episode.ID)
			require.NoError(t, err)
			require.Equal(t, episodes.StatusCanceled, ep.Status)
			require.Equal(t, episodes.ClassTriggerExpired, ep.ErrorClass)
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
// SQLite's clock cannot be held still across two statements, so the test
// holds it still instead: its pool's driver overrides unixepoch('subsec')
// with a clock the test sets (SQLite lets an application function replace
// a built-in one of the same name and arity), an hour behind the real one.
// A lease ending at that instant must refuse the start; one ending a
// millisecond later must allow it, which also proves the statement read
// the held clock (the real one is an hour past both).
func TestStoreStartEpisodeTreatsALeaseEndingNowAsOver(t *testing.T) {
	t.Parallel()
	var frozenMs atomic.Int64
	frozenMs.Store(time.Now().Add(-time.Hour).UnixMilli())
	db := openWithClock(t, sqlitetest.Path(t), func() float64 { return float64(frozenMs.Load()) / 1000 })
	s := sqlite.New(db)
	o, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
		DedupeKey: "ends-now", MaxAttempts: 3, Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, episodes.StatusQueued, o.Episode.Status)

	now := frozenMs.Load()
	sqlitetest.Exec(t, db, `UPDATE leasehold_work_claims SET lease_until = ?2 WHERE dedupe_key = ?1`, o.Claim.Key, now)
	_, err = s.StartEpisode(t.Context(), o.Episode.ID, o.Claim.Token)
	require.ErrorIs(t, err, episodes.ErrLeaseLost, "started on a lease that ends at the start's own instant")

	sqlitetest.Exec(t, db, `UPDATE leasehold_work_claims SET lease_until = ?2 WHERE dedupe_key = ?1`, o.Claim.Key, now+1)
	_, err = s.StartEpisode(t.Context(), o.Episode.ID, o.Claim.Token)
	require.NoError(t, err, "a lease ending a millisecond after the held clock is live")
}

// openWithClock opens a migrated database at path through a driver of its
// own whose unixepoch('subsec') reads clock (seconds since the epoch)
// instead of the system's, on a one-connection pool.
func openWithClock(t *testing.T, path string, clock func() float64) *sql.DB {
	t.Helper()
	drv := &msqlite.Driver{}
	require.NoError(t, drv.RegisterScalarFunction("unixepoch", 1, func(_ *msqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		if m, _ := args[0].(string); m != "subsec" {
			return nil, fmt.Errorf("openWithClock: unixepoch(%v) is not held", args[0])
		}
		return clock(), nil
	}))
	full, err := sqlite.DSN(path)
	require.NoError(t, err)
	db := sql.OpenDB(connectorFunc{drv: drv, dsn: full})
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, sqlite.Migrate(t.Context(), db))
	require.NoError(t, sqlitetest.OffsetIdentities(t.Context(), db))
	return db
}

// connectorFunc opens dsn with drv, so a test's driver (and its functions)
// serves only its own pool.
type connectorFunc struct {
	drv *msqlite.Driver
	dsn string
}

func (c connectorFunc) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connectorFunc) Driver() driver.Driver                        { return c.drv }
