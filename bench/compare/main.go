// Command compare measures leasehold against River (the Go Postgres job
// queue) on the same Postgres, in one run, rounds alternating, on three
// workloads (-workload):
//
//   - broadcast: N members submit M unique units, every unit on every
//     member (leasehold: Fire of an event trigger; River: Insert of a job
//     unique by args), worked while they are submitted;
//   - single: every unit submitted once, on a member drawn at random;
//   - bulk: a burn-down: a loader inserts the units in transactions of 500
//     (leasehold: FireTx per unit; River: InsertMany), then the members
//     start and work them off;
//
// each unit a 1-step no-op, until all are done; then leasehold's claim
// acquire against pgbench running the same AcquireClaim statement. River
// runs at its defaults or tuned as its own `river bench` tunes it
// (-river-config). It prints, per workload, throughput, p50/p99 latency from
// the first submit of a unit to its completion, statements and transactions
// per unit, each member's share, the exactly-once check read from the
// database, and the ratios leasehold / River. It lives in its own module so
// that the library never depends on River. See README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasehold/leasehold/adapters/postgres"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

type config struct {
	url            string
	workloads      []string
	riverConfig    string // riverDefault or riverTuned
	nodes          int
	triggers       int
	bulkUnits      int
	bulkBatch      int
	bulkWorkers    int
	rounds         int
	producers      int
	workers        int
	conns          int
	jitter         string // both, on, off: which leasehold variants run
	riverBatch     int
	acquireTime    time.Duration
	acquireClients int
	timeout        time.Duration
	cpuProfile     string
	logger         *slog.Logger
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	url := defaultURL
	for _, v := range []string{"DATABASE_URL", "TEST_DATABASE_URL"} {
		if u := os.Getenv(v); u != "" {
			url = u
		}
	}
	fs.StringVar(&cfg.url, "url", url, "Postgres URL (default: $TEST_DATABASE_URL, else $DATABASE_URL, else the local server)")
	workloads := fs.String("workload", "all", "workloads to run: broadcast, single, bulk, a comma-separated list, or all")
	fs.StringVar(&cfg.riverConfig, "river-config", riverTuned, "River's client configuration: tuned (FetchCooldown 2ms, FetchPollInterval 20ms, as river bench sets them) or default")
	fs.IntVar(&cfg.nodes, "nodes", 3, "members per system: leasehold nodes and River clients, each with its own pool")
	fs.IntVar(&cfg.triggers, "triggers", 2000, "broadcast and single: unique units per round")
	fs.IntVar(&cfg.bulkUnits, "bulk-units", defaultBulkUnits, "bulk: unique units per round (river bench's burn-down example: 1,000,000; see README.md)")
	fs.IntVar(&cfg.bulkBatch, "bulk-batch", 500, "bulk: units per insert transaction (leasehold: FireTx per unit; River: one InsertMany)")
	fs.IntVar(&cfg.bulkWorkers, "bulk-workers", 500, "bulk: per member, leasehold actor MaxConcurrent and River queue MaxWorkers")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds per system, alternating leasehold and River")
	fs.IntVar(&cfg.producers, "producers", 8, "submitting goroutines per member (bulk: loader goroutines)")
	fs.IntVar(&cfg.workers, "workers", 32, "broadcast and single, per member: leasehold actor MaxConcurrent and River queue MaxWorkers")
	fs.IntVar(&cfg.conns, "conns", 16, "pool size per member (and per bulk loader), both systems")
	fs.StringVar(&cfg.jitter, "jitter", "off", "broadcast and single, leasehold variants to run: off (the default Config: Fire never waits), on (Config.EventJitter 200ms: a random wait inside each Fire before the insert), or both")
	fs.IntVar(&cfg.riverBatch, "river-batch", 1, "broadcast and single, River jobs per insert call: 1 uses Insert (like-for-like with Fire), more uses InsertMany")
	fs.DurationVar(&cfg.acquireTime, "acquire-time", 5*time.Second, "duration of each acquire and pgbench run (whole seconds for pgbench)")
	fs.IntVar(&cfg.acquireClients, "acquire-clients", 8, "concurrent callers in the acquire and pgbench runs")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "give up on a round after this long (default: 1m + triggers/producers × 250ms, as with -jitter on Fire calls take up to 200ms each; bulk 1m + 3ms per unit)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (both systems' Go side, not the server's) to this file")
	verbose := fs.Bool("v", false, "log both systems at info level (default warn)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for name, v := range map[string]int{"nodes": cfg.nodes, "triggers": cfg.triggers, "rounds": cfg.rounds,
		"producers": cfg.producers, "workers": cfg.workers, "conns": cfg.conns, "river-batch": cfg.riverBatch,
		"acquire-clients": cfg.acquireClients, "bulk-units": cfg.bulkUnits, "bulk-batch": cfg.bulkBatch,
		"bulk-workers": cfg.bulkWorkers} {
		if v < 1 {
			err := fmt.Errorf("-%s must be at least 1, got %d", name, v)
			fmt.Fprintln(stderr, err)
			return cfg, err
		}
	}
	if cfg.jitter != "both" && cfg.jitter != "on" && cfg.jitter != "off" {
		err := fmt.Errorf("-jitter must be both, on or off, got %q", cfg.jitter)
		fmt.Fprintln(stderr, err)
		return cfg, err
	}
	var err error
	if cfg.workloads, err = parseWorkloads(*workloads); err != nil {
		fmt.Fprintln(stderr, err)
		return cfg, err
	}
	if cfg.riverConfig != riverTuned && cfg.riverConfig != riverDefault {
		err := fmt.Errorf("-river-config must be tuned or default, got %q", cfg.riverConfig)
		fmt.Fprintln(stderr, err)
		return cfg, err
	}
	if cfg.acquireTime < time.Second || cfg.timeout < 0 {
		err := fmt.Errorf("-acquire-time must be at least 1s and -timeout not negative")
		fmt.Fprintln(stderr, err)
		return cfg, err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return cfg, nil
}

