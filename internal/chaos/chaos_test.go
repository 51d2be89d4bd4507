//go:build unix

package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/sql/queries"
)

const (
	schema = "chaos"
	// redeliverAfter: a trigger no worker answered within this is sent again
	// (a worker that was killed, cut off, or whose Fire failed).
	redeliverAfter = 3 * time.Second
	readyTimeout   = time.Minute
	termTimeout    = 20 * time.Second
	// The final phase: every trigger answered, then nothing queued or
	// running, each within this.
	settleTimeout = 2 * time.Minute
	pollEvery     = 100 * time.Millisecond
	// oneNodeEvery: one trigger in this many is fired on one worker only.
	oneNodeEvery = 4
	// freezeWait: how long the driver waits for an armed worker to reach a
	// finish (it finishes several episodes a second) before it gives up.
	freezeWait = 5 * time.Second
	// freezeTries: how many times the driver arms a worker that did not
	// reach a finish within freezeWait (a loaded host once left a run
	// without its one freeze: "not applied").
	freezeTries = 3
	// freezeSlack: a frozen holder's episode must be another grant's within
	// lease + sweep + claims.TxBound + this: a recovery claim that met the
	// frozen lock fails and the next sweep's succeeds (one more sweep), on
	// a loaded host (testbound.Margin).
	freezeSlack = testbound.Margin
)

// TestChaos runs K worker processes under SIGKILL, SIGTERM, a Postgres
// restart, a network cut, slow answers and SIGSTOP inside a transaction
// while triggers are fired continuously, then checks from the database that
// every trigger ran exactly once, its effect was recorded exactly once by
// the grant that finished it, no run outlived its lease, and nothing was
// left behind. See the package documentation.
func TestChaos(t *testing.T) {
	began := time.Now()
	r := newRun(t, loadConfig(uint64(rand.IntN(1_000_000))+1))
	r.say("chaos: %v", r.cfg)
	r.setup()
	r.drive()
	r.settle()
	r.check()
	r.say("wall time %.1fs", time.Since(began).Seconds())
}

// TestChaosQueries checks that every statement of chaos.sql and of
// chaos_sqlite.sql is used and that every statement the Go code names
// exists: the names given to query in chaos.sql, those given to
// sqliteQuery in chaos_sqlite.sql, and the driver's reads (reads.QueryRow
// and reads.Query, by name) in both.
func TestChaosQueries(t *testing.T) {
	pg, lite := map[string]bool{}, map[string]bool{}
	files, err := os.ReadDir(".")
	require.NoError(t, err)
	patterns := []struct {
		re *regexp.Regexp
		in []map[string]bool
	}{
		{regexp.MustCompile(`\bquery\("(\w+)"\)`), []map[string]bool{pg}},
		{regexp.MustCompile(`\bsqliteQuery\("(\w+)"\)`), []map[string]bool{lite}},
		{regexp.MustCompile(`\.(?:QueryRow|Query)\([\w.]+, "(\w+)"`), []map[string]bool{pg, lite}},
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		for _, p := range patterns {
			for _, m := range p.re.FindAllStringSubmatch(string(src), -1) {
				for _, used := range p.in {
					used[m[1]] = true
				}
			}
		}
	}
	for _, d := range []struct {
		file string
		used map[string]bool
		qs   map[string]queries.Query
	}{{"chaos.sql", pg, chaosQueries}, {"chaos_sqlite.sql", lite, sqliteQueries}} {
		for name := range d.used {
			_, ok := d.qs[name]
			require.True(t, ok, "%s has no statement %s", d.file, name)
		}
		for name := range d.qs {
			require.True(t, d.used[name], "%s: %s is never used", d.file, name)
		}
	}
}

// chaosRun is one run of the suite: the server, the proxies, the workers,
// the driver's books and the report.
type chaosRun struct {
	t       *testing.T
	cfg     config
	ctx     context.Context
	cancel  context.CancelFunc
	srv     *pgServer
	db      reads // direct to the database: the driver's reads
	proxies []*proxy
	cl      *cluster
	book    *triggerBook

	busyMu    sync.Mutex
	busy      []bool      // a slot being signaled, restarted, cut, slowed or frozen
	busyFrom  []time.Time // since when each busy slot is
	busySpans []busySpan  // every time a slot was busy, once it is free again

	freezing atomic.Int32 // freezes in progress (no server restart meanwhile)

	slotOps  sync.WaitGroup // kill/term + restart, cut + heal
	watchers sync.WaitGroup // takeover watchers
	firing   sync.WaitGroup
	stopFire context.CancelFunc
	fireNew  atomic.Bool

	mu        sync.Mutex
	faults    []fault
	restarts  [][2]time.Time // each Postgres restart: began, ended
	takeovers []takeover
	freezes   []*freeze
	problems  []string // failures found off the test goroutine

	histDir string // the workers' claims histories, one file each

	report []string
}

type fault struct {
	at     time.Duration // since the faults began
	kind   string        // SIGKILL, SIGTERM, pg-restart, cut, slow, SIGSTOP
	target string
	detail string
	cutOff *proc   // the worker cut off or slowed, for its lease losses (reported late)
	frozen *freeze // SIGSTOP: what became of the frozen episode (reported late)
}

// freeze is one SIGSTOP of a worker inside its finish transaction: the
// grant g of episode ep was frozen at at, resumed after for; what the
// database shows of the episode since (watchFrozen).
type freeze struct {
	p     *proc
	g     grant
	ep    int64
	at    time.Time
	hold  time.Duration
	until time.Time // SIGCONT

	mu           sync.Mutex
	takenBy      holder        // the later grant that took the episode over
	takenAfter   time.Duration // since at
	doneBy       holder        // the grant whose finish ended the episode
	doneAfter    time.Duration
	status       string // the episode's status then
	watched      bool   // watchFrozen ended (done, or gave up)
	stepsBefore  int64  // the frozen grant's journal steps just before SIGCONT
	writesBefore int64  // and its ledger writes
}

// holder is who holds a grant: its owner and fence.
type holder struct {
	owner string
	fence int64
}

func (h holder) String() string { return fmt.Sprintf("%s fence %d", h.owner, h.fence) }

// takeover is what became of a departed (killed, drained, cut-off, slowed
// then cut, stopped) worker's work: HeldBy's held episodes were someone
// else's (or done) took after the fault, its available ones dispatched (or
// done) after tookAvailable.
type takeover struct {
	kind, id      string
	at            time.Time
	held          int64 // its held unfinished episodes when first looked at
	available     int64 // and the available ones it left
	took          time.Duration
	tookAvailable time.Duration
	lastHeld      string // the last sample that found work still held: what held it
	sessions      string // the worker's database sessions when its work was first held past lease + sweep + margin
	ok            bool
}

func newRun(t *testing.T, cfg config) *chaosRun {
	ctx, cancel := context.WithCancel(t.Context())
	return &chaosRun{t: t, cfg: cfg, ctx: ctx, cancel: cancel, book: newTriggerBook(), busy: make([]bool, cfg.workers),
		busyFrom: make([]time.Time, cfg.workers)}
}

// say adds a line to the report: t.Log, and stdout with CHAOS=1.
func (r *chaosRun) say(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.report = append(r.report, line)
	r.t.Log(line)
	if r.cfg.loud {
		fmt.Println(line)
	}
}

func (r *chaosRun) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// setup starts the server, migrates a schema, creates the ledger, and
// starts the proxies and the workers.
func (r *chaosRun) setup() {
	t := r.t
	r.srv = startServer(t)
	r.db = pgReads{newDatabase(t, r.ctx, r.srv)}
	r.histDir = historyDir(t)

	for range r.cfg.workers {
		r.proxies = append(r.proxies, newProxy(t, r.srv.Addr()))
	}
	r.startCluster(func(slot int) []string {
		return []string{envURL + "=" + r.srv.urlAt(r.proxies[slot].Addr(), schema)}
	})
}

