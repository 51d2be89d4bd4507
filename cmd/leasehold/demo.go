package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// fallbackURL is the Postgres URL when neither TEST_DATABASE_URL nor
// DATABASE_URL is set.
const fallbackURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Demo timings. The nodes' own (lease, sweep, poll) are the configuration
// the demo shows; the driver's waits are derived from them.
const (
	demoNodes = 3
	victim    = "node-1" // killed anyway when no node is seen running billing (see driveDemo)

	// demoLease is the nodes' work-claim lease. A SIGKILLed node's work is
	// recovered once it has run out, so it sets the demo's length; it also
	// sets how long a node's writes may wait for the database before its
	// runs stop (the heartbeat renews every lease/3 and gives up at
	// lease*4/5 without a renewal). 3 s was too tight for a loaded host.
	// Measured 2026-12-01 on the 2-core CI machine, race-enabled binaries,
	// two CPU hogs beside them (load 12-15), 12 runs three at a time (two
	// SQLite, one Postgres): with 3 s (and the poller's defaults), SQLite
	// renewals and journal writes waited past their 1 s call bound for the
	// file's write lock in 7 of 8 SQLite runs, leases were lost in 6 (an
	// episode restarted to attempt 3 of 4), and runs took 10.5-38.6 s; with
	// 10 s (a renewal may wait 3.3 s, a lease has 4.7 s of retries) and the
	// poller below, no renewal failed and no lease was lost in any run, and
	// every run took 17.2-20.8 s.
	demoLease = 10 * time.Second
	// demoSweepEvery: the nodes' recovery sweep (initial delay and
	// interval); demoStaleAfter: the sweep's bound for an episode with no
	// claim at all.
	demoSweepEvery = time.Second
	demoStaleAfter = 5 * time.Second
	// demoPollEvery: the nodes' poller for available work (the demo has
	// no waker).
	demoPollEvery = time.Second

	killAfter       = 3 * time.Second  // look for a node running a billing episode from then on
	killAnywayAfter = 13 * time.Second // kill it even if it never ran anything
	// demoDeadline: every billing episode done by then, or exit 1. The
	// victim's work is another node's within one lease, one sweep and one
	// poll of the kill (at killAnywayAfter at the latest), and then takes
	// billingSteps steps; demoLoadMargin covers the queue behind it and a
	// host so loaded that a step takes many times its 400 ms.
	demoDeadline   = killAnywayAfter + demoLease + demoSweepEvery + demoPollEvery + demoLoadMargin
	demoLoadMargin = 30 * time.Second

	pollEvery     = 100 * time.Millisecond
	progressEvery = 500 * time.Millisecond
	// readyTimeout: every node started (schema checked, definitions
	// recorded) by then. A node starts in about a second on a quiet host;
	// beside two CPU hogs a race-built node once took more than 15 s (its
	// definitions' writes queued for the SQLite file behind the other
	// nodes'), so the same load margin as the deadline's is allowed.
	readyTimeout = 15*time.Second + demoLoadMargin
	// demoNodeStop bounds a node's Stop (SIGTERM: drain, release its
	// claims); stopTimeout, the parent's wait for it before a SIGKILL.
	demoNodeStop = 5 * time.Second
	stopTimeout  = 2 * demoNodeStop
)

// demoURLEnv lists the variables the demo's server comes from, first set
// wins: the test harness's precedence (internal/pgtest.URL), so `make demo`
// runs on the server scripts/with-postgres.sh chose and exported as
// TEST_DATABASE_URL, never on a developer's own DATABASE_URL beside it.
var demoURLEnv = []string{"TEST_DATABASE_URL", "DATABASE_URL"}

// defaultURL returns TEST_DATABASE_URL, else DATABASE_URL, else the local
// default server.
func defaultURL() string {
	u, _ := defaultURLFrom()
	return u
}

// defaultURLFrom is defaultURL and the variable it came from.
func defaultURLFrom() (url, from string) {
	for _, v := range demoURLEnv {
		if u := os.Getenv(v); u != "" {
			return u, v
		}
	}
	return fallbackURL, "the default"
}

// The demo's dialects: -db's values.
const (
	demoSQLite   = "sqlite"
	demoPostgres = "postgres"
)

