package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// CallerTxBackend is what the caller's-transaction scenarios need from one
// isolated backend: the episode backend (its Store and ExpireClaim), and
// transactions of the caller's own on the same database, with a table of
// the caller's own beside leasehold's.
type CallerTxBackend struct {
	EpisodesBackend
	// Begin begins a transaction of the caller's.
	Begin func(t testing.TB) CallerTx
	// Effects counts the caller's rows (CallerTx.Effect) that committed.
	Effects func(t testing.TB) int
}

// CallerTx is one transaction of the caller's, as a strategy that finishes
// its run in its own transaction (Run.CompleteTx, Run.FailTx) has one.
type CallerTx struct {
	// Store is the adapter bound to the transaction (postgres.New(tx),
	// sqlite's or sqlserver's Store.WithTx(tx)).
	Store interface {
		FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
		HoldClaim(ctx context.Context, t claims.Token) (time.Time, error)
	}
	// Effect writes one row of the caller's own in the transaction and
	// returns the statement's error.
	Effect func(ctx context.Context) error
	// Commit commits the transaction and returns its error.
	Commit func(ctx context.Context) error
	// Rollback ends the transaction if Commit did not; it must be harmless
	// after Commit, failed or not.
	Rollback func(ctx context.Context)
}

// RunCallerTx runs the scenarios of a run finished in the caller's own
// transaction: the fenced finish and the caller's writes commit together
// under the current grant, and a finish (or a hold, Run.Hold) that matches
// no row (the grant was taken over, released or finished already) makes
// the caller's transaction unable to commit, so a caller that ignores
// claims.ErrLeaseLost and commits lands nothing of it.
func RunCallerTx(t *testing.T, newBackend func(t *testing.T) CallerTxBackend) {
	t.Run("CurrentGrantCommitsWithTheCallersWrites", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, c := running(t, b.EpisodesBackend, "manual:pay:1", "node-a")
		tx := b.Begin(t)
		defer tx.Rollback(ctx(t))
		require.NoError(t, tx.Effect(ctx(t)))
		require.NoError(t, tx.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{Status: episodes.StatusDone}))
		require.NoError(t, tx.Effect(ctx(t)))
		require.Equal(t, episodes.StatusRunning, get(t, b.EpisodesBackend, ep.ID).Status, "not before the commit")
		require.NoError(t, tx.Commit(ctx(t)))
		require.Equal(t, 2, b.Effects(t))
		require.Equal(t, episodes.StatusDone, get(t, b.EpisodesBackend, ep.ID).Status)
	})

	t.Run("FinishThatMatchesNothingDoomsTheCallersTransaction", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			// lose makes c's grant no longer the current one and returns
			// the current grant, if any.
			lose func(t *testing.T, b CallerTxBackend, ep episodes.Episode, c claims.Claim) *claims.Claim
			f    episodes.Finish
		}{
			{"Stolen", steal, episodes.Finish{Status: episodes.StatusDone}},
			{"StolenFail", steal, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: episodes.ClassError}},
			{"Released", func(t *testing.T, b CallerTxBackend, _ episodes.Episode, c claims.Claim) *claims.Claim {
				require.NoError(t, b.Store.Release(ctx(t), c.Token))
				return nil
			}, episodes.Finish{Status: episodes.StatusDone}},
			{"FinishedAlready", func(t *testing.T, b CallerTxBackend, ep episodes.Episode, c claims.Claim) *claims.Claim {
				require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: episodes.ClassError}))
				return nil
			}, episodes.Finish{Status: episodes.StatusDone}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := newBackend(t)
				ep, c := running(t, b.EpisodesBackend, "manual:pay:1", "node-a")
				live := tc.lose(t, b, ep, c)
				before := get(t, b.EpisodesBackend, ep.ID)

				doomed(t, b, func(tx CallerTx) error { return tx.Store.FinishEpisode(ctx(t), ep.ID, c.Token, tc.f) })
				after := get(t, b.EpisodesBackend, ep.ID)
				require.Equal(t, before.Status, after.Status, "the episode was not finished by the stale grant")
				require.Equal(t, before.FinishedAt, after.FinishedAt)
				if live != nil {
					_, err := b.Store.Renew(ctx(t), live.Token, time.Minute)
					require.NoError(t, err, "the current grant is untouched")
					require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, live.Token, episodes.Finish{Status: episodes.StatusDone}))
					require.Equal(t, episodes.StatusDone, get(t, b.EpisodesBackend, ep.ID).Status)
				}
			})
		}
	})

	t.Run("HoldOnALostGrantDoomsTheCallersTransaction", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, c := running(t, b.EpisodesBackend, "manual:pay:1", "node-a")
		thief := steal(t, b, ep, c)
		doomed(t, b, func(tx CallerTx) error {
			_, err := tx.Store.HoldClaim(ctx(t), c.Token)
			return err
		})
		_, err := b.Store.Renew(ctx(t), thief.Token, time.Minute)
		require.NoError(t, err, "the current grant is untouched")

		tx := b.Begin(t)
		defer tx.Rollback(ctx(t))
		_, err = tx.Store.HoldClaim(ctx(t), thief.Token)
		require.NoError(t, err)
		require.NoError(t, tx.Effect(ctx(t)))
		require.NoError(t, tx.Commit(ctx(t)), "the current grant's hold commits with the caller's write")
		require.Equal(t, 2, b.Effects(t))
	})

	// Each part of the grant is checked on its own: a token that differs
	// from the current grant only in its fence (the same node's earlier
	// grant), only in its owner, or names a grant that ended (released,
	// finished) holds nothing, and its caller's writes cannot commit.
	t.Run("HoldChecksKeyOwnerFenceAndState", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			// stale returns a token that must hold nothing, after
			// changing the grant as the case says.
			stale func(t *testing.T, b CallerTxBackend, ep episodes.Episode, c claims.Claim) claims.Token
		}{
			{"SameNodeEarlierFence", func(t *testing.T, b CallerTxBackend, _ episodes.Episode, c claims.Claim) claims.Token {
				b.ExpireClaim(t, c.Key)
				again := acquire(t, b.EpisodesBackend, c.Key, c.Owner) // A -> A
				require.Equal(t, c.Fence+1, again.Fence)
				return c.Token
			}},
			{"LaterFence", func(t *testing.T, b CallerTxBackend, _ episodes.Episode, c claims.Claim) claims.Token {
				tok := c.Token
				tok.Fence++ // no such grant yet
				return tok
			}},
			{"AnotherOwnerSortingFirst", func(t *testing.T, b CallerTxBackend, _ episodes.Episode, c claims.Claim) claims.Token {
				tok := c.Token
				tok.Owner = "a-node" // sorts before node-a: the current fence, not this owner's grant
				return tok
			}},
			{"AnotherOwnerSortingLast", func(t *testing.T, b CallerTxBackend, _ episodes.Episode, c claims.Claim) claims.Token {
				tok := c.Token
				tok.Owner = "z-node"
				return tok
			}},
			{"Released", func(t *testing.T, b CallerTxBackend, _ episodes.Episode, c claims.Claim) claims.Token {
				require.NoError(t, b.Store.Release(ctx(t), c.Token))
				return c.Token
			}},
			{"Finished", func(t *testing.T, b CallerTxBackend, ep episodes.Episode, c claims.Claim) claims.Token {
				require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{Status: episodes.StatusDone}))
				return c.Token
			}},
			{"Failed", func(t *testing.T, b CallerTxBackend, ep episodes.Episode, c claims.Claim) claims.Token {
				require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: episodes.ClassError}))
				return c.Token
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := newBackend(t)
				ep, c := running(t, b.EpisodesBackend, "manual:pay:1", "node-a")
				tok := tc.stale(t, b, ep, c)
				doomed(t, b, func(tx CallerTx) error {
					_, err := tx.Store.HoldClaim(ctx(t), tok)
					return err
				})
			})
		}
	})
}

