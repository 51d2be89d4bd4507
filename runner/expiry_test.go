package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// Deferred work waits for a full node however long an outage lasts: with
// the default PollConfig (no TTL) an episode made available 30 days ago is
// still taken and run when a full node comes back, never canceled. A TTL
// is opt-in; with one, the same episode expires: it ends canceled.
func TestDeferredWorkNeverExpiresByDefault(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			d, err := postgres.New(pool).CreateDeferredEpisode(context.Background(), episodes.Deferred{
				New: episodes.New{ActorID: "monitor", ExpectationID: "check", TriggerType: episodes.TriggerEvent,
					DedupeKey: "event:monitor:check:outage", MaxAttempts: 3},
			})
			require.NoError(t, err)
			// The only full node was down for 30 days.
			pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET created_at = now() - interval '30 days', run_after = now() - interval '30 days' WHERE id = $1`, d.Episode.ID)

			ended := make(chan telemetry.Event, 2)
			want := runner.EventCompleted
			if ttl > 0 {
				want = runner.EventRequestExpired
			}
			nodetest.StartOn(t, pool, 1, func(_ int, cfg *runner.Config) {
				cfg.Poll.TTL = ttl
				cfg.Observer = watch{Observer: cfg.Observer, name: want, ch: ended}
			}, nil, eventActor(oneStep, 1))
			select {
			case <-ended:
			case <-time.After(time.Minute):
				t.Fatalf("no %s within a minute", want)
			}
			var status, class string
			require.NoError(t, pool.QueryRow(context.Background(),
				`SELECT status, coalesce(error_class, '') FROM leasehold_episodes WHERE id = $1`, d.Episode.ID).Scan(&status, &class))
			if ttl == 0 {
				require.Equal(t, "done", status, "deferred work must not be lost to a default expiry")
				return
			}
			require.Equal(t, "canceled", status)
			require.Equal(t, episodes.ClassTriggerExpired, class)
		})
	}
}