// runDemo is the demo command: see demo, which prints its progress and
// summary on the process's stdout.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	def, from := defaultURLFrom()
	dialect := fs.String("db", "", "sqlite or postgres; the default is sqlite, or postgres when -url is given")
	url := fs.String("url", "", "Postgres URL (-db postgres); the default is TEST_DATABASE_URL, else DATABASE_URL, else "+fallbackURL)
	keep := fs.Bool("keep", false, "keep the demo's database afterwards and print the 'leasehold ui' command that shows it")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold demo [-db sqlite|postgres] [-url URL] [-keep]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Runs three leasehold nodes as separate processes on one throwaway database,")
		fmt.Fprintln(w, "SIGKILLs one of them while it runs an episode, and shows from the database that")
		fmt.Fprintln(w, "its work was recovered exactly once: nothing lost, nothing duplicated (exit")
		fmt.Fprintln(w, "code 1 otherwise).")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The database is SQLite by default: a file in a new temporary directory,")
		fmt.Fprintln(w, "removed afterwards, so the demo needs nothing but this binary. -db postgres,")
		fmt.Fprintln(w, "or a -url (postgres:// or postgresql://), runs it on a Postgres server instead,")
		fmt.Fprintln(w, "in a schema created and dropped there; without -url the server is")
		fmt.Fprintln(w, "TEST_DATABASE_URL, else DATABASE_URL, else the local default below. The")
		fmt.Fprintln(w, "environment never selects Postgres by itself. With -keep the file or schema")
		fmt.Fprintln(w, "stays, so 'leasehold ui' can show the takeover.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "demo", args, stdout, stderr)
	if !ok {
		return code
	}
	if err := noArgs(pos); err != nil {
		return exitCode(stderr, "demo", err)
	}
	switch {
	case *dialect == "" && *url != "":
		*dialect = demoPostgres
	case *dialect == "":
		*dialect = demoSQLite
	}
	switch *dialect {
	case demoSQLite:
		if *url != "" {
			return exitCode(stderr, "demo", usagef("-url is for -db postgres: the SQLite demo makes its own file in a temporary directory"))
		}
		fmt.Fprintln(stdout, "database SQLite (the default; -db postgres runs the demo on Postgres)")
	case demoPostgres:
		if *url == "" {
			*url = def
		} else {
			from = "-url"
		}
		if !isPostgresURL(*url) {
			return exitCode(stderr, "demo", usagef("the Postgres demo needs a postgres:// or postgresql:// URL, got %s (from %s)", redact(*url), from))
		}
		fmt.Fprintf(stdout, "database %s (from %s)\n", redact(*url), from)
	default:
		return exitCode(stderr, "demo", usagef("unknown -db %q: want sqlite or postgres", *dialect))
	}
	start := time.Now()
	ok, err := demo(ctx, *dialect, *url, *keep)
	if err != nil {
		fmt.Fprintf(stderr, "\nleasehold demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "demo took %.1fs\n", time.Since(start).Seconds())
	if !ok {
		return 1
	}
	return 0
}

// isPostgresURL reports whether raw has a Postgres scheme.
func isPostgresURL(raw string) bool {
	scheme, _, _ := strings.Cut(raw, ":")
	scheme = strings.ToLower(scheme)
	return scheme == "postgres" || scheme == "postgresql"
}

// demo creates a throwaway database (openDemoDB), runs the demo nodes on
// it, SIGKILLs one mid-episode, waits for every billing episode to be done
// and prints the summary. ok is false when something was lost or
// duplicated. The database is removed whatever happens, unless keep is set
// and the demo got as far as its summary.
func demo(ctx context.Context, dialect, url string, keep bool) (ok bool, err error) {
	exe, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("find own executable: %w", err)
	}
	d, err := openDemoDB(ctx, dialect, url)
	if err != nil {
		return false, err
	}
	if d.where != "" {
		fmt.Println(d.where)
	}
	reported := false
	defer func() {
		if keep && reported {
			d.close()
			fmt.Print(d.kept)
			return
		}
		// Also after SIGINT: ctx is cancelled then, the removal still runs.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := d.remove(dctx); derr != nil {
			err = errors.Join(err, derr)
		}
	}()

	nodes := make([]*child, 0, demoNodes)
	defer func() { stopChildren(nodes) }() // no-op for those already stopped
	for i := 1; i <= demoNodes; i++ {
		c, err := startChild(exe, d.nodeArgs, fmt.Sprintf("node-%d", i))
		if err != nil {
			return false, err
		}
		nodes = append(nodes, c)
	}
	if err := waitReady(ctx, nodes); err != nil {
		return false, err
	}
	fmt.Printf("started %d node processes (%s); each fires the same %d %s events\n", len(nodes), pids(nodes), demoEvents, billingEvent)

	run, err := driveDemo(ctx, d.reads, nodes)
	if err != nil {
		return false, err
	}
	stopChildren(nodes)
	fmt.Printf("stopped the surviving nodes (SIGTERM)\n\n")

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ok, err = report(rctx, d.reads, d.name, nodes, run)
	reported = err == nil
	return ok && !run.timedOut, err
}

