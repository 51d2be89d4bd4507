// Package conformance is the one suite every leasehold Store must pass: the
// Postgres and SQL Server adapters, the in-memory fake, and any adapter a
// user writes. A dialect difference shows up here as a failing scenario, not
// as a surprise in production.
//
// An adapter's test calls the Run* functions with a constructor that returns
// a fresh, isolated backend per test (a new schema, a new fake).
package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
)

// ClaimRow is a work-claim row as stored, for checking that a rejected write
// left it untouched.
type ClaimRow struct {
	Key         string
	State       claims.State
	Owner       string
	Attempt     int32
	Fence       int64
	LeaseUntil  time.Time
	Finished    bool
	ErrorDetail map[string]any // decoded JSON; nil when none
}

// ClaimsBackend is what the suite needs from one isolated backend.
type ClaimsBackend struct {
	// Store under test, over an empty, migrated database.
	Store claims.Store
	// Expire makes key's lease past on the backend's clock, as if its holder
	// had stopped renewing long ago (backdating, never sleeping).
	Expire func(t testing.TB, key string)
	// Row returns key's row, or false when there is none.
	Row func(t testing.TB, key string) (ClaimRow, bool)
	// Count returns the number of claim rows.
	Count func(t testing.TB) int
}

const lease = 30 * time.Second

