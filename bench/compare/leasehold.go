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
	expectationID = "unit"
	eventName     = "bench.fired"

	// ledgerLeasehold and ledgerRiver are the ledger's system column.
	ledgerLeasehold = "leasehold"
	ledgerRiver     = "river"
)

// unitStrategy is the 1-step strategy of every workload: it holds the run
// for hold (long; a wait that ends early when the run's context does), then
// writes the unit's ledger row fenced on the run's grant, and is done. The
// runner journals that step and writes the terminal status, as it would
// for real work. A ledger row already there is a second run of the unit:
// counted in dupRuns, and the step still ends (the check reports it).
type unitStrategy struct {
	pool    *pgxpool.Pool
	hold    time.Duration
	dupRuns *atomic.Int64
}

func (unitStrategy) Init(context.Context, *runner.Run) error { return nil }

func (s unitStrategy) Step(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
	if s.hold > 0 {
		if err := sleep(ctx, s.hold); err != nil {
			return runner.StepResult{}, err
		}
	}
	var a jobArgs
	if err := r.Payload(&a); err != nil {
		return runner.StepResult{}, err
	}
	t := r.Token()
	_, err := s.pool.Exec(ctx, ledgerInsertFenced, ledgerLeasehold, a.Round, a.N, t.Key, t.Owner, t.Fence)
	if ledgerDuplicate(err) {
		s.dupRuns.Add(1)
		err = nil
	}
	if err != nil {
		return runner.StepResult{}, fmt.Errorf("ledger: %w", err)
	}
	return runner.StepResult{Done: true}, nil
}

// completions feeds episode.completed events to the tracker. The event's key
// is the claim key, which for a deduplicated episode is its dedupe key: the
// map from key to unit is built before the measured span.
type completions struct {
	t    *tracker
	unit map[string]int
}

func (c completions) Observe(_ context.Context, e telemetry.Event) {
	if e.Name != runner.EventCompleted {
		return
	}
	if u, ok := c.unit[e.Key]; ok {
		c.t.completed(u)
	} else {
		c.t.completed(-1)
	}
}