// demoSchemaURL is url with its connections' search_path set to schema.
func demoSchemaURL(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}

// createDemoSchema creates a new schema lh_demo_<hex> and returns its name.
// The DDL stays in Go because a schema name cannot be a bind parameter; it
// coordinates nothing (the demo's other statements are in demo_report.sql).
func createDemoSchema(ctx context.Context, admin *pgxpool.Pool) (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("schema name: %w", err)
	}
	name := "lh_demo_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	return name, nil
}

// dropDemoSchema drops the demo schema and everything in it.
func dropDemoSchema(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", name, err)
	}
	return nil
}

// openSchemaPool opens a pool whose search_path is schema alone.
func openSchemaPool(ctx context.Context, url, schema string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to schema %s: %w", schema, err)
	}
	return pool, nil
}

// child is one demo node process and what it reported on stdout.
type child struct {
	id     string
	cmd    *exec.Cmd
	stdin  io.WriteCloser // closing it tells the node to stop
	ready  chan struct{}
	exited chan struct{} // closed once stdout is drained and the process reaped
	err    error         // the process's exit, valid after exited

	// Written by the stdout reader, read after exited.
	fires    int             // Fire calls made
	triggers map[string]bool // dedupe keys seen as triggers -> created by this node
	killed   bool
}

// startChild starts one demo node: this executable, subcommand demo-node,
// with the arguments that lead it to the demo's database.
func startChild(exe string, dbArgs []string, id string) (*child, error) {
	cmd := exec.Command(exe, append([]string{demoNodeCommand, "-id", id}, dbArgs...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: stdin: %w", id, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: stdout: %w", id, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	c := &child{id: id, cmd: cmd, stdin: stdin, ready: make(chan struct{}), exited: make(chan struct{}), triggers: map[string]bool{}}
	go c.read(stdout)
	return c, nil
}

// read consumes the node's progress lines until EOF, then reaps the process.
func (c *child) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	readyClosed := false
	for sc.Scan() {
		var l progressLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch l.Kind {
		case "ready":
			if !readyClosed {
				close(c.ready)
				readyClosed = true
			}
		case "fire":
			c.fires++
		case "trigger":
			c.triggers[l.Key] = c.triggers[l.Key] || l.Created
		}
	}
	c.err = c.cmd.Wait()
	close(c.exited)
}

// alive reports whether the process has not exited yet.
func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the node: no cleanup, its leases just stop being renewed.
func (c *child) kill() error {
	c.killed = true
	if err := c.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", c.id, err)
	}
	<-c.exited
	return nil
}

