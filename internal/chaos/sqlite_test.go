//go:build unix

package chaos_test

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/sql/queries"
)

// The suite on SQLite (issue 21): the process faults only. Every worker
// opens the same database file (adapters/sqlite: WAL, BEGIN IMMEDIATE,
// busy_timeout), with no proxy in between and no server to restart: the
// faults are SIGKILL (restarted at once under a new identity) and SIGTERM
// (drain, then restart). A SIGKILL may land while the worker holds the
// file's one write lock in the middle of a transaction: the kernel drops
// the lock with the process and SQLite discards the uncommitted WAL frames.
//
// The worker is the Postgres suite's (worker_test.go: the same actor,
// strategy, history recorder and stdout protocol); only its backend
// differs: sqlite.New(db) for the node and the sweeper, no NOTIFY (the
// trigger-request poller polls every sqlitePoll), and the strategy's
// transaction is a *sql.Tx begun on the worker's *sql.DB (BEGIN IMMEDIATE)
// with the adapter bound to it by Store.WithTx(tx): Run.Hold, the ledger
// insert, Run.CompleteTx, COMMIT. The driver, the trigger book and the
// invariants are the Postgres suite's (chaos_test.go), reading the file
// through sqliteReads with the statements of chaos_sqlite.sql; of the
// invariants, only the frozen-transaction one has no SQLite counterpart (a
// SIGSTOPped holder of SQLite's write lock stops every writer of the file:
// SQLite has no server to bound the transaction, see adapters/sqlite).

const (
	dialectSQLite = "sqlite"
	// sqliteShortDuration: faults in `go test ./...` (the Postgres suite's
	// 20 s runs in the same package, one after the other).
	sqliteShortDuration = 15 * time.Second
	// sqlitePoll: the trigger-request poller's interval (no NOTIFY): work
	// created available (a trigger whose worker had no free slot, a retried
	// attempt) waits at most this for a worker with a slot.
	sqlitePoll = 200 * time.Millisecond
	// sqliteFireEvery: one new trigger per tick. Every write of every
	// worker goes through the file's one write lock, and under -race on two
	// cores (SQLite is compiled Go here, and every commit is fsynced:
	// synchronous FULL) four workers at 20–25 triggers/s already saturate
	// it: writes miss their lease-bound deadlines, leases are lost, Fire
	// calls time out and their redeliveries add load, and the run may not
	// settle at all. (Measured: with each worker's pool limited to 4
	// connections, 25/s settles; the waiters then queue in database/sql,
	// not in SQLite's busy handler, which polls and has no queue. The
	// workers keep sqlite.Open's pool as it is.) 10/s leaves room for the
	// rest of `go test ./...`.
	sqliteFireEvery = 100 * time.Millisecond
	// sqliteClockResolution: SQLite's 'now' is read in whole milliseconds
	// (truncated), every lease_until too; see overlaps.
	sqliteClockResolution = time.Millisecond
)

// TestChaosSQLite runs K worker processes on one SQLite file under SIGKILL
// and SIGTERM while triggers are fired continuously, then checks from the
// database what TestChaos checks: every trigger ran exactly once, its
// effect was recorded exactly once by the grant that finished it, no run
// outlived its lease, nothing was left behind, and the claims history is
// linearizable.
func TestChaosSQLite(t *testing.T) {
	began := time.Now()
	cfg := loadConfig(uint64(rand.IntN(1_000_000)) + 1)
	cfg.dialect = dialectSQLite
	if *flagEvery == 0 {
		cfg.fireEvery = sqliteFireEvery
	}
	if !cfg.loud && *flagDuration == 0 {
		cfg.duration = sqliteShortDuration
	}
	r := newRun(t, cfg)
	r.say("chaos on one SQLite file (process faults): %v", r.cfg)
	r.setupSQLite()
	r.drive()
	r.settle()
	r.check()
	r.say("wall time %.1fs", time.Since(began).Seconds())
}

//go:embed chaos_sqlite.sql
var chaosSQLiteSQL embed.FS

// sqliteQueries are the suite's statements on SQLite, by name.
var sqliteQueries = func() map[string]queries.Query {
	qs, err := queries.Parse(chaosSQLiteSQL, "chaos_sqlite.sql")
	if err != nil {
		panic(fmt.Sprintf("chaos_sqlite.sql: %v", err)) // embedded at build time
	}
	return qs
}()

// sqliteQuery returns the named statement of chaos_sqlite.sql.
func sqliteQuery(name string) string {
	q, ok := sqliteQueries[name]
	if !ok {
		panic("chaos_sqlite.sql has no query " + name) // caught by TestChaosQueries
	}
	return q.SQL
}

