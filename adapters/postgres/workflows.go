package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/workflows"
)

var (
	_ workflows.Store = (*Store)(nil)
	_ workflows.Tx    = (*Store)(nil)
)

// ErrNoInstance is workflows.ErrNoInstance, which every adapter returns.
//
// Deprecated: test errors.Is(err, workflows.ErrNoInstance).
var ErrNoInstance = workflows.ErrNoInstance

// InTx runs fn on a Store bound to one transaction, committed when fn
// returns nil. The Store's connection must begin transactions
// (*pgxpool.Pool, *pgx.Conn; a pgx.Tx gives a savepoint). The transaction
// starts with BoundTransaction: if its holder freezes inside it, the server
// rolls it back after claims.TxBoundFrom(ctx) idle and its locks go, so it
// cannot block a takeover for longer (a savepoint keeps the caller's
// settings).
func (s *Store) InTx(ctx context.Context, fn func(workflows.Tx) error) error {
	b, ok := s.conn.(beginner)
	if !ok {
		return fmt.Errorf("postgres: InTx needs a connection that begins transactions, not %T", s.conn)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return dbError("begin", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // a no-op after Commit
	}()
	if _, nested := s.conn.(pgx.Tx); !nested {
		if err := s.boundTransaction(ctx, tx); err != nil {
			return err
		}
	}
	if err := fn(&Store{conn: tx, q: s.q}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return dbError("commit", err)
	}
	return nil
}

func toInstance(r db.LeaseholdWorkflowInstance) workflows.Instance {
	return workflows.Instance{
		ID: r.ID, WorkflowID: r.WorkflowID, Subject: r.Subject, Env: r.Env, SourceStack: r.SourceStack,
		Status: r.Status, Payload: r.Payload, ErrorDetail: r.ErrorDetail, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt,
		ParkedReason: deref(r.ParkedReason), DefinitionVersion: r.DefinitionVersion,
	}
}

func instanceResult(query string, r db.LeaseholdWorkflowInstance, err error) (workflows.Instance, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return workflows.Instance{}, workflows.ErrNoInstance
	}
	if err != nil {
		return workflows.Instance{}, dbError(query, err)
	}
	return toInstance(r), nil
}

