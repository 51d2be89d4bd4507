// Package episodes holds the episode model shared by the runner, recovery and
// the adapters: what an episode is, its statuses, and the fenced writes made
// on behalf of a run. The statements behind it are in
// sql/queries/<dialect>/episodes.sql.
package episodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/dedupe"
)

// Status of an episode.
type Status string

const (
	// StatusQueued: created, waiting for a slot on the node that holds its
	// claim. Never treated as stale by recovery.
	StatusQueued          Status = "queued"
	StatusRunning         Status = "running"
	StatusBlocked         Status = "blocked"
	StatusDone            Status = "done"
	StatusFailed          Status = "failed"
	StatusPartiallyFailed Status = "partially_failed"
	StatusCanceled        Status = "canceled"
)

// Terminal reports whether s ends an episode.
func (s Status) Terminal() bool {
	switch s {
	case StatusDone, StatusFailed, StatusPartiallyFailed, StatusCanceled:
		return true
	}
	return false
}

// TriggerType says what created an episode.
type TriggerType string

const (
	TriggerSchedule TriggerType = "schedule"
	TriggerEvent    TriggerType = "event"
	TriggerManual   TriggerType = "manual"
	TriggerWorkflow TriggerType = "workflow"
)

// Error classes the runner writes.
const (
	ClassError          = "error"           // the strategy returned an error
	ClassPanic          = "panic"           // the strategy panicked
	ClassBudgetExceeded = "budget_exceeded" // max wall time or max steps
	ClassCanceled       = "canceled"        // cancelled by an operator or the host
)

// ErrLeaseLost: a fenced episode write matched nothing because the run's
// grant is gone (stolen, released, finished) or the episode is no longer in
// the state the write expects. Nothing was written. It is claims.ErrLeaseLost,
// so callers test one sentinel whichever layer noticed the loss.
var ErrLeaseLost = claims.ErrLeaseLost

// ErrNotFound: no episode with that id.
var ErrNotFound = errors.New("episodes: not found")

// ErrKeyVersion: the creating statement wrote nothing because an episode's
// dedupe key is a key of a dedupe key version the database no longer uses
// (it moved to a newer one since the node read it; migration 00014's
// insert trigger refused the row). The node reads the version again and
// hashes the trigger anew; inside a caller's transaction, roll that
// transaction back (on Postgres it can no longer commit) and run it again.
var ErrKeyVersion = errors.New("episodes: the dedupe key is not a key of the database's key version")

// KeyVersionOf is the version an adapter writes for key version v of a New
// or a BatchItem: v, or for zero dedupe.LatestKeyVersion, the version every
// key that no version changes is written under (a schedule's, an event
// id's, a payload's whose forms agree).
func KeyVersionOf(v int16) int16 {
	if v == 0 {
		return int16(dedupe.LatestKeyVersion)
	}
	return v
}

// New describes an episode to create.
type New struct {
	ActorID       string
	ExpectationID string
	TriggerType   TriggerType
	TriggerRef    json.RawMessage // what fired it (schedule tick, event name and id)
	DedupeKey     string          // "" for none: the episode can never be a duplicate
	MaxAttempts   int32
	Budget        json.RawMessage
	SourceStack   string
	SourceEnv     string
	Payload       json.RawMessage
	// TraceParent is the W3C trace context of the span that fired the
	// trigger ("" for none), stored with the episode so every attempt, on
	// any node, continues that trace (telemetry.Tracer).
	TraceParent string
	// KeyVersion is the dedupe key version (dedupe.KeyVersion) DedupeKey is
	// a key of: what the runner hashed an event's payload under, the
	// database's version as it read it. Zero for a key no version changes
	// (a schedule's, an event id's, a payload both forms agree on), written
	// as dedupe.LatestKeyVersion (KeyVersionOf). A key of a version the
	// database no longer uses is refused: ErrKeyVersion, nothing written.
	KeyVersion int16

	// Owner, when set, is granted the episode's work claim by the creating
	// statement itself, for Lease: a created episode is never left queued
	// without an owner by a crash between two statements. Empty creates the
	// episode unclaimed (deferred execution by another node).
	Owner string
	Lease time.Duration
	// Start, with Owner, starts the episode in the creating statement
	// itself (status running, owner_node and started_at set) when the
	// grant is made: the caller holds a free slot and runs it at once, so
	// the run needs no StartEpisode. Created.Started says whether it was.
	Start bool
}

