package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// An orphan is excluded from recovery by its own open trigger request
// (pollers hand it over instead), never by another episode's: a later
// episode waiting in the queue leaves an orphan recoverable.
func TestClaimForRecoveryIgnoresOtherEpisodesRequests(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	o := startedEpisode(t, s, "orphan", "dead")
	pgtest.ExpireClaim(t, pool, o.Claim.Key)
	_, err := s.CreateDeferredEpisode(t.Context(), episodes.Deferred{New: episodes.New{ActorID: "a", ExpectationID: "e",
		TriggerType: episodes.TriggerEvent, DedupeKey: "later", MaxAttempts: 3}, SourceNode: "trigger-node"})
	require.NoError(t, err)

	ep, c, err := s.ClaimForRecovery(t.Context(), o.Episode.ID, "sweeper", time.Minute, time.Minute)
	require.NoError(t, err, "an orphan was left for another episode's request")
	require.Equal(t, o.Episode.ID, ep.ID)
	require.Equal(t, o.Claim.Fence+1, c.Fence)
}
