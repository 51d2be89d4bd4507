package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// ErrInvalid: an actor, expectation or configuration was rejected.
var ErrInvalid = errors.New("runner: invalid")

// Actor is a named unit of behaviour registered on a node. Every node of a
// cluster registers the same actors; the database decides which node runs
// each episode.
type Actor struct {
	// ID names the actor in episodes and dedupe keys. Required.
	ID string
	// MaxConcurrent bounds the episodes of this actor running at once on one
	// node; the rest wait, status queued, in FIFO order. Default 1.
	MaxConcurrent int
	// Expectations are the jobs the actor can do. At least one.
	Expectations []Expectation
}

// Expectation is one job an actor can do.
type Expectation struct {
	// ID names the expectation in episodes and dedupe keys. Required.
	ID string
	// Trigger says what creates its episodes. Required.
	Trigger Trigger
	// Strategy is the code that runs each episode. Required.
	Strategy Strategy
	// Recovery says what recovery does with an orphaned episode. Default
	// RecoveryFail: only idempotent strategies should restart.
	Recovery RecoveryPolicy
	// Budget bounds each run. Zero fields are unlimited.
	Budget Budget
	// MaxAttempts bounds how often recovery restarts an episode. Default 3.
	MaxAttempts int32
}

// Trigger is one of Schedule, Event or Manual.
type Trigger interface{ triggerType() episodes.TriggerType }

// Schedule fires on a cron expression (standard five fields, UTC) or at a
// fixed interval; exactly one of Cron and Every is set. Interval windows are
// aligned to the interval itself from the Unix epoch.
type Schedule struct {
	Cron  string
	Every time.Duration
}

// Event fires when the host application calls Node.Fire with this name.
type Event struct{ Name string }

// Manual fires only when an operator calls Node.RunManual.
type Manual struct{}

func (Schedule) triggerType() episodes.TriggerType { return episodes.TriggerSchedule }
func (Event) triggerType() episodes.TriggerType    { return episodes.TriggerEvent }
func (Manual) triggerType() episodes.TriggerType   { return episodes.TriggerManual }

// RecoveryPolicy says what recovery does with an orphaned episode.
type RecoveryPolicy string

const (
	RecoveryFail    RecoveryPolicy = "fail"
	RecoveryRestart RecoveryPolicy = "restart"
)

// Budget bounds one run of an episode.
type Budget struct {
	// MaxWall is the wall time a run may take, measured locally from its
	// start; exceeding it fails the episode with error class
	// budget_exceeded.
	MaxWall time.Duration
	// MaxSteps is the number of steps a run may journal without finishing.
	MaxSteps int
}

// Strategy is the user's code for one expectation: Init once per run, then
// Step until a step reports Done. One Strategy value serves every episode of
// its expectation, concurrently: keep per-run state in Run.State.
//
// ctx is cancelled when the run must stop: its lease was lost
// (claims.ErrLeaseLost), its budget ran out, it was cancelled, or the node is
// stopping. A strategy returns promptly when ctx is done; whatever it
// returns then, nothing more is written on its behalf unless the lease is
// still held.
type Strategy interface {
	Init(ctx context.Context, run *Run) error
	Step(ctx context.Context, run *Run) (StepResult, error)
}

// Run is one run of an episode, as a strategy sees it.
type Run struct {
	Episode episodes.Episode
	// Attempt of the work claim this run holds: 1 on the first run, higher
	// after a steal or a restart.
	Attempt int32
	// StepNo is the journal number the next step will get.
	StepNo int32
	// State belongs to the strategy.
	State any

	token claims.Token
}

// EpisodeID is the id of the episode this run executes.
func (r *Run) EpisodeID() int64 { return r.Episode.ID }

// Token is the work claim this run holds. Writes made on behalf of the run
// outside the runner (findings, an application's own fenced tables) carry it
// and are conditioned on it.
func (r *Run) Token() claims.Token { return r.token }

// Payload decodes the episode's payload into v.
func (r *Run) Payload(v any) error { return json.Unmarshal(r.Episode.Payload, v) }

// StepResult is what one step produced.
type StepResult struct {
	// Data is journaled with the step, as JSON. nil journals null.
	Data any
	// Done ends the episode successfully after this step.
	Done bool
	// Result is stored on the episode when Done, as JSON.
	Result any
}

// validID checks an actor or expectation id (episodes.CheckID).
func validID(what, id string) error {
	if err := episodes.CheckID(what, id); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

func (a Actor) validate() error {
	if err := validID("actor", a.ID); err != nil {
		return err
	}
	if a.MaxConcurrent < 0 {
		return fmt.Errorf("%w: actor %q: max concurrent %d is negative", ErrInvalid, a.ID, a.MaxConcurrent)
	}
	if len(a.Expectations) == 0 {
		return fmt.Errorf("%w: actor %q has no expectations", ErrInvalid, a.ID)
	}
	seen := map[string]bool{}
	for _, e := range a.Expectations {
		if err := e.validate(); err != nil {
			return fmt.Errorf("actor %q: %w", a.ID, err)
		}
		if seen[e.ID] {
			return fmt.Errorf("%w: actor %q: expectation %q registered twice", ErrInvalid, a.ID, e.ID)
		}
		seen[e.ID] = true
	}
	return nil
}

func (e Expectation) validate() error {
	if err := validID("expectation", e.ID); err != nil {
		return err
	}
	switch {
	case e.Strategy == nil:
		return fmt.Errorf("%w: expectation %q has no strategy", ErrInvalid, e.ID)
	case e.Budget.MaxWall < 0 || e.Budget.MaxSteps < 0:
		return fmt.Errorf("%w: expectation %q: negative budget", ErrInvalid, e.ID)
	case e.MaxAttempts < 0:
		return fmt.Errorf("%w: expectation %q: negative max attempts", ErrInvalid, e.ID)
	}
	switch e.Recovery {
	case "", RecoveryFail, RecoveryRestart:
	default:
		return fmt.Errorf("%w: expectation %q: unknown recovery policy %q", ErrInvalid, e.ID, e.Recovery)
	}
	switch t := e.Trigger.(type) {
	case Schedule:
		if (t.Cron == "") == (t.Every == 0) {
			return fmt.Errorf("%w: expectation %q: a schedule needs exactly one of Cron and Every", ErrInvalid, e.ID)
		}
		if t.Every < 0 || (t.Every > 0 && t.Every%time.Second != 0) {
			return fmt.Errorf("%w: expectation %q: interval %v must be a positive whole number of seconds", ErrInvalid, e.ID, t.Every)
		}
		if t.Cron != "" {
			if _, err := cron.ParseStandard(t.Cron); err != nil {
				return fmt.Errorf("%w: expectation %q: cron %q: %v", ErrInvalid, e.ID, t.Cron, err)
			}
		}
	case Event:
		if t.Name == "" {
			return fmt.Errorf("%w: expectation %q: event trigger has no name", ErrInvalid, e.ID)
		}
	case Manual:
	case nil:
		return fmt.Errorf("%w: expectation %q has no trigger", ErrInvalid, e.ID)
	default:
		return fmt.Errorf("%w: expectation %q: unknown trigger %T", ErrInvalid, e.ID, t)
	}
	return nil
}