// Queued is the episode n creates, as the creating statement left it: id and
// created_at from the database, status queued.
func (n New) Queued(id int64, createdAt time.Time) Episode {
	return Episode{
		ID: id, ActorID: n.ActorID, ExpectationID: n.ExpectationID, TriggerType: n.TriggerType,
		TriggerRef: n.TriggerRef, DedupeKey: n.DedupeKey, Status: StatusQueued,
		MaxAttempts: n.MaxAttempts, SourceStack: n.SourceStack, SourceEnv: n.SourceEnv,
		Payload: n.Payload, TraceParent: n.TraceParent, CreatedAt: createdAt,
	}
}

// Created is what CreateEpisode did.
type Created struct {
	// Created is false when a live episode already holds the dedupe key
	// (another node won the trigger); nothing was written.
	Created bool
	// ExistingID, when Created is false, is the live episode that holds the
	// dedupe key: the one the trigger is a duplicate of (0 if it was
	// archived before it could be read).
	ExistingID int64
	Episode    Episode
	// Claim is the grant made with the episode; Claim.Fence is 0 when none
	// was asked for, or the key's claim was held live elsewhere (busy).
	Claim claims.Claim
	// Started: New.Start was honoured and the episode is running under
	// Claim. A started episode with Claim.Fence 0 (its key's claim changed
	// hands during the statement) must not be run: it is left to recovery.
	Started bool
}

// Episode is an episode row.
type Episode struct {
	ID            int64
	ActorID       string
	ExpectationID string
	TriggerType   TriggerType
	TriggerRef    json.RawMessage
	DedupeKey     string
	Status        Status
	Phase         string
	// Attempts is the stored count of recovery restarts (column attempts):
	// 0 until recovery first restarts the episode. The attempt a run is,
	// everywhere leasehold shows or bounds one, is Attempt().
	Attempts int32
	// MaxAttempts is the most attempts (runs) the episode gets; see
	// Attempt.
	MaxAttempts int32
	SourceStack string
	SourceEnv   string
	OwnerNode   string
	Payload     json.RawMessage
	Result      json.RawMessage
	ErrorClass  string
	ErrorDetail json.RawMessage
	CreatedAt   time.Time
	StartedAt   *time.Time
	FinishedAt  *time.Time
	LastStepAt  *time.Time
	ArchivedAt  *time.Time
	// TraceParent is the W3C trace context the episode's runs continue, ""
	// for none (New.TraceParent).
	TraceParent string
}

// ClaimKey is the work-claim key a run of the episode holds: its dedupe key,
// or episode:{id} for an episode created without one.
func (e Episode) ClaimKey() string { return ClaimKey(e.ID, e.DedupeKey) }

// ClaimKey returns the work-claim key for episode id with dedupeKey.
func ClaimKey(id int64, dedupeKey string) string {
	if dedupeKey != "" {
		return dedupeKey
	}
	return fmt.Sprintf("episode:%d", id)
}

// Finish is a run's terminal write.
type Finish struct {
	Status      Status // a terminal status
	Result      json.RawMessage
	ErrorClass  string
	ErrorDetail json.RawMessage
	// StepNo > 0 journals the run's last step (StepData) with the finish,
	// in the same fenced statement: one commit instead of two.
	StepNo   int32
	StepData json.RawMessage
}

// Retry is how a failed attempt that may run again ends (RetryEpisode):
// its error is kept and journaled, and the episode is due again after
// Backoff on the database clock.
type Retry struct {
	ErrorClass  string
	ErrorDetail json.RawMessage
	// StepNo > 0 journals the attempt's error (StepData) as a step, under
	// the attempt's fence.
	StepNo   int32
	StepData json.RawMessage
	// Backoff: the episode is due this long after the retry's statement,
	// on the database clock. Millisecond precision.
	Backoff time.Duration
}

// Retried is what RetryEpisode (or an operator's RequeueEpisode) did: the
// episode is available as attempt Attempts + 1, due at RunAfter (database
// time). Canceled: a cancel was requested while the attempt ran, so the
// episode ended canceled instead (not available).
type Retried struct {
	Attempts int32
	RunAfter time.Time
	Canceled bool
}

