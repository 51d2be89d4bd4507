package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// Instance statuses.
const (
	InstanceRunning = "running"
	InstanceDone    = "done"
	InstanceFailed  = "failed"
	// InstanceCanceled: ended by Cancel (an operator); see Cancel.
	InstanceCanceled = "canceled"
)

// Step statuses.
const (
	StepPending = "pending"
	StepRunning = "running"
	StepDone    = "done"
	StepFailed  = "failed"
	StepSkipped = "skipped"
)

// Instance is a workflow instance row.
type Instance struct {
	ID          int64
	WorkflowID  string
	Subject     string
	Env         string
	SourceStack string
	Status      string
	Payload     json.RawMessage
	ErrorDetail json.RawMessage
	CreatedAt   time.Time
	FinishedAt  *time.Time
	// ParkedReason says why the last advance could not apply the
	// definition registered where it ran (a rolling deploy that renamed,
	// added or removed a step): the step's episode kept its finish and the
	// instance waits, running, for a node whose definition has the
	// instance's steps, for Migrate, or for Cancel. "" when not parked; the
	// next advance that succeeds clears it. Only an instance without a
	// recorded definition (DefinitionVersion "", or its row missing) can
	// be parked: the others follow their own definition.
	ParkedReason string
	// DefinitionVersion is the version (Definition.Version) of the
	// definition the instance was started with, which every advance
	// follows; "" for an instance started before versions were recorded
	// (migration 00013), advanced with the definition registered where it
	// advances.
	DefinitionVersion string
}

// StepState is a step row.
type StepState struct {
	InstanceID  int64
	StepID      string
	Status      string
	EpisodeID   int64 // the current (or last) attempt's episode; 0 before the first
	Attempts    int32
	MaxAttempts int32
	UpdatedAt   time.Time
}

// NewInstance describes an instance to start.
type NewInstance struct {
	WorkflowID  string
	Subject     string
	Env         string
	SourceStack string
	Payload     json.RawMessage
	// DefinitionVersion pins the instance to the definition it starts with.
	DefinitionVersion string
}

// StoredDefinition is a definition as recorded under its version
// (PutWorkflowDefinition): Definition is its canonical JSON.
type StoredDefinition struct {
	WorkflowID string
	Version    string
	Definition json.RawMessage
	RecordedBy string // the node that recorded it
}

// StalledQuery selects running steps whose episode already ended, for
// reconciliation: one env (strict), Stack "" every stack, else Stack and
// unstamped rows.
type StalledQuery struct {
	Env   string
	Stack string
	Limit int
}

// Stalled is a running step whose episode already ended.
type Stalled struct {
	InstanceID    int64
	StepID        string
	EpisodeID     int64
	EpisodeStatus episodes.Status
}

// ListQuery selects instances for List, newest first. Every filter is
// optional: "" (and nil Env) is any.
type ListQuery struct {
	WorkflowID string
	Subject    string
	Status     string // running, done, failed or canceled
	Env        *string
	ParkedOnly bool // only instances with a ParkedReason
	Limit      int  // default 100
}

// ErrNoInstance: no workflow instance matched. Every adapter returns it from
// GetWorkflowInstance, GetRunningWorkflowInstance and LockWorkflowInstance
// (so from Engine.Instance and Cancel), whichever the dialect: it is the one
// instance-not-found error.
var ErrNoInstance = errors.New("workflows: no such workflow instance")

// Store is what workflows need from a dialect adapter
// (sql/queries/<dialect>/workflows.sql). The methods that read one
// instance return ErrNoInstance when there is none.
type Store interface {
	// InTx runs fn in one transaction: committed if fn returns nil, rolled
	// back otherwise.
	InTx(ctx context.Context, fn func(Tx) error) error
	// FinishEpisode is the fenced terminal write of an episode that belongs
	// to no workflow.
	FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
	GetWorkflowInstance(ctx context.Context, id int64) (Instance, error)
	ListWorkflowSteps(ctx context.Context, instanceID int64) ([]StepState, error)
	ListStalledWorkflowSteps(ctx context.Context, q StalledQuery) ([]Stalled, error)
	ListWorkflowInstances(ctx context.Context, q ListQuery) ([]Instance, error)
	// PutWorkflowDefinition records d under its version unless that
	// version is recorded already: a version's row is never changed.
	PutWorkflowDefinition(ctx context.Context, d StoredDefinition) error
}

// Tx is the statements one advancing transaction runs.
type Tx interface {
	FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
	CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error)
	// CreateWorkflowInstance reports created false when an instance with
	// the same workflow, subject and env is running.
	CreateWorkflowInstance(ctx context.Context, n NewInstance) (id int64, created bool, err error)
	GetRunningWorkflowInstance(ctx context.Context, workflowID, subject, env string) (Instance, error)
	InsertWorkflowStep(ctx context.Context, instanceID int64, stepID string, maxAttempts int32) error
	LockWorkflowInstance(ctx context.Context, id int64) (Instance, error)
	ListWorkflowSteps(ctx context.Context, instanceID int64) ([]StepState, error)
	// GetWorkflowStepByEpisode reports found false for an episode of no step.
	GetWorkflowStepByEpisode(ctx context.Context, episodeID int64) (s StepState, found bool, err error)
	StartWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode, newEpisode int64) (bool, error)
	EndWorkflowStep(ctx context.Context, instanceID int64, stepID string, episodeID int64, status string) (bool, error)
	SkipPendingWorkflowSteps(ctx context.Context, instanceID int64) (int64, error)
	FinishWorkflowInstance(ctx context.Context, id int64, status string, detail json.RawMessage) (bool, error)
	// ParkWorkflowInstance records reason on a running instance ("" clears
	// it); false when the instance is not running.
	ParkWorkflowInstance(ctx context.Context, id int64, reason string) (bool, error)
	// GetAgentMaxAttempts is the expectation's max attempts as recorded by
	// the nodes that register it; found false when none did.
	GetAgentMaxAttempts(ctx context.Context, actorID, expectationID string) (n int32, found bool, err error)
	// PutWorkflowDefinition: as Store's, in the transaction.
	PutWorkflowDefinition(ctx context.Context, d StoredDefinition) error
	// GetWorkflowDefinition is the canonical JSON recorded for a workflow
	// at version; found false when none was.
	GetWorkflowDefinition(ctx context.Context, workflowID, version string) (def json.RawMessage, found bool, err error)
	// MoveWorkflowStep gives a step another ID and max attempts (Migrate),
	// false when it is no longer in fromStatus with fromEpisode.
	MoveWorkflowStep(ctx context.Context, instanceID int64, stepID, newStepID string, maxAttempts int32, fromStatus string, fromEpisode int64) (bool, error)
	// DeleteWorkflowStep removes a step that is not running (Migrate),
	// false when it is no longer in fromStatus with fromEpisode.
	DeleteWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode int64) (bool, error)
	// SetWorkflowDefinitionVersion points a running instance at another
	// version and clears its parked reason (Migrate); false when the
	// instance is not running.
	SetWorkflowDefinitionVersion(ctx context.Context, id int64, version string) (bool, error)
}