// CreateWorkflowInstance runs CreateWorkflowInstance.
func (s *Store) CreateWorkflowInstance(ctx context.Context, n workflows.NewInstance) (int64, bool, error) {
	row, err := s.q.CreateWorkflowInstance(ctx, s.conn, db.CreateWorkflowInstanceParams{
		WorkflowID: n.WorkflowID, Subject: n.Subject, Env: n.Env, SourceStack: n.SourceStack, Payload: n.Payload,
		DefinitionVersion: n.DefinitionVersion,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, dbError("CreateWorkflowInstance", err)
	}
	return row.ID, true, nil
}

// GetRunningWorkflowInstance runs GetRunningWorkflowInstance.
func (s *Store) GetRunningWorkflowInstance(ctx context.Context, workflowID, subject, env string) (workflows.Instance, error) {
	r, err := s.q.GetRunningWorkflowInstance(ctx, s.conn, db.GetRunningWorkflowInstanceParams{WorkflowID: workflowID, Subject: subject, Env: env})
	return instanceResult("GetRunningWorkflowInstance", r, err)
}

// GetWorkflowInstance runs GetWorkflowInstance.
func (s *Store) GetWorkflowInstance(ctx context.Context, id int64) (workflows.Instance, error) {
	r, err := s.q.GetWorkflowInstance(ctx, s.conn, id)
	return instanceResult("GetWorkflowInstance", r, err)
}

// LockWorkflowInstance runs LockWorkflowInstance (FOR UPDATE).
func (s *Store) LockWorkflowInstance(ctx context.Context, id int64) (workflows.Instance, error) {
	r, err := s.q.LockWorkflowInstance(ctx, s.conn, id)
	return instanceResult("LockWorkflowInstance", r, err)
}

// InsertWorkflowStep runs InsertWorkflowStep.
func (s *Store) InsertWorkflowStep(ctx context.Context, instanceID int64, stepID string, maxAttempts int32) error {
	err := s.q.InsertWorkflowStep(ctx, s.conn, db.InsertWorkflowStepParams{InstanceID: instanceID, StepID: stepID, MaxAttempts: maxAttempts})
	if err != nil {
		return dbError("InsertWorkflowStep", err)
	}
	return nil
}

// ListWorkflowSteps runs ListWorkflowSteps.
func (s *Store) ListWorkflowSteps(ctx context.Context, instanceID int64) ([]workflows.StepState, error) {
	rows, err := s.q.ListWorkflowSteps(ctx, s.conn, instanceID)
	if err != nil {
		return nil, dbError("ListWorkflowSteps", err)
	}
	out := make([]workflows.StepState, len(rows))
	for i, r := range rows {
		out[i] = workflows.StepState{InstanceID: r.InstanceID, StepID: r.StepID, Status: r.Status, EpisodeID: r.EpisodeID,
			Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}

// GetWorkflowStepByEpisode runs GetWorkflowStepByEpisode.
func (s *Store) GetWorkflowStepByEpisode(ctx context.Context, episodeID int64) (workflows.StepState, bool, error) {
	r, err := s.q.GetWorkflowStepByEpisode(ctx, s.conn, &episodeID)
	if errors.Is(err, pgx.ErrNoRows) {
		return workflows.StepState{}, false, nil
	}
	if err != nil {
		return workflows.StepState{}, false, dbError("GetWorkflowStepByEpisode", err)
	}
	return workflows.StepState{InstanceID: r.InstanceID, StepID: r.StepID, Status: r.Status, EpisodeID: r.EpisodeID,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, UpdatedAt: r.UpdatedAt}, true, nil
}

// StartWorkflowStep runs StartWorkflowStep; false when the step was not in
// the expected state.
func (s *Store) StartWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode, newEpisode int64) (bool, error) {
	n, err := s.q.StartWorkflowStep(ctx, s.conn, db.StartWorkflowStepParams{
		NewEpisodeID: &newEpisode, InstanceID: instanceID, StepID: stepID, FromStatus: fromStatus, FromEpisodeID: fromEpisode,
	})
	if err != nil {
		return false, dbError("StartWorkflowStep", err)
	}
	return n == 1, nil
}

// EndWorkflowStep runs EndWorkflowStep; false when the step no longer runs
// that episode.
func (s *Store) EndWorkflowStep(ctx context.Context, instanceID int64, stepID string, episodeID int64, status string) (bool, error) {
	n, err := s.q.EndWorkflowStep(ctx, s.conn, db.EndWorkflowStepParams{Status: status, InstanceID: instanceID, StepID: stepID, EpisodeID: &episodeID})
	if err != nil {
		return false, dbError("EndWorkflowStep", err)
	}
	return n == 1, nil
}

// SkipPendingWorkflowSteps runs SkipPendingWorkflowSteps.
func (s *Store) SkipPendingWorkflowSteps(ctx context.Context, instanceID int64) (int64, error) {
	n, err := s.q.SkipPendingWorkflowSteps(ctx, s.conn, instanceID)
	if err != nil {
		return 0, dbError("SkipPendingWorkflowSteps", err)
	}
	return n, nil
}

// FinishWorkflowInstance runs FinishWorkflowInstance; false when the
// instance was not running.
func (s *Store) FinishWorkflowInstance(ctx context.Context, id int64, status string, detail json.RawMessage) (bool, error) {
	n, err := s.q.FinishWorkflowInstance(ctx, s.conn, db.FinishWorkflowInstanceParams{Status: status, ErrorDetail: detail, ID: id})
	if err != nil {
		return false, dbError("FinishWorkflowInstance", err)
	}
	return n == 1, nil
}

// ListStalledWorkflowSteps runs ListStalledWorkflowSteps.
func (s *Store) ListStalledWorkflowSteps(ctx context.Context, q workflows.StalledQuery) ([]workflows.Stalled, error) {
	rows, err := s.q.ListStalledWorkflowSteps(ctx, s.conn, db.ListStalledWorkflowStepsParams{
		Env: q.Env, SourceStack: q.Stack, MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ListStalledWorkflowSteps", err)
	}
	out := make([]workflows.Stalled, len(rows))
	for i, r := range rows {
		out[i] = workflows.Stalled{InstanceID: r.InstanceID, StepID: r.StepID, EpisodeID: r.EpisodeID, EpisodeStatus: episodes.Status(r.EpisodeStatus)}
	}
	return out, nil
}

// ParkWorkflowInstance runs ParkWorkflowInstance: reason "" clears it;
// false when the instance is not running.
func (s *Store) ParkWorkflowInstance(ctx context.Context, id int64, reason string) (bool, error) {
	var r *string
	if reason != "" {
		r = &reason
	}
	n, err := s.q.ParkWorkflowInstance(ctx, s.conn, db.ParkWorkflowInstanceParams{ParkedReason: r, ID: id})
	if err != nil {
		return false, dbError("ParkWorkflowInstance", err)
	}
	return n == 1, nil
}

// ListWorkflowInstances runs ListWorkflowInstances, an operator read.
func (s *Store) ListWorkflowInstances(ctx context.Context, q workflows.ListQuery) ([]workflows.Instance, error) {
	rows, err := s.q.ListWorkflowInstances(ctx, s.conn, db.ListWorkflowInstancesParams{
		WorkflowID: q.WorkflowID, Subject: q.Subject, Status: q.Status, Env: q.Env, ParkedOnly: q.ParkedOnly, MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ListWorkflowInstances", err)
	}
	out := make([]workflows.Instance, len(rows))
	for i, r := range rows {
		out[i] = toInstance(r)
	}
	return out, nil
}

// GetAgentMaxAttempts runs GetAgentMaxAttempts; found is false when no
// node recorded the expectation's max attempts.
func (s *Store) GetAgentMaxAttempts(ctx context.Context, actorID, expectationID string) (int32, bool, error) {
	n, err := s.q.GetAgentMaxAttempts(ctx, s.conn, db.GetAgentMaxAttemptsParams{ActorID: actorID, ExpectationID: expectationID})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, dbError("GetAgentMaxAttempts", err)
	}
	return n, true, nil
}

// PutWorkflowDefinition runs PutWorkflowDefinition: a version already
// recorded is left as it is.
func (s *Store) PutWorkflowDefinition(ctx context.Context, d workflows.StoredDefinition) error {
	err := s.q.PutWorkflowDefinition(ctx, s.conn, db.PutWorkflowDefinitionParams{
		WorkflowID: d.WorkflowID, Version: d.Version, Definition: d.Definition, RecordedBy: d.RecordedBy,
	})
	if err != nil {
		return dbError("PutWorkflowDefinition", err)
	}
	return nil
}

// GetWorkflowDefinition runs GetWorkflowDefinition; found is false when no
// definition is recorded for the workflow at that version.
func (s *Store) GetWorkflowDefinition(ctx context.Context, workflowID, version string) (json.RawMessage, bool, error) {
	raw, err := s.q.GetWorkflowDefinition(ctx, s.conn, db.GetWorkflowDefinitionParams{WorkflowID: workflowID, Version: version})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, dbError("GetWorkflowDefinition", err)
	}
	return raw, true, nil
}

// MoveWorkflowStep runs MoveWorkflowStep; false when the step was not in
// the expected state.
func (s *Store) MoveWorkflowStep(ctx context.Context, instanceID int64, stepID, newStepID string, maxAttempts int32, fromStatus string, fromEpisode int64) (bool, error) {
	n, err := s.q.MoveWorkflowStep(ctx, s.conn, db.MoveWorkflowStepParams{
		NewStepID: newStepID, MaxAttempts: maxAttempts, InstanceID: instanceID, StepID: stepID, FromStatus: fromStatus, FromEpisodeID: fromEpisode,
	})
	if err != nil {
		return false, dbError("MoveWorkflowStep", err)
	}
	return n == 1, nil
}

// DeleteWorkflowStep runs DeleteWorkflowStep; false when the step was not
// in the expected state (or is running).
func (s *Store) DeleteWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode int64) (bool, error) {
	n, err := s.q.DeleteWorkflowStep(ctx, s.conn, db.DeleteWorkflowStepParams{
		InstanceID: instanceID, StepID: stepID, FromStatus: fromStatus, FromEpisodeID: fromEpisode,
	})
	if err != nil {
		return false, dbError("DeleteWorkflowStep", err)
	}
	return n == 1, nil
}

// SetWorkflowDefinitionVersion runs SetWorkflowDefinitionVersion; false
// when the instance is not running.
func (s *Store) SetWorkflowDefinitionVersion(ctx context.Context, id int64, version string) (bool, error) {
	n, err := s.q.SetWorkflowDefinitionVersion(ctx, s.conn, db.SetWorkflowDefinitionVersionParams{DefinitionVersion: version, ID: id})
	if err != nil {
		return false, dbError("SetWorkflowDefinitionVersion", err)
	}
	return n == 1, nil
}
