//go:build unix

package chaos_test

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/workflows"
)

// The rolling deploy (issue 31): three worker processes of version A (see
// rolling_worker_test.go) under a steady workload are replaced one at a
// time by version B, each replacement a SIGTERM (the worker drains and
// exits, then B starts in its slot) but the second, a SIGKILL (B starts at
// once). A fourth process, version B's trigger_only frontend, is up from
// the start.
//
//	workload, every tick (seeded kinds): billing events fired on random
//	live nodes that have the expectation (charge on any worker, legacy on
//	A workers, refund on the frontend or B workers), sent again when no
//	answer came within redeliverAfter; order instances started on a random
//	live worker.
//
//	phase A    3 A workers; refunds fired on the frontend wait, queued, and
//	           are shown waiting (membership.ListWaitingForNode); the phase
//	           lasts a quarter of the workload and until that is seen.
//	slot 0     SIGTERM, drained; B starts.
//	slot 1     SIGKILL; B starts at once.
//	slot 2     legacy closes: no new legacy, every legacy trigger answered;
//	           then a few legacy events fired on it due lease+Margin later,
//	           and a few orders started on it; then SIGTERM, drained; B
//	           starts. The legacy work left waits for a node that runs
//	           billing/legacy (ListWaitingForNode, once the killed A's row
//	           went silent), and the test cancels it, as an operator would
//	           (`leasehold episodes cancel`: Store.CancelEpisode).
//	phase B    the workload goes on on B alone, until a quarter of the
//	           workload after the last replacement (and the legacy work is
//	           canceled); then nothing new, and the test waits until
//	           nothing is queued or running.
//
// The invariants are checked from the database and reported as TestChaos
// reports its own (see check).

const (
	// rollingEvery / rollingEverySQLite: one new unit of work per tick. An
	// order is three episodes; SQLite's one write lock sets the lower rate.
	rollingEvery = 50 * time.Millisecond
	// On SQLite 150 ms (about 9 episodes/s, an order being three) was
	// more than the file commits under make test-loaded (the whole suite
	// and two CPU hogs beside it): the backlog outlived settleTimeout.
	// A rolling deploy is not an overload test.
	rollingEverySQLite = 300 * time.Millisecond
	rollingWorkers     = 3
	frontendSlot       = rollingWorkers
	// legacyLeft: legacy events fired on the last A worker just before its
	// drain, due lease + testbound.Margin later (after the drain stopped
	// its poller), which no node will then run.
	legacyLeft = 3
	// ordersLeft: orders started on the last A worker just before its
	// drain: their first step (a quarter lease per step) is handed over by
	// the drain or taken by a B worker, and B workers finish them by A's
	// definition.
	ordersLeft = 3
)

// TestRollingDeploy is the rolling deploy on Postgres, with real processes.
func TestRollingDeploy(t *testing.T) {
	runRolling(t, "")
}

// TestRollingDeploySQLite is the rolling deploy on one SQLite file.
func TestRollingDeploySQLite(t *testing.T) {
	runRolling(t, dialectSQLite)
}

func runRolling(t *testing.T, dialect string) {
	began := time.Now()
	cfg := loadConfig(uint64(rand.IntN(1_000_000)) + 1)
	cfg.dialect = dialect
	cfg.workers = rollingWorkers
	if *flagEvery == 0 {
		cfg.fireEvery = rollingEvery
		if dialect == dialectSQLite {
			cfg.fireEvery = rollingEverySQLite
		}
	}
	r := newRollingRun(t, cfg)
	r.say("rolling deploy A -> B on %s: %d workers, lease %v, sweep %v, poll %v, workload %v, one unit of work every %v, seed %d",
		map[string]string{"": "Postgres", dialectSQLite: "one SQLite file"}[dialect],
		cfg.workers, cfg.lease, cfg.sweep, cfg.poll(), cfg.duration, cfg.fireEvery, cfg.seed)
	r.setup()
	r.deploy()
	r.settle()
	r.check()
	r.say("wall time %.1fs", time.Since(began).Seconds())
}

//go:embed rolling.sql rolling_sqlite.sql
var rollingSQL embed.FS

var rollingQueries = func() [2]map[string]queries.Query {
	pg, err1 := queries.Parse(rollingSQL, "rolling.sql")
	lite, err2 := queries.Parse(rollingSQL, "rolling_sqlite.sql")
	if err1 != nil || err2 != nil {
		panic(fmt.Sprintf("rolling SQL: %v %v", err1, err2)) // embedded at build time
	}
	return [2]map[string]queries.Query{pg, lite}
}()

// rollingPG and rollingLite return the named statement of rolling.sql and
// rolling_sqlite.sql (TestRollingQueries checks both have the same names).
func rollingPG(name string) string { return rollingStatement(0, name) }