// startCluster starts the workers, each with the run's settings and the
// database settings of its slot (dbEnv), and waits until all are ready.
func (r *chaosRun) startCluster(dbEnv func(slot int) []string) {
	t := r.t
	exe, err := os.Executable()
	require.NoError(t, err)
	r.cl = newCluster(exe, r.cfg.workers, r.book, func(slot int, id string) []string {
		return append([]string{
			envWorker + "=" + id,
			envLease + "=" + strconv.FormatInt(r.cfg.lease.Milliseconds(), 10),
			envSweep + "=" + strconv.FormatInt(r.cfg.sweep.Milliseconds(), 10),
			envHistory + "=" + filepath.Join(r.histDir, id+".jsonl"),
		}, dbEnv(slot)...)
	})
	// Runs first at the end: no worker, fault or watcher outlives the test.
	t.Cleanup(func() {
		r.cancel()
		r.cl.stopAll()
		r.slotOps.Wait()
		r.watchers.Wait()
		if r.stopFire != nil {
			r.stopFire()
		}
		r.firing.Wait()
		if t.Failed() { // the latest workers that logged anything
			shown := 0
			for _, p := range slices.Backward(r.cl.procs()) {
				if out := p.log.String(); out != "" && shown < 12 {
					t.Logf("--- stderr of %s (last 16 KiB) ---\n%s", p.id, out)
					shown++
				}
			}
		}
	})
	for slot := range r.cfg.workers {
		_, err := r.cl.start(slot)
		require.NoError(t, err)
	}
	for slot := range r.cfg.workers {
		require.NoError(t, waitReady(r.cl.current(slot), readyTimeout))
	}
}

// newDatabase creates the suite's schema on srv, migrates it, creates the
// ledger and the grant_ends recorder, and returns a pool of the driver's own
// (direct, no proxy), closed when t ends.
func newDatabase(t *testing.T, ctx context.Context, srv *pgServer) *pgxpool.Pool {
	t.Helper()
	admin, err := pgx.Connect(ctx, srv.URL(""))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))

	pcfg, err := pgxpool.ParseConfig(srv.URL(schema))
	require.NoError(t, err)
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	sqlDB := stdlib.OpenDBFromPool(pool)
	require.NoError(t, postgres.Migrate(ctx, sqlDB))
	require.NoError(t, sqlDB.Close())
	for _, ddl := range []string{query("CreateLedger"), query("CreateLedgerWrites"),
		query("CreateGrantEnds"), query("CreateGrantEndsFunction"), query("CreateGrantEndsTrigger")} {
		_, err := pool.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	require.NoError(t, prepareAll(ctx, pool))
	return pool
}

// prepareAll checks that Postgres accepts every statement of chaos.sql but
// the DDL (prepared: columns and types are checked, nothing runs).
func prepareAll(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for name, q := range chaosQueries {
		if strings.HasPrefix(name, "Create") {
			continue
		}
		if _, err := conn.Conn().Prepare(ctx, name, q.SQL); err != nil {
			return fmt.Errorf("%s does not prepare: %w", name, err)
		}
	}
	return nil
}

// drive fires triggers and injects faults for the configured duration.
func (r *chaosRun) drive() {
	fireCtx, stop := context.WithCancel(r.ctx)
	r.stopFire = stop
	r.fireNew.Store(true)
	r.firing.Go(func() { r.fireLoop(fireCtx) })
	if r.cfg.dialect == dialectSQLite {
		r.injectProcessFaults()
	} else {
		r.injectFaults()
	}
	r.fireNew.Store(false)
	r.book.close()
}

// fireLoop fires a new trigger every tick while fireNew holds, and sends
// again every trigger no worker has answered for a while.
func (r *chaosRun) fireLoop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.fireEvery)
	defer tick.Stop()
	for n := 1; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if r.fireNew.Load() {
			r.deliver(r.book.add(fmt.Sprintf("t%06d", n)))
			n++
		}
		for _, tr := range r.book.due(time.Now().Add(-redeliverAfter)) {
			r.deliver(tr)
		}
	}
}

// deliver sends one trigger to fanout live workers (fewer if fewer live);
// one trigger in oneNodeEvery goes to a single worker, as an HTTP handler
// would fire it, so its work must flow to the others when that worker is
// saturated.
func (r *chaosRun) deliver(tr *trigger) {
	n := r.cfg.fanout
	if rand.IntN(oneNodeEvery) == 0 {
		n = 1
	}
	targets := r.cl.pick(n)
	for _, p := range targets {
		p.send("fire " + tr.id)
	}
	r.book.sent(tr, len(targets))
}

// injectFaults runs the seeded fault schedule: a fault every 0.6–1.5 s, the
// cut once in the first third, the server restart once after the middle
// (and after the cut healed, with no worker frozen, and after the freezes
// due by then: in the short version, after its one freeze), slow answers and
// freezes at planned times (one of each in the short version, a few in the
// long one; the first slow phase ends in a cut), SIGKILL or SIGTERM
// otherwise. Each kind happens at least once whatever the duration.
func (r *chaosRun) injectFaults() {
	rng := rand.New(rand.NewPCG(r.cfg.seed, r.cfg.seed^0x9e3779b97f4a7c15))
	dur := r.cfg.duration
	frac := func(lo, hi float64) time.Duration { return time.Duration((lo + (hi-lo)*rng.Float64()) * float64(dur)) }
	cutAt, pgAt := frac(0.15, 0.30), frac(0.50, 0.65)
	// Planned faults, each in its own stretch of the run so that they
	// spread; one that finds no idle slot is tried again at the next tick.
	type planned struct {
		at      time.Duration
		kind    string // slow, slow+cut, freeze
		pending bool
	}
	var plan []*planned
	nSlow, nFreeze := max(1, int(dur/(20*time.Second))), max(1, int(dur/(30*time.Second)))
	for i := range nSlow {
		kind := "slow"
		if i%2 == 0 {
			kind = "slow+cut"
		}
		lo := 0.05 + 0.8*float64(i)/float64(nSlow)
		plan = append(plan, &planned{at: frac(lo, lo+0.5*0.8/float64(nSlow)), kind: kind, pending: true})
	}
	for i := range nFreeze {
		lo := 0.30 + 0.6*float64(i)/float64(nFreeze)
		plan = append(plan, &planned{at: frac(lo, lo+0.6*0.6/float64(nFreeze)), kind: "freeze", pending: true})
	}
	slices.SortFunc(plan, func(a, b *planned) int { return int(a.at - b.at) })
	start := time.Now()
	runPlanned := func(x *planned) bool {
		if x.kind == "freeze" {
			return r.freeze(start)
		}
		return r.slowAnswers(start, x.kind == "slow+cut")
	}
	// A freeze that is due, and the short version's one freeze, go before
	// the server restart: on a loaded host the cluster finishes little for
	// a while after a restart (every worker reconnects at once), and an
	// armed worker that finishes nothing leaves the run without its freeze.
	freezePending := func() bool {
		el := time.Since(start)
		return slices.ContainsFunc(plan, func(x *planned) bool {
			return x.pending && x.kind == "freeze" && (nFreeze == 1 || el >= x.at)
		})
	}
	var healed chan struct{}
	pgDone := false
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
		if time.Since(start)+gap >= dur || !r.pause(gap) {
			break
		}
		el := time.Since(start)
		var due *planned
		for _, x := range plan {
			if x.pending && el >= x.at {
				due = x
				break
			}
		}
		switch {
		case healed == nil && el >= cutAt:
			healed = r.cut(start)
		case !pgDone && el >= pgAt && (healed == nil || closed(healed)) && r.freezing.Load() == 0 && !freezePending():
			r.restartPostgres(start)
			pgDone = true
		case due != nil:
			if runPlanned(due) {
				due.pending = false
			}
		default:
			signal(kills == 0 || (terms > 0 && rng.IntN(2) == 0))
		}
	}
	for healed == nil && r.ctx.Err() == nil {
		if healed = r.cut(start); healed == nil {
			r.slotOps.Wait() // every slot was busy: let them finish
		}
	}
	for _, x := range plan {
		for x.pending && r.ctx.Err() == nil {
			if x.pending = !runPlanned(x); x.pending {
				r.slotOps.Wait()
			}
		}
	}
	if healed != nil {
		select {
		case <-healed:
		case <-r.ctx.Done():
		}
	}
	r.slotOps.Wait() // no freeze in progress either
	if !pgDone {
		r.restartPostgres(start)
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

// pause waits d (the pace of the fault schedule); false if the test ends.
func (r *chaosRun) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// takeSlot marks a random idle slot busy and returns it, or -1.
func (r *chaosRun) takeSlot(rng *rand.Rand) int {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	var idle []int
	for slot, b := range r.busy {
		if !b {
			idle = append(idle, slot)
		}
	}
	if len(idle) == 0 {
		return -1
	}
	slot := idle[rng.IntN(len(idle))]
	r.busy[slot], r.busyFrom[slot] = true, time.Now()
	return slot
}

// takeBusiestSlot marks busy the idle slot whose worker holds the most
// unfinished episodes, and returns it, or -1.
func (r *chaosRun) takeBusiestSlot() int {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	best, most := -1, int64(-1)
	for slot, b := range r.busy {
		if b {
			continue
		}
		_, held := r.mark(r.cl.current(slot).id)
		if held > most {
			best, most = slot, held
		}
	}
	if best >= 0 {
		r.busy[best], r.busyFrom[best] = true, time.Now()
	}
	return best
}

func (r *chaosRun) freeSlot(slot int) {
	r.busyMu.Lock()
	r.busy[slot] = false
	r.busySpans = append(r.busySpans, busySpan{slot: slot, from: r.busyFrom[slot], to: time.Now()})
	r.busyMu.Unlock()
}

// busySpan is a time a slot had no healthy worker: from its fault's start
// (SIGKILL, SIGTERM, cut, slow answers, SIGSTOP) until its next worker was
// ready, its link healed or it was resumed.
type busySpan struct {
	slot     int
	from, to time.Time
}

// noHealthyWorker is how much of [from, to] every one of the workers slots
// was busy at once (spans): no live worker could sweep, poll or take work
// over then. Faults pick idle slots, but a slot stays busy until its next
// worker is ready, and a restarted race-instrumented worker takes seconds
// to start on a loaded host, so the faults can leave the cluster without a
// healthy worker for a while.
func noHealthyWorker(spans []busySpan, workers int, from, to time.Time) time.Duration {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, sp := range spans {
		a, b := maxTime(sp.from, from), minTime(sp.to, to)
		if a.Before(b) {
			edges = append(edges, edge{a, +1}, edge{b, -1})
		}
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.delta - y.delta // an end before a start at the same instant
	})
	var total time.Duration
	busy := 0
	for i, e := range edges {
		if busy >= workers && i > 0 {
			total += e.at.Sub(edges[i-1].at)
		}
		busy += e.delta
	}
	return total
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (r *chaosRun) addFault(start time.Time, kind, target, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, fault{at: time.Since(start), kind: kind, target: target, detail: detail})
}