// setupSQLite creates and migrates the database file, creates the ledger
// and the grant_ends recorder, and starts the workers on the file.
func (r *chaosRun) setupSQLite() {
	t := r.t
	path := filepath.Join(keptDir(t, "chaos-sqlite-*", "the SQLite database"), "chaos.db")
	r.db = sqliteReads{newSQLiteDatabase(t, r.ctx, path)}
	r.histDir = historyDir(t)
	r.startCluster(func(int) []string {
		return []string{envDialect + "=" + dialectSQLite, envURL + "=" + path}
	})
}

// newSQLiteDatabase opens the file at path (sqlite.Open: WAL, busy_timeout,
// BEGIN IMMEDIATE), migrates it, creates the suite's tables and triggers,
// checks that SQLite prepares every other statement of chaos_sqlite.sql,
// and returns the driver's own handle, closed when t ends.
func newSQLiteDatabase(t *testing.T, ctx context.Context, path string) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, sqlite.Migrate(ctx, db))
	for _, ddl := range []string{sqliteQuery("CreateLedger"), sqliteQuery("CreateLedgerWrites"), sqliteQuery("CreateLedgerWritesTrigger"),
		sqliteQuery("CreateGrantEnds"), sqliteQuery("CreateGrantEndsTrigger")} {
		_, err := db.ExecContext(ctx, ddl)
		require.NoError(t, err)
	}
	for name, q := range sqliteQueries {
		if strings.HasPrefix(name, "Create") {
			continue
		}
		st, err := db.PrepareContext(ctx, q.SQL)
		require.NoError(t, err, "%s does not prepare", name)
		require.NoError(t, st.Close())
	}
	return db
}

// keptDir is a temporary directory for t: removed when t passes, kept (and
// named in the log) when it fails.
func keptDir(t *testing.T, pattern, what string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s is kept in %s", what, dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// injectProcessFaults is the fault schedule on SQLite: a SIGKILL or a
// SIGTERM of a random idle worker every 0.6–1.5 s (seeded), the first a
// SIGKILL, each kind at least once whatever the duration.
func (r *chaosRun) injectProcessFaults() {
	rng := rand.New(rand.NewPCG(r.cfg.seed, r.cfg.seed^0x9e3779b97f4a7c15))
	start := time.Now()
	kills, terms := 0, 0
	signal := func(doKill bool) {
		if r.signal(rng, start, doKill) {
			if doKill {
				kills++
			} else {
				terms++
			}
		}
	}
	for {
		gap := 600*time.Millisecond + time.Duration(rng.IntN(900))*time.Millisecond
		if time.Since(start)+gap >= r.cfg.duration || !r.pause(gap) {
			break
		}
		signal(kills == 0 || (terms > 0 && rng.IntN(2) == 0))
	}
	r.slotOps.Wait()
	if kills == 0 {
		signal(true)
	}
	if terms == 0 {
		signal(false)
	}
	r.slotOps.Wait()
}

// openSQLite opens the worker's backend on the database file at path:
// no NOTIFY, so the poller polls every sqlitePoll.
func openSQLite(ctx context.Context, path string, lease time.Duration) (backend, error) {
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return backend{}, err
	}
	// Never closed: the process exits instead.
	store := sqlite.New(db)
	return backend{
		store:  store,
		poll:   runner.PollConfig{Interval: sqlitePoll},
		ledger: sqliteLedger{db, store},
	}, nil
}

// sqliteLedger: a *sql.Tx begun on the worker's *sql.DB (BEGIN IMMEDIATE:
// it holds the file's write lock from its start) and the adapter bound to
// it with Store.WithTx.
type sqliteLedger struct {
	db    *sql.DB
	store *sqlite.Store
}

func (l sqliteLedger) begin(ctx context.Context) (ledgerTx, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqliteTx{tx, l.store.WithTx(tx)}, nil
}

// transient: the write lock stayed busy (SQLITE_BUSY, SQLITE_LOCKED; the
// adapter marks them claims.ErrRetryable): nothing applied.
func (sqliteLedger) transient(err error) bool {
	if errors.Is(err, claims.ErrRetryable) {
		return true
	}
	code, ok := sqliteCode(err)
	return ok && (code&0xff == sqlite3.SQLITE_BUSY || code&0xff == sqlite3.SQLITE_LOCKED)
}

type sqliteTx struct {
	tx *sql.Tx
	st *sqlite.Store
}

func (t sqliteTx) store() runner.TxStore { return t.st }

func (t sqliteTx) insertLedger(ctx context.Context, episode int64, owner string, fence int64, trigger string) error {
	_, err := t.tx.ExecContext(ctx, sqliteQuery("InsertLedger"), episode, owner, fence, trigger)
	return err
}

func (t sqliteTx) commit(context.Context) error { return t.tx.Commit() }
func (t sqliteTx) rollback(context.Context)     { _ = t.tx.Rollback() }

// sqliteCode returns err's SQLite result code (extended), if it has one.
func sqliteCode(err error) (int, bool) {
	var e *msqlite.Error
	if errors.As(err, &e) {
		return e.Code(), true
	}
	return 0, false
}
