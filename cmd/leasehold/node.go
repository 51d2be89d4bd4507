package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// demoNodeCommand is the hidden subcommand the demo starts its nodes with.
const demoNodeCommand = "demo-node"

// The demo's actors, and the work every node fires.
const (
	reporterActor = "reporter"
	reporterExp   = "every_2s"
	reporterSteps = 3
	billingActor  = "billing"
	billingExp    = "charge"
	billingEvent  = "invoice.created"
	billingSteps  = 4
	demoEvents    = 20
)

// progressLine is what a node writes to stdout, one JSON object a line, for
// the parent to count; everything else a node says goes to stderr.
type progressLine struct {
	Node    string `json:"node"`
	Kind    string `json:"kind"` // ready, fire, trigger
	N       int    `json:"n,omitempty"`
	Key     string `json:"key,omitempty"`
	Created bool   `json:"created,omitempty"`
	Err     string `json:"err,omitempty"`
}

// progressWriter writes progress lines; it is also the node's telemetry
// observer, reporting every trigger the node saw (created or duplicate).
type progressWriter struct {
	node string
	mu   sync.Mutex
	enc  *json.Encoder
}

func newProgressWriter(w io.Writer, node string) *progressWriter {
	return &progressWriter{node: node, enc: json.NewEncoder(w)}
}

func (p *progressWriter) write(l progressLine) {
	l.Node = p.node
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.enc.Encode(l) // the parent may be gone; nothing to do about it
}

// Observe implements telemetry.Observer.
func (p *progressWriter) Observe(_ context.Context, e telemetry.Event) {
	switch e.Name {
	case runner.EventCreated, runner.EventDuplicate:
		p.write(progressLine{Kind: "trigger", Key: e.Key, Created: e.Name == runner.EventCreated})
	}
}

// stepper is the demo strategy: a fixed number of steps that each sleep for
// pause, journaling the step number and the attempt. It is idempotent, so
// its expectations restart on recovery.
type stepper struct {
	steps int
	pause time.Duration
}

// Init implements runner.Strategy.
func (s stepper) Init(_ context.Context, run *runner.Run) error {
	run.State = 0
	return nil
}

// Step implements runner.Strategy.
func (s stepper) Step(ctx context.Context, run *runner.Run) (runner.StepResult, error) {
	t := time.NewTimer(s.pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return runner.StepResult{}, context.Cause(ctx)
	case <-t.C:
	}
	done, _ := run.State.(int)
	done++
	run.State = done
	return runner.StepResult{
		Data:   map[string]any{"step": done, "of": s.steps, "attempt": run.Attempt},
		Done:   done == s.steps,
		Result: map[string]any{"steps": done},
	}, nil
}

// demoActors are the actors every demo node registers.
func demoActors() []runner.Actor {
	return []runner.Actor{
		{ID: reporterActor, Expectations: []runner.Expectation{{
			ID:       reporterExp,
			Trigger:  runner.Schedule{Every: 2 * time.Second},
			Strategy: stepper{steps: reporterSteps, pause: 300 * time.Millisecond},
			Recovery: runner.RecoveryRestart,
		}}},
		{ID: billingActor, MaxConcurrent: 4, Expectations: []runner.Expectation{{
			ID:       billingExp,
			Trigger:  runner.Event{Name: billingEvent},
			Strategy: stepper{steps: billingSteps, pause: 400 * time.Millisecond},
			Recovery: runner.RecoveryRestart,
		}}},
	}
}

// runDemoNode is one node of the demo: it runs the demo actors and a
// recovery sweeper, fires the demo events itself, and stops gracefully on
// SIGTERM, SIGINT or when its stdin closes (the parent is gone).
func runDemoNode(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(demoNodeCommand, flag.ContinueOnError)
	schema := fs.String("schema", "", "migrated schema to run in (required with a Postgres URL)")
	id := fs.String("id", "", "node identity (required)")
	url := fs.String("url", "", "the demo's database: a sqlite: URL, or a Postgres URL with -schema (required)")
	every := fs.Duration("every", 250*time.Millisecond, "interval between fired events")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold "+demoNodeCommand+" -id ID -url URL [-schema S] [-every D]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "One node of 'leasehold demo', which starts it; not for use on its own.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, demoNodeCommand, args, stdout, stderr)
	if !ok {
		return code
	}
	err := noArgs(pos)
	if err == nil && (*id == "" || *url == "" || (*schema == "" && !isSQLiteURL(*url))) {
		err = usagef("-id and -url are required, and -schema with a Postgres URL")
	}
	if err != nil {
		return exitCode(stderr, demoNodeCommand, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With(slog.String("node", *id))
	if err := demoNode(ctx, *url, *schema, *id, *every, log); err != nil {
		log.Error("demo node failed", slog.Any("error", err))
		return 1
	}
	return 0
}

func demoNode(ctx context.Context, url, schema, id string, every time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the parent holds our stdin open; EOF means it is gone
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	store, closeStore, err := openDemoStore(ctx, url, schema)
	if err != nil {
		return err
	}
	defer closeStore()
	out := newProgressWriter(os.Stdout, id)

	node, err := runner.NewNode(runner.Config{Store: store, Identity: id, Lease: demoLease, Logger: log, Observer: out,
		Poll: runner.PollConfig{Interval: demoPollEvery}})
	if err != nil {
		return fmt.Errorf("new node: %w", err)
	}
	for _, a := range demoActors() {
		if err := node.Register(a); err != nil {
			return fmt.Errorf("register %s: %w", a.ID, err)
		}
	}
	rec, err := recovery.New(store, node, log, nil)
	if err != nil {
		return fmt.Errorf("recoverer: %w", err)
	}
	sweeper, err := recovery.NewSweeper(rec, recovery.SweeperConfig{
		InitialDelay: demoSweepEvery, Interval: demoSweepEvery,
		Options: recovery.Options{StaleAfter: demoStaleAfter},
	})
	if err != nil {
		return fmt.Errorf("sweeper: %w", err)
	}
	if err := node.Start(ctx); err != nil {
		return fmt.Errorf("start node: %w", err)
	}
	var bg sync.WaitGroup
	bg.Go(func() { _ = sweeper.Run(ctx) })
	out.write(progressLine{Kind: "ready"})

	fireEvents(ctx, node, out, every, log)
	<-ctx.Done()

	bg.Wait() // no sweep resumes work on a stopping node
	stopCtx, cancelStop := context.WithTimeout(context.Background(), demoNodeStop)
	defer cancelStop()
	if err := node.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop node: %w", err)
	}
	return nil
}

// fireEvents fires the demo's events, one every interval, until all are
// fired or ctx is done. Every node fires every event: the database makes one
// episode of each.
func fireEvents(ctx context.Context, node *runner.Node, out *progressWriter, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 1; i <= demoEvents; i++ {
		_, err := node.Fire(ctx, billingActor, billingEvent, map[string]int{"invoice": i}, runner.FireOptions{})
		if ctx.Err() != nil {
			return
		}
		l := progressLine{Kind: "fire", N: i}
		if err != nil {
			l.Err = err.Error()
			log.Warn("fire failed", slog.Int("invoice", i), slog.Any("error", err))
		}
		out.write(l)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// isScheduleKey reports whether a dedupe key names a schedule window.
func isScheduleKey(key string) bool { return strings.HasPrefix(key, "schedule:") }
