package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	sysLeasehold            = "leasehold"
	sysLeaseholdEventJitter = "leasehold/eventjitter"
	sysRiver                = "River"

	// eventJitterWait is the Config.EventJitter of the eventjitter variant:
	// up to this long a random wait inside each Fire, to spread the wins.
	eventJitterWait = 200 * time.Millisecond
)

// settle is the pause between starting a system's nodes or clients and the
// first submission: start-up work (River's leader election and queue
// registration, leasehold's membership row) stays out of the measured span,
// and the server publishes the counters of the set-up sessions.
const settle = 1500 * time.Millisecond

var errTimeout = errors.New("round timed out")

// result is one round of one system.
type result struct {
	system     string
	workload   string
	round      int
	units      int
	wall       time.Duration    // first submit to the later of last done and last submit returned
	burn       time.Duration    // bulk: the members' start to the last done; 0 otherwise
	insert     time.Duration    // bulk: the load before the members start; 0 otherwise
	startUp    time.Duration    // bulk: the members' Start calls, inside burn
	lat        []time.Duration  // sorted, per unit
	stmts      int64            // statements the system's pools sent during wall
	xacts      int64            // transactions they ended during wall
	begins     int64            // of stmts, BEGINs
	storeStmts int64            // leasehold: statements its Stores sent (a db.DBTX wrapper); -1 for River
	byName     map[string]int64 // stmts by statement name
	srv        int64            // server counter delta (see serverStats), -1 if unread
	duplicates int              // submissions the system reported as duplicates
	wantDups   int              // submissions that must be reported as duplicates
	db         dbCheck          // the database's view of the round's units at the end
	members    int
	again      int // second completion events for one unit
	unknown    int // completion events for units never submitted
}

// throughput is units per second: over the burn-down for bulk (the load
// before it is reported apart, as insertRate), over the wall time otherwise.
func (r result) throughput() float64 {
	if r.burn > 0 {
		return float64(r.units) / r.burn.Seconds()
	}
	return float64(r.units) / r.wall.Seconds()
}

// insertRate is bulk's load, in units per second; 0 otherwise.
func (r result) insertRate() float64 {
	if r.insert <= 0 {
		return 0
	}
	return float64(r.units) / r.insert.Seconds()
}

// dbCheck is what the database says, at the end of a round, about the rows
// of that round's units.
type dbCheck struct {
	rows        int // rows of the round's units (episodes, jobs), whatever their state
	done        int // of them done (leasehold) or completed (River)
	distinct    int // distinct units among the done rows
	maxAttempts int // the highest attempt count among them: 1 when no unit ran twice
	byMember    map[int]int
}

// add pools d into c.
func (c *dbCheck) add(d dbCheck) {
	c.rows += d.rows
	c.done += d.done
	c.distinct += d.distinct
	c.maxAttempts = max(c.maxAttempts, d.maxAttempts)
	if c.byMember == nil {
		c.byMember = map[int]int{}
	}
	for m, n := range d.byMember {
		c.byMember[m] += n
	}
}

// exactlyOnce reports whether every unit of r was done exactly once: one
// done row per unit and no other row, no row attempted twice, one completion
// event per unit, and the expected duplicates reported.
func (r result) exactlyOnce() bool {
	return r.db.rows == r.units && r.db.done == r.units && r.db.distinct == r.units && r.db.maxAttempts == 1 &&
		r.again == 0 && r.unknown == 0 && r.duplicates == r.wantDups
}

// bulkStart is set by a bulk round's produce: loaded when the load is in,
// started just before the first member's Start call (the burn-down is timed
// from there, so both systems' start-up is inside it), up when the last
// Start call returned.
type bulkStart struct {
	loaded, started, up time.Time
}

// measure runs produce (which submits every unit and returns when its own
// calls have returned; for bulk it loads every unit, then starts the members
// and records when in bs), waits until every unit is done, and fills res.
// store, when not nil, counts the statements of leasehold's Stores
// (countingDBTX). verify reads the round's units from the database; teardown stops the
// system and closes its pools, which makes every backend publish its
// statistics as it exits, before the server counter is read again.
func measure(ctx context.Context, w workload, srv *serverStats, stmts, store *stmtCounter, tr *tracker, res *result, bs *bulkStart,
	produce func(ctx context.Context, fail func(error)), verify func(ctx context.Context) (dbCheck, error), teardown func(),
) (result, error) {
	if err := sleep(ctx, settle); err != nil {
		return *res, err
	}
	srvBefore, srvErr := srv.read(ctx)
	countsBefore, storeBefore := stmts.snapshot(), store.snapshot()

	runCtx, cancel := context.WithTimeoutCause(ctx, w.timeout, errTimeout)
	defer cancel()
	var failOnce sync.Once
	var failErr error
	fail := func(err error) {
		failOnce.Do(func() {
			failErr = err
			cancel()
		})
	}
	start := time.Now()
	produced := make(chan time.Time, 1)
	go func() {
		produce(runCtx, fail)
		produced <- time.Now()
	}()
	select {
	case <-tr.all:
	case <-runCtx.Done():
	}
	lastSubmit := <-produced
	used := stmts.snapshot().minus(countsBefore)
	res.storeStmts = -1
	if store != nil {
		res.storeStmts = store.snapshot().minus(storeBefore).stmts
	}
	done, again, unknown, lastDone := tr.counts()
	res.again, res.unknown = again, unknown
	if failErr != nil {
		return *res, failErr
	}
	if done < res.units {
		return *res, fmt.Errorf("%s %s round %d: %d of %d done after %v: %w", w.name, res.system, res.round, done, res.units,
			time.Since(start).Round(time.Millisecond), context.Cause(runCtx))
	}
	end := lastDone
	if lastSubmit.After(end) {
		end = lastSubmit
	}
	res.wall = end.Sub(start)
	if bs != nil && !bs.started.IsZero() {
		res.insert = bs.loaded.Sub(start)
		res.burn = lastDone.Sub(bs.started)
		res.startUp = bs.up.Sub(bs.started)
	}
	res.lat = tr.latencies()
	res.stmts, res.xacts, res.begins, res.byName = used.stmts, used.xacts, used.byName["BEGIN"], used.byName

	check, err := verify(ctx)
	if err != nil {
		return *res, fmt.Errorf("%s %s round %d: verify: %w", w.name, res.system, res.round, err)
	}
	res.db = check
	teardown()
	res.srv = -1
	if srvErr == nil {
		if err := sleep(ctx, statsFlush); err != nil {
			return *res, err
		}
		if after, err := srv.read(ctx); err == nil {
			res.srv = after - srvBefore
		}
	}
	return *res, nil
}

// newPool opens a pool whose search_path is schema alone, counting its
// statements with tracer.
func newPool(ctx context.Context, url, schema string, maxConns int, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.ConnConfig.RuntimeParams["search_path"] = schema
	pc.MaxConns = int32(maxConns)
	pc.ConnConfig.Tracer = tracer
	return pgxpool.NewWithConfig(ctx, pc)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
