package runner_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// counting counts the statements a Store sends.
type counting struct {
	db.DBTX
	n *atomic.Int64
}

func (c counting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n.Add(1)
	return c.DBTX.Exec(ctx, sql, args...)
}

func (c counting) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.DBTX.Query(ctx, sql, args...)
}

func (c counting) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.DBTX.QueryRow(ctx, sql, args...)
}

// BenchmarkEndToEnd: b.N distinct events, each fired on every node, 1-step
// no-op strategy (Init, one journaled step, done), until all are done. Reports episodes/s and the statements
// the whole cluster sent per episode.
func BenchmarkEndToEnd(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			pool := pgtest.Schema(b)
			var statements atomic.Int64
			done := make(chan struct{}, 1<<16)
			noop := funcStrategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
				return runner.StepResult{Done: true}, nil
			}}
			cluster := benchCluster(b, pool, nodes, eventActor(noop, 32), &statements, false,
				func(_ int, o doneObserver) telemetry.Observer { return o }, done)
			ctx := context.Background()
			statements.Store(0)
			b.ResetTimer()
			// Each node fires every event from producers running side by side,
			// as a host receiving them concurrently would.
			const producers = 8
			var wg sync.WaitGroup
			for _, node := range cluster {
				for p := range producers {
					wg.Go(func() {
						for i := p; i < b.N; i += producers {
							if _, err := node.Fire(ctx, "monitor", "resource.updated", i, runner.FireOptions{}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			for range b.N {
				<-done
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
			b.ReportMetric(float64(statements.Load())/float64(b.N), "stmts/episode")
		})
	}
}

// benchCluster starts n nodes bench-0 … on pool, each counting its
// statements into statements and registering actor; observe wraps each
// node's observer (done signals the end of an episode).
func benchCluster(b *testing.B, pool *pgxpool.Pool, n int, actor runner.Actor, statements *atomic.Int64, waker bool,
	observe func(i int, o doneObserver) telemetry.Observer, done chan struct{}) []*runner.Node {
	b.Helper()
	var cluster []*runner.Node
	for i := range n {
		conn := pgtest.Another(b, pool, pgtest.Options{MaxConns: 16})
		cfg := runner.Config{
			Store:    postgres.New(counting{DBTX: conn, n: statements}),
			Identity: fmt.Sprintf("bench-%d", i), NoJitter: true,
			Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Observer: observe(i, doneObserver{newSignals(), done}),
		}
		if waker {
			cfg.TriggerWaker = postgres.NewNotifier(conn)
		}
		node, err := runner.NewNode(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := node.Register(actor); err != nil {
			b.Fatal(err)
		}
		if err := node.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = node.Stop(context.Background()) })
		cluster = append(cluster, node)
	}
	return cluster
}

type doneObserver struct {
	*signals
	done chan struct{}
}

var _ telemetry.Observer = doneObserver{}

func (d doneObserver) Observe(_ context.Context, e telemetry.Event) {
	if e.Name == runner.EventCompleted {
		d.done <- struct{}{}
	}
}

// BenchmarkOverflow: one submitter fires b.N distinct events (8 producers)
// to an actor with 4 slots per node whose strategy works 5 ms; with
// workers=3 the episodes that find no free slot on the submitter are
// created available and flow to the other nodes. Reports episodes/s, each
// node's share of the runs, and the statements the cluster sent per
// episode (the local-first path costs CreateEpisode and FinishEpisode; the
// overflow path CreateDeferredEpisode, a share of ClaimTriggerRequests,
// DispatchTriggerRequest, StartEpisode and FinishEpisode; see
// BenchmarkStatementsPerEpisode). Compare workers=1 and workers=3 from one
// run.
func BenchmarkOverflow(b *testing.B) {
	for _, workers := range []int{1, 3} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			pool := pgtest.Schema(b)
			var statements atomic.Int64
			done := make(chan struct{}, 1<<16)
			work := funcStrategy{StepFunc: func(ctx context.Context, _ *runner.Run) (runner.StepResult, error) {
				t := time.NewTimer(5 * time.Millisecond)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return runner.StepResult{}, ctx.Err()
				case <-t.C:
				}
				return runner.StepResult{Done: true}, nil
			}}
			started := make([]atomic.Int64, workers)
			cluster := benchCluster(b, pool, workers, eventActor(work, 4), &statements, true,
				func(i int, o doneObserver) telemetry.Observer { return startCounter{o, &started[i]} }, done)
			ctx := context.Background()
			statements.Store(0)
			b.ResetTimer()
			const producers = 8
			var wg sync.WaitGroup
			for p := range producers {
				wg.Go(func() {
					for i := p; i < b.N; i += producers {
						if _, err := cluster[0].Fire(ctx, "monitor", "resource.updated", i, runner.FireOptions{}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for range b.N {
				<-done
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
			b.ReportMetric(float64(statements.Load())/float64(b.N), "stmts/episode")
			for i := range started {
				b.ReportMetric(100*float64(started[i].Load())/float64(b.N), fmt.Sprintf("%%node%d", i))
			}
		})
	}
}

// startCounter counts the runs a node started, after its doneObserver.
type startCounter struct {
	doneObserver
	n *atomic.Int64
}

func (s startCounter) Observe(ctx context.Context, e telemetry.Event) {
	s.doneObserver.Observe(ctx, e)
	if e.Name == runner.EventStarted {
		s.n.Add(1)
	}
}

// BenchmarkStatementsPerEpisode: what one episode costs in statements sent,
// cluster-wide, on each path (b.N distinct events, 8 producers, a strategy
// that is done at its first step, so no AppendStep):
//
//   - path=local: the triggering node has a free slot (32): CreateEpisode
//     creates the episode running under its grant, FinishEpisode ends it:
//     the goal is 2 statements, both commits;
//   - path=available: a trigger_only node creates the episode available
//     (CreateDeferredEpisode) and a full node takes it: its share of a
//     batched ClaimTriggerRequests, DispatchTriggerRequest, StartEpisode,
//     FinishEpisode; the overflow and retry paths cost the same.
//
// Background statements (lease renewals, membership, cancel requests) are
// counted too; with these short runs they add well under 0.1 a episode.
func BenchmarkStatementsPerEpisode(b *testing.B) {
	for _, path := range []string{"local", "available"} {
		b.Run("path="+path, func(b *testing.B) {
			pool := pgtest.Schema(b)
			var statements atomic.Int64
			done := make(chan struct{}, 1<<16)
			noop := funcStrategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
				return runner.StepResult{Done: true}, nil
			}}
			nodes := 1
			if path == "available" {
				nodes = 2
			}
			cluster := benchCluster(b, pool, nodes, eventActor(noop, 32), &statements, true,
				func(_ int, o doneObserver) telemetry.Observer { return o }, done)
			if path == "available" {
				if err := cluster[0].SetMode(runner.ModeTriggerOnly); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			walStart := walLSN(b, pool)
			statements.Store(0)
			b.ResetTimer()
			const producers = 8
			var wg sync.WaitGroup
			for p := range producers {
				wg.Go(func() {
					for i := p; i < b.N; i += producers {
						if _, err := cluster[0].Fire(ctx, "monitor", "resource.updated", i, runner.FireOptions{}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for range b.N {
				<-done
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
			b.ReportMetric(float64(statements.Load())/float64(b.N), "stmts/episode")
			// WAL the whole server wrote meanwhile (other databases' work
			// included, so an upper bound on a quiet server).
			b.ReportMetric(float64(walSince(b, pool, walStart))/float64(b.N), "wal-bytes/episode")
		})
	}
}

// walLSN is the server's current WAL position (test SQL).
func walLSN(b *testing.B, pool *pgxpool.Pool) string {
	var lsn string
	if err := pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// walSince is the WAL written since lsn, in bytes.
func walSince(b *testing.B, pool *pgxpool.Pool, lsn string) int64 {
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, lsn).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
