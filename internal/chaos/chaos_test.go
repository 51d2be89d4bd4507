//go:build unix

package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
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
	// takeoverSlack: a departed worker's unfinished work must belong to a
	// live worker within lease + this (lease + one sweep, in theory; the
	// slack covers a sweep that met the server restart, and -race on two
	// cores).
	takeoverSlack = 10 * time.Second
)

// TestChaos runs K worker processes under SIGKILL, SIGTERM, a Postgres
// restart and a network cut while triggers are fired continuously, then
// checks from the database that every trigger ran exactly once, its effect
// was recorded exactly once by the grant that finished it, and nothing was
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

// TestChaosQueries checks that every statement of chaos.sql is used and
// that every statement the Go code names exists.
func TestChaosQueries(t *testing.T) {
	used := map[string]bool{}
	files, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`query\("(\w+)"\)`).FindAllStringSubmatch(string(src), -1) {
			used[m[1]] = true
		}
	}
	for name := range used {
		require.Contains(t, chaosQueries, name)
	}
	for name := range chaosQueries {
		require.True(t, used[name], "%s is never used", name)
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
	pool    *pgxpool.Pool // direct to the server: the driver's reads
	proxies []*proxy
	cl      *cluster
	book    *triggerBook

	busyMu sync.Mutex
	busy   []bool // a slot being signaled, restarted or cut

	slotOps  sync.WaitGroup // kill/term + restart, cut + heal
	watchers sync.WaitGroup // takeover watchers
	firing   sync.WaitGroup
	stopFire context.CancelFunc
	fireNew  atomic.Bool

	mu        sync.Mutex
	faults    []fault
	takeovers []takeover
	problems  []string // failures found off the test goroutine

	report []string
}

type fault struct {
	at     time.Duration // since the faults began
	kind   string        // SIGKILL, SIGTERM, pg-restart, cut
	target string
	detail string
	cutOff *proc // the worker cut off, for its lease losses (reported late)
}

type takeover struct {
	kind, id string
	held     int64 // its unfinished episodes when first looked at
	took     time.Duration
	ok       bool
}