// schemas are the run's throwaway schemas, dropped when it ends.
type schemas struct {
	leasehold, river, acquire string
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	began := time.Now()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	admin, err := pgx.Connect(ctx, cfg.url)
	if err != nil {
		return fmt.Errorf("connect %s: %w", cfg.url, err)
	}
	defer admin.Close(context.Background())
	var version string
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return err
	}
	srv, srvNote := detectServerStats(ctx, admin)

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "lh_compare_" + hex.EncodeToString(b)
	sc := schemas{leasehold: prefix + "_leasehold", river: prefix + "_river", acquire: prefix + "_acquire"}
	for _, s := range []string{sc.leasehold, sc.river, sc.acquire} {
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
			return err
		}
		defer func() {
			dropCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := admin.Exec(dropCtx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
				fmt.Fprintf(os.Stderr, "compare: drop schema %s: %v\n", s, err)
			}
		}()
	}
	if err := migrate(ctx, cfg, sc); err != nil {
		return err
	}

	fmt.Fprintf(out, "leasehold vs River — PostgreSQL %s, River %s, %d CPUs, schemas %s_*\n",
		version, moduleVersion("github.com/riverqueue/river"), runtime.NumCPU(), prefix)
	fmt.Fprintf(out, "%s: every member a runner.Node: %s\n", sysLeasehold, leaseholdNodeText)
	if cfg.jitter != "off" {
		fmt.Fprintf(out, "%s: the same with EventJitter %v (a random wait inside Fire before the episode insert); broadcast and single only\n",
			sysLeaseholdEventJitter, eventJitterWait)
	}
	fmt.Fprintf(out, "%s: every member a river.Client, %s; jobs unique by args\n", sysRiver, riverConfigText(cfg.riverConfig))
	if cfg.riverBatch > 1 {
		fmt.Fprintf(out, "%s: broadcast and single insert with InsertMany, %d jobs per call (NOT like-for-like: Fire takes one trigger)\n",
			sysRiver, cfg.riverBatch)
	}
	fmt.Fprintf(out, "server counter: %s (%s)\n", srv.what(), srvNote)

	var sections []section
	space := 0
	for _, name := range cfg.workloads {
		w := newWorkload(cfg, name)
		fmt.Fprintf(out, "\n%s: %s\n", w.name, w.describe(cfg))
		var variants []bool // EventJitter on, per leasehold variant
		if cfg.jitter != "on" || w.bulk() {
			variants = append(variants, false)
		}
		if cfg.jitter != "off" && !w.bulk() {
			variants = append(variants, true)
		}
		byVariant := map[string][]result{}
		for r := 1; r <= cfg.rounds; r++ {
			for _, eventJitter := range variants {
				space++
				res, err := runLeasehold(ctx, cfg, w, sc.leasehold, r, space, eventJitter, srv)
				if err != nil {
					return err
				}
				byVariant[res.system] = append(byVariant[res.system], res)
				printProgress(out, res)
			}
			space++
			res, err := runRiver(ctx, cfg, w, sc.river, r, space, srv)
			if err != nil {
				return err
			}
			byVariant[res.system] = append(byVariant[res.system], res)
			printProgress(out, res)
		}
		sec := section{w: w, river: byVariant[sysRiver]}
		for _, name := range []string{sysLeasehold, sysLeaseholdEventJitter} {
			if rs, ok := byVariant[name]; ok {
				sec.lh = append(sec.lh, rs)
			}
		}
		sections = append(sections, sec)
	}
	fmt.Fprintln(out)

	var acq []acquirePair
	script, scriptErr := pgbenchScript(queriesDir())
	bin, binErr := findPgbench()
	for r := 1; r <= cfg.rounds; r++ {
		p := acquirePair{round: r}
		if p.leasehold, err = runAcquire(ctx, cfg, sc.acquire); err != nil {
			return err
		}
		switch {
		case scriptErr != nil:
			p.pgbenchErr = scriptErr
		case binErr != nil:
			p.pgbenchErr = binErr
		default:
			p.pgbench, p.pgbenchErr = runPgbenchScript(ctx, cfg, bin, sc.acquire, script)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		acq = append(acq, p)
		fmt.Fprintf(out, "  acquire round %d: leasehold %.0f/s, pgbench %s\n", r, p.leasehold, p.pgbenchText())
	}

	ok := report(out, cfg, srv, sections, acq)
	fmt.Fprintf(out, "\ntotal wall time %v (set-up, %d workloads × %d rounds, %d acquire pairs; the schema drop after this line excluded)\n",
		time.Since(began).Round(100*time.Millisecond), len(sections), cfg.rounds, cfg.rounds)
	if !ok {
		return errors.New("exactly-once check failed (see MISMATCH above)")
	}
	return nil
}

// migrate applies leasehold's migrations (through database/sql, as the
// library documents) and River's (rivermigrate), each into its schema.
func migrate(ctx context.Context, cfg config, sc schemas) error {
	for _, s := range []string{sc.leasehold, sc.acquire} {
		pool, err := newPool(ctx, cfg.url, s, 2, nil)
		if err != nil {
			return err
		}
		db := stdlib.OpenDBFromPool(pool)
		err = postgres.Migrate(ctx, db)
		_ = db.Close()
		pool.Close()
		if err != nil {
			return fmt.Errorf("schema %s: %w", s, err)
		}
	}
	pool, err := newPool(ctx, cfg.url, sc.river, 2, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: sc.river, Logger: cfg.logger})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate schema %s: %w", sc.river, err)
	}
	return nil
}

// runPgbenchScript writes script to a temporary file and runs pgbench on it.
func runPgbenchScript(ctx context.Context, cfg config, bin, schema, script string) (float64, error) {
	dir, err := os.MkdirTemp("", "lh-compare-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "acquire.sql")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return 0, err
	}
	return runPgbench(ctx, cfg, bin, schema, file)
}

// moduleVersion is the version of dependency path this binary was built with.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}
