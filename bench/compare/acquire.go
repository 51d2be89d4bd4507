package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/sql/queries"
)

// queriesDir finds sql/queries of the leasehold checkout this module
// replaces: beside this source file, else relative to the working directory.
func queriesDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "sql", "queries")
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
	}
	return filepath.Join("..", "..", "sql", "queries")
}

// pgbenchScript is the AcquireClaim statement exactly as in
// sql/queries/postgres/claims.sql, with each sqlc.arg(x) turned into the
// pgbench variable :x (bound as a parameter under -M prepared) and a random
// fresh key per transaction, as adapters/postgres/bench_test.go builds it.
func pgbenchScript(dir string) (string, error) {
	qs, err := queries.Parse(os.DirFS(dir), "postgres/claims.sql")
	if err != nil {
		return "", err
	}
	q, ok := qs["AcquireClaim"]
	if !ok {
		return "", fmt.Errorf("AcquireClaim not found in %s/postgres/claims.sql", dir)
	}
	sql := regexp.MustCompile(`sqlc\.arg\((\w+)\)`).ReplaceAllString(q.Statement(), ":$1")
	sql = strings.ReplaceAll(sql, ":dedupe_key", ":k")
	sql = strings.ReplaceAll(sql, "\n", " ") // pgbench reads one statement per line
	return "\\set k random(1, 9000000000000000000)\n" + sql + ";\n", nil
}

// findPgbench looks on PATH, then in pg_config's bindir, then in Debian's
// versioned PostgreSQL directories.
func findPgbench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "pgbench")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(m) > 0 {
		return m[len(m)-1], nil
	}
	return "", errors.New("pgbench not found (PATH, pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

// runAcquire calls Store.Acquire on fresh random keys from cfg.acquireClients
// goroutines for cfg.acquireTime and returns acquires per second.
func runAcquire(ctx context.Context, cfg config, schema string) (float64, error) {
	pool, err := newPool(ctx, cfg.url, schema, cfg.acquireClients+2, nil)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	store := postgres.New(pool)
	if err := pool.Ping(ctx); err != nil {
		return 0, err
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.acquireTime)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	start := time.Now()
	for range cfg.acquireClients {
		wg.Go(func() {
			for runCtx.Err() == nil {
				_, err := store.Acquire(runCtx, claims.AcquireParams{
					Key: strconv.FormatUint(rand.Uint64(), 10), Owner: "bench", Lease: 30 * time.Second, WorkType: "bench",
				})
				switch {
				case err == nil:
					n.Add(1)
				case runCtx.Err() == nil:
					failed.CompareAndSwap(nil, &err)
					cancel()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := failed.Load(); e != nil {
		return 0, fmt.Errorf("acquire: %w", *e)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(n.Load()) / elapsed.Seconds(), nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// runPgbench runs script over cfg.acquireClients connections for
// cfg.acquireTime and returns pgbench's transactions per second.
func runPgbench(ctx context.Context, cfg config, bin, schema, script string) (float64, error) {
	secs := max(1, int(cfg.acquireTime.Round(time.Second)/time.Second))
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared",
		"-c", strconv.Itoa(cfg.acquireClients), "-j", strconv.Itoa(min(cfg.acquireClients, 2)),
		"-T", strconv.Itoa(secs), "-f", script,
		"-D", "owner_node=pgbench", "-D", "lease_ms=30000", "-D", "work_type=bench",
		// The bound Store.Acquire sets (claims.TxBound of its context's
		// default lease): an unset pgbench variable is NULL, which would
		// skip the statement's set_config and flatter pgbench.
		"-D", "bound_ms="+strconv.FormatInt(claims.TxBoundFrom(context.Background()).Milliseconds(), 10),
		cfg.url)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench output: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
