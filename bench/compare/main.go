// Command compare measures leasehold against River (the Go Postgres job
// queue) on the same Postgres, in one run, alternating rounds:
//
//   - leasehold: N nodes fire M unique event triggers, every trigger on every
//     node, into an actor with a 1-step no-op strategy, until all M episodes
//     are done;
//   - River: N clients insert the same M jobs, unique by args, every job on
//     every client, worked by a no-op worker, until all M are completed;
//
// then leasehold's claim acquire against pgbench running the same
// AcquireClaim statement. It prints throughput, p50/p99 latency from the
// first submit of a unit to its completion, statements per unit, and the
// ratios leasehold / River. It lives in its own module so that the library
// never depends on River. See README.md.
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
	nodes          int
	triggers       int
	rounds         int
	producers      int
	workers        int
	conns          int
	jitter         string // both, on, off: which leasehold variants run
	riverBatch     int
	acquireTime    time.Duration
	acquireClients int
	timeout        time.Duration
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
	fs.IntVar(&cfg.nodes, "nodes", 3, "leasehold nodes and River clients, each with its own pool")
	fs.IntVar(&cfg.triggers, "triggers", 2000, "unique triggers (River: unique jobs) per round, each submitted on every node")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds per system, alternating leasehold and River")
	fs.IntVar(&cfg.producers, "producers", 8, "submitting goroutines per node")
	fs.IntVar(&cfg.workers, "workers", 32, "per node: leasehold actor MaxConcurrent and River queue MaxWorkers")
	fs.IntVar(&cfg.conns, "conns", 16, "pool size per node, both systems")
	fs.StringVar(&cfg.jitter, "jitter", "off", "leasehold variants to run: off (the default Config: Fire never waits), on (Config.EventJitter 200ms: a random wait inside each Fire before the insert), or both")
	fs.IntVar(&cfg.riverBatch, "river-batch", 1, "River jobs per insert call: 1 uses Insert (like-for-like with Fire), more uses InsertMany")
	fs.DurationVar(&cfg.acquireTime, "acquire-time", 5*time.Second, "duration of each acquire and pgbench run (whole seconds for pgbench)")
	fs.IntVar(&cfg.acquireClients, "acquire-clients", 8, "concurrent callers in the acquire and pgbench runs")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "give up on a round after this long (default 1m + triggers/producers × 250ms: with -jitter on, Fire calls take up to 200ms each)")
	verbose := fs.Bool("v", false, "log both systems at info level (default warn)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for name, v := range map[string]int{"nodes": cfg.nodes, "triggers": cfg.triggers, "rounds": cfg.rounds,
		"producers": cfg.producers, "workers": cfg.workers, "conns": cfg.conns, "river-batch": cfg.riverBatch,
		"acquire-clients": cfg.acquireClients} {
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
	if cfg.timeout == 0 {
		cfg.timeout = time.Minute + time.Duration(cfg.triggers/cfg.producers+1)*250*time.Millisecond
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
	riverInsert := "Insert, one job per call"
	if cfg.riverBatch > 1 {
		riverInsert = fmt.Sprintf("InsertMany, %d jobs per call (NOT like-for-like: Fire takes one trigger)", cfg.riverBatch)
	}
	var variants []bool // EventJitter on, per leasehold variant
	if cfg.jitter != "on" {
		variants = append(variants, false)
	}
	if cfg.jitter != "off" {
		variants = append(variants, true)
	}
	fmt.Fprintf(out, "workload: %d nodes × %d unique units per round, every unit submitted on every node (%d submissions), "+
		"%d producers/node, %d workers/node, %d conns/node\n", cfg.nodes, cfg.triggers, cfg.nodes*cfg.triggers,
		cfg.producers, cfg.workers, cfg.conns)
	for _, eventJitter := range variants {
		if eventJitter {
			fmt.Fprintf(out, "%s: EventJitter %v (a random wait inside Fire before the episode insert); poller off (no trigger_only nodes)\n", sysLeaseholdEventJitter, eventJitterWait)
		} else {
			fmt.Fprintf(out, "%s: default runner.Config (Fire never waits); poller off (no trigger_only nodes)\n", sysLeasehold)
		}
	}
	fmt.Fprintf(out, "%s: %s, unique by args, default Config (fetch cooldown 100ms, poll 1s)\n", sysRiver, riverInsert)
	fmt.Fprintf(out, "server counter: %s (%s)\n\n", srv.what(), srvNote)

	byVariant := map[string][]result{}
	space := 0
	for r := 1; r <= cfg.rounds; r++ {
		for _, eventJitter := range variants {
			space++
			res, err := runLeasehold(ctx, cfg, sc.leasehold, r, space, eventJitter, srv)
			if err != nil {
				return err
			}
			byVariant[res.system] = append(byVariant[res.system], res)
			printProgress(out, res)
		}
		res, err := runRiver(ctx, cfg, sc.river, r, srv)
		if err != nil {
			return err
		}
		byVariant[res.system] = append(byVariant[res.system], res)
		printProgress(out, res)
	}

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

	fmt.Fprintln(out)
	var lh [][]result
	for _, name := range []string{sysLeasehold, sysLeaseholdEventJitter} {
		if rs, ok := byVariant[name]; ok {
			lh = append(lh, rs)
		}
	}
	ok := report(out, cfg, srv, lh, byVariant[sysRiver], acq)
	fmt.Fprintf(out, "\ntotal wall time %v (set-up, %d rounds of %d systems, %d acquire pairs; the schema drop after this line excluded)\n",
		time.Since(began).Round(100*time.Millisecond), cfg.rounds, len(variants)+1, cfg.rounds)
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
