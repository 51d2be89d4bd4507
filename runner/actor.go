package runner

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

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
	// Retry says whether a strategy error runs the episode again. The zero
	// value retries nothing: an error fails the episode at once, as
	// recovery's default fails an orphan. Panics, an exhausted budget and
	// errors marked Permanent always fail at once.
	Retry RetryPolicy
	// MaxAttempts bounds the attempts (runs) of each episode: the first
	// run is attempt 1 and each restart by recovery starts the next; a
	// recovery that would start attempt MaxAttempts+1 fails the episode
	// with error class recovery_exhausted instead (episodes.Episode.Attempt).
	// Default 3: the first run and two restarts.
	MaxAttempts int32
}

// Trigger is one of Schedule, Event or Manual.
type Trigger interface{ triggerType() episodes.TriggerType }

// Schedule fires on a cron expression or at a fixed interval; exactly one of
// Cron and Every is set. Each firing is one window, named in the dedupe key,
// so every node creates the same one episode for it.
type Schedule struct {
	// Cron is a standard five-field expression (minute hour day-of-month
	// month day-of-week) or one of @yearly, @annually, @monthly, @weekly,
	// @daily, @midnight and @hourly, evaluated in UTC. Its window is the
	// planned minute in UTC. Register refuses what that cannot represent:
	// a CRON_TZ= or TZ= prefix (cron is always UTC: write the expression
	// in UTC), @every (its ticks count from each node's start, so nodes
	// would disagree on the windows, and a period under a minute would run
	// once a minute: use Every), and an expression that never fires
	// ("0 0 30 2 *").
	Cron string
	// Every is a positive whole number of seconds. Its windows are aligned
	// to the interval itself from the Unix epoch in UTC, so every node maps
	// an instant to the same window whenever it started.
	Every time.Duration
}

// Event fires when the host application calls Node.Fire with this name,
// which must be valid UTF-8 without NUL (it is stored in trigger_ref).
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

// RetryPolicy runs an episode again after a strategy error, as its next
// attempt, until the expectation's MaxAttempts (which crash recovery counts
// the same way): the failed attempt ends in one fenced statement
// (RetryEpisode) that keeps and journals its error, releases the claim and
// makes the episode available again after a backoff on the database clock,
// so whichever full node has a free slot then runs it. Set it only for
// strategies that are safe to run again from Init (as for RecoveryRestart):
// a payment strategy should pass an idempotency key derived from the
// episode, and mark declines Permanent.
type RetryPolicy struct {
	// Backoff is the wait before attempt 2; each later attempt waits twice
	// the previous one, at most MaxBackoff, with ±20% random jitter so
	// retries of many episodes spread out. Zero: no retries.
	Backoff time.Duration
	// MaxBackoff caps the wait. Default 1 hour.
	MaxBackoff time.Duration
}

// wait returns the backoff after attempt failed (1 for the first run).
func (p RetryPolicy) wait(attempt int32) time.Duration {
	d := p.Backoff
	for i := int32(1); i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Permanent marks err as permanent: the episode fails at once, whatever its
// expectation's RetryPolicy (a declined card, a validation error).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or an error it wraps) was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

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
	// Attempt is this run's attempt: 1 on the first run, one more for each
	// restart by recovery (episodes.Episode.Attempt), at most the
	// expectation's MaxAttempts.
	Attempt int32
	// StepNo is the journal number the next step will get.
	StepNo int32
	// State belongs to the strategy.
	State any

	token claims.Token
	node  *Node
	// finishedInTx: CompleteTx or FailTx wrote this finish in the caller's
	// transaction; the runner reads whether it committed.
	finishedInTx *episodes.Finish
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
