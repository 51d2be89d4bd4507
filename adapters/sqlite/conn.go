package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"time"
)

// connector opens modernc.org/sqlite's connections (sqlite.NewConnector)
// and wraps each in a conn, which routes every write through the write
// gate of the database file and does the waiting for SQLite's write lock
// itself (see the Lock section of the package documentation).
type connector struct {
	base driver.Connector
	gate *writeGate
	// wait bounds a statement's wait for the write lock, in the gate and in
	// SQLite: the DSN's busy_timeout.
	wait time.Duration
	prof *lockProfile // nil unless LockProfileEnv is set
}

// trySlice is how long SQLite itself waits for its write lock (the
// connection's PRAGMA busy_timeout) in one try: a conn tries again until
// the DSN's busy_timeout has passed, so that SQLite's busy handler, which
// sleeps longer the longer it has waited (1, 2, 5, 10 ms, ... up to 100
// ms a poll after the first quarter second), never sleeps past a few
// milliseconds; and, where there is no turn file, a write between tries
// can give its place to one of an earlier lane.
const trySlice = 10 * time.Millisecond

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	b, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := b.(driver.ExecerContext).ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", trySlice.Milliseconds()), nil); err != nil {
		_ = b.Close()
		return nil, err
	}
	level, err := synchronousOf(ctx, b)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return &conn{base: b, c: c, syncBase: level, syncNow: level}, nil
}

// syncNormal is PRAGMA synchronous NORMAL, as SQLite reports it.
const syncNormal = 1

// synchronousOf reads the connection's PRAGMA synchronous (the DSN's, FULL
// unless it says otherwise).
func synchronousOf(ctx context.Context, b driver.Conn) (int64, error) {
	rows, err := b.(driver.QueryerContext).QueryContext(ctx, "PRAGMA synchronous", nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return 0, fmt.Errorf("PRAGMA synchronous: %w", err)
	}
	level, ok := v[0].(int64)
	if !ok || level < 0 {
		return 0, fmt.Errorf("PRAGMA synchronous: unexpected %v", v[0])
	}
	return level, nil
}

// syncFor sets the connection's PRAGMA synchronous for a write of lane l,
// before the write begins: NORMAL (or the DSN's level, if lower) for a
// lease write, the DSN's level for every other. In WAL mode a NORMAL
// commit is not fsynced itself: it reaches the disk with the next commit
// that is (every later grant, finish or journal write, FULL) or the next
// checkpoint, and only a power loss or an operating-system crash can undo
// it, never a crash of a process. WAL needs shared memory, so every
// process on the file runs on this host, and such a loss ends every holder
// of every lease with it: a renewal or a release undone then keeps nobody
// running on a lease the database forgot, and WAL's frames are replayed
// in order, so no later durable commit survives without it. Grants stay
// FULL: a grant undone by a power loss could hand its fence out twice to
// systems outside the database. See the package's Lock section for what
// this saves.
func (c *conn) syncFor(ctx context.Context, l lane) error {
	want := c.syncBase
	if l == laneLease {
		want = min(want, syncNormal)
	}
	if want == c.syncNow {
		return nil
	}
	if _, err := c.base.(driver.ExecerContext).ExecContext(ctx, fmt.Sprintf("PRAGMA synchronous = %d", want), nil); err != nil {
		return err
	}
	c.syncNow = want
	return nil
}

func (c *connector) Driver() driver.Driver { return c.base.Driver() }

// conn is one of the pool's connections. Outside a transaction, a read
// runs as it is; a write statement waits for the gate, then runs in a
// BEGIN IMMEDIATE transaction of its own (which is what SQLite does for it
// in autocommit, but here the wait for the lock and the time it is held
// can be told apart), and gives the gate back when it ended. A
// transaction begun with BeginTx holds the gate from before its BEGIN
// IMMEDIATE to its end.
type conn struct {
	base driver.Conn
	c    *connector
	tx   *op // the open transaction begun through BeginTx, if any
	// syncBase is the connection's PRAGMA synchronous as opened, syncNow
	// its level now (see syncFor).
	syncBase, syncNow int64
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
)

// Unwrap returns the driver's own connection (modernc.org/sqlite's Limit
// and the like look through it).
func (c *conn) Unwrap() driver.Conn { return c.base }

func (c *conn) Close() error { return c.base.Close() }

