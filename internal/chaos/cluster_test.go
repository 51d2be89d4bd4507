//go:build unix

package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proc is one worker process: one generation of a slot.
type proc struct {
	slot, gen int
	id        string // worker-<slot>-<gen>, its node identity
	cmd       *exec.Cmd
	log       *tail // its stderr

	inMu  sync.Mutex
	stdin io.WriteCloser

	ready   chan struct{} // closed on "ready"
	exited  chan struct{} // closed once the process was reaped
	waitErr error         // valid after exited
	drained string        // the "drained" line, valid after exited
	leaving atomic.Bool   // signaled by the test: no more fire requests
	paused  atomic.Bool   // SIGSTOPped: sent nothing until resumed
	lost    atomic.Int64  // lease_lost events it reported

	intx     chan intx   // its "intx" lines: a finish frozen in its transaction
	intxDone chan string // its "intxdone" results

	actMu    sync.Mutex
	activity map[grant][]time.Time // "active" instants per grant
	stopped  time.Time             // SIGSTOP sent (zero: never)
	resumed  time.Time             // SIGCONT sent
}

// grant identifies one grant of a work claim.
type grant struct {
	key   string
	fence int64
}

// intx is an "intx" line: the finish of grant g (episode ep) waits inside
// its open transaction.
type intx struct {
	g  grant
	ep int64
}

// active returns the instants at which g's strategy calls returned, as the
// worker printed them (a SIGKILLed worker's last lines may be lost).
func (p *proc) active(g grant) []time.Time {
	p.actMu.Lock()
	defer p.actMu.Unlock()
	return p.activity[g]
}

// pauseWindow returns when p was SIGSTOPped and SIGCONTed (zero: never).
func (p *proc) pauseWindow() (stopped, resumed time.Time) {
	p.actMu.Lock()
	defer p.actMu.Unlock()
	return p.stopped, p.resumed
}

// stop SIGSTOPs p: it keeps its connections and its transactions, and does
// nothing at all, as in a long GC pause or a hung VM.
func (p *proc) stop() {
	p.actMu.Lock()
	p.stopped = time.Now()
	p.actMu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
}

// cont resumes p after stop.
func (p *proc) cont() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.actMu.Lock()
	p.resumed = time.Now()
	p.actMu.Unlock()
}

func (p *proc) isReady() bool { return closed(p.ready) && !closed(p.exited) }

// send writes one command line; a dead worker's pipe just fails.
func (p *proc) send(line string) {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_, _ = io.WriteString(p.stdin, line+"\n")
}

// cluster runs the worker processes, K slots, each slot restarted under a
// new generation after every SIGKILL or SIGTERM.
type cluster struct {
	exe  string
	env  func(slot int, id string) []string
	book *triggerBook
	// stacksDir receives the workers' goroutine dumps (stacks).
	stacksDir string

	mu      sync.Mutex
	cur     []*proc
	all     []*proc
	gens    []int
	stopped bool // stopAll ran: start no more

	readers sync.WaitGroup

	leaseLost, handedOver, recovered atomic.Int64
	historyFailed                    atomic.Int64 // workers whose claims history is incomplete

	writesMu     sync.Mutex             // guards writesFailed, fireErrs and starts
	writesFailed map[string]int         // "<statement> <why>" -> count
	fireErrs     map[string]int         // a fireerr answer's error, trigger left out -> count
	starts       map[int64][]startedRun // episode -> its runs a worker reported started
}

// startedRun is a run a worker reported started (runner.EventStarted: its
// StartEpisode landed, so the run may count as an attempt).
type startedRun struct {
	attempt int32
	worker  string
}

// startsOf returns the runs of episode id the workers reported started.
func (c *cluster) startsOf(id int64) []startedRun {
	c.writesMu.Lock()
	defer c.writesMu.Unlock()
	return slices.Clone(c.starts[id])
}

func newCluster(exe string, slots int, book *triggerBook, env func(slot int, id string) []string) *cluster {
	dir, _ := os.MkdirTemp("", "leasehold-chaos-stacks-") // "" (no dumps) if it cannot be made
	return &cluster{exe: exe, env: env, book: book, cur: make([]*proc, slots), gens: make([]int, slots), stacksDir: dir}
}

