package postgres_test

import (
	"context"
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
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/sql/queries"
)

// benchClients is the number of concurrent callers in both the leasehold and
// the pgbench runs, so the two are measured under the same load.
const benchClients = 8

// BenchmarkAcquire compares our acquire (adapter + pgx + the AcquireClaim
// statement, fresh keys) with pgbench running the very same statement text
// on the same database, in the same run. The ratio of their acquires/s is
// the figure to quote; absolute numbers on a shared machine are noise. The
// two run in four turns, ABBA (leasehold, pgbench, pgbench, leasehold), a
// quarter of b.N each, so a drift over the run (the table and its index
// growing, a checkpoint, other load) weighs on both alike.
func BenchmarkAcquire(b *testing.B) {
	pool := pgtest.Schema(b, pgtest.Options{MaxConns: benchClients + 2})
	store := postgres.New(pool)
	script := filepath.Join(b.TempDir(), "acquire.sql")
	require.NoError(b, os.WriteFile(script, []byte(pgbenchAcquireScript(b)), 0o644))
	searchPath := pool.Config().ConnConfig.RuntimeParams["search_path"]

	leasehold := func(n int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		per := max(1, n/benchClients)
		for range benchClients {
			wg.Go(func() {
				ctx := context.Background()
				for range per {
					_, err := store.Acquire(ctx, claims.AcquireParams{
						Key: strconv.FormatUint(rand.Uint64(), 10), Owner: "bench", Lease: 30 * time.Second, WorkType: "bench",
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start) * time.Duration(n) / time.Duration(per*benchClients)
	}
	turn := max(benchClients, b.N/4)
	var lh, pg time.Duration // the time each took for its two turns
	b.ResetTimer()
	lh += leasehold(turn)
	pgbench := func(n int) time.Duration { // the time n transactions took at pgbench's rate
		return time.Duration(float64(n) / runPgbench(b, searchPath, script, n) * float64(time.Second))
	}
	pg += pgbench(turn)
	pg += pgbench(turn)
	lh += leasehold(turn)
	b.StopTimer()
	lhRate, pgRate := float64(2*turn)/lh.Seconds(), float64(2*turn)/pg.Seconds()
	b.ReportMetric(lhRate, "leasehold-acquires/s")
	b.ReportMetric(pgRate, "pgbench-acquires/s")
	b.ReportMetric(lhRate/pgRate, "leasehold/pgbench")
}

// BenchmarkAcquireComplete is one unit of claimed work: grant, then finish.
func BenchmarkAcquireComplete(b *testing.B) {
	pool := pgtest.Schema(b, pgtest.Options{MaxConns: benchClients + 2})
	store := postgres.New(pool)
	b.SetParallelism(max(1, benchClients/runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			c, err := store.Acquire(ctx, claims.AcquireParams{
				Key: strconv.FormatUint(rand.Uint64(), 10), Owner: "bench", Lease: 30 * time.Second,
			})
			if err == nil {
				err = store.Complete(ctx, c.Token)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "units/s")
}

// BenchmarkRenewMany renews every lease one node holds with one statement.
func BenchmarkRenewMany(b *testing.B) {
	for _, n := range []int{1, 100, 10_000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			pool := pgtest.Schema(b, pgtest.Options{MaxConns: 4})
			store := postgres.New(pool)
			ctx := context.Background()
			held := make([]claims.Held, n)
			if n > 10_000 {
				// Seeded in one statement (test SQL): as AcquireClaim grants them.
				pgtest.Exec(b, pool, `INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence)
					SELECT 'lease-' || i, 'claimed', 'bench', now() + interval '1 hour', now(), 1, 1 FROM generate_series(0, $1 - 1) AS i`, n)
				for i := range held {
					held[i] = claims.Held{Key: fmt.Sprintf("lease-%d", i), Fence: 1}
				}
			}
			for i := range held {
				if n > 10_000 {
					break
				}
				c, err := store.Acquire(ctx, claims.AcquireParams{Key: fmt.Sprintf("lease-%d", i), Owner: "bench", Lease: time.Minute})
				require.NoError(b, err)
				held[i] = claims.Held{Key: c.Key, Fence: c.Fence}
			}
			b.ResetTimer()
			for b.Loop() {
				renewed, err := store.RenewMany(ctx, "bench", held, time.Minute)
				if err != nil || len(renewed) != n {
					b.Fatalf("renewed %d of %d: %v", len(renewed), n, err)
				}
			}
			b.ReportMetric(float64(n), "leases/op")
		})
	}
}

// pgbenchAcquireScript is the AcquireClaim statement exactly as it stands in
// sql/queries/postgres/claims.sql, with each sqlc.arg(x) turned into the
// pgbench variable :x (bound as a parameter under -M prepared).
func pgbenchAcquireScript(b *testing.B) string {
	b.Helper()
	qs, err := queries.Parse(os.DirFS("../../sql/queries"), "postgres/claims.sql")
	require.NoError(b, err)
	q, ok := qs["AcquireClaim"]
	require.True(b, ok, "AcquireClaim not found in claims.sql")
	sql := regexp.MustCompile(`sqlc\.arg\((\w+)\)`).ReplaceAllString(q.Statement(), ":$1")
	sql = strings.ReplaceAll(sql, ":dedupe_key", ":k")
	// pgbench sends one statement per line unless continued; keep it whole.
	sql = strings.ReplaceAll(sql, "\n", " ")
	return "\\set k random(1, 9000000000000000000)\n" + sql + ";\n"
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// runPgbench runs total transactions of script over benchClients connections
// and returns pgbench's transactions per second.
func runPgbench(b *testing.B, searchPath, script string, total int) float64 {
	b.Helper()
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
		require.NotEmpty(b, matches, "pgbench not found: install PostgreSQL's client tools to get the baseline")
		bin = matches[len(matches)-1]
	}
	perClient := max(1, total/benchClients)
	cmd := exec.Command(bin, "-n", "-M", "prepared", "-c", strconv.Itoa(benchClients), "-j", "2",
		"-t", strconv.Itoa(perClient), "-f", script,
		"-D", "owner_node=pgbench", "-D", "lease_ms=30000", "-D", "work_type=bench",
		"-D", "bound_ms="+strconv.FormatInt(claims.TxBoundFrom(context.Background()).Milliseconds(), 10),
		pgtest.URL())
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+searchPath)
	out, err := cmd.CombinedOutput()
	require.NoError(b, err, "pgbench: %s", out)
	m := tpsLine.FindSubmatch(out)
	require.NotNil(b, m, "no tps in pgbench output: %s", out)
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(b, err)
	return tps
}
