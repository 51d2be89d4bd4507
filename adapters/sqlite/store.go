package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
)

// DriverName is the database/sql driver Open uses: modernc.org/sqlite's.
const DriverName = "sqlite"

// BusyTimeout is how long a write waits for the database write lock, in
// its process's write gate, for the file's turn and in SQLite (see the
// package's Lock section; a DSN's _busy_timeout sets another), before it
// fails with SQLITE_BUSY, which the Store reports as claims.ErrRetryable:
// nothing was applied. A read that SQLite finds busy (WAL recovery) is
// tried again as long. Each connection's own PRAGMA busy_timeout is one
// try, 10 ms. Write
// transactions here last milliseconds, so a wait that long means the holder
// is stuck (a process frozen inside a write transaction); ten seconds is far
// beyond any healthy queue of writers on one host, and short enough that a
// writer behind a frozen one gets its error back well within the default
// lease (claims.DefaultLease, two minutes) and retries.
const BusyTimeout = 10 * time.Second

// dsnParams are the driver parameters Open adds: WAL (readers never block
// the writer nor it them; several processes share the file), the busy
// timeout, foreign keys (the schema's ON DELETE CASCADE), synchronous FULL
// (a committed grant survives a power loss, as on a server database) and
// _txlock=immediate, so that every transaction begun with BeginTx is BEGIN
// IMMEDIATE: it takes the write lock when it begins, never mid-way, where
// a deferred transaction that read first would fail SQLITE_BUSY_SNAPSHOT.
// required lists those a DSN may not set otherwise.
var (
	dsnParams = [][2]string{
		{"_busy_timeout", fmt.Sprint(BusyTimeout.Milliseconds())},
		{"_journal_mode", "WAL"},
		{"_foreign_keys", "1"},
		{"_synchronous", "FULL"},
		{"_txlock", "immediate"},
	}
	required = map[string]string{"_journal_mode": "WAL", "_foreign_keys": "1", "_txlock": "immediate"}
	// aliases are modernc.org/sqlite's second names for the same keys.
	aliases = map[string]string{"_timeout": "_busy_timeout", "_fk": "_foreign_keys", "_journal": "_journal_mode", "_sync": "_synchronous"}
)

// DSN returns dsn (a file path, or a "file:" URI) with the parameters Open
// adds (see BusyTimeout and dsnParams): those the DSN already sets are
// kept, and it fails when the DSN sets journal mode, foreign keys or the
// transaction lock to anything else, which the Store's guarantees rest on.
func DSN(dsn string) (string, error) {
	if dsn == "" {
		return "", fmt.Errorf("%w: sqlite: empty database path", claims.ErrInvalid)
	}
	base, rawQuery, _ := strings.Cut(dsn, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", fmt.Errorf("%w: sqlite: DSN %q: %w", claims.ErrInvalid, dsn, err)
	}
	set := map[string]string{}
	for k, v := range q {
		if a, ok := aliases[k]; ok {
			k = a
		}
		set[k] = v[len(v)-1]
	}
	var add []string
	for _, p := range dsnParams {
		v, ok := set[p[0]]
		if !ok {
			add = append(add, p[0]+"="+url.QueryEscape(p[1]))
			continue
		}
		if want, strict := required[p[0]]; strict && !sameSetting(p[0], v, want) {
			return "", fmt.Errorf("%w: sqlite: DSN sets %s=%s; leasehold needs %s=%s", claims.ErrInvalid, p[0], v, p[0], want)
		}
	}
	if len(add) == 0 {
		return dsn, nil
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	if rawQuery == "" {
		dsn = base
	}
	return dsn + sep + strings.Join(add, "&"), nil
}

func sameSetting(key, got, want string) bool {
	if key == "_foreign_keys" {
		switch strings.ToLower(got) {
		case "1", "true", "yes", "on":
			return true
		}
		return false
	}
	return strings.EqualFold(got, want)
}

// Open opens the database file at dsn (a path, or a "file:" URI; created
// when missing) with the parameters of DSN on every connection of the pool,
// and pings it. Migrate it with Migrate before use.
func Open(ctx context.Context, dsn string) (*sql.DB, error) {
	full, err := DSN(dsn)
	if err != nil {
		return nil, err
	}
	base, err := sqlite.NewConnector(full)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", dsn, err)
	}
	db := sql.OpenDB(&connector{base: base, gate: gateFor(full), wait: busyTimeoutOf(full), prof: processProfile()})
	// Writers wait for SQLite's write lock in the write gate, in order,
	// lease writes first, each holding a connection meanwhile: the pool
	// leaves room beside them for readers and for the lease writes, which
	// would otherwise queue for a connection in database/sql, unordered,
	// before they ever reached the gate.
	db.SetMaxOpenConns(MaxOpenConns)
	db.SetMaxIdleConns(MaxOpenConns)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", dsn, err)
	}
	return db, nil
}

