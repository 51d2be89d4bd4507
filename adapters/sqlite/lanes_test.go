package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// Environment of the child processes of TestLeaseWritesLandUnderAFlood.
const (
	floodDBEnv   = "LEASEHOLD_SQLITE_FLOOD_DB"
	floodHoldEnv = "LEASEHOLD_SQLITE_FLOOD_HOLD_MS"
	// floodLaneEnv set to "takeover": the flood's writes are takeovers
	// (TestHeldWritesAreNotStarvedByTakeovers), else other writes.
	floodLaneEnv = "LEASEHOLD_SQLITE_FLOOD_LANE"
)

// Flood shape: floodProcs processes of floodWriters goroutines each, every
// one writing in a loop in a transaction that holds the write lock for
// floodHold (a slow holder: a CPU-starved host, a caller's transaction
// that does some work), so that the lock is never free for long.
const (
	floodProcs   = 3
	floodWriters = 4
	floodHold    = 15 * time.Millisecond
)

// Lease writes get SQLite's write lock before their lease runs out however
// many other writers want it: while three other processes (four writers
// each, every write transaction holding the lock 15 ms) keep the lock busy,
// this process renews a lease every lease/3 and finally releases it, and
// each of those writes lands within the local time a lease leaves
// (lease - margin, 1.6 s of 2 s); in fact within a few holders' time,
// because every other writer of every process on the file stands back
// while a lease write waits (see the package's Lock section).
//
// What this tests is the order, which is leasehold's: the flood's writers
// commit at synchronous=NORMAL (their DSN says so), so that a holder's
// time is its 15 ms and not an fsync. A lease write cannot go before the
// holder it finds, and a holder's COMMIT at FULL holds the lock through its
// fsync: on this 2-core host with two CPU hogs beside (make test-loaded),
// with the flood at FULL, a lease write took up to 0.8-7.7 s in 5 of 8 runs
// (one holder's fsync), where with the flood at NORMAL it took 23-28 ms at
// most in every run; the Lock section says what that means for a lease.
func TestLeaseWritesLandUnderAFlood(t *testing.T) {
	if os.Getenv(floodDBEnv) != "" {
		t.Skip("child process")
	}
	const (
		lease  = 2 * time.Second
		margin = lease / 5
		rounds = 12
	)
	path := sqlitetest.Path(t)
	db := sqlitetest.Open(t, path)
	_, err := db.ExecContext(t.Context(), `CREATE TABLE flood (id INTEGER PRIMARY KEY, by TEXT NOT NULL)`)
	require.NoError(t, err)
	s := sqlite.New(db)
	c, err := s.Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-a", Lease: lease})
	require.NoError(t, err)

	startFlood(t, path, "")

	var took []time.Duration
	tick := time.NewTicker(lease / 3)
	defer tick.Stop()
	for range rounds {
		<-tick.C
		start := time.Now()
		renewed, err := s.RenewMany(t.Context(), "node-a", []claims.Held{{Key: c.Key, Fence: c.Fence}}, lease)
		took = append(took, time.Since(start))
		require.NoError(t, err)
		require.Len(t, renewed, 1)
	}
	start := time.Now()
	require.NoError(t, s.Release(t.Context(), c.Token))
	took = append(took, time.Since(start))
	var flooded int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM flood`).Scan(&flooded))

	slices.Sort(took)
	t.Logf("%d renewals and a release beside %d flood writes: p50 %v, max %v", rounds, flooded,
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	require.Less(t, took[len(took)-1], lease-margin, "a lease write did not land within the lease's local time")
}

// startFlood starts floodProcs child processes writing to the table flood
// of the file at path in a loop (lane "takeover": as takeovers), waits
// until each has written, and stops them when t ends.
func startFlood(t *testing.T, path, lane string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	floodCtx, stopFlood := context.WithCancel(context.Background())
	var children sync.WaitGroup
	t.Cleanup(func() { stopFlood(); children.Wait() })
	flooding := make(chan struct{}, floodProcs)
	for range floodProcs {
		cmd := exec.CommandContext(floodCtx, exe, "-test.run=^TestLeaseWritesFloodChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), floodDBEnv+"="+path, floodHoldEnv+"="+strconv.Itoa(int(floodHold.Milliseconds())),
			floodLaneEnv+"="+lane)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		children.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == "FLOODING" {
					flooding <- struct{}{}
				}
			}
			_ = cmd.Wait()
		})
	}
	for range floodProcs { // every child has written
		select {
		case <-flooding:
		case <-time.After(time.Minute):
			t.Fatal("the flood did not start within a minute")
		}
	}
}

// TestLeaseWritesFloodChild is a child of TestLeaseWritesLandUnderAFlood:
// floodWriters goroutines write until the parent kills the process.
func TestLeaseWritesFloodChild(t *testing.T) {
	path := os.Getenv(floodDBEnv)
	if path == "" {
		t.Skip("run by TestLeaseWritesLandUnderAFlood")
	}
	holdMS, err := strconv.Atoi(os.Getenv(floodHoldEnv))
	require.NoError(t, err)
	ctx := context.Background()
	if os.Getenv(floodLaneEnv) == "takeover" {
		ctx = sqlite.WithTakeoverLane(ctx)
	}
	db, err := sqlite.Open(ctx, path+"?_synchronous=NORMAL") // a holder's time is its hold, not an fsync
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(floodWriters)
	var (
		wg    sync.WaitGroup
		first sync.Once
	)
	for w := range floodWriters {
		by := fmt.Sprintf("%d/%d", os.Getpid(), w)
		wg.Go(func() {
			for {
				tx, err := db.BeginTx(ctx, nil)
				if sqlite.IsRetryable(err) {
					continue // busy_timeout ran out: nothing began
				}
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, `INSERT INTO flood (by) VALUES (?)`, by)
				require.NoError(t, err)
				time.Sleep(time.Duration(holdMS) * time.Millisecond) // a slow holder, not a wait for expiry
				require.NoError(t, tx.Commit())
				first.Do(func() { fmt.Println("FLOODING") })
			}
		})
	}
	wg.Wait()
}

// Takeovers go before writes of held work, but not for ever: while three
// other processes (four writers each) keep a takeover waiting for the
// write lock all the time, every transaction holding it 15 ms, this
// process's writes made on behalf of a lease (a run's journal step or
// finish) each land after standBack (1 s) plus the time the turn takes to
// come round, and none runs out of busy_timeout. Before standBack they
// stood back as long as any takeover waited anywhere, failed busy after
// busy_timeout, were retried, and starved (a run that never finished while
// its lease was renewed).
func TestHeldWritesAreNotStarvedByTakeovers(t *testing.T) {
	if os.Getenv(floodDBEnv) != "" {
		t.Skip("child process")
	}
	const rounds = 6
	path := sqlitetest.Path(t)
	db := sqlitetest.Open(t, path)
	_, err := db.ExecContext(t.Context(), `CREATE TABLE flood (id INTEGER PRIMARY KEY, by TEXT NOT NULL)`)
	require.NoError(t, err)
	c, err := sqlite.New(db).Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-a", Lease: time.Hour})
	require.NoError(t, err)
	startFlood(t, path, "takeover")

	held := claims.OnBehalfOf(t.Context(), c.Token)
	var took []time.Duration
	for range rounds {
		start := time.Now()
		_, err := db.ExecContext(held, `INSERT INTO flood (by) VALUES ('held')`)
		took = append(took, time.Since(start))
		require.NoError(t, err, "a write of held work failed after %v beside the takeovers", took[len(took)-1])
	}
	slices.Sort(took)
	t.Logf("%d writes of held work beside a flood of takeovers: p50 %v, max %v", rounds,
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	// Each landed within busy_timeout (none failed, above), which is the
	// bound a write has; how soon past standBack depends on when this
	// process, starved of CPU beside the hogs of make test-loaded, polls
	// for the turn: 1.05 s at the median and 1.13 s at most on a quiet
	// host, 1.0-2.6 s at the median and up to 4.2 s at most with two hogs.
	require.Greater(t, took[len(took)/2], sqlite.StandBack/2, "held work went first though takeovers waited: the lanes are gone")
}

// In one process, a lease write waiting for the write gate goes before
// every takeover waiting there, a takeover before every write of held
// work, and those before every other write, whichever came first: with a
// caller's transaction holding the lock and five other writes queued
// behind it, then a takeover, then a write made on behalf of a lease, a
// renewal sent last is the first to land once the transaction ends, the
// takeover next, the held work's write third.
func TestLeaseWritesGoFirstInTheProcess(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	db := sqlitetest.Open(t, path)
	db.SetMaxOpenConns(10)
	_, err := db.ExecContext(t.Context(), `CREATE TABLE queued (id INTEGER PRIMARY KEY, by TEXT NOT NULL)`)
	require.NoError(t, err)
	s := sqlite.New(db)
	c, err := s.Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	// The order the writes land in is the order of their rows in queued
	// (the renewal's too, through this trigger), not the order their
	// callers happen to be scheduled in after they return.
	_, err = db.ExecContext(t.Context(), `CREATE TRIGGER renewal_landed AFTER UPDATE OF lease_until ON leasehold_work_claims
		BEGIN INSERT INTO queued (by) VALUES ('renewal'); END`)
	require.NoError(t, err)

	holder, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	write := func(ctx context.Context, who string) {
		wg.Go(func() {
			_, err := db.ExecContext(ctx, `INSERT INTO queued (by) VALUES (?)`, who)
			require.NoError(t, err)
		})
	}
	const others = 5
	for i := range others {
		write(context.Background(), fmt.Sprintf("other-%d", i))
	}
	waitQueued(t, path, 0, 0, others)
	write(sqlite.WithTakeoverLane(context.Background()), "takeover")
	waitQueued(t, path, 0, 1, others)
	// A write of held work (a caller's transaction inside a run, say):
	// after the takeover, before every other write, queued earlier or not.
	write(claims.OnBehalfOf(context.Background(), c.Token), "held")
	for deadline := time.Now().Add(time.Minute); sqlite.GateQueuedHeld(path) != 1; {
		require.True(t, time.Now().Before(deadline), "the write made on behalf of a lease is not queued as held work")
		time.Sleep(time.Millisecond) // as in waitQueued
	}
	wg.Go(func() {
		_, err := s.Renew(context.Background(), c.Token, time.Minute)
		require.NoError(t, err)
	})
	waitQueued(t, path, 1, 1, others)
	require.NoError(t, holder.Commit())
	wg.Wait()
	var order []string
	rows, err := db.QueryContext(t.Context(), `SELECT by FROM queued ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var by string
		require.NoError(t, rows.Scan(&by))
		order = append(order, by)
	}
	require.NoError(t, rows.Err())
	require.Len(t, order, others+3)
	require.Equal(t, []string{"renewal", "takeover", "held"}, order[:3], "landed in the order %v", order)
}

