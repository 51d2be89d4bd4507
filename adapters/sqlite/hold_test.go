package sqlite_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

func acquire(t *testing.T, s *sqlite.Store, key, owner string) claims.Claim {
	t.Helper()
	c, err := s.Acquire(t.Context(), claims.AcquireParams{Key: key, Owner: owner, Lease: time.Minute})
	require.NoError(t, err)
	return c
}

func TestHoldClaimNeedsATransaction(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	c := acquire(t, s, "k", "a")
	_, err := s.HoldClaim(t.Context(), c.Token)
	require.ErrorIs(t, err, claims.ErrInvalid)
}

func TestHoldClaimCurrentAndLostGrants(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	old := acquire(t, s, "k", "a")
	sqlitetest.ExpireClaim(t, db, "k")

	// Expired but not taken over: still the current grant (no clock).
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	until, err := s.WithTx(tx).HoldClaim(t.Context(), old.Token)
	require.NoError(t, err)
	require.True(t, until.Before(time.Now()))
	require.Equal(t, time.UTC, until.Location())
	require.NoError(t, tx.Commit())

	cur := acquire(t, s, "k", "b")
	for name, tok := range map[string]claims.Token{
		"stolen":      old.Token,
		"wrong owner": {Key: "k", Owner: "a", Fence: cur.Fence},
		"older fence": {Key: "k", Owner: "b", Fence: cur.Fence - 1},
		"no such key": {Key: "nope", Owner: "b", Fence: 1},
	} {
		tx, err := db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		_, err = s.WithTx(tx).HoldClaim(t.Context(), tok)
		require.ErrorIs(t, err, claims.ErrLeaseLost, name)
		require.NoError(t, tx.Rollback())
	}
	tx, err = db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	until, err = s.WithTx(tx).HoldClaim(t.Context(), cur.Token)
	require.NoError(t, err)
	require.Equal(t, cur.LeaseUntil, until)
	require.NoError(t, tx.Commit())

	require.NoError(t, s.Complete(t.Context(), cur.Token))
	tx, err = db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = s.WithTx(tx).HoldClaim(t.Context(), cur.Token)
	require.ErrorIs(t, err, claims.ErrLeaseLost, "finished")
	require.NoError(t, tx.Rollback())
}

// The hold keeps a takeover out until the holder's transaction ends: a
// steal from another pool (another process) of the expired lease waits
// for the commit, and the holder's own write committed under its grant.
func TestHoldClaimBlocksTakeoverUntilCommit(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	a := sqlitetest.Open(t, path)
	b := sqlitetest.OpenUnmigrated(t, path)
	sa, sb := sqlite.New(a), sqlite.New(b)
	held := acquire(t, sa, "k", "a")
	sqlitetest.ExpireClaim(t, a, "k")

	tx, err := a.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = sa.WithTx(tx).HoldClaim(t.Context(), held.Token)
	require.NoError(t, err)

	stolen := make(chan claims.Claim, 1)
	go func() {
		c, err := sb.Acquire(context.Background(), claims.AcquireParams{Key: "k", Owner: "b", Lease: time.Minute})
		if err != nil {
			t.Errorf("steal: %v", err)
		}
		stolen <- c
	}()
	select {
	case c := <-stolen:
		t.Fatalf("the lease was stolen while held: %+v", c)
	case <-time.After(300 * time.Millisecond):
	}
	// The holder's own write, guarded by the hold.
	_, err = tx.Exec(`INSERT INTO leasehold_nodes (node_id, mode) VALUES ('written-under-hold', 'full')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	c := <-stolen
	require.Equal(t, held.Fence+1, c.Fence)
	require.Equal(t, claims.GrantSteal, c.Grant)
	var n int
	require.NoError(t, b.QueryRow(`SELECT count(*) FROM leasehold_nodes WHERE node_id = 'written-under-hold'`).Scan(&n))
	require.Equal(t, 1, n)
}

// A caller's transaction begun DEFERRED (a pool not from Open) is held too:
// HoldClaim is a write, so it takes the write lock, and a takeover cannot
// commit until the transaction ends.
func TestHoldClaimInDeferredTransaction(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	a := sqlitetest.Open(t, path)
	deferred, err := sql.Open(sqlite.DriverName, path+"?_txlock=deferred&_busy_timeout=10000")
	require.NoError(t, err)
	t.Cleanup(func() { _ = deferred.Close() })
	impatient, err := sqlite.Open(t.Context(), path+"?_busy_timeout=100")
	require.NoError(t, err)
	t.Cleanup(func() { _ = impatient.Close() })

	held := acquire(t, sqlite.New(a), "k", "a")
	sqlitetest.ExpireClaim(t, a, "k")
	tx, err := deferred.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = sqlite.New(deferred).WithTx(tx).HoldClaim(t.Context(), held.Token)
	require.NoError(t, err)
	_, err = sqlite.New(impatient).Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "b", Lease: time.Minute})
	require.ErrorIs(t, err, claims.ErrRetryable, "the steal waits for the held transaction")
	require.NoError(t, tx.Commit())
	_, err = sqlite.New(impatient).Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "b", Lease: time.Minute})
	require.NoError(t, err)
}