// busyTimeoutOf returns the busy_timeout a DSN from DSN sets.
func busyTimeoutOf(full string) time.Duration {
	_, rawQuery, _ := strings.Cut(full, "?")
	q, _ := url.ParseQuery(rawQuery) // DSN parsed it already
	for k, v := range q {
		if a, ok := aliases[k]; ok {
			k = a
		}
		if k == "_busy_timeout" {
			if ms, err := strconv.ParseInt(v[len(v)-1], 10, 64); err == nil && ms >= 0 {
				return time.Duration(ms) * time.Millisecond
			}
		}
	}
	return BusyTimeout
}

// MaxOpenConns is the connection limit Open sets on its pool.
const MaxOpenConns = 16

// Store runs leasehold's statements (package sqlitedb, compiled by sqlc from
// sql/queries/sqlite) on a *sql.DB from Open, or inside a transaction.
type Store struct {
	conn sqlitedb.DBTX
	q    *sqlitedb.Queries
	// lockedAt: in a transaction the Store began itself (inTx), when it
	// held the write lock; zero otherwise (see grantStart).
	lockedAt time.Time
}

// New returns a Store over conn: a *sql.DB from Open (each statement runs
// in autocommit; operations of several statements run in a BEGIN IMMEDIATE
// transaction of their own), or a caller's *sql.Tx (everything runs in it).
func New(conn sqlitedb.DBTX) *Store {
	return &Store{conn: conn, q: sqlitedb.New()}
}

// WithTx returns a Store whose statements all run in the caller's
// transaction tx, which should have been begun on a *sql.DB from Open
// (BEGIN IMMEDIATE, see DSN): what FireTx, Run.Hold and Run.CompleteTx
// write through it commits or rolls back with the caller's own writes.
func (s *Store) WithTx(tx *sql.Tx) *Store {
	return &Store{conn: tx, q: s.q}
}

// beginner is what can begin a transaction: *sql.DB, *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTx runs fn so that its statements land together or not at all: in a
// new transaction, begun BEGIN IMMEDIATE (the DSN's _txlock) so it holds
// the database write lock from its start, committed when fn returns nil
// and rolled back otherwise; or, when the Store is bound to a caller's
// transaction (WithTx: FireTx, Run.Hold, Run.CompleteTx), inside a
// SAVEPOINT of it, rolled back to when fn fails, so the caller's
// transaction goes on without fn's writes and the caller decides (a fenced
// write that matched no row then dooms it: doomTransaction). A failed
// BEGIN (the lock stayed busy for busy_timeout) is claims.ErrRetryable:
// nothing ran.
func (s *Store) inTx(ctx context.Context, fn func(*Store) error) error {
	if tx, ok := s.conn.(*sql.Tx); ok {
		return s.inSavepoint(ctx, tx, fn)
	}
	b, ok := s.conn.(beginner)
	if !ok {
		return fmt.Errorf("%w: sqlite: cannot begin a transaction on %T", claims.ErrInvalid, s.conn)
	}
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return dbError("BEGIN IMMEDIATE", err)
	}
	inner := s.WithTx(tx)
	inner.lockedAt = time.Now()
	if err := fn(inner); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return dbError("COMMIT", err)
	}
	return nil
}