// RunClaims runs every work-claim scenario against backends made by newBackend.
func RunClaims(t *testing.T, newBackend func(t *testing.T) ClaimsBackend) {
	t.Run("FreshAcquire", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		c := mustAcquire(t, b, "k", "node-a")
		require.Equal(t, claims.StateClaimed, c.State)
		require.Equal(t, claims.Token{Key: "k", Owner: "node-a", Fence: 1}, c.Token)
		require.EqualValues(t, 1, c.Attempt)
		require.Equal(t, claims.GrantFresh, c.Grant)
		require.Equal(t, "test", c.WorkType)
		// Both times come from one database clock reading, to the millisecond
		// or better: no whole-second rounding, no node clock.
		require.Equal(t, lease, c.LeaseUntil.Sub(c.ClaimedAt))
	})

	t.Run("SubSecondLease", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		c, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "k", Owner: "a", Lease: 1500 * time.Millisecond})
		require.NoError(t, err)
		require.Equal(t, 1500*time.Millisecond, c.LeaseUntil.Sub(c.ClaimedAt))
	})

	for _, n := range []int{8, 32} {
		t.Run("ConcurrentFirstAcquire/"+strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			won, busy := race(t, n, func(i int) error {
				_, err := b.Store.Acquire(ctx(t), params("k", owner(i)))
				return err
			})
			require.Equal(t, 1, won)
			require.Equal(t, n-1, busy)
			require.Equal(t, 1, b.Count(t))
		})
	}

	t.Run("ConcurrentSteal", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		mustAcquire(t, b, "k", "dead")
		b.Expire(t, "k")
		won, busy := race(t, 8, func(i int) error {
			_, err := b.Store.Acquire(ctx(t), params("k", owner(i)))
			return err
		})
		require.Equal(t, 1, won)
		require.Equal(t, 7, busy)
		row := mustRow(t, b, "k")
		require.EqualValues(t, 2, row.Fence)
		require.EqualValues(t, 2, row.Attempt)
		require.NotEqual(t, "dead", row.Owner)
		require.Equal(t, 1, b.Count(t))
	})

	t.Run("LiveLeaseIsBusyForEveryone", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		mustAcquire(t, b, "k", "node-a")
		before := mustRow(t, b, "k")
		for _, o := range []string{"node-a", "node-b"} {
			_, err := b.Store.Acquire(ctx(t), params("k", o))
			require.ErrorIs(t, err, claims.ErrBusy, "owner %s", o)
		}
		require.Equal(t, before, mustRow(t, b, "k"))
	})

	t.Run("StealExpiredLease", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		mustAcquire(t, b, "k", "node-a")
		b.Expire(t, "k")
		c := mustAcquire(t, b, "k", "node-b")
		require.Equal(t, claims.Token{Key: "k", Owner: "node-b", Fence: 2}, c.Token)
		require.EqualValues(t, 2, c.Attempt)
		require.Equal(t, claims.GrantSteal, c.Grant)
		require.Equal(t, lease, c.LeaseUntil.Sub(c.ClaimedAt))
	})

	t.Run("Reclaim", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name        string
			finish      func(claims.Store, claims.Token) error
			wantAttempt int32
		}{
			{"AfterDone", func(s claims.Store, tk claims.Token) error { return s.Complete(context.Background(), tk) }, 1},
			{"AfterFailed", func(s claims.Store, tk claims.Token) error { return s.Fail(context.Background(), tk, nil) }, 3},
			{"AfterReleased", func(s claims.Store, tk claims.Token) error { return s.Release(context.Background(), tk) }, 3},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := newBackend(t)
				mustAcquire(t, b, "k", "node-a")
				b.Expire(t, "k")
				c := mustAcquire(t, b, "k", "node-b") // attempt 2, fence 2
				require.NoError(t, tc.finish(b.Store, c.Token))
				// No expiry needed: a finished or released key is free at once.
				c = mustAcquire(t, b, "k", "node-c")
				require.EqualValues(t, 3, c.Fence)
				require.Equal(t, tc.wantAttempt, c.Attempt)
				require.Equal(t, claims.GrantReclaim, c.Grant)
				row := mustRow(t, b, "k")
				require.False(t, row.Finished, "a new grant clears finished_at")
				require.Nil(t, row.ErrorDetail, "a new grant clears error_detail")
			})
		}
	})

	t.Run("FencedWritesRejectStaleGrants", func(t *testing.T) {
		t.Parallel()
		ops := map[string]func(claims.Store, claims.Token) error{
			"Renew": func(s claims.Store, tk claims.Token) error {
				_, err := s.Renew(context.Background(), tk, lease)
				return err
			},
			"Complete": func(s claims.Store, tk claims.Token) error { return s.Complete(context.Background(), tk) },
			"Fail": func(s claims.Store, tk claims.Token) error {
				return s.Fail(context.Background(), tk, json.RawMessage(`{"reason":"zombie"}`))
			},
			"Release": func(s claims.Store, tk claims.Token) error { return s.Release(context.Background(), tk) },
		}
		for name, op := range ops {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := newBackend(t)
				c := mustAcquire(t, b, "k", "node-a")
				before := mustRow(t, b, "k")
				for _, bad := range []claims.Token{
					{Key: "k", Owner: "node-b", Fence: c.Fence},     // another owner
					{Key: "k", Owner: "a-node", Fence: c.Fence},     // one whose name sorts before node-a's (equality, not order)
					{Key: "k", Owner: "node-a", Fence: c.Fence - 1}, // an older fence
					{Key: "k", Owner: "node-a", Fence: c.Fence + 1}, // a fence never granted
					{Key: "missing", Owner: "node-a", Fence: 1},     // no such claim
				} {
					require.ErrorIs(t, op(b.Store, bad), claims.ErrNotOwner, "%v", bad)
					require.Equal(t, before, mustRow(t, b, "k"), "row changed by %v", bad)
				}
				// A finished grant cannot be written again either.
				require.NoError(t, b.Store.Complete(ctx(t), c.Token))
				done := mustRow(t, b, "k")
				require.ErrorIs(t, op(b.Store, c.Token), claims.ErrNotOwner)
				require.Equal(t, done, mustRow(t, b, "k"))
			})
		}
	})

	t.Run("ABAZombieIsFencedOut", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		a1 := mustAcquire(t, b, "k", "node-a")
		b.Expire(t, "k")
		bb := mustAcquire(t, b, "k", "node-b")
		b.Expire(t, "k")
		a2 := mustAcquire(t, b, "k", "node-a")
		require.Equal(t, []int64{1, 2, 3}, []int64{a1.Fence, bb.Fence, a2.Fence})

		// The first task of node-a is still running somewhere: every write it
		// makes carries fence 1 and must match nothing.
		_, err := b.Store.Renew(ctx(t), a1.Token, lease)
		require.ErrorIs(t, err, claims.ErrNotOwner)
		require.ErrorIs(t, b.Store.Complete(ctx(t), a1.Token), claims.ErrNotOwner)
		require.ErrorIs(t, b.Store.Release(ctx(t), a1.Token), claims.ErrNotOwner)
		renewed, err := b.Store.RenewMany(ctx(t), "node-a", []claims.Held{{Key: "k", Fence: a1.Fence}}, lease)
		require.NoError(t, err)
		require.Empty(t, renewed)
		require.ErrorIs(t, b.Store.Complete(ctx(t), bb.Token), claims.ErrNotOwner)

		require.NoError(t, b.Store.Complete(ctx(t), a2.Token))
		row := mustRow(t, b, "k")
		require.Equal(t, claims.StateDone, row.State)
		require.EqualValues(t, 3, row.Fence)
	})

	t.Run("RenewExtendsTheLease", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		c := mustAcquire(t, b, "k", "node-a")
		until, err := b.Store.Renew(ctx(t), c.Token, 2*lease)
		require.NoError(t, err)
		require.True(t, until.After(c.LeaseUntil), "renewed %v, was %v", until, c.LeaseUntil)
		row := mustRow(t, b, "k")
		require.True(t, row.LeaseUntil.Equal(until))
		require.Equal(t, c.Fence, row.Fence, "renewal is not a new grant")

		// Another owner presenting the live grant's key and fence renews
		// nothing, whether its name sorts after node-a's or before it (the
		// owner is compared for equality, not order).
		for _, other := range []string{"node-b", "a-node"} {
			_, err := b.Store.Renew(ctx(t), claims.Token{Key: "k", Owner: other, Fence: c.Fence}, time.Hour)
			require.ErrorIs(t, err, claims.ErrNotOwner, "renewed by %s", other)
		}
		require.True(t, mustRow(t, b, "k").LeaseUntil.Equal(until), "the lease was moved")
	})

	t.Run("ReleaseIsClaimableAtOnce", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		c := mustAcquire(t, b, "k", "node-a")
		require.NoError(t, b.Store.Release(ctx(t), c.Token))
		require.Equal(t, claims.StateReleased, mustRow(t, b, "k").State)
		next := mustAcquire(t, b, "k", "node-b")
		require.EqualValues(t, 2, next.Fence)
	})

	t.Run("FailRecordsDetail", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		c := mustAcquire(t, b, "k", "node-a")
		require.NoError(t, b.Store.Fail(ctx(t), c.Token, json.RawMessage(`{"reason":"crash","step":3}`)))
		row := mustRow(t, b, "k")
		require.Equal(t, claims.StateFailed, row.State)
		require.True(t, row.Finished)
		require.Equal(t, map[string]any{"reason": "crash", "step": float64(3)}, row.ErrorDetail)
	})

	t.Run("RenewManyReturnsExactlyTheLeasesStillHeld", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		held := map[string]claims.Claim{}
		for _, k := range []string{"live1", "live2", "stolen", "done", "released", "expired-unstolen"} {
			held[k] = mustAcquire(t, b, k, "node-a")
		}
		b.Expire(t, "stolen")
		mustAcquire(t, b, "stolen", "node-b")
		require.NoError(t, b.Store.Complete(ctx(t), held["done"].Token))
		require.NoError(t, b.Store.Release(ctx(t), held["released"].Token))
		// Expired but not re-granted: nobody else can have been admitted (the
		// fence is unchanged), so renewing revives it safely.
		b.Expire(t, "expired-unstolen")

		var list []claims.Held
		for _, c := range held {
			list = append(list, claims.Held{Key: c.Key, Fence: c.Fence})
		}
		list = append(list, claims.Held{Key: "live1", Fence: 99}, claims.Held{Key: "never", Fence: 1})
		renewed, err := b.Store.RenewMany(ctx(t), "node-a", list, 2*lease)
		require.NoError(t, err)
		got := map[string]int64{}
		for _, r := range renewed {
			got[r.Key] = r.Fence
			require.True(t, r.LeaseUntil.Equal(mustRow(t, b, r.Key).LeaseUntil))
		}
		require.Equal(t, map[string]int64{"live1": 1, "live2": 1, "expired-unstolen": 1}, got)
		require.Equal(t, "node-b", mustRow(t, b, "stolen").Owner)

		// Another owner presenting node-a's grants renews nothing, not even
		// "stolen", which it holds under a newer fence.
		renewed, err = b.Store.RenewMany(ctx(t), "node-b", list, lease)
		require.NoError(t, err)
		require.Empty(t, renewed)
		// Nor does an owner whose name sorts before node-a's (the owner is
		// compared for equality, not order).
		renewed, err = b.Store.RenewMany(ctx(t), "a-node", list, lease)
		require.NoError(t, err)
		require.Empty(t, renewed)
	})

	t.Run("ReleaseManyReleasesExactlyTheGrantsStillHeld", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		held := map[string]claims.Claim{}
		for _, k := range []string{"run1", "run2", "stolen", "done", "again"} {
			held[k] = mustAcquire(t, b, k, "node-a")
		}
		b.Expire(t, "stolen")
		thief := mustAcquire(t, b, "stolen", "node-b")
		require.NoError(t, b.Store.Complete(ctx(t), held["done"].Token))
		// A -> A: node-a's own later grant of "again"; the list names the
		// earlier one, whose fence alone tells them apart.
		b.Expire(t, "again")
		againNow := mustAcquire(t, b, "again", "node-a")
		require.Equal(t, held["again"].Fence+1, againNow.Fence)

		var list []claims.Held
		for _, c := range held {
			list = append(list, claims.Held{Key: c.Key, Fence: c.Fence})
		}
		list = append(list, claims.Held{Key: "run1", Fence: 99}, claims.Held{Key: "never", Fence: 1})
		// Another owner, whose name sorts before node-a's, presenting
		// node-a's grants releases nothing.
		none, err := b.Store.ReleaseMany(ctx(t), "a-node", list)
		require.NoError(t, err)
		require.Empty(t, none)
		released, err := b.Store.ReleaseMany(ctx(t), "node-a", list)
		require.NoError(t, err)
		require.ElementsMatch(t, []claims.Held{{Key: "run1", Fence: 1}, {Key: "run2", Fence: 1}}, released)
		require.Equal(t, claims.StateReleased, mustRow(t, b, "run1").State)
		require.Equal(t, claims.StateClaimed, mustRow(t, b, "stolen").State, "a newer grant is never released")
		require.Equal(t, claims.StateClaimed, mustRow(t, b, "again").State, "the same owner's newer grant is never released by the earlier fence")
		require.Equal(t, againNow.Fence, mustRow(t, b, "again").Fence)
		require.Equal(t, claims.StateDone, mustRow(t, b, "done").State)

		// Released grants are claimable at once, at fence + 1.
		next := mustAcquire(t, b, "run1", "node-c")
		require.EqualValues(t, 2, next.Fence)
		again, err := b.Store.ReleaseMany(ctx(t), "node-b", []claims.Held{{Key: "stolen", Fence: thief.Fence}})
		require.NoError(t, err)
		require.Len(t, again, 1)
	})

	t.Run("ListExpiredListsOnlyExpiredClaimedRows", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		for _, k := range []string{"e1", "e2", "e3", "live", "done-expired"} {
			mustAcquire(t, b, k, "node-a")
		}
		for _, k := range []string{"e1", "e2", "e3"} {
			b.Expire(t, k)
		}
		c := claims.Token{Key: "done-expired", Owner: "node-a", Fence: 1}
		require.NoError(t, b.Store.Complete(ctx(t), c))
		b.Expire(t, "done-expired")

		all, err := b.Store.ListExpired(ctx(t), 10)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"e1", "e2", "e3"}, keys(all))
		for i := 1; i < len(all); i++ {
			require.False(t, all[i].LeaseUntil.Before(all[i-1].LeaseUntil), "oldest deadline first")
		}
		two, err := b.Store.ListExpired(ctx(t), 2)
		require.NoError(t, err)
		require.Len(t, two, 2)

		none := newBackend(t)
		mustAcquire(t, none, "live", "node-a")
		empty, err := none.Store.ListExpired(ctx(t), 10)
		require.NoError(t, err)
		require.Empty(t, empty)
	})

	// claims ls, the operator's view of the leases (with -owner and
	// -expired to find stuck work): exactly the rows asked for, soonest
	// deadline first.
	t.Run("ListClaimsFiltersByOwnerAndExpiry", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		lister := claimListerOf(t, b.Store)
		for _, c := range []struct{ key, owner string }{{"a-expired", "node-a"}, {"a-live", "node-a"}, {"a-done", "node-a"}, {"b-expired", "node-b"}} {
			mustAcquire(t, b, c.key, c.owner)
		}
		require.NoError(t, b.Store.Complete(ctx(t), claims.Token{Key: "a-done", Owner: "node-a", Fence: 1}))
		for _, k := range []string{"a-expired", "a-done", "b-expired"} {
			b.Expire(t, k)
		}
		list := func(q claims.ListQuery) []string {
			t.Helper()
			got, err := lister.ListClaims(ctx(t), q)
			require.NoError(t, err)
			for i := 1; i < len(got); i++ {
				require.False(t, got[i].LeaseUntil.Before(got[i-1].LeaseUntil), "soonest deadline first")
			}
			return keys(got)
		}
		require.ElementsMatch(t, []string{"a-expired", "a-live", "a-done", "b-expired"}, list(claims.ListQuery{Limit: 10}))
		require.ElementsMatch(t, []string{"a-expired", "a-live", "a-done"}, list(claims.ListQuery{Owner: "node-a", Limit: 10}))
		require.ElementsMatch(t, []string{"b-expired"}, list(claims.ListQuery{Owner: "node-b", Limit: 10}))
		require.Empty(t, list(claims.ListQuery{Owner: "node-c", Limit: 10}))
		require.ElementsMatch(t, []string{"a-expired", "b-expired"}, list(claims.ListQuery{ExpiredOnly: true, Limit: 10}),
			"expired means a claimed lease past its deadline: never a live one, never a finished one")
		require.ElementsMatch(t, []string{"a-expired"}, list(claims.ListQuery{Owner: "node-a", ExpiredOnly: true, Limit: 10}))
		require.Len(t, list(claims.ListQuery{Limit: 2}), 2)
	})

	t.Run("InvalidInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		g, err := claims.NewGate(b.Store, claims.GateConfig{Owner: "node-a", Lease: lease})
		require.NoError(t, err)
		for name, key := range map[string]string{
			"empty":    "",
			"513chars": strings.Repeat("é", claims.MaxKeyLen+1),
			"badUTF8":  "k\xff",
			"nul":      "k\x00",
		} {
			_, err := g.Acquire(ctx(t), key, "test")
			require.ErrorIs(t, err, claims.ErrInvalid, name)
		}
		require.Zero(t, b.Count(t))

		// The limit counts characters, as the column does, not bytes.
		max := strings.Repeat("é", claims.MaxKeyLen)
		c, err := g.Acquire(ctx(t), max, "test")
		require.NoError(t, err)
		require.Equal(t, max, c.Key)
		require.Equal(t, 1, b.Count(t))
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := b.Store.Acquire(cctx, params("k", "node-a"))
		require.Error(t, err)
		require.NotErrorIs(t, err, claims.ErrBusy)
		require.Zero(t, b.Count(t))
	})
}

