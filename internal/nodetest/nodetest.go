// Package nodetest runs several leasehold nodes in one process against one
// fresh Postgres schema, each with its own pool and identity, and lets tests
// wait on episode endings instead of sleeping.
package nodetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// Signals records telemetry and signals each episode ending.
type Signals struct {
	telemetry.Recorder
	ended chan telemetry.Event
}

// NewSignals returns an empty Signals.
func NewSignals() *Signals { return &Signals{ended: make(chan telemetry.Event, 100_000)} }

// Observe implements telemetry.Observer.
func (s *Signals) Observe(ctx context.Context, e telemetry.Event) {
	s.Recorder.Observe(ctx, e)
	switch e.Name {
	case runner.EventCompleted, runner.EventFailed, runner.EventCanceled, runner.EventLeaseLost, runner.EventReleased, runner.EventNotStarted:
		s.ended <- e
	}
}

// Ended delivers each episode ending (as WaitEnded counts them), for code
// without a testing.TB (runnable examples).
func (s *Signals) Ended() <-chan telemetry.Event { return s.ended }

// seen lists each node's telemetry, in order, by event name and count
// (runs of one name counted together), for a failure that says where
// the runs stopped.
func seen(sigs []*Signals) string {
	var b strings.Builder
	for i, s := range sigs {
		fmt.Fprintf(&b, "[node %d:", i)
		events := s.Events()
		for j := 0; j < len(events); {
			k := j
			for k < len(events) && events[k].Name == events[j].Name {
				k++
			}
			fmt.Fprintf(&b, " %s×%d", events[j].Name, k-j)
			j = k
		}
		b.WriteString("] ")
	}
	return b.String()
}

// WaitEnded waits for n episode endings (completed, failed, canceled, lease
// lost, released, not started) across sigs, failing after a minute, and
// returns them in the order they were received.
func WaitEnded(t testing.TB, n int, sigs ...*Signals) []telemetry.Event {
	t.Helper()
	merged := make(chan telemetry.Event)
	stop := make(chan struct{})
	defer close(stop)
	for _, s := range sigs {
		go func() {
			for {
				select {
				case e := <-s.ended:
					select {
					case merged <- e:
					case <-stop:
						return
					}
				case <-stop:
					return
				}
			}
		}()
	}
	deadline := time.After(time.Minute)
	ended := make([]telemetry.Event, 0, n)
	for i := range n {
		select {
		case e := <-merged:
			ended = append(ended, e)
		case <-deadline:
			t.Fatalf("only %d of %d episodes ended; what the nodes reported: %s", i, n, seen(sigs))
		}
	}
	return ended
}

// Seen says what each of sigs reported so far: event names in order, with
// counts, for a failing assertion's message.
func Seen(sigs ...*Signals) string { return seen(sigs) }

// Strategy adapts functions to runner.Strategy; a nil InitFunc does nothing.
type Strategy struct {
	InitFunc func(ctx context.Context, r *runner.Run) error
	StepFunc func(ctx context.Context, r *runner.Run) (runner.StepResult, error)
}

// Init implements runner.Strategy.
func (f Strategy) Init(ctx context.Context, r *runner.Run) error {
	if f.InitFunc == nil {
		return nil
	}
	return f.InitFunc(ctx, r)
}

// Step implements runner.Strategy.
func (f Strategy) Step(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
	return f.StepFunc(ctx, r)
}

// Cluster is n started nodes on one schema.
type Cluster struct {
	Pool  *pgxpool.Pool // for assertions and test-only statements
	Nodes []*runner.Node
	Sigs  []*Signals
}

// Start starts n nodes named node-0 … node-n-1 on a fresh schema, all
// registering actors, with jitter off; tune adjusts each node's config.
func Start(t testing.TB, n int, tune func(i int, cfg *runner.Config), actors ...runner.Actor) Cluster {
	t.Helper()
	return StartOn(t, pgtest.Schema(t), n, tune, nil, actors...)
}

// StartOn is Start on an existing schema's pool; before, when set, is
// called with each node after Register and before Start (to attach a
// workflow engine, say).
func StartOn(t testing.TB, schema *pgxpool.Pool, n int, tune func(i int, cfg *runner.Config),
	before func(i int, node *runner.Node), actors ...runner.Actor) Cluster {
	t.Helper()
	c := Cluster{Pool: schema}
	for i := range n {
		sig := NewSignals()
		pool := pgtest.Another(t, c.Pool, pgtest.Options{MaxConns: 8})
		cfg := runner.Config{
			Store:        postgres.New(pool),
			TriggerWaker: postgres.NewNotifier(pool),
			Identity:     fmt.Sprintf("node-%d", i),
			NoJitter:     true,
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Observer:     sig,
		}
		if tune != nil {
			tune(i, &cfg)
		}
		node, err := runner.NewNode(cfg)
		require.NoError(t, err)
		for _, a := range actors {
			require.NoError(t, node.Register(a))
		}
		if before != nil {
			before(i, node)
		}
		require.NoError(t, node.Start(context.Background()))
		t.Cleanup(func() {
			// No grace: a test's hung steps are cancelled at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = node.Stop(ctx)
		})
		c.Nodes = append(c.Nodes, node)
		c.Sigs = append(c.Sigs, sig)
	}
	return c
}

// Count counts episodes matching a test-only WHERE clause.
func (c Cluster) Count(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, c.Pool.QueryRow(context.Background(), "SELECT count(*) FROM leasehold_episodes WHERE "+where, args...).Scan(&n))
	return n
}
