package sqlite_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// A grant that waited for the write lock behind another writer starts its
// local lease clock when it held the lock, not when it was sent: the wait
// (on a loaded host, most of a lease) is not taken from the run's local
// time, and the clock still starts no later than the database's grant
// (claimed_at, the same host's clock). Both ways a grant is made: a
// statement on its own (Acquire) and a transaction of the Store's
// (CreateEpisode).
func TestGrantClockStartsWhenTheLockIsHeld(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	db := sqlitetest.Open(t, path)
	other := sqlitetest.OpenUnmigrated(t, path) // another process's pool, in effect
	s := sqlite.New(db)

	for name, grant := range map[string]func() (claims.Claim, error){
		"Acquire": func() (claims.Claim, error) {
			return s.Acquire(t.Context(), claims.AcquireParams{Key: "acquire", Owner: "node-a", Lease: time.Minute})
		},
		"CreateEpisode": func() (claims.Claim, error) {
			res, err := s.CreateEpisode(t.Context(), episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent,
				DedupeKey: "create", MaxAttempts: 3, Owner: "node-a", Lease: time.Minute})
			return res.Claim, err
		},
	} {
		holder, err := other.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		type result struct {
			c   claims.Claim
			err error
		}
		done := make(chan result, 1)
		go func() {
			c, err := grant()
			done <- result{c, err}
		}()
		waitQueued(t, path, 0, 0, 1) // the grant waits behind the holder
		ended := time.Now()
		require.NoError(t, holder.Rollback())
		r := <-done
		require.NoError(t, r.err, name)
		require.False(t, r.c.LocalStart().Before(ended), "%s: the local clock started %v before the lock was free",
			name, ended.Sub(r.c.LocalStart()))
		require.False(t, r.c.LocalStart().Round(0).After(r.c.ClaimedAt.Add(time.Millisecond)),
			"%s: the local clock starts after the database's grant (%v > %v)", name, r.c.LocalStart(), r.c.ClaimedAt)
	}
}
