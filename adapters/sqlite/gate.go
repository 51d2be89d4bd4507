package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// lane is a writer's place in the queue for the write lock: every waiting
// lease write (renew, release) is let in before any takeover, every
// takeover before any write of held work, and those before any other
// write, each lane in arrival order, in this process (the write gate) and
// across the processes on the file (the turn).
type lane int

const (
	laneLease    lane = iota // RenewClaim(s), ReleaseClaim(s): keeping or giving back a lease
	laneTakeover             // recovery's requeue and claim: orphaned work on its way to a live node, a sweep's bounded batch
	laneHeld                 // writes made on behalf of a held lease (claims.OnBehalf): journal steps, finishes, retries, callers' transactions inside a run
	laneOther                // everything else, new work above all: creations, the pollers' ClaimAvailable, membership, callers' transactions outside a run
	lanes
)

func (l lane) String() string {
	switch l {
	case laneLease:
		return "lease"
	case laneTakeover:
		return "takeover"
	case laneHeld:
		return "held"
	}
	return "other"
}

type laneKey struct{}

// withLane marks ctx's writes as lane l's.
func withLane(ctx context.Context, l lane) context.Context {
	return context.WithValue(ctx, laneKey{}, l)
}

// laneOf is the lane withLane put on ctx; else held for a write made on
// behalf of a lease (claims.OnBehalf: a run's context and its writes'),
// else other.
func laneOf(ctx context.Context) lane {
	if l, ok := ctx.Value(laneKey{}).(lane); ok {
		return l
	}
	if _, ok := claims.OnBehalf(ctx); ok {
		return laneHeld
	}
	return laneOther
}

// The bytes of the turn file (turnFile) and how the turn is taken.
const (
	// turnByte, held exclusively, is the turn: only its holder asks
	// SQLite for the write lock.
	turnByte = 0
	// waitByte, held shared by every process with a write waiting for the
	// turn, makes a process that just ended its turn wait turnYield
	// before it takes the next one.
	waitByte = 2

	turnPollLease = 500 * time.Microsecond // a lease write's poll for the turn
	turnPollOther = time.Millisecond       // any other write's poll
	// turnYield: longer than turnPollOther, so that a waiting process
	// polls at least once between two turns of another.
	turnYield = 3 * time.Millisecond
	// flagStale: how long a write waits for another process's write of a
	// lane before its own while nobody has the turn: a process frozen
	// (SIGSTOP) with such a write waiting holds the lane's byte and never
	// takes the turn. Found stale once, the byte is not waited for again by
	// this process until it has been seen let go. Long enough for a live
	// but CPU-starved process to take the turn it waits for: at 50 ms, on a
	// host with two CPU hogs beside race-enabled processes (wake-ups up to
	// 350 ms late), a lease write waited up to 11.7 s beside a flood of
	// other writers, who took its flag for a frozen one's; at 1 s, 31 ms to
	// 1.65 s (TestLeaseWritesLandUnderAFlood).
	flagStale = time.Second
	// standBack: how long a write of held work (a journal step, a finish)
	// stands back for takeovers, this process's and the others', before
	// only lease writes go first (op.deferTo). The lanes are a preference,
	// not a starvation: nodes whose sweeps run back to back keep a takeover
	// waiting somewhere nearly all the time, and a finish that stood back
	// for them for ever kept its run alive, renewing its lease, and never
	// ended it: in TestRollingDeploySQLite on a loaded host, two workers'
	// slots (16 runs) still held live leases two minutes after the
	// workload stopped, their finishes failing busy again and again
	// (TestHeldWritesAreNotStarvedByTakeovers). Lease writes keep their
	// place before everything; new work (the other lane) still waits
	// while held work does (see Overload in the package documentation).
	standBack = time.Second
)

// laneByte is the byte of the turn file that every process with a write of
// the lane waiting holds shared, so that the other processes' writes of the
// lanes after it wait before they take the turn; the last lane has none.
var laneByte = [lanes]int64{laneLease: 1, laneTakeover: 3, laneHeld: 4, laneOther: -1}