// start starts the next generation of slot; it does not wait for ready.
func (c *cluster) start(slot int) (*proc, error) {
	c.mu.Lock()
	gen := c.gens[slot]
	c.gens[slot]++
	c.mu.Unlock()
	id := fmt.Sprintf("worker-%d-%d", slot, gen)
	errStopped := fmt.Errorf("start %s: the cluster is stopping", id)
	cmd := exec.Command(c.exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), c.env(slot, id)...), envStacks+"="+c.stacksDir)
	p := &proc{slot: slot, gen: gen, id: id, cmd: cmd, log: &tail{max: 16 << 10},
		ready: make(chan struct{}), exited: make(chan struct{}),
		intx: make(chan intx, 4), intxDone: make(chan string, 4), activity: map[grant][]time.Time{}}
	cmd.Stderr = p.log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.stdin = stdin
	dieWithParent(cmd)
	// Started and recorded under mu, so stopAll either sees it or refuses it.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		_ = stdin.Close()
		_ = stdout.Close()
		return nil, errStopped
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	c.cur[slot] = p
	c.all = append(c.all, p)
	c.readers.Go(func() { c.read(p, stdout) })
	return p, nil
}

// read handles the worker's answers until EOF, then reaps the process.
func (c *cluster) read(p *proc, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "ready" && !closed(p.ready):
			close(p.ready)
		case f[0] == "fired" && len(f) >= 3:
			c.book.answer(f[1], true, f[2] == "created")
		case f[0] == "fireerr" && len(f) >= 2:
			c.book.answer(f[1], false, false)
			c.writesMu.Lock()
			if c.fireErrs == nil {
				c.fireErrs = map[string]int{}
			}
			c.fireErrs[strings.Join(f[2:], " ")]++
			c.writesMu.Unlock()
			fmt.Fprintf(p.log, "(stdout) %s\n", sc.Text()) // shown with its stderr when a test fails
		case f[0] == "event" && len(f) >= 2 && f[1] == "lease_lost":
			c.leaseLost.Add(1)
			p.lost.Add(1)
		case f[0] == "event" && len(f) == 4 && f[1] == "started":
			ep, err1 := strconv.ParseInt(f[2], 10, 64)
			attempt, err2 := strconv.ParseInt(f[3], 10, 32)
			if err1 == nil && err2 == nil {
				c.writesMu.Lock()
				if c.starts == nil {
					c.starts = map[int64][]startedRun{}
				}
				c.starts[ep] = append(c.starts[ep], startedRun{int32(attempt), p.id})
				c.writesMu.Unlock()
			}
		case f[0] == "event" && len(f) >= 2 && f[1] == "handed_over":
			c.handedOver.Add(1)
		case f[0] == "event" && len(f) >= 3 && f[1] == "recovered":
			n, _ := strconv.Atoi(f[2])
			c.recovered.Add(int64(n))
		case f[0] == "event" && len(f) >= 2 && f[1] == "history_failed":
			c.historyFailed.Add(1)
		case f[0] == "event" && len(f) >= 4 && f[1] == "write_failed":
			c.writesMu.Lock()
			if c.writesFailed == nil {
				c.writesFailed = map[string]int{}
			}
			c.writesFailed[f[2]+" "+f[3]]++
			c.writesMu.Unlock()
		case f[0] == "active" && len(f) == 4:
			fence, err1 := strconv.ParseInt(f[2], 10, 64)
			ns, err2 := strconv.ParseInt(f[3], 10, 64)
			if err1 == nil && err2 == nil {
				g := grant{f[1], fence}
				p.actMu.Lock()
				p.activity[g] = append(p.activity[g], time.Unix(0, ns))
				p.actMu.Unlock()
			}
		case f[0] == "intx" && len(f) == 4:
			fence, err1 := strconv.ParseInt(f[2], 10, 64)
			ep, err2 := strconv.ParseInt(f[3], 10, 64)
			if err1 == nil && err2 == nil {
				select {
				case p.intx <- intx{grant{f[1], fence}, ep}:
				default:
				}
			}
		case f[0] == "intxdone" && len(f) >= 4:
			select {
			case p.intxDone <- strings.Join(f[3:], " "):
			default:
			}
		case f[0] == "drained":
			p.drained = strings.Join(f[1:], " ")
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	p.waitErr = p.cmd.Wait()
	close(p.exited)
}

// current returns slot's latest generation.
func (c *cluster) current(slot int) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur[slot]
}

// procs returns every generation started so far.
func (c *cluster) procs() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*proc(nil), c.all...)
}

// pick returns up to n distinct ready workers, at random.
func (c *cluster) pick(n int) []*proc {
	c.mu.Lock()
	var live []*proc
	for _, p := range c.cur {
		if p != nil && p.isReady() && !p.leaving.Load() && !p.paused.Load() {
			live = append(live, p)
		}
	}
	c.mu.Unlock()
	rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	return live[:min(n, len(live))]
}

// waitReady waits for p's "ready", failing if it exits first or is slow.
func waitReady(p *proc, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("%s exited before it was ready (%v); stderr:\n%s", p.id, p.waitErr, p.log.String())
	case <-t.C:
		return fmt.Errorf("%s not ready after %v; stderr:\n%s", p.id, timeout, p.log.String())
	}
}