// Cancel outcomes and the errors of the operator's statements.
var (
	// ErrNotLive: the episode is terminal or archived, so there is nothing
	// to cancel.
	ErrNotLive = errors.New("episodes: episode is not live (terminal or archived)")
	// ErrNotRetryable: only a failed or canceled episode that is not
	// archived can be run again.
	ErrNotRetryable = errors.New("episodes: episode is not failed or canceled, or is archived")
)

// Canceled is what CancelEpisode did. Ended: nobody held a live lease on
// the episode, and it is canceled now. Otherwise its holder was asked
// (cancel_requested_at, database time) and ends the run canceled once it
// reads the request, within one heartbeat interval.
type Canceled struct {
	EpisodeID   int64
	Ended       bool
	Status      Status
	RequestedAt time.Time
}

// CancelRequest is an episode a node holds live whose cancel was requested.
type CancelRequest struct {
	EpisodeID int64
	Fence     int64
}

// Requeued is what RequeueOrphan did with an orphan: made available as
// attempt Attempts + 1 (Status queued, due at once), or ended canceled
// because a cancel was requested (Status canceled).
type Requeued struct {
	Status      Status
	Attempts    int32
	MaxAttempts int32
}

// RequeueItem names one orphan of a batch requeue (RequeueOrphans): its id
// and the attempts the sweep listed.
type RequeueItem struct {
	ID       int64
	Attempts int32
}

// RequeueResult is one RequeueItem's outcome: Err is nil when the orphan
// was requeued (or ended canceled), and what RequeueOrphan would have
// returned otherwise (claims.ErrBusy: not, or no longer, this sweep's).
type RequeueResult struct {
	Requeued
	Err error
}

// RequeueEach runs requeue for each of items, at most atOnce at a time (one
// at a time when atOnce < 2), and returns each outcome at its item's index:
// how an adapter over a connection pool requeues a sweep's orphans (its
// recovery.BatchRequeuer), so that their round trips and lock waits
// overlap. Each item keeps its own statement, conditions and outcome.
func RequeueEach(items []RequeueItem, atOnce int, requeue func(RequeueItem) (Requeued, error)) []RequeueResult {
	out := make([]RequeueResult, len(items))
	one := func(i int) { out[i].Requeued, out[i].Err = requeue(items[i]) }
	if atOnce < 2 {
		for i := range items {
			one(i)
		}
		return out
	}
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for i := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			one(i)
		})
	}
	wg.Wait()
	return out
}

// ClaimState is the work-claim state written with the finish: done for a done
// episode, failed otherwise.
func (f Finish) ClaimState() string {
	if f.Status == StatusDone {
		return "done"
	}
	return "failed"
}

// Step is one journal entry.
type Step struct {
	EpisodeID int64
	StepNo    int32
	Fence     int64
	Data      json.RawMessage
	CreatedAt time.Time
}

// OrphanQuery selects orphaned episodes. Stack "" means every stack;
// otherwise Stack and unstamped rows. Env is matched exactly ("" is the
// unset env).
type OrphanQuery struct {
	Stack      string
	Env        string
	StaleAfter time.Duration // for episodes with no claim at all
	Limit      int
}

// Orphan is an episode nobody holds a live lease on, with why.
type Orphan struct {
	Episode         Episode
	LastSeenAt      time.Time // last step, else start, else creation (database time)
	ClaimState      string    // "" when the episode has no claim row
	ClaimOwner      string
	ClaimLeaseUntil *time.Time
	// GivenBack: the holder of the orphan's grant released it itself (a
	// drain, a failed journal write, a lease past its local deadline), or
	// the grant expired before the episode was started under it, within the
	// free hand-backs, so a restart starts the same attempt again instead of
	// the next one (recovery/doc.go).
	GivenBack bool
}

// ClassOrphaned and ClassRecoveryExhausted are written by recovery.
const (
	ClassOrphaned          = "orphaned"
	ClassRecoveryExhausted = "recovery_exhausted"
)

// Attempt is the episode's current (or next) attempt, the one definition
// of "attempt" everywhere: 1 for its first run, one more for each restart
// by recovery (Attempts + 1). Run.Attempt, telemetry's Attempt of episode
// events, `leasehold episodes ls` (attempt/max) and the recovery bound use
// it: a recovery that would start attempt MaxAttempts + 1 fails the episode
// (recovery_exhausted) instead.
func (e Episode) Attempt() int32 { return e.Attempts + 1 }

