package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

type riverResult = rivertype.JobInsertResult

// riverKey names a River job in the tracker by its args.
func riverKey(a jobArgs) string { return fmt.Sprintf("%d/%d", a.Round, a.N) }

// riverClient is the client configuration of every member (and, without
// queues, of bulk's loader): -river-config's fetch settings, the workload's
// workers as MaxWorkers, every other field at River's default.
func riverClient(cfg config, w workload, id, schema string, workers *river.Workers) *river.Config {
	rc := &river.Config{ID: id, Schema: schema, Logger: cfg.logger}
	if workers != nil {
		rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: w.workers}}
		rc.Workers = workers
	}
	if cfg.riverConfig == riverTuned {
		rc.FetchCooldown, rc.FetchPollInterval = riverTunedFetchCooldown, riverTunedFetchPollInterval
	}
	return rc
}

// runRiver is one River round of workload w: cfg.nodes clients, each with
// its own pool, until each of the round's jobs (unique by args) is completed
// by its no-op worker. Broadcast and single insert the jobs from
// cfg.producers goroutines per client (Insert, or InsertMany with
// -river-batch); bulk loads them with InsertMany from a loader client that
// works nothing, before the clients start. space numbers the units, as for
// leasehold.
func runRiver(ctx context.Context, cfg config, w workload, schema string, round, space int, srv *serverStats) (result, error) {
	res := result{system: sysRiver, workload: w.name, round: round, units: w.units,
		wantDups: w.duplicates(cfg.nodes), members: cfg.nodes}
	tr := newTracker(w.units)
	var stmts stmtCounter
	uniqueByArgs := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}

	var pools []*pgxpool.Pool
	var clients []*river.Client[pgx.Tx]
	var started []*river.Client[pgx.Tx]
	ids := map[string]int{}
	var readers sync.WaitGroup
	stopReaders := make(chan struct{})
	teardown := sync.OnceFunc(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, c := range started {
			_ = c.Stop(stopCtx)
		}
		close(stopReaders)
		readers.Wait()
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
	for i := range cfg.nodes {
		pool, err := open()
		if err != nil {
			return res, err
		}
		workers := river.NewWorkers()
		if err := river.AddWorkerSafely(workers, river.WorkFunc(func(context.Context, *river.Job[jobArgs]) error { return nil })); err != nil {
			return res, err
		}
		id := fmt.Sprintf("client-%d-space-%d", i, space)
		ids[id] = i
		client, err := river.NewClient(riverpgxv5.New(pool), riverClient(cfg, w, id, schema, workers))
		if err != nil {
			return res, err
		}
		// The default buffer (1000) drops events a slow reader misses; a
		// buffer as large as the round loses none.
		events, _ := client.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: w.units + 1024, Kinds: []river.EventKind{river.EventKindJobCompleted},
		})
		readers.Go(func() {
			for {
				select {
				case <-stopReaders:
					return
				case ev, ok := <-events:
					if !ok {
						return
					}
					var a jobArgs
					if ev.Job == nil || json.Unmarshal(ev.Job.EncodedArgs, &a) != nil || a.Round != space {
						continue
					}
					tr.completed(riverKey(a))
				}
			}
		})
		clients = append(clients, client)
	}
	start := func(c *river.Client[pgx.Tx]) error {
		if err := c.Start(ctx); err != nil {
			return err
		}
		started = append(started, c)
		return nil
	}
	if !w.bulk() {
		for _, c := range clients {
			if err := start(c); err != nil {
				return res, err
			}
		}
	}
	var loader *river.Client[pgx.Tx]
	if w.bulk() {
		pool, err := open()
		if err != nil {
			return res, err
		}
		// Never started: an insert-only client, as river bench inserts
		// before its client starts.
		if loader, err = river.NewClient(riverpgxv5.New(pool), riverClient(cfg, w, "loader", schema, nil)); err != nil {
			return res, err
		}
	}

	var duplicates atomic.Int64
	count := func(results []*riverResult) {
		for _, r := range results {
			if r.UniqueSkippedAsDuplicate {
				duplicates.Add(1)
			}
		}
	}
	var bs bulkStart
	produce := func(ctx context.Context, fail func(error)) {
		var wg sync.WaitGroup
		for ci, units := range w.submitters(cfg.nodes, round) {
			client := clients[ci]
			for p := range cfg.producers {
				wg.Go(func() {
					batch := make([]river.InsertManyParams, 0, cfg.riverBatch)
					flush := func() bool {
						if len(batch) == 0 {
							return true
						}
						if cfg.riverBatch == 1 {
							r, err := client.Insert(ctx, batch[0].Args, uniqueByArgs)
							if err != nil {
								fail(fmt.Errorf("client-%d: insert: %w", ci, err))
								return false
							}
							count([]*riverResult{r})
						} else {
							rs, err := client.InsertMany(ctx, batch)
							if err != nil {
								fail(fmt.Errorf("client-%d: insert many: %w", ci, err))
								return false
							}
							count(rs)
						}
						batch = batch[:0]
						return true
					}
					for j := p; j < len(units) && ctx.Err() == nil; j += cfg.producers {
						a := jobArgs{Round: space, N: units[j]}
						tr.submitted(riverKey(a))
						batch = append(batch, river.InsertManyParams{Args: a, InsertOpts: uniqueByArgs})
						if len(batch) == cfg.riverBatch && !flush() {
							return
						}
					}
					flush()
				})
			}
		}
		wg.Wait()
	}
	if w.bulk() {
		produce = func(ctx context.Context, fail func(error)) {
			load(ctx, cfg.producers, w, func(ctx context.Context, first, n int) error {
				batch := make([]river.InsertManyParams, n)
				for j := range batch {
					a := jobArgs{Round: space, N: first + j}
					tr.submitted(riverKey(a))
					batch[j] = river.InsertManyParams{Args: a, InsertOpts: uniqueByArgs}
				}
				rs, err := loader.InsertMany(ctx, batch)
				if err != nil {
					return fmt.Errorf("loader: insert many: %w", err)
				}
				count(rs)
				return nil
			}, fail)
			if ctx.Err() != nil {
				return
			}
			bs.loaded = time.Now()
			bs.started = bs.loaded
			for _, c := range clients {
				if err := start(c); err != nil {
					fail(err)
					return
				}
			}
			bs.up = time.Now()
		}
	}
	return measure(ctx, w, srv, &stmts, nil, tr, &res, &bs, produce, func(ctx context.Context) (dbCheck, error) {
		res.duplicates = int(duplicates.Load())
		c := dbCheck{byMember: map[int]int{}}
		err := pools[0].QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'completed'),
			count(DISTINCT args->>'n') FILTER (WHERE state = 'completed'), coalesce(max(attempt), 0)
			FROM river_job WHERE (args->>'round')::int = $1`, space).Scan(&c.rows, &c.done, &c.distinct, &c.maxAttempts)
		if err != nil {
			return c, err
		}
		rows, err := pools[0].Query(ctx, `SELECT coalesce(attempted_by[cardinality(attempted_by)], ''), count(*) FROM river_job
			WHERE state = 'completed' AND (args->>'round')::int = $1 GROUP BY 1`, space)
		if err != nil {
			return c, err
		}
		var by string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&by, &n}, func() error {
			m, ok := ids[by]
			if !ok {
				return fmt.Errorf("job completed by %q, not by a member", by)
			}
			c.byMember[m] += n
			return nil
		})
		return c, err
	}, teardown)
}
