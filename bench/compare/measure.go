package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/db"
)

// jobArgs is the unit of work both systems receive: the payload of a
// leasehold event and the args of a River job. Its JSON is what each system
// hashes for uniqueness (leasehold's event key, River's ByArgs), so a
// duplicate is "the same payload" on both sides. Round numbers the run the
// unit belongs to, so that no unit repeats one of an earlier run.
type jobArgs struct {
	Round int `json:"round"`
	N     int `json:"n"`
}

// Kind implements river.JobArgs.
func (jobArgs) Kind() string { return "bench_noop" }

// tracker pairs each unit's first submission with its completion. Latency is
// taken from the first submit call of a unit on any node (before the call,
// so the insert itself is inside the measured span) to the completion event.
type tracker struct {
	mu       sync.Mutex
	target   int
	first    map[string]time.Time
	done     map[string]time.Time
	lastDone time.Time
	again    int // completions of a unit already completed: must stay 0
	unknown  int // completions of a unit never submitted: must stay 0
	all      chan struct{}
}

func newTracker(target int) *tracker {
	return &tracker{
		target: target, first: make(map[string]time.Time, target), done: make(map[string]time.Time, target),
		all: make(chan struct{}),
	}
}

func (t *tracker) submitted(key string) {
	now := time.Now()
	t.mu.Lock()
	if _, ok := t.first[key]; !ok {
		t.first[key] = now
	}
	t.mu.Unlock()
}

func (t *tracker) completed(key string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch _, seen := t.done[key]; {
	case seen:
		t.again++
		return
	case t.first[key].IsZero():
		t.unknown++
		return
	}
	t.done[key] = now
	t.lastDone = now
	if len(t.done) == t.target {
		close(t.all)
	}
}

// latencies returns the sorted first-submit-to-done spans of completed units.
func (t *tracker) latencies() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]time.Duration, 0, len(t.done))
	for k, d := range t.done {
		out = append(out, d.Sub(t.first[k]))
	}
	slices.Sort(out)
	return out
}

func (t *tracker) counts() (done, again, unknown int, last time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.done), t.again, t.unknown, t.lastDone
}

// percentile of sorted values (nearest rank); 0 when empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// stmtCounter is a pgx tracer that counts what a system's pools send: every
// statement (queries and execs, BEGIN and COMMIT included since pgx sends
// them as statements, each statement of a batch, COPY), by name, and the
// transactions that ended (a statement after which the connection is idle,
// outside a transaction: an autocommit statement, a COMMIT or a ROLLBACK).
// Both systems use pgx, so the counts compare like for like and, unlike the
// server's counters, no other session on the database leaks into them.
type stmtCounter struct {
	mu     sync.Mutex
	n      int64
	xacts  int64
	byName map[string]int64
}

// counts is a snapshot of a stmtCounter.
type counts struct {
	stmts, xacts int64
	byName       map[string]int64
}

func (c *stmtCounter) statement(sql string) {
	name := stmtName(sql)
	c.mu.Lock()
	c.n++
	if c.byName == nil {
		c.byName = map[string]int64{}
	}
	c.byName[name]++
	c.mu.Unlock()
}

func (c *stmtCounter) ended(conn *pgx.Conn) {
	if conn.PgConn().TxStatus() != 'I' {
		return
	}
	c.mu.Lock()
	c.xacts++
	c.mu.Unlock()
}

// snapshot is the counts so far; a nil counter has none.
func (c *stmtCounter) snapshot() counts {
	if c == nil {
		return counts{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := counts{stmts: c.n, xacts: c.xacts, byName: make(map[string]int64, len(c.byName))}
	for k, v := range c.byName {
		s.byName[k] = v
	}
	return s
}

// minus returns what was counted between before and c.
func (c counts) minus(before counts) counts {
	d := counts{stmts: c.stmts - before.stmts, xacts: c.xacts - before.xacts, byName: map[string]int64{}}
	for k, v := range c.byName {
		if v -= before.byName[k]; v != 0 {
			d.byName[k] = v
		}
	}
	return d
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.statement(d.SQL)
	return ctx
}
func (c *stmtCounter) TraceQueryEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceQueryEndData) {
	c.ended(conn)
}
func (c *stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *stmtCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.statement(d.SQL)
}
func (c *stmtCounter) TraceBatchEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	c.ended(conn)
}
func (c *stmtCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.statement("COPY")
	return ctx
}
func (c *stmtCounter) TraceCopyFromEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceCopyFromEndData) {
	c.ended(conn)
}

// countingDBTX is the db.DBTX under a leasehold Store (postgres.New): it
// counts every statement the Store sends, by sqlc name, as
// runner/bench_test.go counts them. Unlike the pool's tracer it sees only
// leasehold's own statements: no BEGIN or COMMIT of the caller's
// transactions, no LISTEN of the notifier.
type countingDBTX struct {
	db.DBTX
	c *stmtCounter
}

func (d countingDBTX) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	d.c.statement(sql)
	return d.DBTX.Exec(ctx, sql, args...)
}

func (d countingDBTX) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	d.c.statement(sql)
	return d.DBTX.Query(ctx, sql, args...)
}

func (d countingDBTX) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.c.statement(sql)
	return d.DBTX.QueryRow(ctx, sql, args...)
}

// stmtName names a statement by its sqlc header ("-- name: CreateEpisode
// :one"), which both systems' generated queries carry, else by its first
// keyword (BEGIN, COMMIT, LISTEN, ...).
func stmtName(sql string) string {
	for line := range strings.Lines(sql) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "-- name:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return f[0]
			}
		}
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		word, _, _ := strings.Cut(line, " ")
		return strings.ToUpper(strings.TrimRight(word, ";"))
	}
	return "?"
}

// serverStats reads the server's own counters for the current database.
// With pg_stat_statements preloaded it counts executed statements; otherwise
// it falls back to committed transactions from pg_stat_database. Both are
// database-wide: other sessions on the same database are counted too.
type serverStats struct {
	conn       *pgx.Conn
	statements bool // pg_stat_statements is usable
}

// what names the counter in the report.
func (s *serverStats) what() string {
	if s.statements {
		return "db stmts/unit"
	}
	return "db xacts/unit"
}

// detectServerStats uses pg_stat_statements only when the server preloads it:
// creating the extension without the preload gives a view that errors.
func detectServerStats(ctx context.Context, conn *pgx.Conn) (*serverStats, string) {
	s := &serverStats{conn: conn}
	var preload string
	if err := conn.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&preload); err != nil {
		return s, fmt.Sprintf("cannot read shared_preload_libraries (%v)", err)
	}
	if !strings.Contains(preload, "pg_stat_statements") {
		return s, "pg_stat_statements is not in shared_preload_libraries"
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return s, fmt.Sprintf("CREATE EXTENSION pg_stat_statements failed (%v)", err)
	}
	s.statements = true
	if _, err := s.read(ctx); err != nil {
		s.statements = false
		return s, fmt.Sprintf("pg_stat_statements unreadable (%v)", err)
	}
	return s, "pg_stat_statements"
}

// read returns the current counter. Backends publish their statistics when
// idle, at most once a second: callers wait statsFlush before reading.
func (s *serverStats) read(ctx context.Context) (int64, error) {
	q := `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`
	if s.statements {
		// The extension may live in any schema; the view is found through
		// the admin connection's default search_path.
		q = `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`
	}
	var n int64
	err := s.conn.QueryRow(ctx, q).Scan(&n)
	return n, err
}

// statsFlush is how long to wait for idle backends to publish their counters
// (PostgreSQL flushes pending statistics at most once a second).
const statsFlush = 1200 * time.Millisecond
