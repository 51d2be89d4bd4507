package telemetry

import "context"

// Tracer starts the spans of episode attempts and steps; the core packages
// never import a tracing library themselves. telemetry/oteltrace bridges
// it to OpenTelemetry. A nil Tracer traces nothing.
//
// The trace crosses nodes through the database: when a trigger creates an
// episode, Inject's value (the W3C trace context of the trigger's span) is
// stored with it (episodes.New.TraceParent, column trace_parent), and every
// attempt's span, on whichever node runs it (after an overflow, a retry or
// a recovery), is started as a child of that stored context.
type Tracer interface {
	// Inject returns the W3C trace context (traceparent, then ";" and the
	// tracestate when there is one) of ctx's span, "" when ctx has none.
	Inject(ctx context.Context) string
	// Start starts a span named name: a child of the stored trace context
	// parent when it is set, else of ctx's span. The returned context
	// carries the new span (the strategy's context does, so the work's own
	// spans nest under it).
	Start(ctx context.Context, name, parent string, attrs SpanAttrs) (context.Context, Span)
}

// SpanAttrs are what a span says of its episode: all bounded except the
// episode ID and the key, which traces (unlike metrics) carry.
type SpanAttrs struct {
	Actor, Expectation, Key, Node, Env string
	EpisodeID                          int64
	Attempt                            int32
	Fence                              int64
	Step                               int32 // 0 for an attempt's span
}

// Span is one started span.
type Span interface {
	// End ends the span with how the attempt or step ended: status (done,
	// failed, canceled, retrying, lease_lost, released, or ok for a step),
	// its error class, and err for a failure.
	End(status, errorClass string, err error)
}

// NoSpan is the span of a nil Tracer.
type NoSpan struct{}

// End implements Span.
func (NoSpan) End(string, string, error) {}
