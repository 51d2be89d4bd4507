package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
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

// leaseholdNode is the node configuration every workload uses: the
// trigger-request poller on, woken by NOTIFY (postgres.NewNotifier) with its
// interval (5s) as the fallback, claiming up to the actor's free slots in
// one statement (Poll.Batch = MaxConcurrent). A unit that finds no free slot
// where it is fired is created available and taken by whichever member has
// a slot; a unit that finds one runs where it was fired.
func leaseholdNode(cfg config, w workload, pool *pgxpool.Pool, store *stmtCounter, identity string, jitter time.Duration,
	obs telemetry.Observer) runner.Config {
	return runner.Config{
		Store:        postgres.New(countingDBTX{DBTX: pool, c: store}),
		Identity:     identity,
		EventJitter:  jitter,
		Poll:         runner.PollConfig{Batch: w.workers},
		TriggerWaker: postgres.NewNotifier(pool),
		Logger:       cfg.logger,
		Observer:     obs,
	}
}

const leaseholdNodeText = "the trigger-request poller on, woken by postgres.NewNotifier (TriggerWaker), " +
	"its 5s interval the fallback, Poll.Batch = workers/member; every other runner.Config field at its default"

// runLeasehold is one leasehold round of workload w: cfg.nodes nodes, each
// with its own pool, until each of the round's units has its one episode
// done. Broadcast and single fire the units from cfg.producers goroutines
// per node (Fire); bulk loads them from a trigger-only loader node
// (fireBatch) before the nodes start.
//
// Every leasehold round shares one schema, so space (not round) numbers the
// units: a unit of an earlier round would be a duplicate of an episode done.
func runLeasehold(ctx context.Context, cfg config, w workload, schema string, round, space int, eventJitter bool, srv *serverStats) (result, error) {
	res := result{system: sysLeasehold, workload: w.name, round: round, units: w.units,
		wantDups: w.duplicates(cfg.nodes), members: cfg.nodes}
	var jitter time.Duration
	if eventJitter {
		res.system, jitter = sysLeaseholdEventJitter, eventJitterWait
	}
	keys := make([]string, w.units)
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
	tr := newTracker(w.units)
	var stmts, store stmtCounter

	var pools []*pgxpool.Pool
	var started []*runner.Node
	teardown := sync.OnceFunc(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range started {
			_ = n.Stop(stopCtx)
		}
		for _, p := range pools {
			p.Close()
		}
	})
	defer teardown()
	open := func() (*pgxpool.Pool, error) {
		pool, err := newPool(ctx, cfg.url, schema, cfg.conns, &stmts)
		if err == nil {
			pools = append(pools, pool)
		}
		return pool, err
	}
	newNode := func(nc runner.Config) (*runner.Node, error) {
		node, err := runner.NewNode(nc)
		if err != nil {
			return nil, err
		}
		return node, node.Register(runner.Actor{ID: actorID, MaxConcurrent: w.workers, Expectations: []runner.Expectation{{
			ID: expectationID, Trigger: runner.Event{Name: eventName}, Strategy: noop{},
		}}})
	}
	start := func(node *runner.Node) error {
		if err := node.Start(ctx); err != nil {
			return err
		}
		started = append(started, node)
		return nil
	}
	var nodes []*runner.Node
	for i := range cfg.nodes {
		pool, err := open()
		if err != nil {
			return res, err
		}
		node, err := newNode(leaseholdNode(cfg, w, pool, &store, fmt.Sprintf("node-%d", i), jitter, completions{tr}))
		if err != nil {
			return res, err
		}
		nodes = append(nodes, node)
		if !w.bulk() {
			if err := start(node); err != nil {
				return res, err
			}
		}
	}
	var loader *runner.Node
	var loaderPool *pgxpool.Pool
	if w.bulk() {
		pool, err := open()
		if err != nil {
			return res, err
		}
		lc := leaseholdNode(cfg, w, pool, &store, "loader", 0, nil)
		lc.Mode = runner.ModeTriggerOnly // it creates the episodes and runs none
		if loader, err = newNode(lc); err != nil {
			return res, err
		}
		if err := start(loader); err != nil {
			return res, err
		}
		loaderPool = pool
	}

	var duplicates atomic.Int64
	var bs bulkStart
	produce := func(ctx context.Context, fail func(error)) {
		var wg sync.WaitGroup
		for m, units := range w.submitters(cfg.nodes, round) {
			node := nodes[m]
			for p := range cfg.producers {
				wg.Go(func() {
					for j := p; j < len(units) && ctx.Err() == nil; j += cfg.producers {
						i := units[j]
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
	}
	if w.bulk() {
		produce = func(ctx context.Context, fail func(error)) {
			load(ctx, cfg.producers, w, func(ctx context.Context, first, n int) error {
				batch := make([]jobArgs, n)
				for j := range batch {
					batch[j] = jobArgs{Round: space, N: first + j}
					tr.submitted(keys[first+j])
				}
				dups, err := fireBatch(ctx, loader, loaderPool, &store, batch)
				duplicates.Add(int64(dups))
				return err
			}, fail)
			if ctx.Err() != nil {
				return
			}
			bs.loaded = time.Now()
			// The loader is done; stopping it keeps its background work
			// out of the burn-down.
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := loader.Stop(stopCtx)
			cancel()
			if err != nil {
				fail(fmt.Errorf("stop loader: %w", err))
				return
			}
			started = started[:0] // the loader, stopped
			bs.started = time.Now()
			for _, node := range nodes {
				if err := start(node); err != nil {
					fail(err)
					return
				}
			}
			bs.up = time.Now()
		}
	}
	return measure(ctx, w, srv, &stmts, &store, tr, &res, &bs, produce, func(ctx context.Context) (dbCheck, error) {
		res.duplicates = int(duplicates.Load())
		c := dbCheck{byMember: map[int]int{}}
		// A unit ran once when its episode is on its first attempt
		// (attempts counts retries) and its work claim was granted once
		// (the fence grows with every grant).
		err := pools[0].QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE e.status = 'done'),
			count(DISTINCT e.payload->>'n') FILTER (WHERE e.status = 'done'),
			coalesce(max(greatest(e.attempts + 1, c.fence)), 0)
			FROM leasehold_episodes e LEFT JOIN leasehold_work_claims c ON c.dedupe_key = e.dedupe_key
			WHERE (e.payload->>'round')::int = $1`, space).Scan(&c.rows, &c.done, &c.distinct, &c.maxAttempts)
		if err != nil {
			return c, err
		}
		rows, err := pools[0].Query(ctx, `SELECT coalesce(owner_node, ''), count(*) FROM leasehold_episodes
			WHERE status = 'done' AND (payload->>'round')::int = $1 GROUP BY 1`, space)
		if err != nil {
			return c, err
		}
		var owner string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&owner, &n}, func() error {
			m := -1
			if _, err := fmt.Sscanf(owner, "node-%d", &m); err != nil || m < 0 || m >= cfg.nodes {
				return fmt.Errorf("episode done by %q, not by a member", owner)
			}
			c.byMember[m] += n
			return nil
		})
		return c, err
	}, teardown)
}

// fireBatch creates one batch of bulk units in one transaction of the
// caller's: one node.FireBatchTx on postgres.New(tx) (one statement for the
// whole batch), then COMMIT. It returns how many were duplicates.
func fireBatch(ctx context.Context, node *runner.Node, pool *pgxpool.Pool, store *stmtCounter, batch []jobArgs) (int, error) {
	dups := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		txStore := postgres.New(countingDBTX{DBTX: tx, c: store})
		events := make([]runner.BatchEvent, len(batch))
		for i, a := range batch {
			events[i] = runner.BatchEvent{Payload: a}
		}
		// One statement for the whole batch (CreateDeferredEpisodes), as
		// River's InsertMany.
		out, err := node.FireBatchTx(ctx, txStore, actorID, eventName, events, runner.FireOptions{})
		if err != nil {
			return fmt.Errorf("fire batch of %d: %w", len(batch), err)
		}
		for _, o := range out {
			if o.Duplicate {
				dups++
			}
		}
		return nil
	})
	return dups, err
}
