package sqlite_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/runner"
)

// BenchmarkEpisodesAgainstPostgres runs the same work on SQLite and on
// Postgres in one run, alternating: b.N distinct events fired by 8
// producers on each of the nodes (every node fires every event; one wins
// each), a one-step strategy, until all are done. nodes=3 gives each node
// its own pool of the one file, as three processes on one host would have.
// It reports each dialect's episodes/s and SQLite's as a ratio of
// Postgres's.
func BenchmarkEpisodesAgainstPostgres(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			lite := sqlitetest.DB(b)
			pool := pgtest.Schema(b)
			stores := map[string]func(i int) runner.Store{
				"sqlite": func(int) runner.Store { return sqlite.New(sqlitetest.Another(b, lite)) },
				"postgres": func(int) runner.Store {
					return postgres.New(pgtest.Another(b, pool, pgtest.Options{MaxConns: 16}))
				},
			}
			rate := map[string]float64{}
			b.ResetTimer()
			for round, dialect := range []string{"sqlite", "postgres"} {
				rate[dialect] = episodesPerSecond(b, stores[dialect], nodes, b.N, round)
			}
			b.StopTimer()
			b.ReportMetric(rate["sqlite"], "sqlite-episodes/s")
			b.ReportMetric(rate["postgres"], "postgres-episodes/s")
			b.ReportMetric(rate["sqlite"]/rate["postgres"], "sqlite/postgres")
		})
	}
}

// episodesPerSecond starts nodes nodes on newStore, fires n events on each
// and waits for n completions; round keeps the identities apart.
func episodesPerSecond(b *testing.B, newStore func(i int) runner.Store, nodes, n, round int) float64 {
	b.Helper()
	sig := nodetest.NewSignals()
	actor := runner.Actor{ID: "monitor", MaxConcurrent: 32, Expectations: []runner.Expectation{{
		ID: "check", Trigger: runner.Event{Name: "resource.updated"},
		Strategy: nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{Done: true}, nil
		}},
	}}}
	var cluster []*runner.Node
	for i := range nodes {
		node, err := runner.NewNode(runner.Config{
			Store: newStore(i), Identity: fmt.Sprintf("bench-%d-%d", round, i), NoJitter: true,
			Poll:     runner.PollConfig{Interval: 20 * time.Millisecond},
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			Observer: sig,
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := node.Register(actor); err != nil {
			b.Fatal(err)
		}
		if err := node.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = node.Stop(context.Background()) }()
		cluster = append(cluster, node)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, node := range cluster {
		for p := range 8 {
			wg.Go(func() {
				for i := p; i < n; i += 8 {
					if _, err := node.Fire(context.Background(), "monitor", "resource.updated", fmt.Sprint(round, "-", i), runner.FireOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for range n {
		select {
		case <-sig.Ended():
		case <-deadline.C:
			b.Fatalf("%d episodes did not end within a minute", n)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}