// grantStart is the local start of a grant made by this Store's
// statements (claims.Claim.SetLocalStart): sent, the instant before the
// operation was sent, or, when the Store runs in a transaction it began
// itself, the instant that transaction held the write lock, if later. The
// statements that grant run after it, so the database's clock (the same
// host's) starts the lease no earlier; and the time spent waiting for the
// lock behind other writers, which on a loaded host can be most of a lease,
// is not taken from the grant's local time.
func (s *Store) grantStart(sent time.Time) time.Time {
	if s.lockedAt.After(sent) {
		return s.lockedAt
	}
	return sent
}

// savepoints numbers the savepoints of inSavepoint, so nested ones never
// share a name.
var savepoints atomic.Uint64

// inSavepoint is inTx inside the caller's transaction tx.
func (s *Store) inSavepoint(ctx context.Context, tx *sql.Tx, fn func(*Store) error) error {
	name := "leasehold_" + strconv.FormatUint(savepoints.Add(1), 10)
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return dbError("SAVEPOINT", err)
	}
	if err := fn(s); err != nil {
		_, rerr := tx.ExecContext(ctx, "ROLLBACK TO "+name)
		if rerr == nil {
			_, rerr = tx.ExecContext(ctx, "RELEASE "+name)
		}
		return errors.Join(err, ignoreDone(rerr))
	}
	if _, err := tx.ExecContext(ctx, "RELEASE "+name); err != nil {
		return dbError("RELEASE", err)
	}
	return nil
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// fromMs converts a time column (milliseconds since the Unix epoch, written
// by the database clock) to a UTC time.
func fromMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// fromMsPtr is fromMs for a nullable column: nil stays nil.
func fromMsPtr(ms *int64) *time.Time {
	if ms == nil {
		return nil
	}
	t := fromMs(*ms)
	return &t
}

// SQLite result codes the Store classifies (https://sqlite.org/rescode.html).
// Extended codes carry the primary code in their low byte.
const (
	codeBusy             = 5    // SQLITE_BUSY (and BUSY_RECOVERY, BUSY_SNAPSHOT, BUSY_TIMEOUT)
	codeLocked           = 6    // SQLITE_LOCKED (and LOCKED_SHAREDCACHE, LOCKED_VTAB)
	codeConstraintPK     = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	codeConstraintUnique = 2067 // SQLITE_CONSTRAINT_UNIQUE
	primaryCodeMask      = 0xff
)

// sqliteCode returns the (extended) result code of err, or 0.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// isRetryable reports whether err is SQLITE_BUSY or SQLITE_LOCKED: the
// statement (or BEGIN) could not get its lock and applied nothing.
func isRetryable(err error) bool {
	if errors.Is(err, errBusy) {
		return true
	}
	switch sqliteCode(err) & primaryCodeMask {
	case codeBusy, codeLocked:
		return true
	}
	return false
}

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY
// constraint failure (the statement applied nothing).
func isUniqueViolation(err error) bool {
	switch sqliteCode(err) {
	case codeConstraintUnique, codeConstraintPK:
		return true
	}
	return false
}

// fenced maps "no row matched the fenced WHERE" to ErrNotOwner.
func fenced(query string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return claims.ErrNotOwner
	default:
		return dbError(query, err)
	}
}

