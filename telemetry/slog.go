package telemetry

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// Slog is an Observer that writes each event as one structured log record:
// losses and failures at Warn, routine contention (busy, duplicate) at
// Debug, everything else at Info. Its attributes come in one stable order,
// each only when set: actor, expectation, episode, env, stack, key, owner,
// fence, attempt, error_class, duration, count, the named counts (sorted by
// name), error.
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
	attrs := make([]slog.Attr, 0, 12)
	add := func(ok bool, a slog.Attr) {
		if ok {
			attrs = append(attrs, a)
		}
	}
	add(e.Actor != "", slog.String("actor", e.Actor))
	add(e.Expectation != "", slog.String("expectation", e.Expectation))
	add(e.EpisodeID != 0, slog.Int64("episode", e.EpisodeID))
	add(e.EpisodeID != 0, slog.String("env", e.Env)) // "" is an env of its own: shown with the episode
	add(e.Stack != "", slog.String("stack", e.Stack))
	add(e.Key != "", slog.String("key", e.Key))
	add(e.Owner != "", slog.String("owner", e.Owner))
	add(e.Fence != 0, slog.Int64("fence", e.Fence))
	add(e.Attempt != 0, slog.Int("attempt", int(e.Attempt)))
	add(e.ErrorClass != "", slog.String("error_class", e.ErrorClass))
	add(e.Duration != 0, slog.Duration("duration", e.Duration))
	add(e.Count != 0, slog.Int("count", e.Count))
	for _, k := range slices.Sorted(maps.Keys(e.Counts)) {
		attrs = append(attrs, slog.Int(k, e.Counts[k]))
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