func (c *conn) Begin() (driver.Tx, error) { return c.BeginTx(context.Background(), driver.TxOptions{}) }

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b := c.base.(driver.ConnBeginTx)
	if opts.ReadOnly { // BEGIN (deferred), for reads: not gated
		var tx driver.Tx
		err := c.retryBusy(ctx, time.Now(), func() (err error) { tx, err = b.BeginTx(ctx, opts); return err })
		if err != nil {
			return nil, err
		}
		c.tx = &op{c: c, ended: true}
		return &connTx{base: tx, c: c}, nil
	}
	o, err := c.enter(ctx, "tx")
	if err != nil {
		return nil, err
	}
	var tx driver.Tx
	if err := c.lock(ctx, o, func() (err error) { tx, err = b.BeginTx(ctx, opts); return err }); err != nil {
		o.leave(err)
		return nil, err
	}
	c.tx = o
	return &connTx{base: tx, c: c}, nil
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.base.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{base: s, c: c, info: classify(query)}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.exec(ctx, classify(query), func() (driver.Result, error) {
		return c.base.(driver.ExecerContext).ExecContext(ctx, query, args)
	})
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.query(ctx, classify(query), func() (driver.Rows, error) {
		return c.base.(driver.QueryerContext).QueryContext(ctx, query, args)
	})
}

func (c *conn) Ping(ctx context.Context) error { return c.base.(driver.Pinger).Ping(ctx) }

func (c *conn) ResetSession(ctx context.Context) error {
	return c.base.(driver.SessionResetter).ResetSession(ctx)
}

func (c *conn) IsValid() bool { return c.base.(driver.Validator).IsValid() }

// exec runs a statement that returns no rows: as it is inside a
// transaction, for a read (tried again while SQLite is busy), else as a
// gated write.
func (c *conn) exec(ctx context.Context, info stmtInfo, exec func() (driver.Result, error)) (res driver.Result, err error) {
	switch {
	case c.tx != nil:
		c.tx.saw(info)
		return exec()
	case info.kind == kindPass:
		err = c.retryBusy(ctx, time.Now(), func() (err error) { res, err = exec(); return err })
		return res, err
	}
	o, err := c.write(ctx, info)
	if err != nil {
		return nil, err
	}
	res, err = exec()
	return res, o.end(err)
}

// query is exec for a statement that returns rows (a write's RETURNING):
// the write ends when the rows are closed.
func (c *conn) query(ctx context.Context, info stmtInfo, query func() (driver.Rows, error)) (rows driver.Rows, err error) {
	switch {
	case c.tx != nil:
		c.tx.saw(info)
		return query()
	case info.kind == kindPass:
		err = c.retryBusy(ctx, time.Now(), func() (err error) { rows, err = query(); return err })
		return rows, err
	}
	o, err := c.write(ctx, info)
	if err != nil {
		return nil, err
	}
	rows, err = query()
	if err != nil {
		return nil, o.end(err)
	}
	return &writeRows{Rows: rows, o: o}, nil
}

// write takes the gate for a write statement outside a transaction and,
// for a single data-changing statement, SQLite's write lock in a BEGIN
// IMMEDIATE of its own. Any other write (DDL, a script) runs as it is,
// with SQLite waiting for the lock itself for the rest of busy_timeout.
func (c *conn) write(ctx context.Context, info stmtInfo) (*op, error) {
	o, err := c.enter(ctx, info.name)
	if err != nil {
		return nil, err
	}
	x := c.base.(driver.ExecerContext)
	if info.kind != kindDML {
		o.unsplit, o.slow = true, true
		o.locked()
		left := max(time.Until(o.start.Add(c.c.wait)), time.Millisecond)
		if _, err := x.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", left.Milliseconds()), nil); err != nil {
			o.end(err)
			return nil, err
		}
		return o, nil
	}
	err = c.lock(ctx, o, func() error { _, err := x.ExecContext(ctx, "BEGIN IMMEDIATE", nil); return err })
	switch {
	case err != nil && strings.Contains(err.Error(), "within a transaction"):
		// The connection is in a transaction the caller began with a
		// statement of its own (an Exec of BEGIN, not BeginTx): the write
		// runs in it, as it is.
		o.unsplit = true
		return o, nil
	case err != nil:
		o.leave(err)
		return nil, err
	}
	o.own = true
	if l, ok := ctx.Value(lockClockKey{}).(*lockClock); ok {
		l.at = o.lockAt
	}
	return o, nil
}

type lockClockKey struct{}

