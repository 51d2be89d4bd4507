// Package otelmetric bridges leasehold's telemetry events to OpenTelemetry
// metrics. It lives in its own package so that the core packages stay free
// of the OpenTelemetry dependency.
//
// Every event name becomes instruments named after it, prefixed "leasehold.":
//
//	leasehold.<event>           counter, +1 per event          (leasehold.claims.steal)
//	leasehold.<event>.items     counter, + the event's Count   (leases renewed by one statement)
//	leasehold.<event>.<name>    counter, + each named count    (leasehold.recovery.sweep.restarted)
//	leasehold.<event>.duration  histogram, seconds             (acquire latency)
//
// Attributes are bounded on purpose: leasehold.actor, leasehold.expectation
// and leasehold.error_class, each only when the event carries it. Their
// cardinality is that of your registered actors and expectations times
// leasehold's error classes (error, panic, budget_exceeded, canceled,
// orphaned, recovery_exhausted, trigger_expired) plus the classes your
// strategies' FailTx calls use. Keys, episode IDs, owners, envs and
// payloads are unbounded and never become attributes; logs (telemetry.Slog)
// and traces carry them.
package otelmetric

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/telemetry"
)

// Observer records telemetry events as OpenTelemetry metrics.
type Observer struct {
	meter metric.Meter

	mu         sync.Mutex
	counters   map[string]metric.Int64Counter
	histograms map[string]metric.Float64Histogram
}

// New returns an Observer recording on meter, e.g.
// otel.GetMeterProvider().Meter("github.com/leasehold/leasehold").
func New(meter metric.Meter) *Observer {
	return &Observer{meter: meter, counters: map[string]metric.Int64Counter{}, histograms: map[string]metric.Float64Histogram{}}
}

var _ telemetry.Observer = (*Observer)(nil)

// Observe implements telemetry.Observer. Instruments are created on first
// use; an instrument that cannot be created is skipped (the meter reports
// why through OpenTelemetry's error handler).
func (o *Observer) Observe(ctx context.Context, e telemetry.Event) {
	name := "leasehold." + e.Name
	set := metric.WithAttributeSet(Attributes(e))
	o.add(ctx, name, 1, set)
	if e.Count > 0 {
		o.add(ctx, name+".items", int64(e.Count), set)
	}
	for k, v := range e.Counts {
		o.add(ctx, name+"."+k, int64(v), set)
	}
	if e.Duration > 0 {
		if h, ok := o.histogram(name + ".duration"); ok {
			h.Record(ctx, e.Duration.Seconds(), set)
		}
	}
}

// Attributes are the bounded attributes of e's measurements: actor,
// expectation and error class, each only when set.
func Attributes(e telemetry.Event) attribute.Set {
	kv := make([]attribute.KeyValue, 0, 3)
	if e.Actor != "" {
		kv = append(kv, attribute.String("leasehold.actor", e.Actor))
	}
	if e.Expectation != "" {
		kv = append(kv, attribute.String("leasehold.expectation", e.Expectation))
	}
	if e.ErrorClass != "" {
		kv = append(kv, attribute.String("leasehold.error_class", e.ErrorClass))
	}
	return attribute.NewSet(kv...)
}

func (o *Observer) add(ctx context.Context, name string, n int64, opts ...metric.AddOption) {
	o.mu.Lock()
	c, ok := o.counters[name]
	if !ok {
		var err error
		if c, err = o.meter.Int64Counter(name); err != nil {
			o.mu.Unlock()
			return
		}
		o.counters[name] = c
	}
	o.mu.Unlock()
	c.Add(ctx, n, opts...)
}

func (o *Observer) histogram(name string) (metric.Float64Histogram, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.histograms[name]
	if !ok {
		var err error
		if h, err = o.meter.Float64Histogram(name, metric.WithUnit("s")); err != nil {
			return nil, false
		}
		o.histograms[name] = h
	}
	return h, true
}
