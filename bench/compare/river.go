package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

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

// riverUniqueDuplicate reports whether err is InsertManyFast meeting a job
// unique by args that is there already: River's COPY cannot skip it, so
// the call fails whole with the unique index's violation.
func riverUniqueDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "river_job_unique_idx"
}

// argsText is River's args of unit n in round as River hands them back in
// a completed event: the jsonb column's text (keys sorted by length, a
// space after each colon and comma). Completions are matched on it, so that
// no event is decoded inside the measured span; one that does not match
// is decoded instead.
func argsText(round, n int) string { return fmt.Sprintf(`{"n": %d, "round": %d}`, n, round) }

// runRiver is one River round of workload w in a fresh schema: cfg.nodes
// clients, each with its own pool, until each of the round's jobs is
// completed by its worker (which holds it for w.hold, then writes the
// unit's ledger row). Broadcast, single and long insert the jobs from
// cfg.producers goroutines per client, one job per call (Insert, or
// InsertManyFast) or -river-batch per call (InsertMany, InsertManyFast);
// bulk loads them in batches from a loader client that works nothing,
// while the clients are started with their queue paused, then resumes it.
func runRiver(ctx context.Context, cfg config, w workload, sch *schemas, sys system, round, space int, srv *serverStats) (result, error) {
	res := result{system: sys.name, workload: w.name, round: round, units: w.units,
		wantDups: w.duplicates(cfg.nodes), members: cfg.nodes}
	schema, err := sch.fresh(ctx, space, true)
	if err != nil {
		return res, err
	}
	defer sch.drop(schema)
	// Everything a unit needs on either side of the span is built here.
	var opts *river.InsertOpts
	if sys.variant.unique {
		opts = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	}
	params := make([]river.InsertManyParams, w.units)
	unitOf := make(map[string]int, w.units)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobArgs{Round: round, N: i}, InsertOpts: opts}
		unitOf[argsText(round, i)] = i
	}
	tr := newTracker(w.units)
	var stmts stmtCounter
	var dupRuns atomic.Int64

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
	if w.bulk() {
		// The gate: a paused queue row before any client starts, so every
		// producer starts paused (River keeps paused_at when a producer
		// registers the queue), until the loader's QueueResume.
		if _, err := sch.admin.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "river_queue"}.Sanitize()+
			` (name, paused_at, updated_at) VALUES ($1, now(), now())`, river.QueueDefault); err != nil {
			return res, fmt.Errorf("pause queue: %w", err)
		}
	}
	for i := range cfg.nodes {
		pool, err := open()
		if err != nil {
			return res, err
		}
		workers := river.NewWorkers()
		work := func(ctx context.Context, job *river.Job[jobArgs]) error {
			if w.hold > 0 {
				if err := sleep(ctx, w.hold); err != nil {
					return err
				}
			}
			_, err := pool.Exec(ctx, ledgerInsert, ledgerRiver, job.Args.Round, job.Args.N)
			if ledgerDuplicate(err) {
				dupRuns.Add(1)
				return nil
			}
			return err
		}
		if err := river.AddWorkerSafely(workers, river.WorkFunc(work)); err != nil {
			return res, err
		}
		id := fmt.Sprintf("client-%d", i)
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
					tr.completed(completedUnit(ev, unitOf, round))
				}
			}
		})
		clients = append(clients, client)
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
	began := time.Now()
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			return res, err
		}
		started = append(started, c)
	}
	res.startUp = time.Since(began)

	var duplicates atomic.Int64
	// insert sends batch (one job or more) through client, the variant's
	// way, and counts what River reports as duplicates.
	insert := func(ctx context.Context, client *river.Client[pgx.Tx], batch []river.InsertManyParams) error {
		var err error
		switch {
		case sys.variant.fast:
			_, err = client.InsertManyFast(ctx, batch)
			if riverUniqueDuplicate(err) && len(batch) == 1 {
				duplicates.Add(1)
				return nil
			}
		case len(batch) == 1:
			var r *rivertype.JobInsertResult
			if r, err = client.Insert(ctx, batch[0].Args, batch[0].InsertOpts); err == nil && r.UniqueSkippedAsDuplicate {
				duplicates.Add(1)
			}
		default:
			var rs []*rivertype.JobInsertResult
			rs, err = client.InsertMany(ctx, batch)
			for _, r := range rs {
				if r.UniqueSkippedAsDuplicate {
					duplicates.Add(1)
				}
			}
		}
		return err
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
						if err := insert(ctx, client, batch); err != nil {
							fail(fmt.Errorf("client-%d: insert: %w", ci, err))
							return false
						}
						batch = batch[:0]
						return true
					}
					for j := p; j < len(units) && ctx.Err() == nil; j += cfg.producers {
						i := units[j]
						tr.submitted(i)
						batch = append(batch, params[i])
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
				for i := first; i < first+n; i++ {
					tr.submitted(i)
				}
				if err := insert(ctx, loader, params[first:first+n]); err != nil {
					return fmt.Errorf("loader: insert: %w", err)
				}
				return nil
			}, fail)
			if ctx.Err() != nil {
				return
			}
			bs.loaded = time.Now()
			bs.opened = bs.loaded
			if err := loader.QueueResume(ctx, river.QueueDefault, nil); err != nil {
				fail(fmt.Errorf("resume queue: %w", err))
			}
		}
	}
	return measure(ctx, w, srv, &stmts, tr, &res, &bs, produce, func(ctx context.Context) (dbCheck, error) {
		res.duplicates = int(duplicates.Load())
		res.dupRuns = int(dupRuns.Load())
		c := dbCheck{byMember: map[int]int{}}
		err := pools[0].QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'completed'),
			count(DISTINCT args->>'n') FILTER (WHERE state = 'completed'), coalesce(max(attempt), 0)
			FROM river_job`).Scan(&c.rows, &c.done, &c.distinct, &c.maxAttempts)
		if err != nil {
			return c, err
		}
		if c.ledger, c.stray, err = ledgerCheck(ctx, pools[0], ledgerRiver, round, w.units); err != nil {
			return c, err
		}
		rows, err := pools[0].Query(ctx, `SELECT coalesce(attempted_by[cardinality(attempted_by)], ''), count(*) FROM river_job
			WHERE state = 'completed' GROUP BY 1`)
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

// completedUnit names the unit of a completed event: by its args' text, else
// (a format River may change) by decoding them; -1 when neither works.
func completedUnit(ev *river.Event, unitOf map[string]int, round int) int {
	if ev.Job == nil {
		return -1
	}
	if u, ok := unitOf[string(ev.Job.EncodedArgs)]; ok {
		return u
	}
	var a jobArgs
	if json.Unmarshal(ev.Job.EncodedArgs, &a) != nil || a.Round != round {
		return -1
	}
	return a.N
}
