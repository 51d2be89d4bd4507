package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// jobArgs is the unit of work both systems receive: the payload of a
// leasehold event and the args of a River job. Its JSON is what each system
// hashes for uniqueness (leasehold's event key, River's ByArgs), so a
// duplicate is "the same payload" on both sides. Round is the harness round,
// N the unit: both systems of a round get the same payloads.
type jobArgs struct {
	Round int `json:"round"`
	N     int `json:"n"`
}

// Kind implements river.JobArgs.
func (jobArgs) Kind() string { return "bench_unit" }

// tracker pairs each unit's first submission with its completion, by unit
// number, so that neither system's side formats or parses anything to find
// a unit. Latency is taken from the first submit call of a unit on any
// member (before the call, so the insert itself is inside the measured
// span) to the completion event.
type tracker struct {
	mu       sync.Mutex
	first    []time.Time
	done     []time.Time
	n        int
	lastDone time.Time
	again    int // completions of a unit already completed: must stay 0
	unknown  int // completions of a unit never submitted: must stay 0
	all      chan struct{}
}

func newTracker(units int) *tracker {
	return &tracker{first: make([]time.Time, units), done: make([]time.Time, units), all: make(chan struct{})}
}

func (t *tracker) submitted(unit int) {
	now := time.Now()
	t.mu.Lock()
	if t.first[unit].IsZero() {
		t.first[unit] = now
	}
	t.mu.Unlock()
}

// completed records unit's completion; a negative unit is one the system
// reported but the harness cannot name.
func (t *tracker) completed(unit int) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case unit < 0 || unit >= len(t.first) || t.first[unit].IsZero():
		t.unknown++
		return
	case !t.done[unit].IsZero():
		t.again++
		return
	}
	t.done[unit] = now
	t.lastDone = now
	if t.n++; t.n == len(t.done) {
		close(t.all)
	}
}

// latencies returns the sorted first-submit-to-done spans of completed units.
func (t *tracker) latencies() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]time.Duration, 0, t.n)
	for i, d := range t.done {
		if !d.IsZero() {
			out = append(out, d.Sub(t.first[i]))
		}
	}
	slices.Sort(out)
	return out
}

func (t *tracker) counts() (done, again, unknown int, last time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.again, t.unknown, t.lastDone
}

// percentile of sorted values (nearest rank); 0 when empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// stmtCounter is a pgx tracer on every pool of a system, and the only place
// the harness counts statements: each statement a pool sends is counted
// once (queries and execs, BEGIN and COMMIT included since pgx sends them
// as statements, each statement of a batch, a COPY as one), by name, and
// the transactions that ended (a statement after which the connection is
// idle, outside a transaction: an autocommit statement, a COMMIT or a
// ROLLBACK). Both systems use pgx, so the counts compare like for like and,
// unlike the server's counters, no other session on the database leaks
// into them.
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

// snapshot is the counts so far.
func (c *stmtCounter) snapshot() counts {
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

// stmtName names a statement by its sqlc header ("-- name: CreateEpisode
// :one"), which both systems' generated queries (and the ledger's insert)
// carry, else by its first keyword (BEGIN, COMMIT, LISTEN, ...).
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

// serverStats reads the server's own counters: committed transactions of
// the current database (pg_stat_database.xact_commit) and the WAL position
// (pg_current_wal_lsn, in bytes). Neither is the system's alone: other
// sessions on the database count in xact_commit, every database of the
// cluster writes WAL. Statements are not read from the server: the pools'
// tracer counts them once (stmtCounter).
type serverStats struct {
	conn *pgx.Conn
}

// read returns the current counters. Backends publish their transaction
// counts when idle, at most once a second: callers wait statsFlush before
// reading xacts; the WAL position is current.
func (s *serverStats) read(ctx context.Context) (xacts, wal int64, err error) {
	err = s.conn.QueryRow(ctx, `SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&xacts, &wal)
	return xacts, wal, err
}

// statsFlush is how long to wait for idle backends to publish their counters
// (PostgreSQL flushes pending statistics at most once a second).
const statsFlush = 1200 * time.Millisecond

// ledger: every unit either system runs inserts one row into
// compare_ledger, a table of its round's fresh schema that neither system
// knows about, so the rows are a witness of exactly-once independent of the
// systems' own bookkeeping. The primary key turns a second run of a unit
// into a unique violation, which the worker counts (duplicateRuns) and
// never hides; after the round the harness counts the rows (ledgerCheck).
const (
	// ledgerDDL is formatted with the table's schema-qualified name.
	ledgerDDL = `CREATE TABLE %s (
		system text NOT NULL,
		round int NOT NULL,
		unit bigint NOT NULL,
		PRIMARY KEY (system, round, unit))`

	// ledgerInsert is River's: a plain insert from the worker, River's way
	// to write on a job's behalf (it has no fence to check).
	ledgerInsert = `-- name: LedgerInsert
INSERT INTO compare_ledger (system, round, unit) VALUES ($1, $2, $3)`

	// ledgerInsertFenced is leasehold's: the same insert, conditioned on
	// the run's grant by leasehold_hold (migration 00009), which locks the
	// work claim row FOR SHARE until the statement's transaction ends and
	// raises LH001 unless the grant is current. One autocommit statement,
	// so the insert is inside the lock's transaction and costs the same
	// round trip as River's.
	ledgerInsertFenced = `-- name: LedgerInsert
INSERT INTO compare_ledger (system, round, unit) SELECT $1, $2, $3 FROM leasehold_hold($4, $5, $6)`
)

// ledgerDuplicate reports whether err is the ledger's unique violation: the
// unit's row is there already, so the unit ran twice.
func ledgerDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "compare_ledger_pkey"
}

// ledgerCheck counts the ledger rows of round's units 0..units-1 written
// for system (one per unit at most, by the primary key) and every other row.
func ledgerCheck(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, system string, round, units int) (rows, stray int, err error) {
	err = q.QueryRow(ctx, `SELECT count(*) FILTER (WHERE system = $1 AND round = $2 AND unit >= 0 AND unit < $3),
		count(*) FILTER (WHERE NOT (system = $1 AND round = $2 AND unit >= 0 AND unit < $3))
		FROM compare_ledger`, system, round, units).Scan(&rows, &stray)
	if err != nil {
		err = fmt.Errorf("ledger: %w", err)
	}
	return rows, stray, err
}