// lockClock receives the instant a write statement outside a transaction
// held the write lock (its own BEGIN IMMEDIATE had returned), so that the
// Store can start a grant's local clock there (see Store.grantStart).
type lockClock struct{ at time.Time }

func withLockClock(ctx context.Context) (context.Context, *lockClock) {
	l := &lockClock{}
	return context.WithValue(ctx, lockClockKey{}, l), l
}

// since is sent, or the instant the statement held the lock if later.
func (l *lockClock) since(sent time.Time) time.Time {
	if l.at.After(sent) {
		return l.at
	}
	return sent
}

// enter sets the connection's synchronous level for ctx's lane (syncFor),
// then waits for the gate, in that lane, then for the file's turn.
func (c *conn) enter(ctx context.Context, name string) (*op, error) {
	if err := c.syncFor(ctx, laneOf(ctx)); err != nil {
		return nil, err
	}
	g := c.c.gate
	o := &op{c: c, lane: laneOf(ctx), name: name, start: time.Now()}
	deadline := o.start.Add(c.c.wait)
	g.flagWaiting(o.lane, 1)
	o.flagged = true
	err := g.acquire(ctx, o.lane, deadline)
	o.gateWait = time.Since(o.start)
	if err == nil {
		if err = g.takeTurn(ctx, o, deadline); err != nil && !o.gateLost {
			g.release()
		}
	}
	o.unflag()
	o.turnWait = time.Since(o.start) - o.gateWait
	if err != nil {
		o.ended = true
		o.lockAt = time.Now()
		o.record(err)
		return nil, err
	}
	return o, nil
}

// lock runs begin (a BEGIN IMMEDIATE) until it has SQLite's write lock,
// for at most the rest of busy_timeout: SQLite waits trySlice for it in
// each try. With the turn, only writers outside leasehold's pools (another
// program on the file) make it wait; without a turn file, a write hands
// the gate to this process's waiting writes of earlier lanes between
// tries.
func (c *conn) lock(ctx context.Context, o *op, begin func() error) error {
	deadline := o.start.Add(c.c.wait)
	for {
		err := begin()
		if err == nil || !isBusy(err) || ctx.Err() != nil || !time.Now().Before(deadline) {
			o.locked()
			return err
		}
		if o.turn {
			continue
		}
		t := time.Now()
		yielded, err := c.c.gate.yield(ctx, o.lane, o.deferTo(), deadline)
		if yielded {
			o.gateWait += time.Since(t)
		}
		if err != nil {
			o.gateLost = true
			o.locked()
			return err
		}
	}
}

// retryBusy runs f, a read or transaction control outside a transaction,
// until SQLite is not busy, for at most busy_timeout from start.
func (c *conn) retryBusy(ctx context.Context, start time.Time, f func() error) error {
	for {
		err := f()
		if err == nil || !isBusy(err) || ctx.Err() != nil || time.Since(start) >= c.c.wait {
			return err
		}
	}
}

// isBusy reports whether err is SQLITE_BUSY: SQLite waited its trySlice
// for a lock, and the statement applied nothing.
func isBusy(err error) bool { return sqliteCode(err)&primaryCodeMask == codeBusy }

// op is one write holding the gate: a statement, or a transaction.
type op struct {
	c        *conn
	lane     lane
	name     string
	names    []string // the statements of a transaction, for the profile
	own      bool     // the statement's own BEGIN IMMEDIATE is open
	slow     bool     // the connection's busy_timeout was raised for it
	unsplit  bool     // run as it is: lock wait and hold not told apart
	flagged  bool     // counted in the gate's writers of its lane waiting
	turn     bool     // holds the file's turn
	gateLost bool     // a wait to get the gate back after yielding it failed
	start    time.Time
	gateWait time.Duration // in the gate (also while yielding to lease writes)
	turnWait time.Duration // for the file's turn
	lockAt   time.Time     // SQLite's write lock was the op's (BEGIN IMMEDIATE returned)
	commit   time.Duration // its COMMIT (the fsync of synchronous FULL)
	ended    bool
}

func (o *op) locked() { o.lockAt = time.Now() }

// deferTo is the lane that o's write stands back before: writes of the
// lanes before it, in this process and in the others on the file, go
// first. That is o's own lane, except for a write of held work that has
// waited standBack since it began: from then on only lease writes go
// before it, and takeovers no longer do.
func (o *op) deferTo() lane {
	if o.lane == laneHeld && time.Since(o.start) >= standBack {
		return laneTakeover
	}
	return o.lane
}

