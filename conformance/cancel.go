package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// runCancel: CancelEpisode decides on the database clock whether anybody
// holds the episode live. A live grant is left to its holder (flagged for
// ListCancelRequests, its lease and fence untouched, so the holder ends
// the run by its own fenced finish); an expired grant's episode ends
// canceled at once and the grant is fenced out, so its zombie's writes
// match nothing.
func runCancel(t *testing.T, newBackend func(t *testing.T) DeferredBackend) {
	t.Run("CancelFlagsALiveGrantForItsHolder", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := flowEpisode("event:a:e:cancel-live")
		n.Owner, n.Lease, n.Start = "holder", time.Minute, true
		o, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)

		c, err := b.Store.CancelEpisode(ctx(t), o.Episode.ID, nil)
		require.NoError(t, err)
		require.False(t, c.Ended, "a live grant's episode is not ended by the cancel")
		require.Equal(t, episodes.StatusRunning, c.Status)
		require.False(t, c.RequestedAt.IsZero())

		reqs, err := b.Store.ListCancelRequests(ctx(t), "holder")
		require.NoError(t, err)
		require.Equal(t, []episodes.CancelRequest{{EpisodeID: o.Episode.ID, Fence: o.Claim.Fence}}, reqs,
			"the holder is asked to cancel, at its own fence")
		require.NoError(t, b.Store.AppendStep(ctx(t), o.Episode.ID, o.Claim.Token, 1, []byte(`{}`), time.Minute),
			"the live grant is not fenced out: its holder still writes")
	})

	t.Run("CancelEndsAnExpiredGrantsEpisodeAndFencesItOut", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := flowEpisode("event:a:e:cancel-expired")
		n.Owner, n.Lease, n.Start = "zombie", time.Minute, true
		o, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		b.ExpireClaim(t, o.Claim.Key)

		c, err := b.Store.CancelEpisode(ctx(t), o.Episode.ID, nil)
		require.NoError(t, err)
		require.True(t, c.Ended, "nobody holds it live: it ends here")
		require.Equal(t, episodes.StatusCanceled, c.Status)
		require.Equal(t, episodes.StatusCanceled, get(t, EpisodesBackend{Store: b.Store}, o.Episode.ID).Status)

		reqs, err := b.Store.ListCancelRequests(ctx(t), "zombie")
		require.NoError(t, err)
		require.Empty(t, reqs, "an ended episode asks nobody to cancel it")
		require.ErrorIs(t, b.Store.Release(ctx(t), o.Claim.Token), claims.ErrNotOwner,
			"the expired grant is fenced out: its holder cannot even give it back")
		require.Empty(t, claimRequests(t, b, "poller", "", "", 10), "its request is closed")

		again, err := b.Store.CancelEpisode(ctx(t), o.Episode.ID, nil)
		require.ErrorIs(t, err, episodes.ErrNotLive, "a second cancel finds it ended (%+v)", again)
	})
}
