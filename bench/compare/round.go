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
	round      int
	units      int
	wall       time.Duration    // first submit to the later of last done and last submit returned
	lat        []time.Duration  // sorted, per unit
	stmts      int64            // statements the system's pools sent during wall
	xacts      int64            // transactions they ended during wall
	byName     map[string]int64 // stmts by statement name
	srv        int64            // server counter delta (see serverStats), -1 if unread
	duplicates int              // submissions the system reported as duplicates
	dbDone     int              // units done in the database at the end
	again      int              // second completion events for one unit
	unknown    int              // completion events for units never submitted
}

func (r result) throughput() float64 { return float64(r.units) / r.wall.Seconds() }

// measure runs produce (which submits every unit on every node and returns
// when its own calls have returned), waits until every unit is done, and
// fills res. verify counts the round's done units in the database; teardown
// stops the system and closes its pools, which makes every backend publish
// its statistics as it exits, before the server counter is read again.
func measure(ctx context.Context, cfg config, srv *serverStats, stmts *stmtCounter, tr *tracker, res *result,
	produce func(ctx context.Context, fail func(error)), verify func(ctx context.Context) (int, error), teardown func(),
) (result, error) {
	if err := sleep(ctx, settle); err != nil {
		return *res, err
	}
	srvBefore, srvErr := srv.read(ctx)
	countsBefore := stmts.snapshot()

	runCtx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, errTimeout)
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
	done, again, unknown, lastDone := tr.counts()
	res.again, res.unknown = again, unknown
	if failErr != nil {
		return *res, failErr
	}
	if done < res.units {
		return *res, fmt.Errorf("%s round %d: %d of %d done after %v: %w", res.system, res.round, done, res.units,
			time.Since(start).Round(time.Millisecond), context.Cause(runCtx))
	}
	end := lastDone
	if lastSubmit.After(end) {
		end = lastSubmit
	}
	res.wall = end.Sub(start)
	res.lat = tr.latencies()
	res.stmts, res.xacts, res.byName = used.stmts, used.xacts, used.byName

	n, err := verify(ctx)
	if err != nil {
		return *res, fmt.Errorf("%s round %d: verify: %w", res.system, res.round, err)
	}
	res.dbDone = n
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
