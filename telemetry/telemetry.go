// Package telemetry carries leasehold's events to whatever observes them: a
// slog logger, a metrics bridge, or a test recorder. The core packages emit
// events through the one small Observer interface and never import a logging
// or metrics library themselves.
package telemetry

import (
	"context"
	"sync"
	"time"
)

// Event is one thing that happened. Name is dotted, component first
// ("claims.acquired"); the other fields are filled where they apply.
//
// Episode events (episode.*, trigger_request.dispatched) carry the episode
// they concern: Actor, Expectation, EpisodeID, Env and Stack, and the
// Attempt; a failed, canceled or retried one its ErrorClass too.
type Event struct {
	Name        string
	Actor       string         // actor of the episode concerned
	Expectation string         // expectation of the episode concerned
	EpisodeID   int64          // the episode concerned, 0 when none (yet)
	Env         string         // the episode's env ("" is the unset env)
	Stack       string         // the episode's stack slug
	Key         string         // dedupe key of the claim or episode
	Owner       string         // node identity acting
	Fence       int64          // fence of the grant concerned, 0 when none
	Attempt     int32          // attempt of the grant concerned, 0 when none
	ErrorClass  string         // error class of a failure (error, panic, budget_exceeded, canceled, ...)
	Duration    time.Duration  // time the operation took, 0 when not timed
	Count       int            // number of items concerned (batch operations)
	Counts      map[string]int // named counts, for summaries such as recovery.sweep
	Err         error          // the failure, for *_failed and lease_lost events
}

// Observer receives events. Implementations must be safe for concurrent use
// and must not block: events are emitted on coordination paths.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Nop discards every event.
type Nop struct{}

// Observe implements Observer.
func (Nop) Observe(context.Context, Event) {}

// Recorder keeps every event in memory, for tests and examples.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Observe implements Observer.
func (r *Recorder) Observe(_ context.Context, e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Count returns how many recorded events have the given name.
func (r *Recorder) Count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Name == name {
			n++
		}
	}
	return n
}
