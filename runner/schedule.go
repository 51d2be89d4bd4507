package runner

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/dedupe"
)

// schedule fires e's schedule until ctx is done. Every node runs the same
// loop; the planned tick (not the moment a timer fired) names the window, so
// all nodes agree on the dedupe key even with skewed clocks and late timers.
func (n *Node) schedule(ctx context.Context, as *actorState, e *Expectation, s Schedule) {
	next := func(now time.Time) time.Time {
		return dedupe.IntervalWindow(now, s.Every).Add(s.Every)
	}
	if s.Cron != "" {
		spec, err := cron.ParseStandard(s.Cron) // validated at Register
		if err != nil {
			n.log.ErrorContext(ctx, "leasehold: bad cron", slog.String("cron", s.Cron), slog.Any("error", err))
			return
		}
		next = func(now time.Time) time.Time { return spec.Next(now.UTC()) }
	}
	for {
		tick := next(time.Now())
		t := time.NewTimer(time.Until(tick))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if _, err := n.Tick(ctx, as.actor.ID, e.ID, tick); err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrDisabled) && ctx.Err() == nil {
			n.log.ErrorContext(ctx, "leasehold: scheduled trigger failed",
				slog.String("actor", as.actor.ID), slog.String("expectation", e.ID), slog.Time("tick", tick), slog.Any("error", err))
		}
	}
}
