package oteltrace_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry/oteltrace"
)

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// The trace crosses nodes through the database: a trigger fired inside a
// request's span on node-0 (trigger_only) runs on node-1; its first attempt
// fails and is retried; both attempts' spans are children of the request's
// span, in its trace, and each step's span a child of its attempt's.
func TestTraceCrossesNodesAndRetries(t *testing.T) {
	t.Parallel()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	tracer := oteltrace.New(provider)

	flaky := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		if r.Attempt == 1 {
			return runner.StepResult{}, errors.New("gateway timeout")
		}
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.Start(t, 2, func(i int, cfg *runner.Config) {
		cfg.Tracer = tracer
		cfg.Poll.Interval = 50 * time.Millisecond
		if i == 0 {
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Event{Name: "order.placed"},
		Strategy: flaky, MaxAttempts: 3, Retry: runner.RetryPolicy{Backoff: time.Millisecond}}}})

	ctx, request := provider.Tracer("app").Start(context.Background(), "POST /orders")
	out, err := c.Nodes[0].Fire(ctx, "pay", "order.placed", map[string]int{"order": 1}, runner.FireOptions{})
	require.NoError(t, err)
	request.End()
	nodetest.WaitEnded(t, 1, c.Sigs[1])

	// The attempt's span ends as its run returns, just after the event.
	var attempts, steps []tracetest.SpanStub
	require.Eventually(t, func() bool {
		attempts, steps = nil, nil
		for _, s := range exporter.GetSpans() {
			switch s.Name {
			case "leasehold.episode pay/charge":
				attempts = append(attempts, s)
			case "leasehold.step pay/charge":
				steps = append(steps, s)
			}
		}
		return len(attempts) == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Len(t, attempts, 2, "one span per attempt")
	require.Len(t, steps, 2, "one span per step")
	byID := map[string]tracetest.SpanStub{}
	for _, a := range attempts {
		require.Equal(t, request.SpanContext().TraceID(), a.SpanContext.TraceID(), "the request's trace")
		require.Equal(t, request.SpanContext().SpanID(), a.Parent.SpanID(), "a child of the span that fired the trigger")
		require.Equal(t, out[0].EpisodeID, attr(a, "leasehold.episode_id").AsInt64())
		require.Equal(t, "node-1", attr(a, "leasehold.node").AsString(), "run on the other node")
		byID[a.SpanContext.SpanID().String()] = a
	}
	for _, s := range steps {
		parent, ok := byID[s.Parent.SpanID().String()]
		require.True(t, ok, "a step's span is a child of an attempt's")
		require.Equal(t, attr(parent, "leasehold.attempt"), attr(s, "leasehold.attempt"))
	}
	status := map[int64]string{}
	for _, a := range attempts {
		status[attr(a, "leasehold.attempt").AsInt64()] = attr(a, "leasehold.status").AsString()
		if attr(a, "leasehold.attempt").AsInt64() == 1 {
			require.Equal(t, codes.Error, a.Status.Code)
			require.Equal(t, "error", attr(a, "leasehold.error_class").AsString())
		}
	}
	require.Equal(t, map[int64]string{1: "retrying", 2: "done"}, status)
}