// signal SIGKILLs or SIGTERMs the worker of a random idle slot and starts
// the slot's next generation once it is gone; false if every slot was busy.
func (r *chaosRun) signal(rng *rand.Rand, start time.Time, doKill bool) bool {
	slot := r.takeSlot(rng)
	if slot < 0 {
		return false
	}
	p := r.cl.current(slot)
	r.slotOps.Go(func() {
		defer r.freeSlot(slot)
		since, held := r.mark(p.id)
		at := time.Now()
		kind := "SIGKILL"
		if doKill {
			kill(p)
			r.addFault(start, kind, p.id, "")
		} else {
			kind = "SIGTERM"
			ok := term(p, termTimeout)
			detail := "drained: " + p.drained
			if !ok {
				detail = fmt.Sprintf("did not exit within %v of SIGTERM; killed", termTimeout)
				r.problem("%s %s", p.id, detail)
			}
			r.addFault(start, kind, p.id, detail)
		}
		r.watchTakeover(kind, p.id, at, since, held)
		np, err := r.cl.start(slot)
		if err != nil {
			if r.ctx.Err() == nil {
				r.problem("restart slot %d: %v", slot, err)
			}
			return
		}
		if err := waitReady(np, readyTimeout); err != nil && r.ctx.Err() == nil {
			r.problem("%v", err)
		}
	})
	return true
}

// cut freezes the proxy of the idle worker holding the most unfinished
// episodes for twice the lease, then heals it; the returned channel closes
// once healed (nil if every slot was busy).
func (r *chaosRun) cut(start time.Time) chan struct{} {
	slot := r.takeBusiestSlot()
	if slot < 0 {
		return nil
	}
	p := r.cl.current(slot)
	healed := make(chan struct{})
	d := 2 * r.cfg.lease
	since, held := r.mark(p.id)
	r.proxies[slot].freeze()
	at := time.Now()
	r.mu.Lock()
	r.faults = append(r.faults, fault{at: time.Since(start), kind: "cut", target: p.id, cutOff: p,
		detail: fmt.Sprintf("database link frozen for %v (lease %v), then the held bytes delivered", d, r.cfg.lease)})
	r.mu.Unlock()
	r.watchTakeover("cut", p.id, at, since, held)
	r.slotOps.Go(func() {
		defer close(healed)
		defer r.freeSlot(slot)
		r.pause(d)
		r.proxies[slot].thaw()
	})
	return healed
}

// slowAnswers delays every answer the server sends to the idle worker
// holding the most unfinished episodes by half its lease, for a few seconds
// (1.5 leases): its grants (episode creation, recovery claims, renewals)
// land on the database half a lease before the worker learns of them. With
// thenCut its link is then also frozen for twice the lease, so that runs
// granted under slow answers must stop by their local deadline, which the
// overlap check compares with the database's. False if every slot was busy.
func (r *chaosRun) slowAnswers(start time.Time, thenCut bool) bool {
	slot := r.takeBusiestSlot()
	if slot < 0 {
		return false
	}
	p, px := r.cl.current(slot), r.proxies[slot]
	d, hold, cutFor := r.cfg.lease/2, 3*r.cfg.lease/2, 2*r.cfg.lease
	px.slow(d)
	detail := fmt.Sprintf("answers from the server delayed by %v (lease/2) for %v", d, hold)
	kind := "slow"
	if thenCut {
		kind = "slow+cut"
		detail += fmt.Sprintf(", then its database link frozen for %v too", cutFor)
	}
	r.mu.Lock()
	r.faults = append(r.faults, fault{at: time.Since(start), kind: kind, target: p.id, cutOff: p, detail: detail})
	r.mu.Unlock()
	r.slotOps.Go(func() {
		defer r.freeSlot(slot)
		defer px.fast()
		if !r.pause(hold) || !thenCut {
			return
		}
		since, held := r.mark(p.id)
		px.freeze()
		r.watchTakeover(kind, p.id, time.Now(), since, held)
		r.pause(cutFor)
		px.thaw()
	})
	return true
}

// freeze arms the idle worker holding the most unfinished episodes to stop
// inside its next finish transaction (after FinishEpisode, before the
// commit: the claim row stays locked), SIGSTOPs it when it says so, and
// SIGCONTs it twice the lease later. Another worker must take the frozen
// episode over meanwhile (the server bounds the frozen transaction), and
// the frozen worker must write nothing once resumed. False if every slot
// was busy.
func (r *chaosRun) freeze(start time.Time) bool {
	slot := r.takeBusiestSlot()
	if slot < 0 {
		return false
	}
	p := r.cl.current(slot)
	hold := 2 * r.cfg.lease
	r.freezing.Add(1)
	r.slotOps.Go(func() {
		defer r.freezing.Add(-1)
		defer r.freeSlot(slot)
		for len(p.intx) > 0 { // a line left by an earlier arming
			<-p.intx
		}
		// A loaded worker may finish nothing for a while: it is armed again
		// while new triggers still flow, freezeTries times at most.
		var x intx
		for try := 1; ; try++ {
			p.send("freeze")
			wait := time.NewTimer(freezeWait)
			applied := false
			select {
			case x = <-p.intx:
				applied = true
			case <-wait.C:
			case <-p.exited:
			case <-r.ctx.Done():
			}
			wait.Stop()
			if applied {
				break
			}
			if closed(p.exited) || r.ctx.Err() != nil {
				return
			}
			p.send("unfreeze")
			if try == freezeTries || !r.fireNew.Load() {
				r.addFault(start, "SIGSTOP", p.id, fmt.Sprintf("not applied: no finish within %v of arming, %d times", freezeWait, try))
				return
			}
		}
		at := time.Now()
		p.paused.Store(true)
		p.stop()
		fz := &freeze{p: p, g: x.g, ep: x.ep, at: at, hold: hold}
		since, held := r.mark(p.id)
		r.watchTakeover("SIGSTOP", p.id, at, since, held)
		r.watchFrozen(fz)
		r.mu.Lock()
		r.freezes = append(r.freezes, fz)
		r.faults = append(r.faults, fault{at: at.Sub(start), kind: "SIGSTOP", target: p.id, frozen: fz,
			detail: fmt.Sprintf("inside its finish transaction of episode %d (grant fence %d), for %v, then SIGCONT", x.ep, x.g.fence, hold)})
		r.mu.Unlock()
		r.pause(hold)
		steps, writes, err := grantWrites(r.ctx, r.db, x.g)
		fz.mu.Lock()
		fz.stepsBefore, fz.writesBefore = steps, writes
		if err != nil {
			fz.stepsBefore = -1
		}
		fz.until = time.Now()
		fz.mu.Unlock()
		p.cont()
		p.paused.Store(false)
	})
	return true
}