// dbError names the failed statement and marks the errors after which it
// certainly did not take effect as claims.ErrRetryable: SQLITE_BUSY and
// SQLITE_LOCKED, with which SQLite refuses a statement (or BEGIN) whose lock
// it could not get within busy_timeout, before it changes anything.
func dbError(query string, err error) error {
	if err != nil && strings.Contains(err.Error(), keyVersionAbort) {
		return fmt.Errorf("sqlite: %s: %w: %w", query, episodes.ErrKeyVersion, err)
	}
	if isRetryable(err) {
		return fmt.Errorf("sqlite: %s: %w: %w", query, claims.ErrRetryable, err)
	}
	return fmt.Errorf("sqlite: %s: %w", query, err)
}

var _ claims.Store = (*Store)(nil)

// Acquire runs AcquireClaim; no row back means a live lease holds the key.
func (s *Store) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	sent := time.Now()
	ctx, locked := withLockClock(ctx)
	row, err := s.q.AcquireClaim(ctx, s.conn, sqlitedb.AcquireClaimParams{
		DedupeKey: p.Key,
		OwnerNode: p.Owner,
		LeaseMs:   p.Lease.Milliseconds(),
		WorkType:  p.WorkType,
	})
	if errors.Is(err, sql.ErrNoRows) {
		return claims.Claim{}, claims.ErrBusy
	}
	if err != nil {
		return claims.Claim{}, dbError("AcquireClaim", err)
	}
	c := toClaim(sqlitedb.ListExpiredClaimsRow(row))
	c.SetLocalStart(locked.since(sent))
	return c, nil
}

// Renew runs RenewClaim, in the write gate's lease lane.
func (s *Store) Renew(ctx context.Context, t claims.Token, lease time.Duration) (time.Time, error) {
	ctx = withLane(ctx, laneLease)
	until, err := s.q.RenewClaim(ctx, s.conn, sqlitedb.RenewClaimParams{
		LeaseMs:   lease.Milliseconds(),
		DedupeKey: t.Key,
		OwnerNode: t.Owner,
		Fence:     t.Fence,
	})
	if err != nil {
		return time.Time{}, fenced("RenewClaim", err)
	}
	return fromMs(until), nil
}

// heldJSON encodes (key, fence) pairs as RenewClaims and ReleaseClaims read
// them: [["key", fence], ...].
func heldJSON(held []claims.Held) (string, error) {
	pairs := make([][2]any, len(held))
	for i, h := range held {
		pairs[i] = [2]any{h.Key, h.Fence}
	}
	b, err := json.Marshal(pairs)
	return string(b), err
}

// RenewMany runs RenewClaims: one statement for every lease of owner, in
// the write gate's lease lane.
func (s *Store) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	ctx = withLane(ctx, laneLease)
	if len(held) == 0 {
		return nil, nil
	}
	items, err := heldJSON(held)
	if err != nil {
		return nil, fmt.Errorf("sqlite: RenewClaims: %w", err)
	}
	sent := time.Now()
	ctx, locked := withLockClock(ctx)
	rows, err := s.q.RenewClaims(ctx, s.conn, sqlitedb.RenewClaimsParams{
		LeaseMs:   lease.Milliseconds(),
		OwnerNode: owner,
		Held:      items,
	})
	if err != nil {
		return nil, dbError("RenewClaims", err)
	}
	out := make([]claims.Renewed, len(rows))
	for i, r := range rows {
		out[i] = claims.Renewed{Key: r.DedupeKey, Fence: r.Fence, LeaseUntil: fromMs(r.LeaseUntil), Start: locked.since(sent)}
	}
	return out, nil
}