// writeGate is the process's queue for one database file's write lock (see
// the Lock section of the package documentation): one writer of the
// process at a time holds it, from before it asks for the lock until it
// gave the lock back (COMMIT, ROLLBACK, or the end of an autocommit
// statement), lease writes first. Across processes, its holder takes the
// file's turn (turnFile) before it asks SQLite, so only one connection on
// the whole file waits for SQLite's lock, which has no queue.
type writeGate struct {
	turn *turnFile // nil: no turn file (in-memory database, no file locks here)

	mu          sync.Mutex
	held        bool
	waiting     [lanes][]*gateWaiter
	flagged     [lanes]int  // writes of each lane waiting for the gate or the turn: laneByte held while > 0
	stale       [lanes]bool // another process's byte of the lane found stale (flagStale); cleared once seen let go
	turnWaiters int         // writes polling for the turn: waitByte held while > 0
	turnEnded   time.Time   // when this process last gave the turn back
}

type gateWaiter struct {
	ready chan struct{} // closed when the gate is handed to this waiter
}

// acquire waits until the gate is the caller's, until deadline (the
// DSN's busy_timeout after the write began: the bound of SQLite's own
// wait) and until ctx is done.
func (g *writeGate) acquire(ctx context.Context, l lane, deadline time.Time) error {
	g.mu.Lock()
	if !g.held {
		g.held = true
		g.mu.Unlock()
		return nil
	}
	w := &gateWaiter{ready: make(chan struct{})}
	g.waiting[l] = append(g.waiting[l], w)
	g.mu.Unlock()
	return g.await(ctx, l, w, deadline)
}

// yield hands the gate to this process's first waiting write of a lane
// before before (l, or an earlier lane for a write that stood back long
// enough: deferTo), if there is one, and waits to get it back before any
// other write of lane l: the holder calls it while it waits for the turn or
// for SQLite's lock.
func (g *writeGate) yield(ctx context.Context, l, before lane, deadline time.Time) (bool, error) {
	g.mu.Lock()
	for first := range before {
		q := g.waiting[first]
		if len(q) == 0 {
			continue
		}
		w := &gateWaiter{ready: make(chan struct{})}
		g.waiting[l] = append([]*gateWaiter{w}, g.waiting[l]...)
		g.waiting[first] = q[1:]
		close(q[0].ready)
		g.mu.Unlock()
		return true, g.await(ctx, l, w, deadline)
	}
	g.mu.Unlock()
	return false, nil
}

// await waits for w, queued in lane l, to be handed the gate.
func (g *writeGate) await(ctx context.Context, l lane, w *gateWaiter, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errBusy
	}
	g.mu.Lock()
	for i, x := range g.waiting[l] {
		if x == w {
			g.waiting[l] = append(g.waiting[l][:i:i], g.waiting[l][i+1:]...)
			g.mu.Unlock()
			return err
		}
	}
	g.mu.Unlock()
	// Handed over just as the wait ended: pass it on.
	g.release()
	return err
}

// release hands the gate to the first waiter of the first lane that has
// one, or frees it.
func (g *writeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for l := range g.waiting {
		if q := g.waiting[l]; len(q) > 0 {
			g.waiting[l] = q[1:]
			close(q[0].ready)
			return
		}
	}
	g.held = false
}

// flagWaiting counts a write of lane l in (+1) or out (-1) of those
// waiting, which the lane's byte shows the other processes.
func (g *writeGate) flagWaiting(l lane, d int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.flagged[l] += d
	if g.turn == nil || laneByte[l] < 0 {
		return
	}
	switch {
	case d > 0 && g.flagged[l] == 1:
		g.turn.share(laneByte[l])
	case d < 0 && g.flagged[l] == 0:
		g.turn.drop(laneByte[l])
	}
}

// turnWaiting is leaseWaiting for waitByte.
func (g *writeGate) turnWaiting(d int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.turnWaiters += d
	switch {
	case d > 0 && g.turnWaiters == 1:
		g.turn.share(waitByte)
	case d < 0 && g.turnWaiters == 0:
		g.turn.drop(waitByte)
	}
}

// endTurn gives the turn back.
func (g *writeGate) endTurn() {
	g.mu.Lock()
	g.turnEnded = time.Now()
	g.mu.Unlock()
	g.turn.drop(turnByte)
}

func (g *writeGate) lastTurnEnded() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.turnEnded
}