func params(key, owner string) claims.AcquireParams {
	return claims.AcquireParams{Key: key, Owner: owner, Lease: lease, WorkType: "test"}
}

func mustAcquire(t testing.TB, b ClaimsBackend, key, owner string) claims.Claim {
	t.Helper()
	c, err := b.Store.Acquire(ctx(t), params(key, owner))
	require.NoError(t, err, "acquire %q by %s", key, owner)
	return c
}

func mustRow(t testing.TB, b ClaimsBackend, key string) ClaimRow {
	t.Helper()
	row, ok := b.Row(t, key)
	require.True(t, ok, "no claim row %q", key)
	return row
}

// race runs n callers released at the same instant and counts winners and
// ErrBusy losers; any other error fails the test.
func race(t *testing.T, n int, call func(i int) error) (won, busy int) {
	t.Helper()
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			err := call(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, claims.ErrBusy):
				busy++
			default:
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs)
	return won, busy
}

func ctx(t testing.TB) context.Context { return t.Context() }

func owner(i int) string { return "node-" + strconv.Itoa(i) }

func keys(cs []claims.Claim) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Key
	}
	return out
}

// ClaimLister is the operator read of leasehold claims ls, which every SQL
// adapter has.
type ClaimLister interface {
	ListClaims(ctx context.Context, q claims.ListQuery) ([]claims.Claim, error)
}

// claimListerOf returns store's ListClaims, or skips the calling scenario,
// loudly, for a store without it.
func claimListerOf(t testing.TB, store any) ClaimLister {
	t.Helper()
	lister, ok := store.(ClaimLister)
	if !ok {
		t.Skipf("SKIPPED: %T has no ListClaims (the operator read of leasehold claims ls)", store)
	}
	return lister
}
