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