// doomed runs lost in a transaction of the caller's between two of the
// caller's writes, ignores its error past checking it is
// claims.ErrLeaseLost, commits, and requires that the commit failed and
// nothing of the transaction landed, and that the pool serves the next
// transaction.
func doomed(t *testing.T, b CallerTxBackend, lost func(tx CallerTx) error) {
	t.Helper()
	tx := b.Begin(t)
	defer tx.Rollback(ctx(t))
	require.NoError(t, tx.Effect(ctx(t)))
	require.ErrorIs(t, lost(tx), claims.ErrLeaseLost)
	_ = tx.Effect(ctx(t)) // ignored, as the commit's cause is
	require.Error(t, tx.Commit(ctx(t)), "a commit after ignoring ErrLeaseLost must fail")
	tx.Rollback(ctx(t))
	require.Zero(t, b.Effects(t), "nothing of the caller's transaction landed")

	next := b.Begin(t)
	defer next.Rollback(ctx(t))
	require.NoError(t, next.Effect(ctx(t)))
	require.NoError(t, next.Commit(ctx(t)), "the doomed transaction left nothing behind on the pool")
	require.Equal(t, 1, b.Effects(t))
}

// steal expires c's lease and grants it to a thief (fence + 1).
func steal(t *testing.T, b CallerTxBackend, _ episodes.Episode, c claims.Claim) *claims.Claim {
	t.Helper()
	b.ExpireClaim(t, c.Key)
	thief := acquire(t, b.EpisodesBackend, c.Key, "thief")
	require.Equal(t, c.Fence+1, thief.Fence)
	return &thief
}