// takeTurn waits, holding the gate, until the process has the file's
// turn, for at most the rest of busy_timeout. A write first hands the gate
// to this process's writes of the lanes before its own, then waits while
// another process has such a write waiting (unless nobody has taken the
// turn for flagStale: that process is frozen); every write waits turnYield
// after this process's last turn while others wait for one.
func (g *writeGate) takeTurn(ctx context.Context, o *op, deadline time.Time) error {
	if g.turn == nil {
		return nil
	}
	poll := turnPollOther
	if o.lane == laneLease {
		poll = turnPollLease
	}
	var (
		polling    bool
		ignoreSeen bool      // this write stopped waiting for a frozen process's write
		freeSince  time.Time // the turn was free while a write of an earlier lane waited elsewhere
		fair       bool      // turnYield was checked
	)
	defer func() {
		if polling {
			g.turnWaiting(-1)
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			return errBusy
		}
		if o.lane != laneLease {
			t := time.Now()
			y, err := g.yield(ctx, o.lane, o.deferTo(), deadline)
			if y {
				o.gateWait += time.Since(t)
			}
			if err != nil {
				o.gateLost = true
				return err
			}
			if !ignoreSeen && g.earlierElsewhere(o.deferTo()) {
				switch {
				case g.turn.heldElsewhere(turnByte):
					freeSince = time.Time{}
				case freeSince.IsZero():
					freeSince = time.Now()
				case time.Since(freeSince) > flagStale:
					ignoreSeen = true
					g.markStale(o.deferTo())
				}
				if !ignoreSeen {
					sleep(ctx, poll)
					continue
				}
			}
		}
		if !fair {
			fair = true
			if wait := turnYield - time.Since(g.lastTurnEnded()); wait > 0 && g.turn.heldElsewhere(waitByte) {
				sleep(ctx, wait)
				continue
			}
		}
		if g.turn.try(turnByte) {
			o.turn = true
			return nil
		}
		if !polling {
			polling = true
			g.turnWaiting(1)
		}
		sleep(ctx, poll)
	}
}

// earlierElsewhere reports whether another process has a write of a lane
// before l waiting, leaving out a lane whose byte was found stale and has
// not been let go since.
func (g *writeGate) earlierElsewhere(l lane) bool {
	for first := range l {
		if laneByte[first] < 0 {
			continue
		}
		held := g.turn.heldElsewhere(laneByte[first])
		g.mu.Lock()
		if !held {
			g.stale[first] = false
		}
		stale := g.stale[first]
		g.mu.Unlock()
		if held && !stale {
			return true
		}
	}
	return false
}

// markStale marks the bytes of the lanes before l that another process
// holds as stale: a frozen process's, which no write of this process waits
// for again until it is let go.
func (g *writeGate) markStale(l lane) {
	for first := range l {
		if laneByte[first] >= 0 && g.turn.heldElsewhere(laneByte[first]) {
			g.mu.Lock()
			g.stale[first] = true
			g.mu.Unlock()
		}
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errBusy is a write that waited out its busy_timeout for this process's
// turn at the write lock: SQLite's SQLITE_BUSY, before SQLite was even
// asked, so nothing was applied.
var errBusy error = busyError{}

type busyError struct{}

func (busyError) Error() string {
	return "database is locked (SQLITE_BUSY): busy_timeout ran out waiting for this process's turn at the write lock"
}

func (busyError) Is(target error) bool { return target == claims.ErrRetryable }

// turnSuffix names the turn file beside the database.
const turnSuffix = "-leasehold-turn"

// gates holds the process's write gate of each database file, by path, so
// that every pool a process opens on one file (several nodes in one
// process) shares one queue and one turn file. They are never removed: a
// turn file's descriptor must stay open (see turnFile).
var (
	gatesMu sync.Mutex
	gates   = map[string]*writeGate{}
)

// gateFor returns the write gate of the file dsn names; an in-memory
// database (each connection its own, or a shared cache) gets one of its
// own, with no turn file.
func gateFor(dsn string) *writeGate {
	path, rawQuery, _ := strings.Cut(dsn, "?")
	if rest, ok := strings.CutPrefix(path, "file:"); ok {
		path = strings.TrimPrefix(rest, "//localhost")
		if strings.HasPrefix(path, "///") {
			path = path[2:]
		}
	}
	if path == "" || path == ":memory:" || strings.Contains(rawQuery, "mode=memory") {
		return &writeGate{}
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	// The directory, not the file, which Open may be about to create.
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		path = filepath.Join(dir, filepath.Base(path))
	}
	gatesMu.Lock()
	defer gatesMu.Unlock()
	g, ok := gates[path]
	if !ok {
		g = &writeGate{turn: openTurnFile(path + turnSuffix)}
		gates[path] = g
	}
	return g
}