func rollingLite(name string) string { return rollingStatement(1, name) }

func rollingStatement(i int, name string) string {
	q, ok := rollingQueries[i][name]
	if !ok {
		panic("no rolling query " + name)
	}
	return q.SQL
}

// TestRollingQueries: both files have the same statements, and the Go
// code uses each of them and names no other.
func TestRollingQueries(t *testing.T) {
	used := map[string]bool{}
	for _, f := range []string{"rolling_test.go", "rolling_worker_test.go"} {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`\b(?:rollingPG|rollingLite|rollingQuery)\("(\w+)"`).FindAllStringSubmatch(string(src), -1) {
			used[m[1]] = true
		}
	}
	require.Equal(t, slices.Sorted(maps.Keys(rollingQueries[0])), slices.Sorted(maps.Keys(used)))
	require.Equal(t, slices.Sorted(maps.Keys(rollingQueries[0])), slices.Sorted(maps.Keys(rollingQueries[1])))
}

// rollingOps is what the driver does through leasehold's own adapter, as
// an operator's tools do: read the work no live node runs, cancel it, and
// read the workflow instances.
type rollingOps interface {
	membership.WaitingReader
	CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error)
	workflows.Store
}

type rollingRun struct {
	t      *testing.T
	cfg    config
	ctx    context.Context
	cancel context.CancelFunc

	db      reads // chaos.sql: Unsettled, DatabaseNow, ClaimKeys
	pg      *pgxpool.Pool
	lite    *sql.DB
	ops     rollingOps
	histDir string
	cl      *cluster
	book    *triggerBook

	mu          sync.Mutex
	slotVersion [rollingWorkers + 1]string
	versionOf   map[string]string        // worker id -> version
	kindOf      map[string]string        // trigger id -> charge, legacy, refund or order
	delayOf     map[string]time.Duration // trigger id -> its fire's delay, sent again with it (0 if absent)

	legacyOpen atomic.Bool
	fireNew    atomic.Bool
	firing     sync.WaitGroup
	stopFire   context.CancelFunc

	firstB         time.Time // database clock, just before the first B worker started
	lastAGone      time.Time // database clock, once the last A worker exited
	legacyCanceled int
	refundSeen     time.Duration // since the start, when refunds were first seen waiting
	legacySeen     time.Duration // since the last A worker's exit, when its legacy work was seen waiting (or found run)

	report []string
}

func newRollingRun(t *testing.T, cfg config) *rollingRun {
	ctx, cancel := context.WithCancel(t.Context())
	return &rollingRun{t: t, cfg: cfg, ctx: ctx, cancel: cancel, book: newTriggerBook(),
		versionOf: map[string]string{}, kindOf: map[string]string{}, delayOf: map[string]time.Duration{}}
}

func (r *rollingRun) say(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.report = append(r.report, line)
	r.t.Log(line)
	if r.cfg.loud {
		fmt.Println(line)
	}
}

// rollingQuery runs one of the driver's reads by name on its dialect.
func (r *rollingRun) rollingQuery(name string, args ...any) (rowsScanner, error) {
	if r.pg != nil {
		rows, err := r.pg.Query(r.ctx, rollingPG(name), args...)
		if err != nil {
			return nil, err
		}
		return rows, nil
	}
	rows, err := r.lite.QueryContext(r.ctx, rollingLite(name), msArgs(args)...)
	if err != nil {
		return nil, err
	}
	return sqliteRows{rows}, nil
}

