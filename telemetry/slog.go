package telemetry

import (
	"context"
	"log/slog"
	"strings"
)

// Slog is an Observer that writes each event as one structured log record:
// losses and failures at Warn, routine contention (busy, duplicate) at
// Debug, everything else at Info.
type Slog struct{ Logger *slog.Logger }

// NewSlog returns an Observer logging to logger (slog.Default() when nil).
func NewSlog(logger *slog.Logger) Slog {
	if logger == nil {
		logger = slog.Default()
	}
	return Slog{Logger: logger}
}

// Observe implements Observer.
func (s Slog) Observe(ctx context.Context, e Event) {
	level := levelOf(e.Name)
	if !s.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	add := func(ok bool, a slog.Attr) {
		if ok {
			attrs = append(attrs, a)
		}
	}
	add(e.Key != "", slog.String("key", e.Key))
	add(e.Owner != "", slog.String("owner", e.Owner))
	add(e.Fence != 0, slog.Int64("fence", e.Fence))
	add(e.Attempt != 0, slog.Int("attempt", int(e.Attempt)))
	add(e.Duration != 0, slog.Duration("duration", e.Duration))
	add(e.Count != 0, slog.Int("count", e.Count))
	for k, v := range e.Counts {
		attrs = append(attrs, slog.Int(k, v))
	}
	add(e.Err != nil, slog.Any("error", e.Err))
	s.Logger.LogAttrs(ctx, level, "leasehold: "+e.Name, attrs...)
}

func levelOf(name string) slog.Level {
	switch {
	case strings.HasSuffix(name, ".lease_lost"), strings.HasSuffix(name, ".renew_failed"), strings.HasSuffix(name, ".failed"):
		return slog.LevelWarn
	case strings.HasSuffix(name, ".busy"), strings.HasSuffix(name, ".duplicate"):
		return slog.LevelDebug
	default:
		return slog.LevelInfo
	}
}
