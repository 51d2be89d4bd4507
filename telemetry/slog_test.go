package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/telemetry"
)

func TestSlogLevelsAndAttributes(t *testing.T) {
	var buf bytes.Buffer
	obs := telemetry.NewSlog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx := context.Background()

	obs.Observe(ctx, telemetry.Event{Name: "claims.busy", Key: "k"})
	require.Empty(t, buf.String(), "routine contention stays at debug")

	obs.Observe(ctx, telemetry.Event{Name: "claims.lease_lost", Key: "k", Owner: "node-a", Fence: 3, Err: errors.New("stolen")})
	require.Contains(t, buf.String(), "level=WARN")
	require.Contains(t, buf.String(), `msg="leasehold: claims.lease_lost" key=k owner=node-a fence=3 error=stolen`)

	buf.Reset()
	obs.Observe(ctx, telemetry.Event{Name: "recovery.sweep", Owner: "node-a", Counts: map[string]int{"found": 2}})
	require.Contains(t, buf.String(), "level=INFO")
	require.Contains(t, buf.String(), "found=2")
}

// An episode event's attributes come in one stable order, the named counts
// sorted, whatever the map's iteration order.
func TestSlogEpisodeAttributesInStableOrder(t *testing.T) {
	var buf bytes.Buffer
	obs := telemetry.NewSlog(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 20 {
		buf.Reset()
		obs.Observe(context.Background(), telemetry.Event{Name: "episode.failed", Actor: "billing", Expectation: "charge",
			EpisodeID: 42, Env: "", Stack: "eu", Key: "k", Owner: "node-a", Fence: 2, Attempt: 3, ErrorClass: "panic",
			Counts: map[string]int{"z": 1, "a": 2, "m": 3}, Err: errors.New("boom")})
		require.Contains(t, buf.String(), `msg="leasehold: episode.failed" actor=billing expectation=charge episode=42 env="" stack=eu `+
			`key=k owner=node-a fence=2 attempt=3 error_class=panic a=2 m=3 z=1 error=boom`)
	}
}
