// Command compare measures leasehold against River (the Go Postgres job
// queue) on the same Postgres, in one run, on four workloads (-workload):
//
//   - broadcast: N members submit M unique units, every unit on every
//     member (leasehold: Fire of an event trigger; River: Insert of a job
//     unique by args), worked while they are submitted;
//   - single: every unit submitted once, on a member drawn at random;
//   - bulk: a burn-down: the members start gated, a loader inserts the
//     units in transactions of 500 (leasehold: FireBatchTx; River:
//     InsertMany or InsertManyFast), then the gate opens and the members
//     work them off;
//   - long: as single, but every unit holds its lease for 2s;
//
// then leasehold's claim acquire against pgbench running the same
// AcquireClaim statement. Every system-round starts from a fresh schema;
// rounds alternate which system goes first. River runs every insert mode
// (InsertMany, InsertManyFast), with and without UniqueOpts, at its
// defaults or tuned as its own `river bench` tunes it (-river-config).
// Every unit writes a row of a ledger table that neither system knows, the
// independent witness of exactly-once. It prints, per workload, throughput,
// p50/p99 latency from the first submit of a unit to its completion,
// statements, transactions and WAL bytes per unit, each member's share, the
// exactly-once check read from the database and the ledger, and the ratios
// leasehold / River. It lives in its own module so that the library never
// depends on River. See README.md.
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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
	longUnits      int
	longWorkers    int
	longHold       time.Duration
	riverInsert    string // both, many, fast: River's insert modes
	riverUnique    string // both, on, off: River with and without UniqueOpts
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
	workloads := fs.String("workload", "all", "workloads to run: broadcast, single, bulk, long, a comma-separated list, or all")
	fs.StringVar(&cfg.riverConfig, "river-config", riverTuned, "River's client configuration: tuned (FetchCooldown 2ms, FetchPollInterval 20ms, as river bench sets them) or default")
	fs.IntVar(&cfg.nodes, "nodes", 3, "members per system: leasehold nodes and River clients, each with its own pool")
	fs.IntVar(&cfg.triggers, "triggers", 2000, "broadcast and single: unique units per round")
	fs.IntVar(&cfg.bulkUnits, "bulk-units", defaultBulkUnits, "bulk: unique units per round (river bench's burn-down example: 1,000,000; see README.md)")
	fs.IntVar(&cfg.bulkBatch, "bulk-batch", 500, "bulk: units per insert transaction (leasehold: one FireBatchTx; River: one InsertMany or InsertManyFast)")
	fs.IntVar(&cfg.bulkWorkers, "bulk-workers", 500, "bulk: per member, leasehold actor MaxConcurrent and River queue MaxWorkers")
	fs.IntVar(&cfg.longUnits, "long-units", 2000, "long: unique units per round")
	fs.IntVar(&cfg.longWorkers, "long-workers", 250, "long: per member, leasehold actor MaxConcurrent and River queue MaxWorkers")
	fs.DurationVar(&cfg.longHold, "long-hold", 2*time.Second, "long: how long each unit holds its lease before it ends")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds per system; odd rounds run leasehold first, even rounds River first")
	fs.IntVar(&cfg.producers, "producers", 8, "submitting goroutines per member (bulk: loader goroutines)")
	fs.IntVar(&cfg.workers, "workers", 32, "broadcast and single, per member: leasehold actor MaxConcurrent and River queue MaxWorkers")
	fs.IntVar(&cfg.conns, "conns", 16, "pool size per member (and per bulk loader), both systems")
	fs.StringVar(&cfg.jitter, "jitter", "off", "broadcast and single, leasehold variants to run: off (the default Config: Fire never waits), on (Config.EventJitter 200ms: a random wait inside each Fire before the insert), or both")
	fs.IntVar(&cfg.riverBatch, "river-batch", 1, "broadcast, single and long, River jobs per insert call: 1 uses Insert or a one-job InsertManyFast (like-for-like with Fire), more uses InsertMany or InsertManyFast")
	fs.StringVar(&cfg.riverInsert, "river-insert", "both", "River's insert modes to run: many (InsertMany; Insert for one job), fast (InsertManyFast, COPY), or both")
	fs.StringVar(&cfg.riverUnique, "river-unique", "both", "River with UniqueOpts{ByArgs: true} (on: like-for-like, leasehold always deduplicates), without (off), or both")
	fs.DurationVar(&cfg.acquireTime, "acquire-time", 5*time.Second, "duration of each acquire and pgbench run (whole seconds for pgbench)")
	fs.IntVar(&cfg.acquireClients, "acquire-clients", 8, "concurrent callers in the acquire and pgbench runs")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "give up on a round after this long (default: 1m + units/producers × 250ms, as with -jitter on Fire calls take up to 200ms each; bulk 1m + 3ms per unit; long adds 3 × its holds back to back)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (both systems' Go side, not the server's) to this file")
	verbose := fs.Bool("v", false, "log both systems at info level (default warn)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for name, v := range map[string]int{"nodes": cfg.nodes, "triggers": cfg.triggers, "rounds": cfg.rounds,
		"producers": cfg.producers, "workers": cfg.workers, "conns": cfg.conns, "river-batch": cfg.riverBatch,
		"acquire-clients": cfg.acquireClients, "bulk-units": cfg.bulkUnits, "bulk-batch": cfg.bulkBatch,
		"bulk-workers": cfg.bulkWorkers, "long-units": cfg.longUnits, "long-workers": cfg.longWorkers} {
		if v < 1 {
			err := fmt.Errorf("-%s must be at least 1, got %d", name, v)
			fmt.Fprintln(stderr, err)
			return cfg, err
		}
	}
	for _, f := range []struct{ name, v, want string }{
		{"jitter", cfg.jitter, "both on off"}, {"river-unique", cfg.riverUnique, "both on off"},
		{"river-insert", cfg.riverInsert, "both many fast"},
	} {
		if !slices.Contains(strings.Fields(f.want), f.v) {
			err := fmt.Errorf("-%s must be one of %s, got %q", f.name, strings.ReplaceAll(f.want, " ", ", "), f.v)
			fmt.Fprintln(stderr, err)
			return cfg, err
		}
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
	if cfg.acquireTime < time.Second || cfg.timeout < 0 || cfg.longHold < 0 {
		err := fmt.Errorf("-acquire-time must be at least 1s, -timeout and -long-hold not negative")
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
	first, err := pgx.Connect(ctx, cfg.url)
	if err != nil {
		return fmt.Errorf("connect %s: %w", cfg.url, err)
	}
	defer first.Close(context.Background())
	var version string
	if err := first.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "lh_compare_" + hex.EncodeToString(b)
	url, dropDB, dbNote, err := ownDatabase(ctx, first, cfg.url, prefix)
	if err != nil {
		return err
	}
	defer dropDB()
	cfg.url = url
	admin, err := pgx.Connect(ctx, cfg.url)
	if err != nil {
		return fmt.Errorf("connect %s: %w", cfg.url, err)
	}
	defer admin.Close(context.Background())
	srv := &serverStats{conn: admin}
	if _, _, err := srv.read(ctx); err != nil {
		return fmt.Errorf("read pg_stat_database and pg_current_wal_lsn: %w", err)
	}

	sch := newSchemas(admin, cfg, prefix)
	defer sch.dropAll()
	acquireSchema, err := sch.create(ctx, "acquire")
	if err != nil {
		return err
	}
	if err := migrateLeasehold(ctx, cfg.url, acquireSchema); err != nil {
		return err
	}

	fmt.Fprintf(out, "leasehold vs River — PostgreSQL %s, River %s, %d CPUs, schemas %s_* in database %s\n",
		version, moduleVersion("github.com/riverqueue/river"), runtime.NumCPU(), prefix, admin.Config().Database)
	fmt.Fprintf(out, "%s: every member a runner.Node: %s\n", sysLeasehold, leaseholdNodeText)
	if cfg.jitter != "off" {
		fmt.Fprintf(out, "%s: the same with EventJitter %v (a random wait inside Fire before the episode insert); broadcast and single only\n",
			sysLeaseholdEventJitter, eventJitterWait)
	}
	fmt.Fprintf(out, "River: every member a river.Client, %s\n", riverConfigText(cfg.riverConfig))
	fmt.Fprintf(out, "River rows: InsertMany (Insert for one job) or InsertManyFast (COPY), +unique = UniqueOpts{ByArgs: true}; "+
		"%s is like-for-like with leasehold, which always deduplicates; the others are shown beside it\n", likeForLike.name())
	if cfg.riverBatch > 1 {
		fmt.Fprintf(out, "River: broadcast, single and long insert %d jobs per call (NOT like-for-like: Fire takes one trigger)\n",
			cfg.riverBatch)
	}
	fmt.Fprintln(out, "every system-round: a fresh schema (migrated, then dropped), its members started before the measured span; "+
		"odd rounds run leasehold first, even rounds River first")
	fmt.Fprintln(out, "every unit writes its row of compare_ledger (leasehold: fenced by leasehold_hold on the run's grant; "+
		"River: a plain insert in the worker), one autocommit statement on each side")
	fmt.Fprintf(out, "counted once each: statements and client xacts by a pgx tracer on every pool of a system; "+
		"db xacts from pg_stat_database.xact_commit (%s); WAL from pg_current_wal_lsn (cluster-wide: every database's writes)\n", dbNote)

	var sections []section
	space := 0
	for _, name := range cfg.workloads {
		w := newWorkload(cfg, name)
		fmt.Fprintf(out, "\n%s: %s\n", w.name, w.describe(cfg))
		if _, left := riverVariants(cfg, w); len(left) > 0 {
			fmt.Fprintf(out, "  not run in %s: %s\n", w.name, strings.Join(left, "; "))
		}
		bySystem := map[string][]result{}
		for r := 1; r <= cfg.rounds; r++ {
			order := systems(cfg, w, r)
			names := make([]string, len(order))
			for i, s := range order {
				names[i] = s.name
			}
			fmt.Fprintf(out, "  round %d order: %s\n", r, strings.Join(names, ", "))
			for _, s := range order {
				space++
				run := runLeasehold
				if s.river {
					run = runRiver
				}
				res, err := run(ctx, cfg, w, sch, s, r, space, srv)
				if err != nil {
					return err
				}
				bySystem[s.name] = append(bySystem[s.name], res)
				printProgress(out, res)
			}
		}
		sec := section{w: w}
		for _, s := range systems(cfg, w, 1) {
			if s.river {
				sec.river = append(sec.river, bySystem[s.name])
			} else {
				sec.lh = append(sec.lh, bySystem[s.name])
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
		if p.leasehold, err = runAcquire(ctx, cfg, acquireSchema); err != nil {
			return err
		}
		switch {
		case scriptErr != nil:
			p.pgbenchErr = scriptErr
		case binErr != nil:
			p.pgbenchErr = binErr
		default:
			p.pgbench, p.pgbenchErr = runPgbenchScript(ctx, cfg, bin, acquireSchema, script)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		acq = append(acq, p)
		fmt.Fprintf(out, "  acquire round %d: leasehold %.0f/s, pgbench %s\n", r, p.leasehold, p.pgbenchText())
	}

	ok := report(out, cfg, sections, acq)
	fmt.Fprintf(out, "\ntotal wall time %v (set-up, %d workloads × %d rounds, %d acquire pairs; the last schema drop excluded)\n",
		time.Since(began).Round(100*time.Millisecond), len(sections), cfg.rounds, cfg.rounds)
	if !ok {
		return errors.New("exactly-once check failed (see MISMATCH above)")
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