func (o *op) unflag() {
	if o.flagged {
		o.flagged = false
		o.c.c.gate.flagWaiting(o.lane, -1)
	}
}

// saw notes a statement run in the transaction o (nil: not in one).
func (o *op) saw(info stmtInfo) {
	if o == nil || o.c.c.prof == nil || info.kind == kindPass && !info.named {
		return
	}
	if n := len(o.names); n < 6 && (n == 0 || o.names[n-1] != info.name) {
		o.names = append(o.names, info.name)
	}
}

// end ends a statement's write: COMMIT after it succeeded, ROLLBACK after
// it failed (what autocommit does), then the gate is given back. It
// returns err, or the COMMIT's error.
func (o *op) end(err error) error {
	bg := context.Background() // the statement ran: its end must run too
	x := o.c.base.(driver.ExecerContext)
	if o.own {
		o.own = false
		if err == nil {
			t := time.Now()
			if _, cerr := x.ExecContext(bg, "COMMIT", nil); cerr != nil {
				err = cerr
			}
			o.commit = time.Since(t)
		}
		if err != nil {
			_, _ = x.ExecContext(bg, "ROLLBACK", nil) // fails when there is no transaction left
		}
	}
	if o.slow {
		o.slow = false
		if _, perr := x.ExecContext(bg, fmt.Sprintf("PRAGMA busy_timeout = %d", trySlice.Milliseconds()), nil); perr != nil && err == nil {
			err = perr
		}
	}
	o.leave(err)
	return err
}

// leave gives the turn and the gate back, once.
func (o *op) leave(err error) {
	if o.ended {
		return
	}
	o.ended = true
	if o.turn {
		o.turn = false
		o.c.c.gate.endTurn()
	}
	if !o.gateLost {
		o.c.c.gate.release()
	}
	o.record(err)
}

func (o *op) record(err error) {
	if p := o.c.c.prof; p != nil {
		p.record(o, time.Now(), err)
	}
}

// connTx is a transaction begun through BeginTx: it gives the gate back
// when it ends.
type connTx struct {
	base driver.Tx
	c    *conn
}

func (t *connTx) Commit() error {
	start := time.Now()
	err := t.base.Commit()
	if o := t.c.tx; o != nil {
		o.commit = time.Since(start)
	}
	t.done(err)
	return err
}

func (t *connTx) Rollback() error {
	err := t.base.Rollback()
	t.done(err)
	return err
}

func (t *connTx) done(err error) {
	if o := t.c.tx; o != nil {
		t.c.tx = nil
		if len(o.names) > 0 {
			o.name = "tx:" + strings.Join(o.names, "+")
		}
		o.leave(err)
	}
}

// writeRows are the rows of a gated write (RETURNING): closing them ends
// the write.
type writeRows struct {
	driver.Rows
	o   *op
	err error // the first error of Next other than io.EOF
}

func (r *writeRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err != nil && !errors.Is(err, io.EOF) && r.err == nil {
		r.err = err
	}
	return err
}

func (r *writeRows) Close() error {
	err := r.Rows.Close()
	if r.o == nil {
		return err
	}
	o := r.o
	r.o = nil
	if r.err != nil {
		return errors.Join(err, o.end(r.err))
	}
	return o.end(err)
}

func (r *writeRows) ColumnTypeScanType(i int) reflect.Type {
	if x, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return x.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *writeRows) ColumnTypeDatabaseTypeName(i int) string {
	if x, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return x.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *writeRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return x.ColumnTypeNullable(i)
	}
	return false, false
}

// stmt is a prepared statement of a conn: run as the conn runs a query.
type stmt struct {
	base driver.Stmt
	c    *conn
	info stmtInfo
}

func (s *stmt) Close() error  { return s.base.Close() }
func (s *stmt) NumInput() int { return s.base.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), named(args))
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), named(args))
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.exec(ctx, s.info, func() (driver.Result, error) {
		return s.base.(driver.StmtExecContext).ExecContext(ctx, args)
	})
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.query(ctx, s.info, func() (driver.Rows, error) {
		return s.base.(driver.StmtQueryContext).QueryContext(ctx, args)
	})
}

func named(args []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return out
}

// stmtKind is how a conn runs a statement outside a transaction.
type stmtKind int

