package otelmetric_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold/leasehold/telemetry"
	"github.com/leasehold/leasehold/telemetry/otelmetric"
)

func TestEventsBecomeMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs := otelmetric.New(provider.Meter("test"))
	ctx := context.Background()

	obs.Observe(ctx, telemetry.Event{Name: "claims.steal", Key: "k", Duration: 2 * time.Millisecond})
	obs.Observe(ctx, telemetry.Event{Name: "claims.steal", Key: "k2"})
	obs.Observe(ctx, telemetry.Event{Name: "claims.renewed", Count: 100})
	obs.Observe(ctx, telemetry.Event{Name: "recovery.sweep", Counts: map[string]int{"restarted": 3, "failed": 1}})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	sums := map[string]int64{}
	histCounts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sums[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					histCounts[m.Name] += p.Count
				}
			}
		}
	}
	require.Equal(t, map[string]int64{
		"leasehold.claims.steal":             2,
		"leasehold.claims.renewed":           1,
		"leasehold.claims.renewed.items":     100,
		"leasehold.recovery.sweep":           1,
		"leasehold.recovery.sweep.restarted": 3,
		"leasehold.recovery.sweep.failed":    1,
	}, sums)
	require.Equal(t, map[string]uint64{"leasehold.claims.steal.duration": 1}, histCounts)
}

// Measurements carry the bounded attributes only: actor, expectation and
// error class; never keys, episodes, owners or envs.
func TestMetricAttributesAreBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs := otelmetric.New(provider.Meter("test"))
	ctx := context.Background()
	for id := range int64(50) {
		obs.Observe(ctx, telemetry.Event{Name: "episode.failed", Actor: "billing", Expectation: "charge", EpisodeID: id,
			Key: fmt.Sprintf("k-%d", id), Owner: "node-a", Env: "rc", ErrorClass: "error"})
	}
	obs.Observe(ctx, telemetry.Event{Name: "episode.failed", Actor: "billing", Expectation: "charge", ErrorClass: "panic"})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	points := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "leasehold.episode.failed" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				var keys []string
				for _, kv := range p.Attributes.ToSlice() {
					keys = append(keys, string(kv.Key)+"="+kv.Value.AsString())
				}
				points[strings.Join(keys, ",")] += p.Value
			}
		}
	}
	require.Equal(t, map[string]int64{
		"leasehold.actor=billing,leasehold.error_class=error,leasehold.expectation=charge": 50,
		"leasehold.actor=billing,leasehold.error_class=panic,leasehold.expectation=charge": 1,
	}, points, "one series per actor, expectation and error class")
}