// Definition is what a node records of one registered expectation when it
// starts (leasehold_agent_definitions), so that nodes without the actor's
// code and operators know its policy.
type Definition struct {
	ActorID, ExpectationID string
	RecoveryPolicy         string // restart | fail
	MaxAttempts            int32  // 0: not recorded
}

// GrantedClaim builds the claim a granting statement (CreateEpisode,
// ClaimForRecovery, ClaimAvailable) returns from its result columns;
// fence 0 (no grant) gives the zero Claim. sent is the local time taken
// just before the statement was sent: the claim's local lease clock starts
// there (claims.Claim.SetLocalStart), so a slow answer shortens the run's
// local deadline instead of letting the run outlive its lease.
func GrantedClaim(sent time.Time, key, owner string, fence int64, attempt int32, leaseUntil, claimedAt time.Time, grant string) claims.Claim {
	if fence == 0 {
		return claims.Claim{}
	}
	c := claims.Claim{
		Token: claims.Token{Key: key, Owner: owner, Fence: fence}, State: claims.StateClaimed,
		Attempt: attempt, LeaseUntil: leaseUntil, ClaimedAt: claimedAt,
		Grant: claims.GrantKind(grant), WorkType: "episode",
	}
	c.SetLocalStart(sent)
	return c
}

// CheckID says why id cannot name an actor, expectation, workflow or step
// (what), or returns nil. IDs are parts of dedupe keys, which ':'
// separates, and fill varchar(255) / nvarchar(255) columns, which hold
// neither NUL (Postgres refuses it, SQLSTATE 22021) nor invalid UTF-8.
func CheckID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s has no ID", what)
	case strings.Contains(id, ":"):
		return fmt.Errorf("%s ID %q contains ':', the dedupe key separator", what, id)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%s ID %q contains NUL (U+0000), which the database cannot store", what, id)
	case utf8.RuneCountInString(id) > 255 || !utf8.ValidString(id):
		return fmt.Errorf("%s ID %q is not valid text of at most 255 characters", what, id)
	}
	return nil
}

// FinishItem is one run's terminal write in a group (FinishEpisodes): the
// episode, the grant it is fenced on, and the finish.
type FinishItem struct {
	ID    int64
	Token claims.Token
	Finish
}

// finishRow is a FinishItem as the FinishEpisodes statements read it.
type finishRow struct {
	ID          int64           `json:"id"`
	ClaimKey    string          `json:"claim_key"`
	Fence       int64           `json:"fence"`
	Status      Status          `json:"status"`
	ClaimState  string          `json:"claim_state"`
	Result      json.RawMessage `json:"result"`
	ErrorClass  *string         `json:"error_class"`
	ErrorDetail json.RawMessage `json:"error_detail"`
	StepNo      int32           `json:"step_no"`
	StepData    json.RawMessage `json:"step_data"`
}

// FinishRows encodes items for FinishEpisodes' rows argument: a JSON
// array, one object per run, with FinishEpisode's arguments (an empty
// error class and absent documents are null). Every item must be fenced
// by owner, and no two may name one claim or one episode: the statements
// pair each row with its claim and its episode by key and id (one live
// grant per key, one run per episode), so a group that named one twice
// could pair a stale row with the live grant.
func FinishRows(owner string, items []FinishItem) ([]byte, error) {
	rows := make([]finishRow, len(items))
	keys, ids := make(map[string]bool, len(items)), make(map[int64]bool, len(items))
	for i, it := range items {
		if it.Token.Owner != owner {
			return nil, fmt.Errorf("episodes: finish of episode %d is fenced on %s, not on the sending node %s", it.ID, it.Token.Owner, owner)
		}
		if keys[it.Token.Key] || ids[it.ID] {
			return nil, fmt.Errorf("episodes: a finish group names episode %d or its claim %q twice", it.ID, it.Token.Key)
		}
		keys[it.Token.Key], ids[it.ID] = true, true
		r := finishRow{ID: it.ID, ClaimKey: it.Token.Key, Fence: it.Token.Fence, Status: it.Status, ClaimState: it.ClaimState(),
			Result: nullJSON(it.Result), ErrorDetail: nullJSON(it.ErrorDetail), StepNo: it.StepNo, StepData: nullJSON(it.StepData)}
		if it.ErrorClass != "" {
			r.ErrorClass = &it.ErrorClass
		}
		rows[i] = r
	}
	return json.Marshal(rows)
}

func nullJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