const (
	kindPass  stmtKind = iota // a read, or transaction control: run as it is
	kindDML                   // one INSERT, UPDATE, DELETE or REPLACE (maybe WITH ...): gated, in its own BEGIN IMMEDIATE
	kindWrite                 // any other write (DDL, several statements): gated, run as it is
)

type stmtInfo struct {
	kind  stmtKind
	name  string // the "-- name:" of a leasehold statement, else its first words
	named bool   // name is a "-- name:"
}

var stmtInfos sync.Map // query -> stmtInfo

// classify tells a write from a read by the statement's text (which is
// conservative: a read taken for a write only waits for the gate).
func classify(query string) stmtInfo {
	if v, ok := stmtInfos.Load(query); ok {
		return v.(stmtInfo)
	}
	info := classifyText(query)
	stmtInfos.Store(query, info)
	return info
}

func classifyText(query string) stmtInfo {
	name, body := leadingName(query)
	words := sqlWords(body, 3)
	if len(words) == 0 {
		return stmtInfo{kind: kindPass, name: name, named: name != ""}
	}
	info := stmtInfo{kind: kindWrite, name: name, named: name != ""}
	if name == "" {
		info.name = strings.Join(words[:min(len(words), 3)], " ")
	}
	switch words[0] {
	case "SELECT", "VALUES", "EXPLAIN", "PRAGMA",
		"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE":
		info.kind = kindPass
	case "INSERT", "UPDATE", "DELETE", "REPLACE":
		info.kind = kindDML
	case "WITH":
		info.kind = kindPass
		for _, w := range sqlWords(body, -1) {
			if w == "INSERT" || w == "UPDATE" || w == "DELETE" || w == "REPLACE" {
				info.kind = kindDML
				break
			}
		}
	}
	if info.kind == kindDML && severalStatements(body) {
		info.kind = kindWrite
	}
	return info
}

// leadingName returns the name of a "-- name: X ..." first line (sqlc's
// header) and the text after the leading comments.
func leadingName(q string) (name, rest string) {
	for {
		q = strings.TrimLeft(q, " \t\r\n")
		switch {
		case strings.HasPrefix(q, "--"):
			line, after, _ := strings.Cut(q, "\n")
			if n, ok := strings.CutPrefix(strings.TrimSpace(line[2:]), "name:"); ok && name == "" {
				if f := strings.Fields(n); len(f) > 0 {
					name = f[0]
				}
			}
			q = after
		case strings.HasPrefix(q, "/*"):
			_, after, ok := strings.Cut(q[2:], "*/")
			if !ok {
				return name, ""
			}
			q = after
		default:
			return name, q
		}
	}
}

// sqlWords returns up to n (all when n < 0) upper-cased bare words of q,
// skipping comments, quoted strings and quoted identifiers.
func sqlWords(q string, n int) []string {
	var out []string
	for i := 0; i < len(q) && (n < 0 || len(out) < n); {
		ch := q[i]
		switch {
		case ch == '-' && strings.HasPrefix(q[i:], "--"):
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				return out
			}
			i += j + 1
		case ch == '/' && strings.HasPrefix(q[i:], "/*"):
			j := strings.Index(q[i+2:], "*/")
			if j < 0 {
				return out
			}
			i += j + 4
		case ch == '\'' || ch == '"' || ch == '`' || ch == '[':
			end := ch
			if ch == '[' {
				end = ']'
			}
			j := strings.IndexByte(q[i+1:], end)
			if j < 0 {
				return out
			}
			i += j + 2
		case isWordByte(ch):
			j := i
			for j < len(q) && isWordByte(q[j]) {
				j++
			}
			out = append(out, strings.ToUpper(q[i:j]))
			i = j
		default:
			i++
		}
	}
	return out
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// severalStatements reports whether q has text after a ';' that ends a
// statement (outside quotes and comments).
func severalStatements(q string) bool {
	for i := 0; i < len(q); i++ {
		switch ch := q[i]; {
		case ch == '-' && strings.HasPrefix(q[i:], "--"):
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				return false
			}
			i += j
		case ch == '/' && strings.HasPrefix(q[i:], "/*"):
			j := strings.Index(q[i+2:], "*/")
			if j < 0 {
				return false
			}
			i += j + 3
		case ch == '\'' || ch == '"' || ch == '`':
			j := strings.IndexByte(q[i+1:], ch)
			if j < 0 {
				return false
			}
			i += j + 1
		case ch == ';':
			_, rest := leadingName(q[i+1:])
			return len(sqlWords(rest, 1)) > 0
		}
	}
	return false
}
