package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/telemetry"
)

// Telemetry event names emitted by a Runner.
const (
	EventRan     = "maintenance.ran"     // this node held the lock and did the work; Counts and Duration
	EventSkipped = "maintenance.skipped" // another node held the lock; nothing done
	EventFailed  = "maintenance.failed"  // the run failed and rolled back; Err and Duration
)

// Counts names r's counts as they appear in EventRan and in the log.
func (r Result) Counts() map[string]int {
	values := r.values()
	m := make(map[string]int, len(countNames))
	for i, name := range countNames {
		m[name] = int(values[i])
	}
	return m
}

// countNames and values list the counts in one order, for logs.
var countNames = [...]string{
	"archived", "steps_purged", "journals_marked", "episodes_expired",
	"claims_deleted", "nodes_deleted", "waiting_raised", "waiting_cleared",
}

func (r Result) values() [len(countNames)]int64 {
	return [...]int64{
		r.Archived, r.StepsPurged, r.JournalsMarked, r.EpisodesExpired,
		r.ClaimsDeleted, r.NodesDeleted, r.WaitingRaised, r.WaitingCleared,
	}
}

// Runner runs maintenance on one node: every Interval it asks its Store for
// one run, which does the work only if no other node's run holds the lock.
// Run it on every node; there is nothing to elect.
type Runner struct {
	store    Store
	cfg      Config
	plan     Plan
	log      *slog.Logger
	observer telemetry.Observer
}

// NewRunner applies cfg's defaults, validates it and returns a Runner over
// store. logger defaults to slog.Default(), observer to discarding.
func NewRunner(store Store, cfg Config, logger *slog.Logger, observer telemetry.Observer) (*Runner, error) {
	if store == nil {
		return nil, fmt.Errorf("maintenance.NewRunner: %w: a Store is required", ErrInvalid)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("maintenance.NewRunner: %w", err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	if observer == nil {
		observer = telemetry.Nop{}
	}
	cfg = cfg.withDefaults()
	return &Runner{store: store, cfg: cfg, plan: cfg.Plan(), log: logger, observer: observer}, nil
}

// Config returns the Runner's configuration, defaults applied.
func (r *Runner) Config() Config { return r.cfg }

// Plan returns what each run asks the Store to do.
func (r *Runner) Plan() Plan { return r.plan }

// RunOnce runs maintenance once, now. Result.Ran is false when another
// node's run held the lock. A run cut short because ctx ended returns ctx's
// error without a failure event: the transaction rolled back and nothing
// was done, which is what shutting down asks for.
func (r *Runner) RunOnce(ctx context.Context) (Result, error) {
	start := time.Now()
	res, err := r.store.Maintain(ctx, r.plan)
	took := time.Since(start)
	switch {
	case err != nil && ctx.Err() != nil:
		return Result{}, fmt.Errorf("maintenance: %w", err)
	case err != nil:
		r.observer.Observe(ctx, telemetry.Event{Name: EventFailed, Err: err, Duration: took})
		r.log.WarnContext(ctx, "leasehold: maintenance failed; retrying next interval",
			slog.Any("error", err), slog.Duration("duration", took))
		return Result{}, fmt.Errorf("maintenance: %w", err)
	case !res.Ran:
		r.observer.Observe(ctx, telemetry.Event{Name: EventSkipped, Duration: took})
		r.log.DebugContext(ctx, "leasehold: maintenance skipped: another node's run holds the lock")
		return res, nil
	}
	r.observer.Observe(ctx, telemetry.Event{Name: EventRan, Counts: res.Counts(), Duration: took})
	attrs := make([]slog.Attr, 0, len(countNames)+1)
	for i, v := range res.values() {
		attrs = append(attrs, slog.Int64(countNames[i], v))
	}
	attrs = append(attrs, slog.Duration("duration", took))
	r.log.LogAttrs(ctx, slog.LevelInfo, "leasehold: maintenance ran", attrs...)
	return res, nil
}

// Run calls RunOnce every Interval until ctx is done, then returns ctx's
// error. The first run comes after a random delay of up to Interval/2, so
// nodes started together (a deploy) do not all ask at once. A failed run is
// reported (EventFailed) and retried at the next interval.
func (r *Runner) Run(ctx context.Context) error {
	t := time.NewTimer(r.initialDelay())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		_, _ = r.RunOnce(ctx) // reported by RunOnce
		t.Reset(r.cfg.Interval)
	}
}

// initialDelay is uniform in [0, Interval/2].
func (r *Runner) initialDelay() time.Duration {
	return time.Duration(rand.Int64N(int64(r.cfg.Interval/2) + 1))
}