// waitReady waits until every node has started.
func waitReady(ctx context.Context, nodes []*child) error {
	deadline := time.After(readyTimeout)
	for _, c := range nodes {
		select {
		case <-c.ready:
		case <-c.exited:
			return fmt.Errorf("%s exited before it was ready: %v", c.id, c.err)
		case <-deadline:
			return fmt.Errorf("%s not ready after %v", c.id, readyTimeout)
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
	return nil
}

// stopChildren SIGTERMs every live node and waits for it; one that does not
// exit within stopTimeout is killed.
func stopChildren(nodes []*child) {
	for _, c := range nodes {
		if c.alive() {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			_ = c.stdin.Close()
		}
	}
	deadline := time.After(stopTimeout)
	for _, c := range nodes {
		select {
		case <-c.exited:
		case <-deadline:
			fmt.Fprintf(os.Stderr, "%s did not stop within %v; killing it\n", c.id, stopTimeout)
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
}

func pids(nodes []*child) string {
	s := make([]string, len(nodes))
	for i, c := range nodes {
		s[i] = fmt.Sprintf("%s pid %d", c.id, c.cmd.Process.Pid)
	}
	return strings.Join(s, ", ")
}

// demoRun is what the driver observed, for the summary.
type demoRun struct {
	victim        string // the node SIGKILLed
	killedAt      time.Duration
	killedRunning []heldEpisode // episodes the victim was running or holding when killed
	killedAnyway  bool
	elapsed       time.Duration
	timedOut      bool // not every billing episode was done by demoDeadline
}

// driveDemo kills a node while it runs a billing episode, prints progress,
// and returns once every billing episode is done, or at demoDeadline with
// timedOut set. The node killed is the first of node-1, node-2, node-3 seen
// running a billing episode from killAfter on: which node runs which
// episode depends on who fires first and whose poller wakes first (on
// SQLite the pollers poll, and one node can win every request for a
// while), so a fixed victim could be idle. None seen by killAnywayAfter:
// node-1, anyway.
func driveDemo(ctx context.Context, db *demoDB, nodes []*child) (demoRun, error) {
	var run demoRun
	t0 := time.Now()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var lastProgress time.Time
	killed := false
	for {
		select {
		case <-ctx.Done():
			fmt.Println()
			return run, fmt.Errorf("interrupted: %w", ctx.Err())
		case <-tick.C:
		}
		el := time.Since(t0)
		if !killed && el >= killAfter {
			target, held, err := pickVictim(ctx, db, nodes)
			if err != nil {
				return run, err
			}
			running := target != nil // mid-episode in billing, the work the demo waits for
			if running || el >= killAnywayAfter {
				if !running {
					for _, c := range nodes {
						if c.id == victim {
							target = c
						}
					}
				}
				if err := target.kill(); err != nil {
					return run, err
				}
				killed = true
				run.victim, run.killedAt, run.killedRunning, run.killedAnyway = target.id, el, held, !running
				fmt.Printf("\nt=%4.1fs SIGKILL %s (pid %d)", el.Seconds(), target.id, target.cmd.Process.Pid)
				if running {
					fmt.Printf(" while it held %s\n", describeHeld(held))
				} else {
					fmt.Printf(" anyway: no running billing episode of any node seen in %v\n", killAnywayAfter)
				}
			}
		}
		counts, err := statusCounts(ctx, db)
		if err != nil {
			return run, err
		}
		if time.Since(lastProgress) >= progressEvery {
			lastProgress = time.Now()
			fmt.Printf("\r%-110s", fmt.Sprintf("t=%4.1fs  %s: %s | %s: %s", el.Seconds(),
				billingActor, counts.line(billingActor), reporterActor, counts.line(reporterActor)))
		}
		if killed && counts[billingActor]["done"] == demoEvents {
			fmt.Printf("\r%-110s\n", fmt.Sprintf("t=%4.1fs  %s: %s | %s: %s", el.Seconds(),
				billingActor, counts.line(billingActor), reporterActor, counts.line(reporterActor)))
			fmt.Printf("all %d billing episodes done after %.1fs\n", demoEvents, el.Seconds())
			run.elapsed = el
			return run, nil
		}
		if el >= demoDeadline {
			missing, err := notDone(ctx, db, billingActor)
			if err != nil {
				return run, err
			}
			fmt.Printf("\nDEADLINE %v: %d of %d billing episodes done; not done: %s\n",
				demoDeadline, counts[billingActor]["done"], demoEvents, describeEpisodes(missing))
			run.timedOut, run.elapsed = true, el
			return run, nil
		}
	}
}

// pickVictim returns the first live node, in order, that holds a running
// billing episode, with the episodes it holds; nil if none does.
func pickVictim(ctx context.Context, db *demoDB, nodes []*child) (*child, []heldEpisode, error) {
	for _, c := range nodes {
		if !c.alive() {
			continue
		}
		held, err := victimHeld(ctx, db, c.id)
		if err != nil {
			return nil, nil, err
		}
		for _, h := range held {
			if h.status == "running" && h.actor == billingActor {
				return c, held, nil
			}
		}
	}
	return nil, nil, nil
}

// describeHeld names the victim's episodes at the moment of the kill.
func describeHeld(held []heldEpisode) string {
	s := make([]string, len(held))
	for i, h := range held {
		s[i] = fmt.Sprintf("%s #%d (%s, steps journaled: %d)", h.actor, h.id, h.status, h.steps)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}