// Complete runs CompleteClaim.
func (s *Store) Complete(ctx context.Context, t claims.Token) error {
	ctx = withLane(ctx, laneHeld) // on behalf of a held lease: see the package's Lock section
	_, err := s.q.CompleteClaim(ctx, s.conn, sqlitedb.CompleteClaimParams{DedupeKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	return fenced("CompleteClaim", err)
}

// Fail runs FailClaim.
func (s *Store) Fail(ctx context.Context, t claims.Token, detail json.RawMessage) error {
	ctx = withLane(ctx, laneHeld) // on behalf of a held lease: see the package's Lock section
	_, err := s.q.FailClaim(ctx, s.conn, sqlitedb.FailClaimParams{ErrorDetail: jsonText(detail), DedupeKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	return fenced("FailClaim", err)
}

// jsonText is a JSON column's value: nil for no JSON, else its text.
func jsonText(j json.RawMessage) *string {
	if j == nil {
		return nil
	}
	s := string(j)
	return &s
}

// jsonRaw is the reverse of jsonText.
func jsonRaw(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

// Release runs ReleaseClaim, in the write gate's lease lane.
func (s *Store) Release(ctx context.Context, t claims.Token) error {
	ctx = withLane(ctx, laneLease)
	_, err := s.q.ReleaseClaim(ctx, s.conn, sqlitedb.ReleaseClaimParams{DedupeKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	return fenced("ReleaseClaim", err)
}

// ListExpired runs ListExpiredClaims.
func (s *Store) ListExpired(ctx context.Context, limit int) ([]claims.Claim, error) {
	rows, err := s.q.ListExpiredClaims(ctx, s.conn, rowLimit(limit))
	if err != nil {
		return nil, dbError("ListExpiredClaims", err)
	}
	out := make([]claims.Claim, len(rows))
	for i, r := range rows {
		out[i] = toClaim(r)
	}
	return out, nil
}

// rowLimit is a LIMIT: SQLite reads a negative LIMIT as "no limit", where
// Postgres rejects it, so a negative limit returns no rows here.
func rowLimit(n int) int64 { return int64(max(n, 0)) }

// toClaim converts a claim row; AcquireClaim, ListExpiredClaims and
// ListClaims return the same columns, so their row types convert into each
// other.
func toClaim(r sqlitedb.ListExpiredClaimsRow) claims.Claim {
	return claims.Claim{
		Token:      claims.Token{Key: r.DedupeKey, Owner: r.OwnerNode, Fence: r.Fence},
		State:      claims.State(r.State),
		Attempt:    int32(r.Attempt),
		LeaseUntil: fromMs(r.LeaseUntil),
		ClaimedAt:  fromMs(r.ClaimedAt),
		Grant:      claims.GrantKind(r.GrantKind),
		WorkType:   r.WorkType,
	}
}

// ListClaims runs ListClaims, an operator read.
func (s *Store) ListClaims(ctx context.Context, q claims.ListQuery) ([]claims.Claim, error) {
	rows, err := s.q.ListClaims(ctx, s.conn, sqlitedb.ListClaimsParams{
		OwnerNode: q.Owner, ExpiredOnly: q.ExpiredOnly, MaxRows: rowLimit(q.Limit),
	})
	if err != nil {
		return nil, dbError("ListClaims", err)
	}
	out := make([]claims.Claim, len(rows))
	for i, r := range rows {
		out[i] = toClaim(sqlitedb.ListExpiredClaimsRow(r))
	}
	return out, nil
}

// ReleaseMany runs ReleaseClaims: every listed grant of owner released in
// one statement, in the write gate's lease lane.
func (s *Store) ReleaseMany(ctx context.Context, owner string, held []claims.Held) ([]claims.Held, error) {
	ctx = withLane(ctx, laneLease)
	if len(held) == 0 {
		return nil, nil
	}
	items, err := heldJSON(held)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ReleaseClaims: %w", err)
	}
	rows, err := s.q.ReleaseClaims(ctx, s.conn, sqlitedb.ReleaseClaimsParams{OwnerNode: owner, Held: items})
	if err != nil {
		return nil, dbError("ReleaseClaims", err)
	}
	out := make([]claims.Held, len(rows))
	for i, r := range rows {
		out[i] = claims.Held{Key: r.DedupeKey, Fence: r.Fence}
	}
	return out, nil
}