// setup creates the database (the chaos suite's tables and rolling_calls)
// and starts three A workers and the B frontend.
func (r *rollingRun) setup() {
	t := r.t
	var dbEnv []string
	if r.cfg.dialect == dialectSQLite {
		path := filepath.Join(keptDir(t, "chaos-rolling-*", "the SQLite database"), "rolling.db")
		r.lite = newSQLiteDatabase(t, r.ctx, path)
		_, err := r.lite.ExecContext(r.ctx, rollingLite("CreateRollingCalls"))
		require.NoError(t, err)
		r.db = sqliteReads{r.lite}
		r.ops = sqlite.New(r.lite)
		dbEnv = []string{envDialect + "=" + dialectSQLite, envURL + "=" + path}
	} else {
		srv := startServer(t)
		r.pg = newDatabase(t, r.ctx, srv)
		_, err := r.pg.Exec(r.ctx, rollingPG("CreateRollingCalls"))
		require.NoError(t, err)
		r.db = pgReads{r.pg}
		r.ops = postgres.New(r.pg)
		dbEnv = []string{envURL + "=" + srv.URL(schema)}
	}
	r.histDir = historyDir(t)
	for slot := range r.slotVersion {
		r.slotVersion[slot] = "A"
	}
	r.slotVersion[frontendSlot] = "B"
	exe, err := os.Executable()
	require.NoError(t, err)
	r.cl = newCluster(exe, rollingWorkers+1, r.book, func(slot int, id string) []string {
		r.mu.Lock()
		version := r.slotVersion[slot]
		r.versionOf[id] = version
		r.mu.Unlock()
		env := append([]string{
			envRolling + "=" + version,
			envWorker + "=" + id,
			envLease + "=" + strconv.FormatInt(r.cfg.lease.Milliseconds(), 10),
			envSweep + "=" + strconv.FormatInt(r.cfg.sweep.Milliseconds(), 10),
			envHistory + "=" + filepath.Join(r.histDir, id+".jsonl"),
		}, dbEnv...)
		if slot == frontendSlot {
			env = append(env, envRollingFrontend+"=1")
		}
		return env
	})
	t.Cleanup(func() {
		r.cancel()
		r.cl.stopAll()
		if r.stopFire != nil {
			r.stopFire()
		}
		r.firing.Wait()
		if t.Failed() {
			for _, p := range slices.Backward(r.cl.procs()) {
				if out := p.log.String(); out != "" {
					t.Logf("--- stderr of %s (last 16 KiB) ---\n%s", p.id, out)
				}
			}
		}
	})
	for slot := range r.slotVersion {
		_, err := r.cl.start(slot)
		require.NoError(t, err)
	}
	for slot := range r.slotVersion {
		require.NoError(t, waitReady(r.cl.current(slot), readyTimeout))
	}
}

func (r *rollingRun) version(p *proc) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.versionOf[p.id]
}

