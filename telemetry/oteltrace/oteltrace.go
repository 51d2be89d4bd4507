// Package oteltrace bridges leasehold's tracing hook (telemetry.Tracer) to
// OpenTelemetry traces. It lives in its own package so that the core
// packages stay free of the OpenTelemetry dependency: runner imports only
// telemetry.
//
// Spans:
//
//	leasehold.episode <actor>/<expectation>   one per attempt, on the node that runs it;
//	                                           a child of the span that fired the trigger
//	leasehold.step <actor>/<expectation>      one per Step call, a child of its attempt
//
// The trigger's span context crosses nodes through the database: Inject's
// W3C traceparent (and tracestate) is stored with the episode, and each
// attempt's span is started from it, so an overflow, a retry on another
// node, or a recovery continues the same trace. Attributes:
// leasehold.actor, leasehold.expectation, leasehold.episode_id,
// leasehold.attempt, leasehold.fence, leasehold.key, leasehold.node,
// leasehold.env, leasehold.step (steps); at the end leasehold.status (done,
// failed, canceled, retrying, lease_lost, released; ok or error for a step)
// and leasehold.error_class, with the span's status Error for a failure.
package oteltrace

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/telemetry"
)

// Tracer implements telemetry.Tracer with an OpenTelemetry tracer and the
// W3C trace-context propagator.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

// New returns a Tracer on provider, e.g. otel.GetTracerProvider().
func New(provider trace.TracerProvider) *Tracer {
	return &Tracer{tracer: provider.Tracer("github.com/leasehold/leasehold")}
}

var _ telemetry.Tracer = (*Tracer)(nil)

// Inject implements telemetry.Tracer.
func (t *Tracer) Inject(ctx context.Context) string {
	c := propagation.MapCarrier{}
	t.prop.Inject(ctx, c)
	tp := c.Get("traceparent")
	if tp == "" {
		return ""
	}
	if ts := c.Get("tracestate"); ts != "" {
		return tp + ";" + ts
	}
	return tp
}

// Start implements telemetry.Tracer.
func (t *Tracer) Start(ctx context.Context, name, parent string, a telemetry.SpanAttrs) (context.Context, telemetry.Span) {
	if parent != "" {
		tp, ts, _ := strings.Cut(parent, ";")
		ctx = t.prop.Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": ts})
	}
	attrs := []attribute.KeyValue{
		attribute.String("leasehold.actor", a.Actor),
		attribute.String("leasehold.expectation", a.Expectation),
		attribute.Int64("leasehold.episode_id", a.EpisodeID),
		attribute.Int("leasehold.attempt", int(a.Attempt)),
		attribute.Int64("leasehold.fence", a.Fence),
		attribute.String("leasehold.key", a.Key),
		attribute.String("leasehold.node", a.Node),
		attribute.String("leasehold.env", a.Env),
	}
	if a.Step > 0 {
		attrs = append(attrs, attribute.Int("leasehold.step", int(a.Step)))
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	return ctx, span{s}
}

type span struct{ trace.Span }

// End implements telemetry.Span.
func (s span) End(status, errorClass string, err error) {
	s.SetAttributes(attribute.String("leasehold.status", status))
	if errorClass != "" {
		s.SetAttributes(attribute.String("leasehold.error_class", errorClass))
	}
	switch status {
	case "failed", "retrying", "lease_lost", "error":
		desc := status
		if errorClass != "" {
			desc += ": " + errorClass
		}
		s.SetStatus(codes.Error, desc)
	}
	if err != nil {
		s.RecordError(err)
	}
	s.Span.End()
}
