package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

const (
	actorID       = "bench"
	expectationID = "noop"
	eventName     = "bench.fired"
)

// noop is the 1-step strategy: Init does nothing, the first step is done.
// The runner still journals that step and writes the terminal status, as it
// would for real work.
type noop struct{}

func (noop) Init(context.Context, *runner.Run) error { return nil }
func (noop) Step(context.Context, *runner.Run) (runner.StepResult, error) {
	return runner.StepResult{Done: true}, nil
}

// completions feeds episode.completed events to the tracker. The event's key
// is the claim key, which for a deduplicated episode is its dedupe key.
type completions struct{ t *tracker }

func (c completions) Observe(_ context.Context, e telemetry.Event) {
	if e.Name == runner.EventCompleted {
		c.t.completed(e.Key)
	}
}

// runLeasehold is one leasehold round: cfg.nodes nodes, each with its own
// pool, fire the round's cfg.triggers events from cfg.producers goroutines
// per node, every event on every node, until each event's one episode is done.
//
// Both variants share one schema, so space (not round) numbers the units:
// a unit of an earlier run would be a duplicate of an episode already done.
func runLeasehold(ctx context.Context, cfg config, schema string, round, space int, eventJitter bool, srv *serverStats) (result, error) {
	res := result{system: sysLeasehold, round: round, units: cfg.triggers}
	var jitter time.Duration
	if eventJitter {
		res.system, jitter = sysLeaseholdEventJitter, eventJitterWait
	}
	keys := make([]string, cfg.triggers)
	for i := range keys {
		k, err := dedupe.EventKey(actorID, expectationID, "", jobArgs{Round: space, N: i})
		if err == nil {
			k, err = dedupe.InEnv("", k)
		}
		if err != nil {
			return res, err
		}
		keys[i] = k
	}
	tr := newTracker(cfg.triggers)
	var stmts stmtCounter

	var pools []*pgxpool.Pool
	var nodes []*runner.Node
	teardown := sync.OnceFunc(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range nodes {
			_ = n.Stop(stopCtx)
		}
		for _, p := range pools {
			p.Close()
		}
	})
	defer teardown()
	for i := range cfg.nodes {
		pool, err := newPool(ctx, cfg.url, schema, cfg.conns, &stmts)
		if err != nil {
			return res, err
		}
		pools = append(pools, pool)
		node, err := runner.NewNode(runner.Config{
			Store:       postgres.New(pool),
			Identity:    fmt.Sprintf("node-%d", i),
			EventJitter: jitter,
			// Every node is full: there are no trigger requests to poll.
			Poll:     runner.PollConfig{Disabled: true},
			Logger:   cfg.logger,
			Observer: completions{tr},
		})
		if err != nil {
			return res, err
		}
		err = node.Register(runner.Actor{ID: actorID, MaxConcurrent: cfg.workers, Expectations: []runner.Expectation{{
			ID: expectationID, Trigger: runner.Event{Name: eventName}, Strategy: noop{},
		}}})
		if err != nil {
			return res, err
		}
		if err := node.Start(ctx); err != nil {
			return res, err
		}
		nodes = append(nodes, node)
	}

	var duplicates atomic.Int64
	return measure(ctx, cfg, srv, &stmts, tr, &res, func(ctx context.Context, fail func(error)) {
		var wg sync.WaitGroup
		for _, node := range nodes {
			for p := range cfg.producers {
				wg.Go(func() {
					for i := p; i < cfg.triggers && ctx.Err() == nil; i += cfg.producers {
						tr.submitted(keys[i])
						out, err := node.Fire(ctx, actorID, eventName, jobArgs{Round: space, N: i}, runner.FireOptions{})
						if err != nil {
							fail(fmt.Errorf("%s: fire %d: %w", node.ID(), i, err))
							return
						}
						for _, o := range out {
							if o.Duplicate {
								duplicates.Add(1)
							}
						}
					}
				})
			}
		}
		wg.Wait()
	}, func(ctx context.Context) (int, error) {
		res.duplicates = int(duplicates.Load())
		var n int
		err := pools[0].QueryRow(ctx, `SELECT count(*) FROM leasehold_episodes
			WHERE status = 'done' AND (payload->>'round')::int = $1`, space).Scan(&n)
		return n, err
	}, teardown)
}
