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

	// eventJitterWait is the Config.EventJitter of the eventjitter variant:
	// up to this long a random wait inside each Fire, to spread the wins.
	eventJitterWait = 200 * time.Millisecond
)

// settle is the pause between the members' Start calls having returned and
// the measured span: start-up work (River's leader election and queue
// registration, leasehold's membership row) stays out of it, and the
// server publishes the counters of the set-up sessions (the migrations
// among them).
const settle = 1500 * time.Millisecond

var errTimeout = errors.New("round timed out")

// result is one round of one system.
type result struct {
	system     string
	workload   string
	round      int
	units      int
	wall       time.Duration    // first submit to the later of last done and last submit returned
	burn       time.Duration    // bulk: the gate's opening (every member started before) to the last done; 0 otherwise
	insert     time.Duration    // bulk: the load, while the members are started but gated; 0 otherwise
	startUp    time.Duration    // the members' Start calls, before the measured span
	lat        []time.Duration  // sorted, per unit
	stmts      int64            // statements the system's pools sent during the measured span
	xacts      int64            // transactions they ended during it
	begins     int64            // of stmts, BEGINs
	byName     map[string]int64 // stmts by statement name
	dbXacts    int64            // server: xact_commit delta (database-wide), -1 if unread
	wal        int64            // server: WAL bytes written during the measured span (cluster-wide), -1 if unread
	duplicates int              // submissions the system reported as duplicates
	wantDups   int              // submissions that must be reported as duplicates
	dupRuns    int              // ledger inserts that found the unit's row there already: second runs
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
	ledger      int // ledger rows of the round's units (at most one each)
	stray       int // ledger rows of anything else
	byMember    map[int]int
}

// add pools d into c.
func (c *dbCheck) add(d dbCheck) {
	c.rows += d.rows
	c.done += d.done
	c.distinct += d.distinct
	c.maxAttempts = max(c.maxAttempts, d.maxAttempts)
	c.ledger += d.ledger
	c.stray += d.stray
	if c.byMember == nil {
		c.byMember = map[int]int{}
	}
	for m, n := range d.byMember {
		c.byMember[m] += n
	}
}

// lost is how many units have no ledger row.
func (r result) lost() int { return r.units - r.db.ledger }

// exactlyOnce reports whether every unit of r was done exactly once: one
// done row per unit and no other row, no row attempted twice, one ledger
// row per unit and no second run, one completion event per unit, and the
// expected duplicates reported.
func (r result) exactlyOnce() bool {
	return r.db.rows == r.units && r.db.done == r.units && r.db.distinct == r.units && r.db.maxAttempts == 1 &&
		r.lost() == 0 && r.dupRuns == 0 && r.db.stray == 0 &&
		r.again == 0 && r.unknown == 0 && r.duplicates == r.wantDups
}

// bulkStart is set by a bulk round's produce: loaded when the load is in,
// opened just before the gate opens (the burn-down is timed from there;
// every member's Start returned before the measured span began).
type bulkStart struct {
	loaded, opened time.Time
}

// measure runs produce (which submits every unit and returns when its own
// calls have returned; for bulk it loads every unit, then opens the gate
// and records when in bs), waits until every unit is done, and fills res.
// Every member's Start has returned before measure is called. verify reads
// the round's units from the database; teardown stops the system and
// closes its pools, which makes every backend publish its statistics as it
// exits, before the server's transaction counter is read again.
func measure(ctx context.Context, w workload, srv *serverStats, stmts *stmtCounter, tr *tracker, res *result, bs *bulkStart,
	produce func(ctx context.Context, fail func(error)), verify func(ctx context.Context) (dbCheck, error), teardown func(),
) (result, error) {
	if err := sleep(ctx, settle); err != nil {
		return *res, err
	}
	xactsBefore, walBefore, srvErr := srv.read(ctx)
	countsBefore := stmts.snapshot()

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
	res.wal = -1
	if srvErr == nil {
		if _, walAfter, err := srv.read(ctx); err == nil {
			res.wal = walAfter - walBefore
		}
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
	if bs != nil && !bs.opened.IsZero() {
		res.insert = bs.loaded.Sub(start)
		res.burn = lastDone.Sub(bs.opened)
	}
	res.lat = tr.latencies()
	res.stmts, res.xacts, res.begins, res.byName = used.stmts, used.xacts, used.byName["BEGIN"], used.byName

	check, err := verify(ctx)
	if err != nil {
		return *res, fmt.Errorf("%s %s round %d: verify: %w", w.name, res.system, res.round, err)
	}
	res.db = check
	teardown()
	res.dbXacts = -1
	if srvErr == nil {
		if err := sleep(ctx, statsFlush); err != nil {
			return *res, err
		}
		if after, _, err := srv.read(ctx); err == nil {
			res.dbXacts = after - xactsBefore
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