func newRun(t *testing.T, cfg config) *chaosRun {
	ctx, cancel := context.WithCancel(t.Context())
	return &chaosRun{t: t, cfg: cfg, ctx: ctx, cancel: cancel, book: newTriggerBook(), busy: make([]bool, cfg.workers)}
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
	ctx := r.ctx

	admin, err := pgx.Connect(ctx, r.srv.URL(""))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))

	pcfg, err := pgxpool.ParseConfig(r.srv.URL(schema))
	require.NoError(t, err)
	pcfg.MaxConns = 8
	r.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(r.pool.Close)
	sqlDB := stdlib.OpenDBFromPool(r.pool)
	require.NoError(t, postgres.Migrate(ctx, sqlDB))
	require.NoError(t, sqlDB.Close())
	for _, ddl := range []string{query("CreateLedger"), query("CreateLedgerWrites")} {
		_, err := r.pool.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	require.NoError(t, prepareAll(ctx, r.pool))

	for range r.cfg.workers {
		r.proxies = append(r.proxies, newProxy(t, r.srv.Addr()))
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	r.cl = newCluster(exe, r.cfg.workers, r.book, func(slot int, id string) []string {
		return []string{
			envWorker + "=" + id,
			envURL + "=" + r.srv.urlAt(r.proxies[slot].Addr(), schema),
			envLease + "=" + strconv.FormatInt(r.cfg.lease.Milliseconds(), 10),
			envSweep + "=" + strconv.FormatInt(r.cfg.sweep.Milliseconds(), 10),
		}
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
	r.injectFaults()
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

// deliver sends one trigger to fanout live workers (fewer if fewer live).
func (r *chaosRun) deliver(tr *trigger) {
	targets := r.cl.pick(r.cfg.fanout)
	for _, p := range targets {
		p.send("fire " + tr.id)
	}
	r.book.sent(tr, len(targets))
}

// injectFaults runs the seeded fault schedule: a fault every 0.6–1.5 s, the
// cut once in the first third, the server restart once after the middle
// (and after the cut healed), SIGKILL or SIGTERM otherwise. Each kind
// happens at least once whatever the duration.
func (r *chaosRun) injectFaults() {
	rng := rand.New(rand.NewPCG(r.cfg.seed, r.cfg.seed^0x9e3779b97f4a7c15))
	dur := r.cfg.duration
	frac := func(lo, hi float64) time.Duration { return time.Duration((lo + (hi-lo)*rng.Float64()) * float64(dur)) }
	cutAt, pgAt := frac(0.15, 0.30), frac(0.50, 0.65)
	start := time.Now()
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
		switch {
		case healed == nil && el >= cutAt:
			healed = r.cut(start)
		case !pgDone && el >= pgAt && (healed == nil || closed(healed)):
			r.restartPostgres(start)
			pgDone = true
		default:
			signal(kills == 0 || (terms > 0 && rng.IntN(2) == 0))
		}
	}
	for healed == nil && r.ctx.Err() == nil {
		if healed = r.cut(start); healed == nil {
			r.slotOps.Wait() // every slot was busy: let them finish
		}
	}
	if healed != nil {
		select {
		case <-healed:
		case <-r.ctx.Done():
		}
	}
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
	r.busy[slot] = true
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
		r.busy[best] = true
	}
	return best
}

func (r *chaosRun) freeSlot(slot int) {
	r.busyMu.Lock()
	r.busy[slot] = false
	r.busyMu.Unlock()
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

func (r *chaosRun) restartPostgres(start time.Time) {
	took, err := r.srv.restart(r.ctx)
	if err != nil {
		if r.ctx.Err() == nil {
			r.problem("restart Postgres: %v", err)
		}
		return
	}
	r.addFault(start, "pg-restart", "postgres", fmt.Sprintf("pg_ctl restart -m fast took %v", took.Round(time.Millisecond)))
}

// mark reads, just before a fault hits worker id, the database clock and
// how many unfinished episodes id holds. Zero values if the database does
// not answer (it may be restarting); the watcher then reads them itself.
func (r *chaosRun) mark(id string) (since time.Time, held int64) {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	if err := r.pool.QueryRow(ctx, query("DatabaseNow")).Scan(&since); err != nil {
		return time.Time{}, -1
	}
	if err := r.pool.QueryRow(ctx, query("HeldBy"), id, since).Scan(&held); err != nil {
		return since, -1
	}
	return since, held
}

// watchTakeover polls until none of the unfinished episodes id held at
// since (database clock) is still its own (HeldBy = 0): recovery, or the
// worker itself after a cut, moved or finished them. It records how long
// that took from at; held is the count at since. Claims id is granted after
// since (a cut-off worker back at work) are not counted.
func (r *chaosRun) watchTakeover(kind, id string, at, since time.Time, held int64) {
	r.watchers.Go(func() {
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for {
			var err error
			if since.IsZero() {
				err = r.pool.QueryRow(r.ctx, query("DatabaseNow")).Scan(&since)
			}
			var n int64
			if err == nil {
				err = r.pool.QueryRow(r.ctx, query("HeldBy"), id, since).Scan(&n)
			}
			if err == nil && held < 0 {
				held = n
			}
			if err == nil && n == 0 {
				r.addTakeover(takeover{kind: kind, id: id, held: held, took: time.Since(at), ok: true})
				return
			}
			if time.Since(at) > settleTimeout {
				r.addTakeover(takeover{kind: kind, id: id, held: held, took: time.Since(at)})
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

func (r *chaosRun) addTakeover(x takeover) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.takeovers = append(r.takeovers, x)
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
		require.NoError(t, waitReady(r.cl.current(slot), readyTimeout))
	}
	r.say("faults stopped after %v; all %d workers live (%d restarted now); no new triggers", r.cfg.duration, r.cfg.workers, restarted)

	deadline := time.NewTimer(settleTimeout)
	defer deadline.Stop()
	select {
	case <-r.book.settled:
	case <-deadline.C:
		t.Fatalf("%d triggers were never answered by any worker within %v", r.book.pendingCount(), settleTimeout)
	}
	r.stopFire()
	r.firing.Wait()

	began := time.Now()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var open int64
	for {
		err := r.pool.QueryRow(r.ctx, query("Unsettled")).Scan(&open)
		if err == nil && open == 0 {
			break
		}
		select {
		case <-deadline.C:
			t.Fatalf("%d episodes still queued or running %v after the faults stopped (last error %v)", open, settleTimeout, err)
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
}

// check reads what the database recorded and checks every invariant; it
// prints the report and fails the test for each violated one.
func (r *chaosRun) check() {
	t := r.t
	ctx := r.ctx
	rows, err := r.pool.Query(ctx, query("EpisodeAudit"))
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
	require.NoError(t, r.pool.QueryRow(ctx, query("StrayLedgerRows")).Scan(&stray))
	require.NoError(t, r.pool.QueryRow(ctx, query("Unsettled")).Scan(&open))
	type claimRow struct {
		key, state, owner string
		live              bool
	}
	var claimsOpen []claimRow
	crows, err := r.pool.Query(ctx, query("OpenClaims"))
	require.NoError(t, err)
	for crows.Next() {
		var c claimRow
		require.NoError(t, crows.Scan(&c.key, &c.state, &c.owner, &c.live))
		claimsOpen = append(claimsOpen, c)
	}
	require.NoError(t, crows.Err())

	r.mu.Lock()
	faults, takeovers, problems := slices.Clone(r.faults), slices.Clone(r.takeovers), slices.Clone(r.problems)
	r.mu.Unlock()
	procs := r.cl.procs()
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
	r.say("faults injected: %d SIGKILL, %d SIGTERM (drain), %d Postgres restart, %d cut-off; %d worker processes in all",
		byKind["SIGKILL"], byKind["SIGTERM"], byKind["pg-restart"], byKind["cut"], len(procs))
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
		r.say("%s", line)
	}
	slices.SortFunc(takeovers, func(a, b takeover) int { return strings.Compare(a.kind+a.id, b.kind+b.id) })
	for _, x := range takeovers {
		r.say("  after %-7s of %-11s its %2d unfinished episodes belonged to live workers (or were done) %.2fs later", x.kind, x.id, x.held, x.took.Seconds())
	}

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
	add := func(name, counts string, bad []string) { inv = append(inv, invariant{name, counts, bad}) }

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
	bound := r.cfg.lease + takeoverSlack
	var worst time.Duration
	for _, x := range takeovers {
		worst = max(worst, x.took)
		if !x.ok || x.took > bound {
			bad = append(bad, fmt.Sprintf("%s's work (after %s) was still its own %.1fs later", x.id, x.kind, x.took.Seconds()))
		}
	}
	add("no claim held by a dead worker after lease + sweep: its unfinished work was a live worker's within lease + 10s",
		fmt.Sprintf("%d departures, slowest %.2fs (lease %v, sweep %v)", len(takeovers), worst.Seconds(), r.cfg.lease, r.cfg.sweep), bad)

	bad = nil
	for _, p := range procs {
		if p.log.raced() {
			bad = append(bad, fmt.Sprintf("%s reported a data race; stderr:\n%s", p.id, p.log.String()))
		}
	}
	add("no data race in any worker process", fmt.Sprintf("%d processes", len(procs)), bad)
	add("no fault failed to apply", fmt.Sprintf("%d faults", len(faults)), problems)

	r.say("invariants:")
	for _, i := range inv {
		status := "ok  "
		if len(i.bad) > 0 {
			status = "FAIL"
		}
		r.say("  %s %s — %s", status, i.name, i.counts)
	}
	for _, i := range inv {
		if len(i.bad) == 0 {
			continue
		}
		shown := i.bad[:min(len(i.bad), 20)]
		t.Errorf("invariant violated: %s (%d):\n  %s", i.name, len(i.bad), strings.Join(shown, "\n  "))
	}
}
