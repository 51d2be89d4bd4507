package handover_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// Worker-process settings, passed through the environment.
const (
	envWorker   = "LEASEHOLD_HANDOVER_WORKER" // set: this process is the leaving node
	envURL      = "LEASEHOLD_HANDOVER_URL"
	envEpisodes = "LEASEHOLD_HANDOVER_EPISODES"
	envLease    = "LEASEHOLD_HANDOVER_LEASE_MS"
)

const (
	lease         = 3 * time.Second
	sweepInterval = 250 * time.Millisecond
	episodes      = 20
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(worker())
	}
	os.Exit(m.Run())
}

// slow runs until its node leaves on the first attempt and finishes at once
// when restarted elsewhere.
func slowActor(started chan<- int64) runner.Actor {
	return runner.Actor{ID: "slow", MaxConcurrent: episodes, Expectations: []runner.Expectation{{
		ID: "job", Trigger: runner.Manual{}, Recovery: runner.RecoveryRestart, MaxAttempts: 100,
		Strategy: nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			if r.Attempt > 1 {
				return runner.StepResult{Done: true}, nil
			}
			if started != nil {
				started <- r.EpisodeID()
			}
			<-ctx.Done()
			return runner.StepResult{}, ctx.Err()
		}},
	}}}
}

// worker is the leaving node: it starts the episodes, says "ready" on
// stdout once all run, then waits for SIGTERM (drain with no grace) or
// SIGKILL.
func worker() int {
	ctx := context.Background()
	n, _ := strconv.Atoi(os.Getenv(envEpisodes))
	ms, _ := strconv.Atoi(os.Getenv(envLease))
	pool, err := pgxpool.New(ctx, os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	started := make(chan int64, n)
	node, err := runner.NewNode(runner.Config{
		Store: postgres.New(pool), Identity: fmt.Sprintf("leaving-%d", os.Getpid()), NoJitter: true,
		Lease: time.Duration(ms) * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Poll: runner.PollConfig{Disabled: true},
	})
	if err == nil {
		err = node.Register(slowActor(started))
	}
	if err == nil {
		err = node.Start(ctx)
	}
	for i := 0; err == nil && i < n; i++ {
		_, err = node.RunManual(ctx, "slow", "job", map[string]int{"i": i})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range n {
		<-started
	}
	fmt.Println("ready")
	<-term
	now, cancel := context.WithCancel(ctx)
	cancel() // no grace: hand everything over at once
	sum, err := node.Drain(now)
	fmt.Fprintf(os.Stderr, "drained: %+v %v\n", sum, err)
	return 0
}

// BenchmarkHandover reports, per leaving node, the time from the signal to
// the moment another node (in this process, sweeping every 250 ms) has
// restarted all of its 20 running episodes, with a 3 s lease: after SIGTERM
// (Drain releases the claims in one statement) and after SIGKILL (the
// leases must expire). The ratio of the two is the point.
func BenchmarkHandover(b *testing.B) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		b.Run(map[syscall.Signal]string{syscall.SIGTERM: "drain", syscall.SIGKILL: "sigkill"}[sig], func(b *testing.B) {
			restarted := make(chan struct{}, 1000)
			c := nodetest.Start(b, 1, func(_ int, cfg *runner.Config) {
				cfg.Lease = lease
				cfg.Observer = onStart{cfg.Observer, restarted}
			}, slowActor(nil))
			rec, err := recovery.New(postgres.New(c.Pool), c.Nodes[0], slog.New(slog.DiscardHandler), nil)
			require.NoError(b, err)
			sweeper, err := recovery.NewSweeper(rec, recovery.SweeperConfig{InitialDelay: sweepInterval, Interval: sweepInterval})
			require.NoError(b, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = sweeper.Run(ctx); close(done) }()
			b.Cleanup(func() { cancel(); <-done })
			url := schemaURL(b, c.Pool)

			var total time.Duration
			for b.Loop() {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), envWorker+"=1", envURL+"="+url,
					envEpisodes+"="+strconv.Itoa(episodes), envLease+"="+strconv.Itoa(int(lease.Milliseconds())))
				cmd.Stderr = os.Stderr
				out, err := cmd.StdoutPipe()
				require.NoError(b, err)
				require.NoError(b, cmd.Start())
				line, err := bufio.NewReader(out).ReadString('\n')
				require.NoError(b, err, "worker did not get ready")
				require.Equal(b, "ready", strings.TrimSpace(line))
				go func() { _, _ = io.Copy(io.Discard, out) }()

				t0 := time.Now()
				require.NoError(b, cmd.Process.Signal(sig))
				for range episodes {
					select {
					case <-restarted:
					case <-time.After(time.Minute):
						b.Fatal("episodes were not taken over within a minute")
					}
				}
				total += time.Since(t0)
				_ = cmd.Wait()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/handover")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// onStart signals every episode this node starts.
type onStart struct {
	telemetry.Observer
	ch chan<- struct{}
}

func (o onStart) Observe(ctx context.Context, e telemetry.Event) {
	o.Observer.Observe(ctx, e)
	if e.Name == runner.EventStarted {
		o.ch <- struct{}{}
	}
}

func schemaURL(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
	require.NotEmpty(t, schema)
	sep := "?"
	if strings.Contains(pgtest.URL(), "?") {
		sep = "&"
	}
	return pgtest.URL() + sep + "search_path=" + schema
}