// grantWrites counts g's journal steps and ledger writes (GrantWrites).
func grantWrites(ctx context.Context, db reads, g grant) (steps, writes int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = db.QueryRow(ctx, "GrantWrites", g.key, g.fence).Scan(&steps, &writes)
	return steps, writes, err
}

// watchFrozen polls the frozen episode's claim until the episode is
// terminal: taken over by a later grant and finished by it, or finished by
// the frozen grant itself (its commit landed after SIGCONT: nothing bounded
// the frozen transaction).
func (r *chaosRun) watchFrozen(fz *freeze) {
	r.watchers.Go(func() {
		defer func() {
			fz.mu.Lock()
			fz.watched = true
			fz.mu.Unlock()
		}()
		tick := time.NewTicker(pollEvery / 2)
		defer tick.Stop()
		for time.Since(fz.at) < settleTimeout {
			var owner, state, status string
			var fence int64
			err := r.db.QueryRow(r.ctx, "GrantOfKey", fz.g.key).Scan(&owner, &fence, &state, &status)
			if err == nil {
				fz.mu.Lock()
				if fence > fz.g.fence && fz.takenBy.fence == 0 {
					fz.takenBy, fz.takenAfter = holder{owner, fence}, time.Since(fz.at)
				}
				terminal := state == "done" || state == "failed"
				if terminal {
					fz.doneBy, fz.doneAfter, fz.status = holder{owner, fence}, time.Since(fz.at), status
				}
				fz.mu.Unlock()
				if terminal {
					return
				}
			}
			select {
			case <-r.ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

func (r *chaosRun) restartPostgres(start time.Time) {
	began := time.Now()
	took, err := r.srv.restart(r.ctx)
	r.mu.Lock()
	r.restarts = append(r.restarts, [2]time.Time{began, time.Now()})
	r.mu.Unlock()
	if err != nil {
		if r.ctx.Err() == nil {
			r.problem("restart Postgres: %v", err)
		}
		return
	}
	r.addFault(start, "pg-restart", "postgres", fmt.Sprintf("pg_ctl restart -m fast took %v", took.Round(time.Millisecond)))
}

// mark reads, just before a fault hits worker id, the database clock and
// how many unfinished episodes id holds (HeldBy's held). Zero values if the
// database does not answer (it may be restarting); the watcher then reads
// them itself.
func (r *chaosRun) mark(id string) (since time.Time, held int64) {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	if err := r.db.QueryRow(ctx, "DatabaseNow").Scan(&since); err != nil {
		return time.Time{}, -1
	}
	var available int64
	var what string
	if err := r.db.QueryRow(ctx, "HeldBy", id, since).Scan(&held, &available, &what); err != nil {
		return since, -1
	}
	return since, held
}

// watchTakeover polls HeldBy until none of the unfinished episodes id held
// at since (database clock) is still its own (held = 0: recovery, another
// poller, or the worker itself after a cut moved or finished them), and
// until the available work it left is dispatched or done (available = 0).
// It records how long each took from at; held is the count at since.
// Grants id got after since (a cut-off worker back at work) are not
// counted.
func (r *chaosRun) watchTakeover(kind, id string, at, since time.Time, held int64) {
	r.watchers.Go(func() {
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		x := takeover{kind: kind, id: id, at: at, held: held, available: -1}
		heldDone := false
		for {
			var err error
			if since.IsZero() {
				err = r.db.QueryRow(r.ctx, "DatabaseNow").Scan(&since)
			}
			var n, avail int64
			var what string
			if err == nil {
				err = r.db.QueryRow(r.ctx, "HeldBy", id, since).Scan(&n, &avail, &what)
			}
			if err == nil && n > 0 {
				x.lastHeld = fmt.Sprintf("at +%.2fs %s", time.Since(at).Seconds(), what)
				if x.sessions == "" && time.Since(at) > r.cfg.lease+r.cfg.sweep+testbound.Margin {
					var sessions string
					if err := r.db.QueryRow(r.ctx, "HolderSessions", id).Scan(&sessions); err != nil {
						sessions = "unknown: " + err.Error()
					}
					x.sessions = fmt.Sprintf("at +%.2fs %s", time.Since(at).Seconds(), sessions)
				}
			}
			if err == nil && x.held < 0 {
				x.held = n
			}
			if err == nil && x.available < 0 {
				x.available = avail
			}
			if err == nil && n == 0 && !heldDone {
				x.took, x.ok, heldDone = time.Since(at), true, true
			}
			if err == nil && heldDone && avail == 0 {
				x.tookAvailable = time.Since(at)
				r.addTakeover(x)
				return
			}
			if time.Since(at) > settleTimeout {
				if !heldDone {
					x.took = time.Since(at)
				}
				x.tookAvailable = time.Since(at)
				r.addTakeover(x)
				return
			}
			select {
			case <-r.ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

// takeoverBound is how soon a departed worker's held work must be someone
// else's, by how it departed, and how that bound was made up. Every bound
// is what the workers' configuration allows plus testbound.Margin:
//
//   - SIGKILL: its claims (its polls' grants among them) run out within a
//     lease; a live worker's sweep, then poll, takes them within one
//     interval more.
//   - SIGTERM: as SIGKILL, after the drain (drainTimeout), during which the
//     worker still renews; what the drain released a sweep takes at once.
//   - cut, slow+cut, SIGSTOP: as SIGKILL, but the worker lives on: what it
//     sent before the cut (or does after SIGCONT) reaches the database at
//     the end of the fault (2 leases), a renewal of a lease nobody took yet
//     among it, so its work is only certainly someone else's a sweep after
//     that; for SIGSTOP, at least lease + TxBound (its frozen transaction).
//   - a Postgres restart that overlapped the takeover adds its length and a
//     sweep (the sweep that met it failed; the next one runs an interval
//     later).
//   - time during the takeover when every slot was busy with a fault
//     (noHealthyWorker: no worker alive, ready and connected) is added: a
//     takeover needs a live worker, and the bound runs only while one is.
//   - a recovery sweep that outlasted its interval during the takeover (the
//     sweeper warns with how long it took) adds the longest such sweep: the
//     orphans it had not reached yet waited for it. On a loaded host (make
//     test-loaded: two CPU hogs on two cores beside the race-instrumented
//     workers) a sweep's round trips are starved of CPU and 20-odd requeues
//     after a restart took 4-9 s; the report prints the slowest sweep of
//     the run, so the allowance is visible, and a sweep that misses or
//     skips the orphans is as fast as ever and still fails the bound.
//
// The watcher's own poll (pollEvery) is added to all.
func (r *chaosRun) takeoverBound(x takeover, restarts [][2]time.Time, sweeps []slowSweep, spans []busySpan) (time.Duration, string) {
	c := r.cfg
	b, how := c.lease, "lease"
	switch x.kind {
	case "SIGTERM":
		b, how = drainTimeout+c.lease, "drain + lease"
	case "cut", "slow+cut":
		b, how = 2*c.lease, "cut (2 leases)"
	case "SIGSTOP":
		b, how = max(2*c.lease, c.lease+claims.TxBound(c.lease)), "stop (2 leases)"
	}
	b += c.sweep + c.poll() + pollEvery + testbound.Margin
	how += fmt.Sprintf(" + sweep + poll %v + watcher %v + margin %v", c.poll(), pollEvery, testbound.Margin)
	if c.dialect == dialectSQLite {
		// The sweep's requeues queue for the file's one write lock behind
		// the live workload's writes, and may wait busy_timeout for it
		// before the next sweep tries again.
		b += sqlite.BusyTimeout + c.sweep
		how += fmt.Sprintf(" + SQLite's busy_timeout %v + sweep", sqlite.BusyTimeout)
	}
	for _, rs := range restarts {
		if rs[0].Before(x.at.Add(x.took)) && rs[1].After(x.at) {
			b += rs[1].Sub(rs[0]) + c.sweep
			how += fmt.Sprintf(" + restart %.2fs + sweep", rs[1].Sub(rs[0]).Seconds())
		}
	}
	if none := noHealthyWorker(spans, c.workers, x.at, x.at.Add(x.took)); none > 0 {
		b += none
		how += fmt.Sprintf(" + %.2fs with no healthy worker", none.Seconds())
	}
	var slowest time.Duration
	for _, sw := range sweeps {
		if sw.overlaps(x.at, x.at.Add(x.took)) {
			slowest = max(slowest, sw.took)
		}
	}
	if slowest > 0 {
		b += slowest
		how += fmt.Sprintf(" + a sweep that took %.2fs", slowest.Seconds())
	}
	return b, how
}

func (r *chaosRun) addTakeover(x takeover) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.takeovers = append(r.takeovers, x)
}

// whyStuck is whyUnanswered with the state of each worker's proxy.
func (r *chaosRun) whyStuck() string {
	var b strings.Builder
	b.WriteString(r.cl.whyUnanswered(r.ctx, r.db))
	for slot, px := range r.proxies {
		fmt.Fprintf(&b, "\nproxy of slot %d: %v", slot, px)
	}
	return b.String()
}

// settle ends the run: every slot live again, every trigger answered by
// some Fire, then nothing queued or running in the database.
func (r *chaosRun) settle() {
	t := r.t
	r.slotOps.Wait()
	restarted := 0
	for slot := range r.cfg.workers {
		if p := r.cl.current(slot); p.leaving.Load() || closed(p.exited) {
			_, err := r.cl.start(slot)
			require.NoError(t, err)
			restarted++
		}
	}
	for slot := range r.cfg.workers {
		if err := waitReady(r.cl.current(slot), readyTimeout); err != nil {
			t.Fatalf("after the faults: %v%s", err, r.whyStuck())
		}
	}
	r.say("faults stopped after %v; all %d workers live (%d restarted now); no new triggers", r.cfg.duration, r.cfg.workers, restarted)

	// A run that does not settle is still checked and reported (check
	// names what is left open, and the report says what the faults did).
	deadline := time.NewTimer(settleTimeout)
	defer deadline.Stop()
	select {
	case <-r.book.settled:
	case <-deadline.C:
		t.Errorf("%d triggers were never answered by any worker within %v%s", r.book.pendingCount(), settleTimeout, r.whyStuck())
		r.stopFire()
		r.firing.Wait()
		r.watchers.Wait()
		return
	}
	r.stopFire()
	r.firing.Wait()

	began := time.Now()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var open int64
	for {
		err := r.db.QueryRow(r.ctx, "Unsettled").Scan(&open)
		if err == nil && open == 0 {
			break
		}
		select {
		case <-deadline.C:
			t.Errorf("%d episodes still queued or running %v after the faults stopped (last error %v); by what they wait on: %s%s",
				open, settleTimeout, err, unsettledBreakdown(r.ctx, r.db), r.cl.stacks())
			r.watchers.Wait()
			return
		case <-tick.C:
		}
	}
	r.say("every trigger answered; no episode queued or running %.1fs later", time.Since(began).Seconds())
	r.watchers.Wait()
}

// audit is one EpisodeAudit row.
type audit struct {
	id                                            int64
	trigger, status, errorClass, errorDetail      string
	attempts                                      int32
	owner, claimState, claimOwner                 string
	claimFence, steps, lastStepFence, stepRegress int64
	ledgerRows                                    int64
	ledgerOwner                                   string
	ledgerFence                                   int64
	ledgerTrigger, ledgerAll                      string
	ledgerWrites, ledgerGrants, staleLedgerWrites int64
}

// invariant is one checked property and what was counted.
type invariant struct {
	name   string
	counts string
	bad    []string
	// quietOnly: a timing bound that holds only on a host running nothing
	// else; outside CHAOS=1 (make chaos) a violation is reported, not
	// failed.
	quietOnly bool
}

// check reads what the database recorded and checks every invariant; it
// prints the report and fails the test for each violated one.
func (r *chaosRun) check() {
	t := r.t
	ctx := r.ctx
	rows, err := r.db.Query(ctx, "EpisodeAudit")
	require.NoError(t, err)
	var eps []audit
	for rows.Next() {
		var a audit
		require.NoError(t, rows.Scan(&a.id, &a.trigger, &a.status, &a.errorClass, &a.errorDetail, &a.attempts,
			&a.owner, &a.claimState, &a.claimOwner, &a.claimFence, &a.steps, &a.lastStepFence, &a.stepRegress,
			&a.ledgerRows, &a.ledgerOwner, &a.ledgerFence, &a.ledgerTrigger, &a.ledgerAll, &a.ledgerWrites, &a.ledgerGrants, &a.staleLedgerWrites))
		eps = append(eps, a)
	}
	require.NoError(t, rows.Err())
	var stray, open int64
	require.NoError(t, r.db.QueryRow(ctx, "StrayLedgerRows").Scan(&stray))
	require.NoError(t, r.db.QueryRow(ctx, "Unsettled").Scan(&open))
	type claimRow struct {
		key, state, owner string
		live              bool
	}
	var claimsOpen []claimRow
	crows, err := r.db.Query(ctx, "OpenClaims")
	require.NoError(t, err)
	for crows.Next() {
		var c claimRow
		require.NoError(t, crows.Scan(&c.key, &c.state, &c.owner, &c.live))
		claimsOpen = append(claimsOpen, c)
	}
	require.NoError(t, crows.Err())
	ends := grantEnds(t, ctx, r.db)

	r.mu.Lock()
	faults, takeovers, problems := slices.Clone(r.faults), slices.Clone(r.takeovers), slices.Clone(r.problems)
	restarts := slices.Clone(r.restarts)
	freezes := slices.Clone(r.freezes)
	r.mu.Unlock()
	r.busyMu.Lock()
	spans := slices.Clone(r.busySpans)
	r.busyMu.Unlock()
	procs := r.cl.procs()
	var sweeps []slowSweep
	for _, p := range procs {
		sweeps = append(sweeps, p.log.slowSweeps()...)
	}
	dead := map[string]bool{}
	for _, p := range procs {
		if closed(p.exited) {
			dead[p.id] = true
		}
	}

	// Faults injected.
	byKind := map[string]int{}
	for _, f := range faults {
		byKind[f.kind]++
	}
	if r.cfg.dialect == dialectSQLite {
		r.say("faults injected: %d SIGKILL, %d SIGTERM (drain), all %d workers on one SQLite file; %d worker processes in all",
			byKind["SIGKILL"], byKind["SIGTERM"], r.cfg.workers, len(procs))
	} else {
		r.say("faults injected: %d SIGKILL, %d SIGTERM (drain), %d Postgres restart, %d cut-off, %d slow answers (%d then cut; answers %v late), %d SIGSTOP inside a transaction; %d worker processes in all",
			byKind["SIGKILL"], byKind["SIGTERM"], byKind["pg-restart"], byKind["cut"], byKind["slow"]+byKind["slow+cut"], byKind["slow+cut"],
			r.cfg.lease/2, len(freezes), len(procs))
	}
	slices.SortFunc(faults, func(a, b fault) int { return int(a.at - b.at) })
	for _, f := range faults {
		line := fmt.Sprintf("  %6.1fs %-10s %-12s", f.at.Seconds(), f.kind, f.target)
		if f.detail != "" {
			line += " " + f.detail
		}
		if f.cutOff != nil {
			// A frozen write returns only after the thaw: the losses it
			// reports (fenced writes that matched nothing, local
			// deadlines) come in late, so they are counted now.
			line += fmt.Sprintf("; it reported %d lease losses", f.cutOff.lost.Load())
		}
		if f.frozen != nil {
			line += "; " + f.frozen.outcome()
		}
		r.say("%s", line)
	}
	slices.SortFunc(takeovers, func(a, b takeover) int { return strings.Compare(a.kind+a.id, b.kind+b.id) })
	for _, x := range takeovers {
		bound, _ := r.takeoverBound(x, restarts, sweeps, spans)
		r.say("  after %-7s of %-11s its %2d held episodes were live workers' (or done) %.2fs later (bound %.2fs); the %2d it left available were dispatched (or done) %.2fs later",
			x.kind, x.id, x.held, x.took.Seconds(), bound.Seconds(), x.available, x.tookAvailable.Seconds())
	}

	r.reportShares()

	b := r.book
	b.mu.Lock()
	r.say("triggers: %d fired, %d fire requests (%.2f per trigger), %d redeliveries; answers: %d created, %d duplicate, %d errors, %d for unknown triggers",
		len(b.all), b.requests, float64(b.requests)/float64(max(1, len(b.all))), b.redeliveries, b.created, b.duplicates, b.errs, b.unknown)
	sentIDs := make(map[string]bool, len(b.all))
	for _, tr := range b.all {
		sentIDs[tr.id] = true
	}
	createdAnswers := b.created
	b.mu.Unlock()
	acked := b.acked()

	var recovered, multiGrant, restamped int
	var maxAttempts int32
	var maxFence, steps, writes int64
	for _, a := range eps {
		if a.attempts > 0 {
			recovered++
		}
		maxAttempts = max(maxAttempts, a.attempts)
		if a.claimFence > 1 {
			multiGrant++
		}
		maxFence = max(maxFence, a.claimFence)
		if a.ledgerGrants > 1 {
			restamped++
		}
		steps += a.steps
		writes += a.ledgerWrites
	}
	r.say("episodes: %d; %d recovered (max %d recoveries of one), %d ran under more than one grant (max fence %d); "+
		"workers reported %d lease losses, %d hand-overs on drain, %d orphans restarted by sweeps",
		len(eps), recovered, maxAttempts, multiGrant, maxFence, r.cl.leaseLost.Load(), r.cl.handedOver.Load(), r.cl.recovered.Load())

	r.cl.writesMu.Lock()
	failedWrites := maps.Clone(r.cl.writesFailed)
	r.cl.writesMu.Unlock()
	for _, w := range slices.Sorted(maps.Keys(failedWrites)) {
		r.say("  runner write failed, not retried: %3d× %s", failedWrites[w], w)
	}
	appends := 0
	for w, n := range failedWrites {
		if strings.HasPrefix(w, "AppendStep ") {
			appends += n
		}
	}
	if appends > 0 {
		r.say("  (a failed AppendStep releases its episode for recovery, never fails it: %d such releases; "+
			"see TestServerRestartDuringStep and TestDatabaseFailureHandsTheEpisodeToRecovery)", appends)
	}
	logs := map[string]logged{}
	for _, p := range procs {
		for m, l := range p.log.messages() {
			all := logs[m]
			if all.first == "" {
				all.first = l.first
			}
			all.n += l.n
			logs[m] = all
		}
	}
	msgs := slices.Sorted(maps.Keys(logs))
	slices.SortStableFunc(msgs, func(a, b string) int { return logs[b].n - logs[a].n })
	for _, m := range msgs {
		r.say("  workers logged %4d× %s; first: %.400s", logs[m].n, m, logs[m].first)
	}

	// Invariants.
	var inv []invariant
	add := func(name, counts string, bad []string) {
		inv = append(inv, invariant{name: name, counts: counts, bad: bad})
	}

	perTrigger := map[string][]int64{}
	var unknown []string
	for _, a := range eps {
		perTrigger[a.trigger] = append(perTrigger[a.trigger], a.id)
		if !sentIDs[a.trigger] {
			unknown = append(unknown, fmt.Sprintf("episode %d has trigger %q that was never fired", a.id, a.trigger))
		}
	}
	var bad []string
	for id := range acked {
		switch n := len(perTrigger[id]); {
		case n == 0:
			bad = append(bad, fmt.Sprintf("trigger %s was answered by a Fire but has no episode", id))
		case n > 1:
			bad = append(bad, fmt.Sprintf("trigger %s has %d episodes %v", id, n, perTrigger[id]))
		}
	}
	if n := b.pendingCount(); n > 0 {
		bad = append(bad, fmt.Sprintf("%d triggers never answered", n))
	}
	if createdAnswers > len(eps) {
		bad = append(bad, fmt.Sprintf("%d Fire calls reported a created episode, but only %d episodes exist", createdAnswers, len(eps)))
	}
	add("every fired trigger has exactly one episode", fmt.Sprintf("%d triggers, %d episodes", len(acked), len(eps)), append(bad, unknown...))

	bad = nil
	done := 0
	for _, a := range eps {
		if a.status == "done" {
			done++
			continue
		}
		bad = append(bad, fmt.Sprintf("episode %d (trigger %s) is %s, class %q: %.300s", a.id, a.trigger, a.status, a.errorClass, a.errorDetail))
	}
	add("every episode is done", fmt.Sprintf("%d of %d done", done, len(eps)), bad)

	bad = nil
	for _, a := range eps {
		switch {
		case a.ledgerRows != 1:
			bad = append(bad, fmt.Sprintf("episode %d (trigger %s) has %d ledger rows (%s); its claim: %s by %s, fence %d",
				a.id, a.trigger, a.ledgerRows, a.ledgerAll, a.claimState, a.claimOwner, a.claimFence))
		case a.ledgerTrigger != a.trigger:
			bad = append(bad, fmt.Sprintf("episode %d: ledger row for trigger %q, episode's is %q", a.id, a.ledgerTrigger, a.trigger))
		}
	}
	if stray > 0 {
		bad = append(bad, fmt.Sprintf("%d ledger rows or writes for episodes that do not exist", stray))
	}
	add("exactly one ledger row per episode, for its trigger", fmt.Sprintf("%d episodes, %d ledger writes", len(eps), writes), bad)

	bad = nil
	for _, a := range eps {
		if a.status != "done" || a.ledgerRows != 1 {
			continue // reported above
		}
		if a.claimState != "done" || a.ledgerOwner != a.claimOwner || a.ledgerFence != a.claimFence ||
			a.owner != a.ledgerOwner || a.lastStepFence != a.ledgerFence {
			bad = append(bad, fmt.Sprintf("episode %d: ledger (%s, fence %d); claim %s (%s, fence %d); episode owner %s; last step fence %d",
				a.id, a.ledgerOwner, a.ledgerFence, a.claimState, a.claimOwner, a.claimFence, a.owner, a.lastStepFence))
		}
	}
	add("each ledger row's (owner, fence) is the grant that finished its episode",
		fmt.Sprintf("%d episodes; %d ledger rows re-stamped by a later grant after the first died", len(eps), restamped), bad)

	bad = nil
	for _, a := range eps {
		if a.staleLedgerWrites > 0 || a.stepRegress > 0 {
			bad = append(bad, fmt.Sprintf("episode %d: %d ledger writes and %d journal steps by a fenced-out grant after a later grant's",
				a.id, a.staleLedgerWrites, a.stepRegress))
		}
	}
	add("no write of a fenced-out grant lands after a later grant's (ledger and journal)",
		fmt.Sprintf("%d ledger writes, %d journal steps", writes, steps), bad)

	bad = nil
	if open > 0 {
		bad = append(bad, fmt.Sprintf("%d episodes queued or running", open))
	}
	for _, c := range claimsOpen {
		who := "live worker"
		if dead[c.owner] {
			who = "dead worker"
		}
		bad = append(bad, fmt.Sprintf("claim %s is %s by %s %s (lease live: %v)", c.key, c.state, who, c.owner, c.live))
	}
	add("nothing queued or running; no claim still claimed or released",
		fmt.Sprintf("%d open episodes, %d open claims, %d dead worker identities", open, len(claimsOpen), len(dead)), bad)

	bad = nil
	var worst, worstOver, worstAvailable time.Duration
	worstOver = -time.Hour
	for _, x := range takeovers {
		bound, how := r.takeoverBound(x, restarts, sweeps, spans)
		worst, worstOver, worstAvailable = max(worst, x.took), max(worstOver, x.took-bound), max(worstAvailable, x.tookAvailable)
		if !x.ok || x.took > bound {
			bad = append(bad, fmt.Sprintf("%s's held work (after %s) was still its own %.2fs later (bound %.2fs: %s; last seen held %s; its database sessions %s)", x.id, x.kind, x.took.Seconds(), bound.Seconds(), how, x.lastHeld, x.sessions))
		}
	}
	var slowestSweep time.Duration
	for _, sw := range sweeps {
		slowestSweep = max(slowestSweep, sw.took)
	}
	add(fmt.Sprintf("no work held by a departed worker past lease + sweep + poll + %v (+ the fault's own length: drain, cut, stop, a restart, a sweep that outlasted its interval; on SQLite busy_timeout + sweep): it was a live worker's or done", testbound.Margin),
		fmt.Sprintf("%d departures, slowest %.2fs, %+.2fs against its bound (lease %v, sweep %v, poll %v); their available work dispatched within %.2fs; %d sweeps outlasted their interval, the slowest %.2fs",
			len(takeovers), worst.Seconds(), worstOver.Seconds(), r.cfg.lease, r.cfg.sweep, r.cfg.poll(), worstAvailable.Seconds(), len(sweeps), slowestSweep.Seconds()), bad)
	// On SQLite a takeover's requeues queue for the file's one write lock
	// behind the live workload; with other suites on the host's two cores
	// (make test) that queue, not the configuration, sets the time (6-25 s
	// seen with a 15.3 s bound), so the bound is asserted by make chaos.
	inv[len(inv)-1].quietOnly = r.cfg.dialect == dialectSQLite

	slowed := map[string]bool{}
	for _, f := range faults {
		if strings.HasPrefix(f.kind, "slow") {
			slowed[f.target] = true
		}
	}
	if r.cfg.dialect == dialectSQLite {
		ov := overlaps(ends, procs, slowed, sqliteClockResolution)
		r.say("overlap of a run's last activity with its lease's end on the database (must be below %v, the resolution of SQLite's clock): %s", sqliteClockResolution, ov.worst())
		for _, l := range ov.lines() {
			r.say("%s", l)
		}
		add(fmt.Sprintf("every run stopped before its lease ended on the database (overlap < %v, the clock's resolution)", sqliteClockResolution), ov.worst(), ov.bad)
	} else {
		ov := overlaps(ends, procs, slowed, 0)
		r.say("overlap of a run's last activity with its lease's end on the database (must be negative): %s", ov.worst())
		for _, l := range ov.lines() {
			r.say("%s", l)
		}
		add("every run stopped before its lease ended on the database (overlap < 0)", ov.worst(), ov.bad)
	}

	if r.cfg.dialect != dialectSQLite { // SQLite: process faults only, no SIGSTOP
		r.checkFreezes(freezes, restarts, spans, sweeps, add)
	}

	bad = nil
	for _, p := range procs {
		if p.log.raced() {
			bad = append(bad, fmt.Sprintf("%s reported a data race; stderr:\n%s", p.id, p.log.String()))
		}
	}
	add("no data race in any worker process", fmt.Sprintf("%d processes", len(procs)), bad)
	counts, bad := r.checkHistory()
	add("every claims operation of every worker, as recorded, is linearizable (porcupine, one lease per key on the database clock)", counts, bad)
	add("no fault failed to apply", fmt.Sprintf("%d faults", len(faults)), problems)

	r.say("invariants:")
	for _, i := range inv {
		status := "ok  "
		switch {
		case len(i.bad) > 0 && i.quietOnly && !r.cfg.loud:
			status = "SLOW"
		case len(i.bad) > 0:
			status = "FAIL"
		}
		r.say("  %s %s — %s", status, i.name, i.counts)
	}
	for _, i := range inv {
		if len(i.bad) == 0 {
			continue
		}
		if i.quietOnly && !r.cfg.loud {
			r.say("not failed here (asserted under CHAOS=1, make chaos, on a host running nothing else): %s (%d):\n  %s",
				i.name, len(i.bad), strings.Join(i.bad[:min(len(i.bad), 20)], "\n  "))
			continue
		}
		shown := i.bad[:min(len(i.bad), 20)]
		t.Errorf("invariant violated: %s (%d):\n  %s", i.name, len(i.bad), strings.Join(shown, "\n  "))
	}
}

// checkFreezes checks every SIGSTOP inside a finish transaction (there must
// be one at least) and adds the invariant. As takeoverBound does, each
// freeze's bound also counts the time no slot had a healthy worker, a
// Postgres restart that overlapped it (its length and a sweep) and the
// longest sweep that outlasted its interval meanwhile.
func (r *chaosRun) checkFreezes(freezes []*freeze, restarts [][2]time.Time, spans []busySpan, sweeps []slowSweep,
	add func(name, counts string, bad []string)) {
	var bad []string
	txBound := claims.TxBound(r.cfg.lease)
	freezeBound := r.cfg.lease + r.cfg.sweep + txBound + freezeSlack
	var slowestFreeze time.Duration
	for _, fz := range freezes {
		fz.mu.Lock()
		from, to := fz.at, fz.at.Add(fz.takenAfter)
		if fz.takenBy.fence == 0 {
			to = time.Now()
		}
		fz.mu.Unlock()
		bound := freezeBound + noHealthyWorker(spans, r.cfg.workers, from, to)
		for _, rs := range restarts {
			if rs[0].Before(to) && rs[1].After(from) {
				bound += rs[1].Sub(rs[0]) + r.cfg.sweep
			}
		}
		var slowest time.Duration
		for _, sw := range sweeps {
			if sw.overlaps(from, to) {
				slowest = max(slowest, sw.took)
			}
		}
		bound += slowest
		took, problem := r.checkFreeze(fz, bound)
		slowestFreeze = max(slowestFreeze, took)
		if problem != "" {
			bad = append(bad, problem)
		}
	}
	if len(freezes) == 0 {
		bad = append(bad, "no worker was frozen inside a transaction (no SIGSTOP applied)")
	}
	add(fmt.Sprintf("a holder SIGSTOPped inside its finish transaction was taken over within lease + sweep + TxBound + %v (+ time with no healthy worker, a restart, a slow sweep), by another grant, and wrote nothing once resumed", freezeSlack),
		fmt.Sprintf("%d freezes, slowest takeover %.2fs (bound %.2fs: lease %v, sweep %v, TxBound %v)",
			len(freezes), slowestFreeze.Seconds(), freezeBound.Seconds(), r.cfg.lease, r.cfg.sweep, txBound), bad)
}

// grantEnd is one GrantEnds row: grant g of owner, superseded by next.
type grantEnd struct {
	g          grant
	owner      string
	state      string // the old grant's state then: claimed (expired) or released
	leaseUntil time.Time
	next       holder
	nextKind   string
}

// grantEnds reads every superseded grant the trigger recorded.
func grantEnds(t *testing.T, ctx context.Context, db reads) []grantEnd {
	rows, err := db.Query(ctx, "GrantEnds")
	require.NoError(t, err)
	var out []grantEnd
	for rows.Next() {
		var e grantEnd
		require.NoError(t, rows.Scan(&e.g.key, &e.g.fence, &e.owner, &e.state, &e.leaseUntil, &e.next.owner, &e.next.fence, &e.nextKind))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

// overlapStats compares, for every superseded grant whose run a worker
// reported active, the run's last activity (the last return of Init or
// Step it printed) with the grant's end on the database: overlap = last
// activity - lease_until, negative when the run stopped first. Grants are
// grouped by how they ended: expired (the run must stop by its local
// deadline, before the database's), released (the node stopped the run,
// then released: a few milliseconds below 0), and, among both, those of a
// worker that had slow answers.
type overlapStats struct {
	ends                    int // superseded grants in all
	expired, released, slow overlapGroup
	// A run its worker was SIGSTOPped through cannot stop itself: its
	// activity after the SIGSTOP is left out (fencing must reject its
	// writes), and reported here; so is a run granted before the SIGSTOP
	// whose lease ended during it and which first became active after.
	paused      int
	pausedWorst time.Duration
	bad         []string
}

type overlapGroup struct {
	n     int
	worst time.Duration
	end   grantEnd
}

func (g *overlapGroup) add(o time.Duration, e grantEnd) {
	if g.n == 0 || o > g.worst {
		g.worst, g.end = o, e
	}
	g.n++
}

func (g overlapGroup) String() string {
	if g.n == 0 {
		return "none"
	}
	return fmt.Sprintf("max %+.3fs over %d (worst: %s fence %d of %s, then %s by %s)",
		g.worst.Seconds(), g.n, g.end.g.key, g.end.g.fence, g.end.owner, g.end.next, g.end.nextKind)
}

// overlaps computes the overlap of every superseded grant in ends whose run
// one of procs reported; slowed are the workers that had slow answers. An
// overlap is a violation from resolution on: the database clock's
// resolution, 0 for Postgres (microseconds); SQLite's clock is read in
// whole milliseconds, truncated, so a release at 12.7 ms is recorded at
// 12 ms and a run's last activity at 12.4 ms, before it, shows +0.4 ms.
func overlaps(ends []grantEnd, procs []*proc, slowed map[string]bool, resolution time.Duration) overlapStats {
	byID := make(map[string]*proc, len(procs))
	for _, p := range procs {
		byID[p.id] = p
	}
	st := overlapStats{ends: len(ends)}
	for _, e := range ends {
		p := byID[e.owner]
		if p == nil {
			continue
		}
		acts := p.active(e.g)
		if len(acts) == 0 {
			continue // never started, or its worker died before it printed
		}
		first, last := slices.MinFunc(acts, time.Time.Compare), slices.MaxFunc(acts, time.Time.Compare)
		if stopped, resumed := p.pauseWindow(); !stopped.IsZero() && !first.Before(stopped) &&
			stopped.Before(e.leaseUntil) && e.leaseUntil.Before(resumed) {
			// Granted before the SIGSTOP, its lease ended during it, and
			// first active after the SIGCONT: the process froze between
			// the runner's last look at the local deadline and the call
			// (Init right after leaseLive), which no check can close.
			// Left out like the runs above; fencing must reject its
			// writes.
			if o := last.Sub(e.leaseUntil); st.paused == 0 || o > st.pausedWorst {
				st.pausedWorst = o
			}
			st.paused++
			continue
		}
		if stopped, _ := p.pauseWindow(); !stopped.IsZero() && first.Before(stopped) && !last.Before(stopped) {
			if o := last.Sub(e.leaseUntil); st.paused == 0 || o > st.pausedWorst {
				st.pausedWorst = o
			}
			st.paused++
			var before []time.Time
			for _, a := range acts {
				if a.Before(stopped) {
					before = append(before, a)
				}
			}
			last = slices.MaxFunc(before, time.Time.Compare) // first is before stopped
		}
		o := last.Sub(e.leaseUntil)
		if e.state == "released" {
			st.released.add(o, e)
		} else {
			st.expired.add(o, e)
		}
		if slowed[e.owner] {
			st.slow.add(o, e)
		}
		if o >= resolution {
			line := fmt.Sprintf("%s fence %d of %s (%s, lease until %s) was still active %v after its lease ended; then granted to %s (%s)",
				e.g.key, e.g.fence, e.owner, e.state, e.leaseUntil.Format("15:04:05.000"), o, e.next, e.nextKind)
			if stopped, resumed := p.pauseWindow(); !stopped.IsZero() && !first.Before(stopped) && e.leaseUntil.Before(resumed) {
				line += fmt.Sprintf("; its worker was SIGSTOPped %s–%s and this run became active only after that, on a grant whose lease ended before the SIGSTOP",
					stopped.Format("15:04:05.000"), resumed.Format("15:04:05.000"))
			}
			st.bad = append(st.bad, line)
		}
	}
	return st
}

// worst is the largest overlap of any group.
func (st overlapStats) worst() string {
	if st.expired.n+st.released.n == 0 {
		return fmt.Sprintf("%d superseded grants, none seen active", st.ends)
	}
	w := st.expired
	if w.n == 0 || (st.released.n > 0 && st.released.worst > w.worst) {
		w = st.released
	}
	return fmt.Sprintf("max %+.3fs over %d superseded grants seen active (%d superseded in all)", w.worst.Seconds(), st.expired.n+st.released.n, st.ends)
}

// lines is the report's detail, one line per group.
func (st overlapStats) lines() []string {
	out := []string{
		"  expired leases: " + st.expired.String(),
		"  released leases: " + st.released.String(),
		"  of both, on a worker with slow answers: " + st.slow.String(),
	}
	if st.paused > 0 {
		out = append(out, fmt.Sprintf("  %d runs paused through a SIGSTOP left out (resumed up to %+.3fs past their lease; fencing, checked below, must reject their writes)",
			st.paused, st.pausedWorst.Seconds()))
	}
	return out
}

// outcome says what became of a frozen episode, for the fault's line.
func (fz *freeze) outcome() string {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	var parts []string
	if fz.takenBy.fence > 0 {
		when := "while it was stopped"
		if fz.takenAfter > fz.hold {
			when = "after SIGCONT"
		}
		parts = append(parts, fmt.Sprintf("taken over by %s %.2fs after SIGSTOP (%s)", fz.takenBy, fz.takenAfter.Seconds(), when))
	} else {
		parts = append(parts, "never taken over")
	}
	switch {
	case !fz.watched || fz.doneBy.fence == 0:
		parts = append(parts, "not finished when last looked at")
	case fz.doneBy.fence == fz.g.fence:
		parts = append(parts, fmt.Sprintf("%s by the frozen grant itself %.2fs after SIGSTOP: its commit landed once resumed", fz.status, fz.doneAfter.Seconds()))
	default:
		parts = append(parts, fmt.Sprintf("%s by %s %.2fs after SIGSTOP", fz.status, fz.doneBy, fz.doneAfter.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// checkFreeze returns how long the frozen episode took to be another
// grant's, and what is wrong, if anything: not taken over within bound, not
// finished by a later grant, or a write of the frozen grant after SIGCONT.
func (r *chaosRun) checkFreeze(fz *freeze, bound time.Duration) (time.Duration, string) {
	steps, writes, err := grantWrites(r.ctx, r.db, fz.g)
	fz.mu.Lock()
	defer fz.mu.Unlock()
	what := fmt.Sprintf("episode %d frozen in %s's finish transaction (fence %d)", fz.ep, fz.p.id, fz.g.fence)
	var bad []string
	switch {
	case fz.takenBy.fence == 0:
		bad = append(bad, "never taken over by another grant (the takeover waited on the frozen transaction's lock)")
	case fz.takenAfter > bound:
		bad = append(bad, fmt.Sprintf("taken over only %.2fs after SIGSTOP (bound %.2fs)", fz.takenAfter.Seconds(), bound.Seconds()))
	}
	switch {
	case fz.doneBy.fence == fz.g.fence:
		bad = append(bad, fmt.Sprintf("finished (%s) by the frozen grant itself: its commit landed after SIGCONT, %.2fs after SIGSTOP", fz.status, fz.doneAfter.Seconds()))
	case fz.doneBy.fence == 0 || fz.status != "done":
		bad = append(bad, fmt.Sprintf("not done by a later grant (status %q, last grant %s)", fz.status, fz.doneBy))
	}
	switch {
	case err != nil || fz.stepsBefore < 0:
		bad = append(bad, fmt.Sprintf("its writes could not be counted: %v", err))
	case steps != fz.stepsBefore || writes != fz.writesBefore:
		bad = append(bad, fmt.Sprintf("the frozen grant wrote after SIGCONT: journal steps %d -> %d, ledger writes %d -> %d",
			fz.stepsBefore, steps, fz.writesBefore, writes))
	}
	took := fz.takenAfter
	if fz.takenBy.fence == 0 {
		took = time.Since(fz.at)
	}
	if len(bad) == 0 {
		return took, ""
	}
	return took, what + ": " + strings.Join(bad, "; ")
}

// reportShares reports how the done episodes spread over the worker slots
// (a quarter of the triggers is fired on one worker only, so the spread
// shows work flowing to free slots) and how many attempts failed
// transiently and ran again (RetryEpisode).
func (r *chaosRun) reportShares() {
	rows, err := r.db.Query(r.ctx, "DoneBySlot")
	require.NoError(r.t, err)
	var parts []string
	for rows.Next() {
		var slot string
		var n int64
		require.NoError(r.t, rows.Scan(&slot, &n))
		parts = append(parts, fmt.Sprintf("slot %s %d", slot, n))
	}
	require.NoError(r.t, rows.Err())
	var attempts, episodes int64
	require.NoError(r.t, r.db.QueryRow(r.ctx, "RetriedAttempts").Scan(&attempts, &episodes))
	r.say("done episodes by worker slot: %s; attempts failed transiently and retried: %d (of %d episodes)",
		strings.Join(parts, ", "), attempts, episodes)
}

// unsettledBreakdown reports the unsettled episodes grouped by what they
// wait on (UnsettledBreakdown), for a failure that says where work stuck.
func unsettledBreakdown(ctx context.Context, db reads) string {
	rows, err := db.Query(ctx, "UnsettledBreakdown")
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var (
			what string
			n    int64
		)
		if err := rows.Scan(&what, &n); err != nil {
			return "(unreadable: " + err.Error() + ")"
		}
		parts = append(parts, fmt.Sprintf("%d × %s", n, what))
	}
	if err := rows.Err(); err != nil {
		parts = append(parts, "(unreadable: "+err.Error()+")")
	}
	return strings.Join(parts, "; ")
}
