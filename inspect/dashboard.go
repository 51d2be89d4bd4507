package inspect

import (
	"encoding/json"
	"time"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/membership"
)

// What the web dashboard (package ui) reads, through the named statements
// of sql/queries/<dialect>/dashboard.sql. Like the rest of this package
// these are snapshots: the statements lock nothing and decide nothing.

// Node is a node row with what it holds, on the database clock.
type Node struct {
	membership.Row
	// ExpiredLeases counts the claims still in state claimed under the
	// node's name whose lease has expired: a node that stopped renewing
	// (died, or cut off), whose work recovery will take over.
	ExpiredLeases int64
	// RunningEpisodes counts the running episodes that name the node as
	// their owner.
	RunningEpisodes int64
}

// Definition is an expectation as the nodes that run it recorded it when
// they started (leasehold_agent_definitions).
type Definition struct {
	ActorID        string
	ExpectationID  string
	RecoveryPolicy string
	MaxAttempts    *int32 // nil: not recorded
	UpdatedAt      time.Time
}

// StatusCount is the number of unarchived episodes of one actor in one
// status.
type StatusCount struct {
	ActorID  string
	Status   episodes.Status
	Episodes int64
}

// SeriesQuery selects a chart's window: the last Window on the database
// clock, in buckets of Bucket aligned to the Unix epoch. Window must be
// under 24 days (SQL Server's DATEADD takes an int of milliseconds).
type SeriesQuery struct {
	Window time.Duration
	Bucket time.Duration
}

// Outcome is the number of episodes that ended in one status within the
// bucket that starts at Start (by their finished_at).
type Outcome struct {
	Start    time.Time
	Status   episodes.Status
	Episodes int64
}

// Hand-over kinds, read from the fences of an episode's journal (see
// Handover).
const (
	// HandoverRetry: the next journaled grant's fence is one above the
	// last one: the holder ended its grant itself and the next grant
	// followed it directly (a retry after an error, an operator's retry).
	HandoverRetry = "retry"
	// HandoverTakeover: two or more above: another node fenced the grant
	// out first (recovery took the work over after its holder died, lost
	// its lease or released it on drain).
	HandoverTakeover = "takeover"
)

// Handover counts the hand-overs of work from one grant to the next whose
// new grant journaled its first step within the bucket that starts at
// Start. Latency runs from the last step journaled under the old grant to
// the first under the new one: an upper bound on how long the work stood
// still. A grant that journaled no step is not seen.
type Handover struct {
	Start      time.Time
	Kind       string // HandoverRetry or HandoverTakeover
	Handovers  int64
	AvgLatency time.Duration
	MaxLatency time.Duration
}

// EpisodeFilter selects a page of episodes, newest first. Each string
// filter "" means any; Node is the episode's owner (the node that runs it,
// or ran it last). Env and Stack nil mean any, and point to "" for the
// unset env or stack. DedupeKeyContains keeps the episodes whose dedupe
// key contains it, archived ones included. BeforeID 0 is the newest page,
// else the episodes with a smaller ID (keyset paging).
type EpisodeFilter struct {
	Status            episodes.Status
	ActorID           string
	ExpectationID     string
	ErrorClass        string
	Node              string
	Env               *string
	Stack             *string
	DedupeKeyContains string
	BeforeID          int64
	Limit             int
}

// EpisodeRow is an episode in a listing, with its claim's fence and whether
// its lease was live on the database clock when read.
type EpisodeRow struct {
	episodes.Episode
	CancelRequestedAt *time.Time
	ClaimFence        int64 // 0: no claim row
	ClaimLive         bool
}

// EpisodeDetail is one episode as its dashboard page shows it, read in
// one statement.
type EpisodeDetail struct {
	Episode
	Budget            json.RawMessage
	QueuedAt          *time.Time
	CancelRequestedAt *time.Time
	// ClaimFinishedAt and ClaimErrorDetail are the claim row's; zero when
	// Claim is nil.
	ClaimFinishedAt  *time.Time
	ClaimErrorDetail json.RawMessage
	// ClaimLeaseLeft is lease_until - now() on the database clock
	// (negative once expired); 0 without a claim.
	ClaimLeaseLeft time.Duration
	// WorkflowInstanceID and WorkflowStepID name the workflow step whose
	// episode this is; 0 and "" when it is none.
	WorkflowInstanceID int64
	WorkflowStepID     string
	// TraceParent is the W3C trace context the trigger's span stored with
	// the episode (a traceparent header, then ";" and its tracestate when
	// there is one), which every attempt's span continues; "" for none.
	TraceParent string
}

// Grant is one fence of an episode's claim as its journal shows it: the
// steps written under it.
type Grant struct {
	Fence       int64
	Steps       int64
	FirstStepNo int32
	LastStepNo  int32
	FirstAt     time.Time
	LastAt      time.Time
}

// WorkflowQuery selects a page of workflow instances, newest first.
// InstanceID 0 means any, else that instance alone; WorkflowID and Status
// "" mean any; BeforeID 0 is the newest page.
type WorkflowQuery struct {
	InstanceID int64
	WorkflowID string
	Status     string
	BeforeID   int64
	Limit      int // instances, not steps
}

// WorkflowInstance is an instance with its steps, each with the status of
// its current (or last) episode.
type WorkflowInstance struct {
	ID           int64
	WorkflowID   string
	Subject      string
	Env          string
	SourceStack  string
	Status       string
	Payload      json.RawMessage
	ErrorDetail  json.RawMessage
	CreatedAt    time.Time
	FinishedAt   *time.Time
	ParkedReason string
	// DefinitionVersion is the version of the definition the instance
	// follows (workflows.Definition.Version); "" for one started before
	// definitions were versioned.
	DefinitionVersion string
	Steps             []WorkflowStep // in step ID order
}

// WorkflowStep is a step row with its episode's status ("" before its
// first episode).
type WorkflowStep struct {
	StepID            string
	Status            string
	EpisodeID         int64 // 0 before the first episode
	Attempts          int32
	MaxAttempts       int32
	UpdatedAt         time.Time
	EpisodeStatus     episodes.Status
	EpisodeErrorClass string
}

// FindingQuery selects a page of findings, newest first. Status "" means
// any, else findings.StatusActive or StatusCleared; Env nil means any (pointing
// to "" for the unset env); Class "" any; KeyContains keeps the keys that
// contain it; BeforeID 0 is the newest page.
type FindingQuery struct {
	Status      string
	Env         *string
	Class       string
	KeyContains string
	BeforeID    int64
	Limit       int
}

// Finding is a finding row, active or cleared.
type Finding struct {
	findings.Finding
	ClearedByEpisode int64 // 0 while active
	ClearedAt        *time.Time
}