// kill SIGKILLs p and waits until it is reaped.
func kill(p *proc) {
	p.leaving.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// term SIGTERMs p (it drains) and waits until it exits; false if it had to
// be killed after timeout.
func term(p *proc, timeout time.Duration) bool {
	p.leaving.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		kill(p)
		return false
	}
}

// stopAll kills every worker still running and waits for all readers: no
// process and no goroutine outlives the test.
func (c *cluster) stopAll() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	for _, p := range c.procs() {
		p.leaving.Store(true)
		_ = p.cmd.Process.Kill()
		p.inMu.Lock()
		_ = p.stdin.Close()
		p.inMu.Unlock()
	}
	c.readers.Wait()
	if c.stacksDir != "" {
		_ = os.RemoveAll(c.stacksDir)
	}
}

// triggerBook tracks every trigger the driver fired: how often it was sent,
// and whether some worker's Fire returned for it (the trigger is then
// recorded in the database: created, or a duplicate of one that was).
type triggerBook struct {
	mu      sync.Mutex
	all     []*trigger
	byID    map[string]*trigger
	pending map[string]*trigger // not yet answered by a successful Fire
	closed  bool                // no new triggers
	settled chan struct{}       // closed once closed and nothing is pending

	requests, redeliveries             int
	created, duplicates, errs, unknown int // answers
}

type trigger struct {
	id       string
	lastSent time.Time
	sends    int
	acked    bool
}

func newTriggerBook() *triggerBook {
	return &triggerBook{byID: map[string]*trigger{}, pending: map[string]*trigger{}, settled: make(chan struct{})}
}

func (b *triggerBook) add(id string) *trigger {
	b.mu.Lock()
	defer b.mu.Unlock()
	tr := &trigger{id: id}
	b.all = append(b.all, tr)
	b.byID[id] = tr
	b.pending[id] = tr
	return tr
}

// sent records that tr was sent to n workers.
func (b *triggerBook) sent(tr *trigger, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tr.sends > 0 && n > 0 {
		b.redeliveries++
	}
	if n > 0 {
		tr.sends++
		tr.lastSent = time.Now()
	}
	b.requests += n
}

// answer records a worker's answer to a fire request.
func (b *triggerBook) answer(id string, ok, created bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tr, known := b.byID[id]
	switch {
	case !known:
		b.unknown++
		return
	case !ok:
		b.errs++
		return
	case created:
		b.created++
	default:
		b.duplicates++
	}
	tr.acked = true
	delete(b.pending, id)
	b.checkSettled()
}

// due returns the pending triggers never sent, or last sent before cutoff.
func (b *triggerBook) due(cutoff time.Time) []*trigger {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*trigger
	for _, tr := range b.pending {
		if tr.sends == 0 || tr.lastSent.Before(cutoff) {
			out = append(out, tr)
		}
	}
	return out
}

// close stops new triggers; settled closes once every one was answered.
func (b *triggerBook) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.checkSettled()
}

func (b *triggerBook) checkSettled() {
	if b.closed && len(b.pending) == 0 && !closed(b.settled) {
		close(b.settled)
	}
}

// acked returns the ids of the triggers some Fire answered.
func (b *triggerBook) acked() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]bool, len(b.all))
	for _, tr := range b.all {
		if tr.acked {
			out[tr.id] = true
		}
	}
	return out
}

func (b *triggerBook) pendingCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tail keeps the last max bytes written to it (a worker's stderr) and
// whether a data race was ever reported.
type tail struct {
	mu   sync.Mutex
	max  int
	buf  []byte
	race bool
	msgs map[string]*logged // slog records seen, by level and message
	// sweeps are the worker's recovery sweeps that outlasted their
	// interval (the sweeper's warning), when each ended and how long it
	// took: orphans wait for them.
	sweeps []slowSweep
}

// slowSweep is one recovery sweep that outlasted its interval: it ended at
// end, on the worker's clock (this machine's), after took.
type slowSweep struct {
	end  time.Time
	took time.Duration
}

// overlaps reports whether the sweep ran during [from, to].
func (s slowSweep) overlaps(from, to time.Time) bool {
	return s.end.After(from) && s.end.Add(-s.took).Before(to)
}

// slowSweepMsg is the sweeper's warning (recovery.Sweeper.Run).
const slowSweepMsg = "leasehold: recovery sweep took longer than its interval"

var (
	logTime = regexp.MustCompile(`^time=(\S+)`)
	logTook = regexp.MustCompile(` took=(\S+)`)
)

// logged counts one kind of log record and keeps the first one in full.
type logged struct {
	n     int
	first string
}

// logMsg matches one slog text record (slog writes each in one Write).
var logMsg = regexp.MustCompile(`level=(\w+) msg="((?:[^"\\]|\\.)*)"`)

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
		t.race = true
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		m := logMsg.FindSubmatch(line)
		if m == nil {
			continue
		}
		if t.msgs == nil {
			t.msgs = map[string]*logged{}
		}
		key := string(m[1]) + " " + string(m[2])
		if t.msgs[key] == nil {
			t.msgs[key] = &logged{first: string(line)}
		}
		t.msgs[key].n++
		if string(m[2]) == slowSweepMsg {
			t.noteSweep(line)
		}
	}
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0:0], t.buf[over:]...)
	}
	return len(b), nil
}