// leaseholdNode is the node configuration every workload uses: the
// trigger-request poller on, woken by NOTIFY (postgres.NewNotifier) with its
// interval (5s) as the fallback, claiming up to the actor's free slots in
// one statement (Poll.Batch = MaxConcurrent). A unit that finds no free slot
// where it is fired is created available and taken by whichever member has
// a slot; a unit that finds one runs where it was fired.
func leaseholdNode(cfg config, w workload, pool *pgxpool.Pool, identity string, jitter time.Duration,
	obs telemetry.Observer) runner.Config {
	return runner.Config{
		Store:        postgres.New(pool),
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

// runLeasehold is one leasehold round of workload w in a fresh schema:
// cfg.nodes nodes, each with its own pool, until each of the round's units
// has its one episode done. Broadcast, single and long fire the units from
// cfg.producers goroutines per node (Fire); bulk loads them from a loader
// node (FireBatchTx per batch) while the nodes are started in mode
// trigger_only, then switches them to full.
func runLeasehold(ctx context.Context, cfg config, w workload, sch *schemas, sys system, round, space int, srv *serverStats) (result, error) {
	res := result{system: sys.name, workload: w.name, round: round, units: w.units,
		wantDups: w.duplicates(cfg.nodes), members: cfg.nodes}
	schema, err := sch.fresh(ctx, space, false)
	if err != nil {
		return res, err
	}
	defer sch.drop(schema)
	var jitter time.Duration
	if sys.eventJitter {
		jitter = eventJitterWait
	}
	// Everything a unit needs on either side of the span is built here.
	unitOf := make(map[string]int, w.units)
	payloads := make([]any, w.units)
	events := make([]runner.BatchEvent, w.units)
	for i := range w.units {
		a := jobArgs{Round: round, N: i}
		k, err := dedupe.EventKey(actorID, expectationID, "", a)
		if err == nil {
			k, err = dedupe.InEnv("", k)
		}
		if err != nil {
			return res, err
		}
		unitOf[k] = i
		payloads[i] = a
		events[i] = runner.BatchEvent{Payload: a}
	}
	tr := newTracker(w.units)
	var stmts stmtCounter
	var dupRuns atomic.Int64

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
	newNode := func(nc runner.Config, pool *pgxpool.Pool) (*runner.Node, error) {
		node, err := runner.NewNode(nc)
		if err != nil {
			return nil, err
		}
		return node, node.Register(runner.Actor{ID: actorID, MaxConcurrent: w.workers, Expectations: []runner.Expectation{{
			ID: expectationID, Trigger: runner.Event{Name: eventName},
			Strategy: unitStrategy{pool: pool, hold: w.hold, dupRuns: &dupRuns},
		}}})
	}
	var nodes []*runner.Node
	for i := range cfg.nodes {
		pool, err := open()
		if err != nil {
			return res, err
		}
		nc := leaseholdNode(cfg, w, pool, fmt.Sprintf("node-%d", i), jitter, completions{t: tr, unit: unitOf})
		if w.bulk() {
			nc.Mode = runner.ModeTriggerOnly // the gate: no poll until the load is in
		}
		node, err := newNode(nc, pool)
		if err != nil {
			return res, err
		}
		nodes = append(nodes, node)
	}
	var loader *runner.Node
	var loaderPool *pgxpool.Pool
	if w.bulk() {
		if loaderPool, err = open(); err != nil {
			return res, err
		}
		lc := leaseholdNode(cfg, w, loaderPool, "loader", 0, nil)
		lc.Mode = runner.ModeTriggerOnly // it creates the episodes and runs none
		if loader, err = newNode(lc, loaderPool); err != nil {
			return res, err
		}
		nodes = append(nodes, loader) // started with the members, stopped once the load is in
	}
	began := time.Now()
	for _, node := range nodes {
		if err := node.Start(ctx); err != nil {
			return res, err
		}
		started = append(started, node)
	}
	res.startUp = time.Since(began)
	nodes = nodes[:cfg.nodes]

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
						tr.submitted(i)
						out, err := node.Fire(ctx, actorID, eventName, payloads[i], runner.FireOptions{})
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
				for i := first; i < first+n; i++ {
					tr.submitted(i)
				}
				dups, err := fireBatch(ctx, loader, loaderPool, events[first:first+n])
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
			started = started[:cfg.nodes]
			bs.opened = time.Now()
			for _, node := range nodes {
				if err := node.SetMode(runner.ModeFull); err != nil {
					fail(err)
					return
				}
			}
		}
	}
	return measure(ctx, w, srv, &stmts, tr, &res, &bs, produce, func(ctx context.Context) (dbCheck, error) {
		res.duplicates = int(duplicates.Load())
		res.dupRuns = int(dupRuns.Load())
		c := dbCheck{byMember: map[int]int{}}
		// A unit ran once when its episode is on its first attempt
		// (attempts counts retries) and its work claim was granted once
		// (the fence grows with every grant).
		err := pools[0].QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE e.status = 'done'),
			count(DISTINCT e.payload->>'n') FILTER (WHERE e.status = 'done'),
			coalesce(max(greatest(e.attempts + 1, c.fence)), 0)
			FROM leasehold_episodes e LEFT JOIN leasehold_work_claims c ON c.dedupe_key = e.dedupe_key`).
			Scan(&c.rows, &c.done, &c.distinct, &c.maxAttempts)
		if err != nil {
			return c, err
		}
		if c.ledger, c.stray, err = ledgerCheck(ctx, pools[0], ledgerLeasehold, round, w.units); err != nil {
			return c, err
		}
		rows, err := pools[0].Query(ctx, `SELECT coalesce(owner_node, ''), count(*) FROM leasehold_episodes
			WHERE status = 'done' GROUP BY 1`)
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
// caller's: one node.FireBatchTx on postgres.New(tx) (one
// CreateDeferredEpisodes statement for the whole batch, as River's
// InsertMany), then COMMIT. It returns how many were duplicates.
func fireBatch(ctx context.Context, node *runner.Node, pool *pgxpool.Pool, events []runner.BatchEvent) (int, error) {
	dups := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		out, err := node.FireBatchTx(ctx, postgres.New(tx), actorID, eventName, events, runner.FireOptions{})
		if err != nil {
			return fmt.Errorf("fire batch of %d: %w", len(events), err)
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