// capable returns the live processes a unit of work of kind may be sent
// to, shuffled: the workers that register its expectation (and, for a
// refund, the frontend).
func (r *rollingRun) capable(kind string) []*proc {
	var out []*proc
	for slot := range r.slotVersion {
		p := r.cl.current(slot)
		if p == nil || !p.isReady() || p.leaving.Load() {
			continue
		}
		v, front := r.version(p), slot == frontendSlot
		switch {
		case kind == "refund" && (front || v == "B"),
			kind == "legacy" && !front && v == "A",
			(kind == "charge" || kind == "order") && !front:
			out = append(out, p)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// newWork adds a unit of work of kind to the book.
func (r *rollingRun) newWork(kind string, n int) *trigger {
	id := fmt.Sprintf("%s-%06d", kind, n)
	r.mu.Lock()
	r.kindOf[id] = kind
	r.mu.Unlock()
	return r.book.add(id)
}

func (r *rollingRun) kind(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kindOf[id]
}

// command is the stdin line that asks a worker for tr, with its delay
// (delayOf) every time it is sent.
func (r *rollingRun) command(tr *trigger) string {
	r.mu.Lock()
	k, delay := r.kindOf[tr.id], r.delayOf[tr.id]
	r.mu.Unlock()
	if k != "order" {
		return fmt.Sprintf("fire %s %s %d", k, tr.id, delay.Milliseconds())
	}
	return "start " + tr.id
}

// deliver sends tr to one capable live process (a charge, one time in
// two, to two, so that dedupe across nodes is exercised too).
func (r *rollingRun) deliver(tr *trigger) {
	n := 1
	if r.kind(tr.id) == "charge" && rand.IntN(2) == 0 {
		n = 2
	}
	targets := r.capable(r.kind(tr.id))
	targets = targets[:min(n, len(targets))]
	for _, p := range targets {
		p.send(r.command(tr))
	}
	r.book.sent(tr, len(targets))
}

// fireLoop adds a unit of work every tick while fireNew holds (a charge,
// an order, a refund, or a legacy event while legacy is open), and sends
// again whatever no process answered within redeliverAfter.
func (r *rollingRun) fireLoop(ctx context.Context, rng *rand.Rand) {
	tick := time.NewTicker(r.cfg.fireEvery)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if r.fireNew.Load() {
			kind := "charge"
			switch x := rng.IntN(20); {
			case x >= 8 && x < 12:
				kind = "order"
			case x >= 12 && x < 16:
				kind = "refund"
			case x >= 16 && r.legacyOpen.Load():
				kind = "legacy"
			}
			r.deliver(r.newWork(kind, n))
		}
		for _, tr := range r.book.due(time.Now().Add(-redeliverAfter)) {
			r.deliver(tr)
		}
	}
}

// pendingOf counts the units of work of kind no process answered yet.
func (r *rollingRun) pendingOf(kind string) int {
	r.book.mu.Lock()
	ids := make([]string, 0, len(r.book.pending))
	for id := range r.book.pending {
		ids = append(ids, id)
	}
	r.book.mu.Unlock()
	n := 0
	for _, id := range ids {
		if r.kind(id) == kind {
			n++
		}
	}
	return n
}

// waitFor polls cond every pollEvery until it holds or within passes.
func (r *rollingRun) waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return false
		}
		select {
		case <-r.ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// waiting returns what ListWaitingForNode lists for billing/expectation.
func (r *rollingRun) waiting(expectation string) (membership.Waiting, bool) {
	ws, err := r.ops.ListWaitingForNode(r.ctx, membership.WaitingQuery{})
	if err != nil {
		return membership.Waiting{}, false
	}
	for _, w := range ws {
		if w.ActorID == billingActor && w.ExpectationID == expectation {
			return w, true
		}
	}
	return membership.Waiting{}, false
}

// capableBound is how long work may take to reach a node that can run it
// once one is live, or to be listed waiting once none is: a poll, a
// sweep, a lease and a membership heartbeat, plus the host's margin.
func (r *rollingRun) capableBound() time.Duration {
	return r.cfg.poll() + r.cfg.sweep + 2*r.cfg.lease + 4*testbound.Margin
}

// deploy runs the workload and replaces the A workers one at a time.
func (r *rollingRun) deploy() {
	t := r.t
	rng := rand.New(rand.NewPCG(r.cfg.seed, r.cfg.seed^0x9e3779b97f4a7c15))
	fireCtx, stop := context.WithCancel(r.ctx)
	r.stopFire = stop
	r.legacyOpen.Store(true)
	r.fireNew.Store(true)
	start := time.Now()
	r.firing.Go(func() { r.fireLoop(fireCtx, rng) })
	gap := r.cfg.duration / 4

	// Phase A: refunds are fired on the frontend and no node runs them.
	ok := r.waitFor(gap+readyTimeout, func() bool {
		w, found := r.waiting("refund")
		if found && w.Episodes > 0 && r.refundSeen == 0 {
			r.refundSeen = time.Since(start)
		}
		return r.refundSeen > 0 && time.Since(start) >= gap
	})
	require.True(t, ok, "no refund was ever listed waiting while only A workers ran")
	r.say("phase A: refunds fired on the frontend listed waiting for a node that runs billing/refund after %.1fs", r.refundSeen.Seconds())
	require.NoError(t, r.db.QueryRow(r.ctx, "DatabaseNow").Scan(&r.firstB))

	for slot := range rollingWorkers {
		p := r.cl.current(slot)
		last := slot == rollingWorkers-1
		if last {
			r.closeLegacy(p)
		}
		how := "SIGTERM (drain)"
		if slot == 1 {
			how = "SIGKILL"
			kill(p)
		} else {
			require.True(t, term(p, termTimeout), "%s did not exit within %v of its SIGTERM", p.id, termTimeout)
			how += ", " + p.drained
		}
		r.mu.Lock()
		r.slotVersion[slot] = "B"
		r.mu.Unlock()
		nb, err := r.cl.start(slot)
		require.NoError(t, err)
		require.NoError(t, waitReady(nb, readyTimeout))
		r.say("%5.1fs  %s (A) replaced by %s (B): %s", time.Since(start).Seconds(), p.id, nb.id, how)
		replaced := time.Now()
		if last {
			require.NoError(t, r.db.QueryRow(r.ctx, "DatabaseNow").Scan(&r.lastAGone))
			r.cancelLegacy(start)
		}
		select {
		case <-r.ctx.Done():
		case <-time.After(time.Until(replaced.Add(gap))):
		}
	}
	r.fireNew.Store(false)
	r.book.close()
	r.book.mu.Lock()
	fired, sends, again := len(r.book.all), r.book.requests, r.book.redeliveries
	r.book.mu.Unlock()
	r.say("%5.1fs  workload stopped: %d units of work, %d sends (%d again)", time.Since(start).Seconds(), fired, sends, again)
}

// closeLegacy stops new legacy work, waits until every legacy event was
// answered, then fires legacyLeft more on p (the last A worker) due
// lease + testbound.Margin later, and starts ordersLeft orders on it; it
// returns once p answered them all.
func (r *rollingRun) closeLegacy(p *proc) {
	t := r.t
	r.legacyOpen.Store(false)
	require.True(t, r.waitFor(settleTimeout, func() bool { return r.pendingOf("legacy") == 0 }),
		"legacy events still unanswered after %v", settleTimeout)
	// Due after the drain began (it stops the poller first): answered
	// within a fire's timeout, then the SIGTERM follows at once.
	delay := r.cfg.lease + testbound.Margin
	var left []*trigger
	for i := range legacyLeft {
		tr := r.newWork("legacy", 900_000+i)
		r.mu.Lock()
		r.delayOf[tr.id] = delay
		r.mu.Unlock()
		p.send(r.command(tr))
		r.book.sent(tr, 1)
		left = append(left, tr)
	}
	for i := range ordersLeft {
		tr := r.newWork("order", 910_000+i)
		p.send(r.command(tr))
		r.book.sent(tr, 1)
		left = append(left, tr)
	}
	var unanswered []string
	if !r.waitFor(settleTimeout, func() bool {
		acked := r.book.acked()
		unanswered = unanswered[:0]
		for _, tr := range left {
			if !acked[tr.id] {
				unanswered = append(unanswered, tr.id)
			}
		}
		return len(unanswered) == 0
	}) {
		t.Fatalf("the last A worker (%s) did not answer %v of its last legacy events and orders within %v%s",
			p.id, unanswered, settleTimeout, r.cl.whyUnanswered(r.ctx, r.db))
	}
}

// cancelLegacy waits until the legacy work the A workers left is listed
// waiting for a node (once every A row is gone or silent, and the delayed
// events are due), then cancels each queued legacy episode, as `leasehold
// episodes cancel` does (Store.CancelEpisode), and checks the list no
// longer names billing/legacy.
func (r *rollingRun) cancelLegacy(start time.Time) {
	t := r.t
	gone := time.Now()
	var ids, running []int64
	var w membership.Waiting
	// The killed A worker's row counts as live until DefaultSilentAfter
	// after its last heartbeat, and a legacy run it left is requeued by a
	// sweep after its lease (then it waits too).
	bound := membership.DefaultSilentAfter + r.cfg.lease + testbound.Margin + r.capableBound()
	ok := r.waitFor(bound, func() bool {
		var err1, err2 error
		ids, err1 = r.episodesOf("legacy", episodes.StatusQueued)
		running, err2 = r.episodesOf("legacy", episodes.StatusRunning)
		if err1 != nil || err2 != nil || len(running) > 0 {
			return false
		}
		var found bool
		w, found = r.waiting("legacy")
		return len(ids) == 0 || (found && w.Episodes == int64(len(ids)))
	})
	require.True(t, ok, "the legacy work left (%d queued, %d running) was not listed waiting for a node within %v (listed: %+v)",
		len(ids), len(running), bound, w)
	r.legacySeen = time.Since(gone)
	if len(ids) == 0 {
		// The last A worker ran its delayed legacy events before its
		// drain stopped its poller: the host stalled it for legacyDelay.
		r.say("%5.1fs  NOT EXERCISED: no legacy work was left waiting (the last A worker ran it before it drained)", time.Since(start).Seconds())
		return
	}
	r.say("%5.1fs  %d legacy episodes listed %.1fs after the last A left: %s", time.Since(start).Seconds(), w.Episodes, r.legacySeen.Seconds(), w.Reason())
	for _, id := range ids {
		res, err := r.ops.CancelEpisode(r.ctx, id, json.RawMessage(`{"reason":"billing/legacy removed in version B","by":"rolling deploy test"}`))
		require.NoError(t, err)
		require.True(t, res.Ended, "episode %d: canceled at once (nobody holds waiting work): %+v", id, res)
		r.legacyCanceled++
	}
	_, still := r.waiting("legacy")
	require.False(t, still, "billing/legacy still listed waiting after its episodes were canceled")
	r.say("%5.1fs  %d legacy episodes canceled; none listed waiting", time.Since(start).Seconds(), r.legacyCanceled)
}

// episodesOf returns billing/expectation's episodes in status st.
func (r *rollingRun) episodesOf(expectation string, st episodes.Status) ([]int64, error) {
	rows, err := r.rollingQuery("RollingEpisodesIn", billingActor, expectation, string(st))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// settle waits until every unit of work was answered, then until nothing
// is queued or running and no order instance runs.
func (r *rollingRun) settle() {
	t := r.t
	began := time.Now()
	select {
	case <-r.book.settled:
	case <-time.After(settleTimeout):
		t.Fatalf("%d units of work never answered within %v%s", r.book.pendingCount(), settleTimeout, r.cl.whyUnanswered(r.ctx, r.db))
	}
	r.stopFire()
	r.firing.Wait()
	var open int64
	var running int
	ok := r.waitFor(settleTimeout, func() bool {
		if err := r.db.QueryRow(r.ctx, "Unsettled").Scan(&open); err != nil || open > 0 {
			return false
		}
		insts, err := workflows.List(r.ctx, r.ops, workflows.ListQuery{WorkflowID: orderWorkflow, Status: workflows.InstanceRunning, Limit: 1000})
		running = len(insts)
		return err == nil && running == 0
	})
	if !ok {
		t.Fatalf("%d episodes queued or running, %d order instances running, %v after the workload stopped; by what they wait on: %s%s",
			open, running, settleTimeout, unsettledBreakdown(r.ctx, r.db), r.cl.stacks())
	}
	r.say("every unit of work answered; nothing queued or running %.1fs later", time.Since(began).Seconds())
}

// rollingEpisode is one RollingEpisodes row with its calls and ledger rows.
type rollingEpisode struct {
	id                                       int64
	triggerType, actor, expectation, trigger string
	status                                   string
	attempts                                 int32
	createdAt                                time.Time
	calls                                    []rollingCall
	ledger                                   int
}

type rollingCall struct {
	attempt int32
	owner   string
	at      time.Time
}

// check reads what the database recorded and checks every invariant.
func (r *rollingRun) check() {
	t := r.t
	eps := map[int64]*rollingEpisode{}
	var order []int64
	rows, err := r.rollingQuery("RollingEpisodes")
	require.NoError(t, err)
	for rows.Next() {
		e := &rollingEpisode{}
		var tt string
		require.NoError(t, rows.Scan(&e.id, &tt, &e.actor, &e.expectation, &e.trigger, &e.status, &e.attempts, &e.createdAt))
		e.triggerType = tt
		eps[e.id] = e
		order = append(order, e.id)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	rows, err = r.rollingQuery("RollingCalls")
	require.NoError(t, err)
	var strayCalls int
	for rows.Next() {
		var id int64
		var c rollingCall
		require.NoError(t, rows.Scan(&id, &c.attempt, &c.owner, &c.at))
		if e := eps[id]; e != nil {
			e.calls = append(e.calls, c)
		} else {
			strayCalls++
		}
	}
	require.NoError(t, rows.Err())
	rows.Close()
	rows, err = r.rollingQuery("RollingLedger")
	require.NoError(t, err)
	var strayLedger int
	for rows.Next() {
		var id, fence int64
		var owner string
		require.NoError(t, rows.Scan(&id, &owner, &fence))
		if e := eps[id]; e != nil {
			e.ledger++
		} else {
			strayLedger++
		}
	}
	require.NoError(t, rows.Err())
	rows.Close()
	insts, err := workflows.List(r.ctx, r.ops, workflows.ListQuery{WorkflowID: orderWorkflow, Limit: 100_000})
	require.NoError(t, err)

	var inv []invariant
	add := func(name, counts string, bad []string) {
		inv = append(inv, invariant{name: name, counts: counts, bad: bad})
	}
	versionOf := func(owner string) string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.versionOf[owner]
	}
	vA, err := orderDefinition("A").Version()
	require.NoError(t, err)
	vB, err := orderDefinition("B").Version()
	require.NoError(t, err)

	// Every acknowledged unit of work has exactly one episode (or
	// instance), and each belongs to one.
	acked := r.book.acked()
	perTrigger := map[string][]int64{}
	var bad []string
	kinds := map[string]int{}
	for _, id := range order {
		e := eps[id]
		if e.triggerType != "event" {
			continue
		}
		perTrigger[e.trigger] = append(perTrigger[e.trigger], id)
		if !acked[e.trigger] {
			bad = append(bad, fmt.Sprintf("episode %d (%s/%s) for %q, which no Fire acknowledged", id, e.actor, e.expectation, e.trigger))
		} else if k := r.kind(e.trigger); k != e.expectation {
			bad = append(bad, fmt.Sprintf("episode %d is %s/%s, its trigger %q a %s", id, e.actor, e.expectation, e.trigger, k))
		}
	}
	perSubject := map[string][]int64{}
	for _, in := range insts {
		perSubject[in.Subject] = append(perSubject[in.Subject], in.ID)
		if !acked[in.Subject] {
			bad = append(bad, fmt.Sprintf("order instance %d for %q, which no start acknowledged", in.ID, in.Subject))
		}
	}
	for id := range acked {
		k := r.kind(id)
		kinds[k]++
		got := perTrigger[id]
		if k == "order" {
			got = perSubject[id]
		}
		if len(got) != 1 {
			bad = append(bad, fmt.Sprintf("%s %q has %d episodes or instances: %v", k, id, len(got), got))
		}
	}
	add("lost 0, duplicated 0: every acknowledged unit of work has exactly one episode (order: one instance), and each episode or instance one acknowledged unit",
		fmt.Sprintf("%d charges, %d refunds, %d legacy, %d orders", kinds["charge"], kinds["refund"], kinds["legacy"], kinds["order"]), bad)

	// Every episode of charge, refund and the workflows is done; legacy
	// done or canceled (those the test canceled).
	bad = nil
	status := map[string]int{}
	legacyCanceled := 0
	for _, id := range order {
		e := eps[id]
		status[e.status]++
		switch {
		case e.expectation == "legacy" && e.status == string(episodes.StatusCanceled):
			legacyCanceled++
		case e.status != string(episodes.StatusDone):
			bad = append(bad, fmt.Sprintf("episode %d (%s/%s, %s) is %s after %d attempts", id, e.actor, e.expectation, e.triggerType, e.status, e.attempts))
		}
	}
	if legacyCanceled != r.legacyCanceled {
		bad = append(bad, fmt.Sprintf("%d legacy episodes canceled, the test canceled %d", legacyCanceled, r.legacyCanceled))
	}
	add("every charge, refund and workflow step episode done; every legacy one done or canceled (by the test, waiting)",
		fmt.Sprintf("%d episodes: %v; %d legacy canceled", len(order), status, legacyCanceled), bad)

	// The ledger: one row per done episode, none for any other.
	bad = nil
	for _, id := range order {
		e := eps[id]
		want := 0
		if e.status == string(episodes.StatusDone) {
			want = 1
		}
		if e.ledger != want {
			bad = append(bad, fmt.Sprintf("episode %d (%s/%s) is %s with %d ledger rows", id, e.actor, e.expectation, e.status, e.ledger))
		}
	}
	if strayLedger > 0 || strayCalls > 0 {
		bad = append(bad, fmt.Sprintf("%d ledger rows and %d calls of no episode", strayLedger, strayCalls))
	}
	add("duplicated 0: exactly one ledger row (the effect, fenced) per done episode, none for the others", fmt.Sprintf("%d episodes", len(order)), bad)

	// No episode failed (or spent an attempt) without its strategy.
	bad = nil
	failed := 0
	for _, id := range order {
		e := eps[id]
		if e.status == string(episodes.StatusFailed) || e.status == string(episodes.StatusPartiallyFailed) {
			failed++
			if len(e.calls) == 0 {
				bad = append(bad, fmt.Sprintf("episode %d (%s/%s) %s, and no strategy ever ran it", id, e.actor, e.expectation, e.status))
			}
		}
	}
	add("0 episodes failed whose strategy never ran", fmt.Sprintf("%d failed", failed), bad)

	// Refunds: run by B workers only, no attempt without a call, and the
	// longest wait for a capable node.
	bad = nil
	var refunds, early, calls int
	var longest, longestB time.Duration
	var longestID, longestBID int64
	for _, id := range order {
		e := eps[id]
		if e.expectation != "refund" {
			continue
		}
		refunds++
		if e.createdAt.Before(r.firstB) {
			early++
		}
		// A run counts as an attempt once its StartEpisode landed, whether
		// or not its strategy was called after: a run whose lease passed
		// its local deadline just after its start (a loaded host) is not
		// called, and counts if its give-back failed too (recovery's "What
		// an attempt is"). So attempts are checked against the runs that
		// started, and every start, like every call, must be a B worker's.
		ran := map[int32]bool{}
		for _, c := range e.calls {
			calls++
			ran[c.attempt] = true
			if v := versionOf(c.owner); v != "B" {
				bad = append(bad, fmt.Sprintf("refund episode %d run by %s (version %q)", id, c.owner, v))
			}
		}
		starts := r.cl.startsOf(id)
		for _, s := range starts {
			ran[s.attempt] = true
			if v := versionOf(s.worker); v != "B" {
				bad = append(bad, fmt.Sprintf("refund episode %d started by %s (version %q)", id, s.worker, v))
			}
		}
		if int(e.attempts) > len(ran) {
			bad = append(bad, fmt.Sprintf("refund episode %d spent %d attempts for %d strategy calls and %d started runs (%+v)",
				id, e.attempts, len(e.calls), len(starts), starts))
		}
		if len(e.calls) > 0 {
			if w := e.calls[0].at.Sub(e.createdAt); w > longest {
				longest, longestID = w, id
			}
			if w := e.calls[0].at.Sub(maxTime(e.createdAt, r.firstB)); w > longestB {
				longestB, longestBID = w, id
			}
		}
	}
	if early == 0 {
		bad = append(bad, "no refund was fired while only A workers ran")
	}
	add("refunds waited for a B worker: none run by an A worker, no attempt spent without a run",
		fmt.Sprintf("%d refunds, %d of them fired while only A workers ran, %d calls", refunds, early, calls), bad)
	r.say("longest wait for a capable node: %v (refund episode %d, from its creation to its first run, database clock); "+
		"counted from the later of its creation and the first B worker's start: %v (episode %d)",
		longest.Round(time.Millisecond), longestID, longestB.Round(time.Millisecond), longestBID)

	// Legacy: never run by a B worker.
	bad = nil
	var left []string
	for _, id := range order {
		e := eps[id]
		if e.expectation == "legacy" && e.status == string(episodes.StatusCanceled) {
			left = append(left, fmt.Sprintf("%d (%s, created %.1fs before the last A left, %d attempts, %d calls)",
				id, e.trigger, r.lastAGone.Sub(e.createdAt).Seconds(), e.attempts, len(e.calls)))
		}
		for _, c := range e.calls {
			if e.expectation == "legacy" && versionOf(c.owner) != "A" {
				bad = append(bad, fmt.Sprintf("legacy episode %d run by %s", id, c.owner))
			}
		}
	}
	r.say("legacy work left waiting and canceled: %s", strings.Join(left, ", "))
	add("legacy run by A workers only; what was left waiting was listed by ListWaitingForNode and canceled",
		fmt.Sprintf("%d listed %.1fs after the last A left, canceled", r.legacyCanceled, r.legacySeen.Seconds()), bad)

	// Workflow instances: every one done, none parked, each by its own
	// definition's steps; A's finished on B workers.
	bad = nil
	var ofA, ofB, aOnB int
	for _, in := range insts {
		if in.Status != workflows.InstanceDone || in.ParkedReason != "" {
			bad = append(bad, fmt.Sprintf("instance %d (%s, version %s) is %s, parked %q", in.ID, in.Subject, in.DefinitionVersion, in.Status, in.ParkedReason))
		}
		want := []string{"charge", "reserve", "notify"}
		switch in.DefinitionVersion {
		case vA:
			ofA++
		case vB:
			ofB++
			want[2] = "confirm"
		default:
			bad = append(bad, fmt.Sprintf("instance %d has version %q (A is %s, B %s)", in.ID, in.DefinitionVersion, vA, vB))
		}
		steps, err := r.ops.ListWorkflowSteps(r.ctx, in.ID)
		require.NoError(t, err)
		var got []string
		onB := false
		for _, s := range steps {
			got = append(got, s.StepID)
			if s.Status != workflows.StepDone {
				bad = append(bad, fmt.Sprintf("instance %d step %s is %s", in.ID, s.StepID, s.Status))
			}
			if e := eps[s.EpisodeID]; e != nil {
				for _, c := range e.calls {
					onB = onB || versionOf(c.owner) == "B"
				}
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("instance %d (version %s) has steps %v, want %v", in.ID, in.DefinitionVersion, got, want))
		}
		if in.DefinitionVersion == vA && onB {
			aOnB++
		}
	}
	if aOnB == 0 {
		bad = append(bad, "no instance started on A was advanced on a B worker")
	}
	add("every order instance done, none parked, each with its own version's steps (A: notify, B: confirm)",
		fmt.Sprintf("%d instances: %d of A (%d of them run partly on B workers, by A's definition), %d of B", len(insts), ofA, aOnB, ofB), bad)

	procs := r.cl.procs()
	bad = nil
	for _, p := range procs {
		if p.log.raced() {
			bad = append(bad, fmt.Sprintf("%s reported a data race; stderr:\n%s", p.id, p.log.String()))
		}
	}
	add("no data race in any worker process", fmt.Sprintf("%d processes", len(procs)), bad)

	bad = nil
	if n := r.cl.historyFailed.Load(); n > 0 {
		bad = append(bad, fmt.Sprintf("%d workers failed to write their history: it is incomplete", n))
	}
	rep, files, grants, err := checkHistories(r.ctx, r.db, r.histDir)
	if err != nil {
		bad = append(bad, err.Error())
	}
	r.say("grants by statement: %s", grants)
	r.say("runner events: %d runs handed over by drains, %d restarted by recovery sweeps, %d leases lost",
		r.cl.handedOver.Load(), r.cl.recovered.Load(), r.cl.leaseLost.Load())
	add("every claims operation of every worker, as recorded, is linearizable (porcupine, one lease per key on the database clock)",
		fmt.Sprintf("%d operations across %d keys by %d processes, %d unknown, checked in %v", rep.Ops, rep.Keys, files, rep.Unknown, rep.Took.Round(time.Millisecond)), bad)

	r.say("invariants:")
	for _, i := range inv {
		mark := "ok  "
		if len(i.bad) > 0 {
			mark = "FAIL"
		}
		r.say("  %s %s — %s", mark, i.name, i.counts)
	}
	for _, i := range inv {
		if len(i.bad) > 0 {
			t.Errorf("invariant violated: %s (%d):\n  %s", i.name, len(i.bad), strings.Join(i.bad[:min(len(i.bad), 20)], "\n  "))
		}
	}
}