// noteSweep records the slow sweep one warning line reports; a line it
// cannot read is kept in the tail and left out.
func (t *tail) noteSweep(line []byte) {
	tm, took := logTime.FindSubmatch(line), logTook.FindSubmatch(line)
	if tm == nil || took == nil {
		return
	}
	end, err := time.Parse(time.RFC3339Nano, string(tm[1]))
	if err != nil {
		return
	}
	d, err := time.ParseDuration(string(took[1]))
	if err != nil {
		return
	}
	t.sweeps = append(t.sweeps, slowSweep{end: end, took: d})
}

// slowSweeps returns the slow sweeps seen so far.
func (t *tail) slowSweeps() []slowSweep {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.sweeps)
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// messages returns how often each kind of log record was seen, with the
// first one.
func (t *tail) messages() map[string]logged {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]logged, len(t.msgs))
	for k, v := range t.msgs {
		out[k] = *v
	}
	return out
}

func (t *tail) raced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.race || bytes.Contains(t.buf, []byte("WARNING: DATA RACE"))
}

// TestTailReadsSlowSweeps: the sweeper's warning, as a worker's slog text
// handler writes it, becomes a slow sweep the takeover bound can allow for;
// other records do not.
func TestTailReadsSlowSweeps(t *testing.T) {
	t.Parallel()
	tl := &tail{max: 1 << 10}
	log := slog.New(slog.NewTextHandler(tl, nil))
	log.Warn("leasehold: lease renewal failed", slog.Duration("took", time.Second))
	before := time.Now()
	log.Warn(slowSweepMsg, slog.Duration("took", 8900*time.Millisecond), slog.Duration("interval", 500*time.Millisecond))
	got := tl.slowSweeps()
	require.Len(t, got, 1)
	require.Equal(t, 8900*time.Millisecond, got[0].took)
	require.WithinDuration(t, before, got[0].end, time.Second)
	require.True(t, got[0].overlaps(before.Add(-time.Second), before.Add(-time.Millisecond*500)), "it ran 8.9 s up to its end")
	require.False(t, got[0].overlaps(before.Add(-20*time.Second), before.Add(-10*time.Second)))
}

// TestNoHealthyWorker: the time every slot was busy at once, within the
// window asked about.
func TestNoHealthyWorker(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	spans := []busySpan{
		{slot: 0, from: at(0), to: at(10)},
		{slot: 1, from: at(5), to: at(15)},
		{slot: 0, from: at(12), to: at(20)},
	}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 30, 8 * time.Second}, // 5-10 and 12-15
		{7, 9, 2 * time.Second},
		{10, 12, 0},
		{14, 30, time.Second},
		{20, 30, 0},
	} {
		require.Equal(t, c.want, noHealthyWorker(spans, 2, at(c.from), at(c.to)), "[%d, %d]", c.from, c.to)
	}
	require.Zero(t, noHealthyWorker(spans, 3, at(0), at(30)), "a third slot was never busy")
}

// whyUnanswered explains a run whose triggers stopped being answered: the
// errors the workers' Fire calls returned (most frequent first), the
// database sessions that are busy and who blocks them, what open work
// waits on, and the workers' goroutines.
func (c *cluster) whyUnanswered(ctx context.Context, db reads) string {
	c.writesMu.Lock()
	type tally struct {
		msg string
		n   int
	}
	var errs []tally
	for msg, n := range c.fireErrs {
		errs = append(errs, tally{msg, n})
	}
	c.writesMu.Unlock()
	slices.SortFunc(errs, func(a, b tally) int { return b.n - a.n })
	var b strings.Builder
	b.WriteString("\nFire errors:")
	if len(errs) == 0 {
		b.WriteString(" none")
	}
	for i, e := range errs {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d other messages", len(errs)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %6d× %s", e.n, e.msg)
	}
	var sessions string
	if err := db.QueryRow(ctx, "BusySessions").Scan(&sessions); err != nil {
		sessions = "(unreadable: " + err.Error() + ")"
	}
	fmt.Fprintf(&b, "\nbusy database sessions: %s\nopen work by what it waits on: %s%s", sessions, unsettledBreakdown(ctx, db), c.stacks())
	return b.String()
}