// waitQueued waits until the write gate of the file at path has that many
// lease writes, takeovers and other writes queued.
func waitQueued(t *testing.T, path string, lease, takeover, others int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		l, tk, o := sqlite.GateQueued(path)
		if l == lease && tk == takeover && o == others {
			return
		}
		require.True(t, time.Now().Before(deadline), "queued %d lease, %d takeover, %d other writes; want %d, %d, %d", l, tk, o, lease, takeover, others)
		time.Sleep(time.Millisecond) // the gate signals nothing when a write queues; this only waits for the goroutines above to get there
	}
}

// Lease writes commit at synchronous=NORMAL and every other write at the
// DSN's level (FULL by default): on a pool of one connection, a renewal
// and a release leave the connection at NORMAL (1), and the next write of
// another lane, a grant, sets it back to FULL (2) before it begins. A DSN
// that asks for less than NORMAL keeps it for lease writes too.
func TestLeaseWritesCommitAtNormal(t *testing.T) {
	t.Parallel()
	level := func(db *sql.DB) int {
		var n int
		require.NoError(t, db.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&n))
		return n
	}
	db := sqlitetest.Open(t, sqlitetest.Path(t))
	db.SetMaxOpenConns(1)
	s := sqlite.New(db)
	require.Equal(t, 2, level(db), "opened at the DSN's FULL")

	c, err := s.Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 2, level(db), "a grant commits at FULL")
	_, err = s.Renew(t.Context(), c.Token, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, level(db), "a renewal commits at NORMAL")
	_, err = s.Acquire(t.Context(), claims.AcquireParams{Key: "k2", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 2, level(db), "the next grant set FULL back before it began")
	renewed, err := s.RenewMany(t.Context(), "node-a", []claims.Held{{Key: c.Key, Fence: c.Fence}}, time.Minute)
	require.NoError(t, err)
	require.Len(t, renewed, 1)
	require.Equal(t, 1, level(db), "RenewMany commits at NORMAL")
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(new(int)))
	require.NoError(t, tx.Rollback())
	require.Equal(t, 2, level(db), "a caller's transaction begins at FULL")
	require.NoError(t, s.Release(t.Context(), c.Token))
	require.Equal(t, 1, level(db), "a release commits at NORMAL")

	off := sqlitetest.OpenUnmigrated(t, sqlitetest.Path(t)+"?_synchronous=OFF")
	require.NoError(t, sqlite.Migrate(t.Context(), off))
	off.SetMaxOpenConns(1)
	so := sqlite.New(off)
	c, err = so.Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
	_, err = so.Renew(t.Context(), c.Token, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 0, level(off), "a DSN's OFF is never raised")
}
