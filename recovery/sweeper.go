package recovery

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	// InitialDelay before the first sweep, so a cluster that is restarting
	// (a deploy) settles and live nodes renew their leases first. Default 2m.
	InitialDelay time.Duration
	// Interval between sweeps. Default 1m.
	Interval time.Duration
	// Options for every sweep (DryRun is ignored).
	Options Options
	// AfterSweep, when set, runs after each sweep this Sweeper runs,
	// whether the sweep succeeded or not (not on the intervals it skips
	// because the node runs nothing), before the next interval starts:
	// the place to reconcile what the sweep ended, e.g.
	//
	//	AfterSweep: func(ctx context.Context) { _, _ = engine.Reconcile(ctx, workflows.ReconcileOptions{}) }
	//
	// It runs on the Sweeper's goroutine with Run's context, so a slow
	// hook delays the next sweep. Default none.
	AfterSweep func(ctx context.Context)
}

// Sweeper runs Sweep periodically on one node. Every node runs one; the
// claim statement makes each orphan recovered exactly once cluster-wide.
type Sweeper struct {
	r   *Recoverer
	cfg SweeperConfig
}

// NewSweeper validates cfg and returns a Sweeper.
func NewSweeper(r *Recoverer, cfg SweeperConfig) (*Sweeper, error) {
	if cfg.InitialDelay == 0 {
		cfg.InitialDelay = 2 * time.Minute
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Minute
	}
	if r == nil || cfg.InitialDelay < 0 || cfg.Interval <= 0 {
		return nil, fmt.Errorf("%w: recovery.NewSweeper: a recoverer, a non-negative initial delay and a positive interval are required", ErrInvalid)
	}
	cfg.Options.DryRun = false
	return &Sweeper{r: r, cfg: cfg}, nil
}

// Run sweeps until ctx is done and returns ctx's error. A failed sweep is
// logged and retried at the next interval.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTimer(s.cfg.InitialDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if !executes(s.r.node) {
			// A trigger_only or disabled node runs nothing, so it recovers
			// nothing either; full nodes of its stack and env do.
			t.Reset(s.cfg.Interval)
			continue
		}
		began := time.Now()
		rep, err := s.r.Sweep(ctx, s.cfg.Options)
		if err != nil && ctx.Err() == nil {
			s.r.log.ErrorContext(ctx, "leasehold: recovery sweep failed", slog.Any("error", err))
		}
		if took := time.Since(began); took > s.cfg.Interval && ctx.Err() == nil {
			// Orphans wait for the sweep: say so, with what it did.
			s.r.log.WarnContext(ctx, "leasehold: recovery sweep took longer than its interval",
				slog.Duration("took", took), slog.Duration("interval", s.cfg.Interval), slog.Int("found", rep.Found),
				slog.Int("claimed", rep.Claimed), slog.Int("restarted", rep.Restarted), slog.Int("skipped", rep.Skipped),
				slog.Int("locked", rep.Locked))
		}
		if s.cfg.AfterSweep != nil && ctx.Err() == nil {
			s.cfg.AfterSweep(ctx)
		}
		t.Reset(s.cfg.Interval)
	}
}

// executes reports whether node runs episodes locally: a *runner.Node does
// in mode full. A Node without the Executes method always does.
func executes(node Node) bool {
	if x, ok := node.(interface{ Executes() bool }); ok {
		return x.Executes()
	}
	return true
}
