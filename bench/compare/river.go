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

// runRiver is one River round: cfg.nodes clients, each with its own pool,
// insert the round's cfg.triggers jobs from cfg.producers goroutines per
// client, every job on every client, unique by args, until each job is
// completed by its no-op worker.
func runRiver(ctx context.Context, cfg config, schema string, round int, srv *serverStats) (result, error) {
	res := result{system: sysRiver, round: round, units: cfg.triggers}
	tr := newTracker(cfg.triggers)
	var stmts stmtCounter
	uniqueByArgs := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}

	var pools []*pgxpool.Pool
	var clients []*river.Client[pgx.Tx]
	var readers sync.WaitGroup
	stopReaders := make(chan struct{})
	teardown := sync.OnceFunc(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, c := range clients {
			_ = c.Stop(stopCtx)
		}
		close(stopReaders)
		readers.Wait()
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
		workers := river.NewWorkers()
		if err := river.AddWorkerSafely(workers, river.WorkFunc(func(context.Context, *river.Job[jobArgs]) error { return nil })); err != nil {
			return res, err
		}
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			ID:      fmt.Sprintf("client-%d-round-%d", i, round),
			Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.workers}},
			Workers: workers,
			Schema:  schema,
			Logger:  cfg.logger,
		})
		if err != nil {
			return res, err
		}
		// The default buffer (1000) drops events a slow reader misses; a
		// buffer as large as the round loses none.
		events, _ := client.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: cfg.triggers + 1024, Kinds: []river.EventKind{river.EventKindJobCompleted},
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
					if ev.Job == nil || json.Unmarshal(ev.Job.EncodedArgs, &a) != nil || a.Round != round {
						continue
					}
					tr.completed(riverKey(a))
				}
			}
		})
		if err := client.Start(ctx); err != nil {
			return res, err
		}
		clients = append(clients, client)
	}

	var duplicates atomic.Int64
	return measure(ctx, cfg, srv, &stmts, tr, &res, func(ctx context.Context, fail func(error)) {
		var wg sync.WaitGroup
		for ci, client := range clients {
			for p := range cfg.producers {
				wg.Go(func() {
					batch := make([]river.InsertManyParams, 0, cfg.riverBatch)
					flush := func() bool {
						if len(batch) == 0 {
							return true
						}
						var results []*riverResult
						if cfg.riverBatch == 1 {
							r, err := client.Insert(ctx, batch[0].Args, uniqueByArgs)
							if err != nil {
								fail(fmt.Errorf("client-%d: insert: %w", ci, err))
								return false
							}
							results = append(results, r)
						} else {
							rs, err := client.InsertMany(ctx, batch)
							if err != nil {
								fail(fmt.Errorf("client-%d: insert many: %w", ci, err))
								return false
							}
							results = rs
						}
						for _, r := range results {
							if r.UniqueSkippedAsDuplicate {
								duplicates.Add(1)
							}
						}
						batch = batch[:0]
						return true
					}
					for i := p; i < cfg.triggers && ctx.Err() == nil; i += cfg.producers {
						a := jobArgs{Round: round, N: i}
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
	}, func(ctx context.Context) (int, error) {
		res.duplicates = int(duplicates.Load())
		var n int
		err := pools[0].QueryRow(ctx, `SELECT count(*) FROM river_job
			WHERE state = 'completed' AND (args->>'round')::int = $1`, round).Scan(&n)
		return n, err
	}, teardown)
}
