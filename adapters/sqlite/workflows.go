package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/workflows"
)

var (
	_ workflows.Store = (*Store)(nil)
	_ workflows.Tx    = (*Store)(nil)
)

// InTx runs fn on a Store bound to one BEGIN IMMEDIATE transaction,
// committed when fn returns nil and rolled back otherwise. The transaction
// holds the database write lock from BEGIN to its end: that is the lock
// LockWorkflowInstance takes on Postgres (FOR UPDATE), so advances of one
// instance (and every other write) run one after the other, each seeing the
// last one's step updates. A BEGIN that found the lock busy for
// BusyTimeout is claims.ErrRetryable: nothing ran. On a Store bound to a
// caller's transaction (WithTx) fn runs in a SAVEPOINT of it, rolled back
// to when fn fails, as Postgres nests InTx in a pgx.Tx.
//
// Keep fn short and free of waits on other writers of the database: while
// it runs, no other connection writes.
func (s *Store) InTx(ctx context.Context, fn func(workflows.Tx) error) error {
	return s.inTx(ctx, func(tx *Store) error { return fn(tx) })
}

// Savepoints reports whether InTx nests inside the Store's own transaction:
// true when the Store is bound to a caller's *sql.Tx (WithTx), where InTx
// runs in a SAVEPOINT, so the workflow engine can park an instance on a
// definition conflict in the caller's transaction, as on Postgres.
func (s *Store) Savepoints() bool {
	_, inTx := s.conn.(*sql.Tx)
	return inTx
}

func toInstance(r sqlitedb.LeaseholdWorkflowInstance) workflows.Instance {
	in := workflows.Instance{
		ID: r.ID, WorkflowID: r.WorkflowID, Subject: r.Subject, Env: r.Env, SourceStack: r.SourceStack,
		Status: r.Status, Payload: jsonRaw(r.Payload), ErrorDetail: jsonRaw(r.ErrorDetail),
		CreatedAt: fromMs(r.CreatedAt), FinishedAt: fromMsPtr(r.FinishedAt), DefinitionVersion: r.DefinitionVersion,
	}
	if r.ParkedReason != nil {
		in.ParkedReason = *r.ParkedReason
	}
	return in
}

func instanceResult(query string, r sqlitedb.LeaseholdWorkflowInstance, err error) (workflows.Instance, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return workflows.Instance{}, workflows.ErrNoInstance
	}
	if err != nil {
		return workflows.Instance{}, dbError(query, err)
	}
	return toInstance(r), nil
}

// CreateWorkflowInstance runs CreateWorkflowInstance; created is false when
// an instance with the same workflow, subject and env is running.
func (s *Store) CreateWorkflowInstance(ctx context.Context, n workflows.NewInstance) (int64, bool, error) {
	row, err := s.q.CreateWorkflowInstance(ctx, s.conn, sqlitedb.CreateWorkflowInstanceParams{
		WorkflowID: n.WorkflowID, Subject: n.Subject, Env: n.Env, SourceStack: n.SourceStack, Payload: jsonText(n.Payload),
		DefinitionVersion: n.DefinitionVersion,
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, dbError("CreateWorkflowInstance", err)
	}
	return row.ID, true, nil
}

// GetRunningWorkflowInstance runs GetRunningWorkflowInstance.
func (s *Store) GetRunningWorkflowInstance(ctx context.Context, workflowID, subject, env string) (workflows.Instance, error) {
	r, err := s.q.GetRunningWorkflowInstance(ctx, s.conn, sqlitedb.GetRunningWorkflowInstanceParams{WorkflowID: workflowID, Subject: subject, Env: env})
	return instanceResult("GetRunningWorkflowInstance", r, err)
}

// GetWorkflowInstance runs GetWorkflowInstance.
func (s *Store) GetWorkflowInstance(ctx context.Context, id int64) (workflows.Instance, error) {
	r, err := s.q.GetWorkflowInstance(ctx, s.conn, id)
	return instanceResult("GetWorkflowInstance", r, err)
}

// LockWorkflowInstance runs LockWorkflowInstance: inside InTx the
// instance is already locked, with the whole database, by the
// transaction's write lock.
func (s *Store) LockWorkflowInstance(ctx context.Context, id int64) (workflows.Instance, error) {
	r, err := s.q.LockWorkflowInstance(ctx, s.conn, id)
	return instanceResult("LockWorkflowInstance", r, err)
}

// InsertWorkflowStep runs InsertWorkflowStep.
func (s *Store) InsertWorkflowStep(ctx context.Context, instanceID int64, stepID string, maxAttempts int32) error {
	err := s.q.InsertWorkflowStep(ctx, s.conn, sqlitedb.InsertWorkflowStepParams{InstanceID: instanceID, StepID: stepID, MaxAttempts: int64(maxAttempts)})
	if err != nil {
		return dbError("InsertWorkflowStep", err)
	}
	return nil
}

func toStepState(r sqlitedb.ListWorkflowStepsRow) workflows.StepState {
	return workflows.StepState{InstanceID: r.InstanceID, StepID: r.StepID, Status: r.Status, EpisodeID: r.EpisodeID,
		Attempts: int32(r.Attempts), MaxAttempts: int32(r.MaxAttempts), UpdatedAt: fromMs(r.UpdatedAt)}
}

// ListWorkflowSteps runs ListWorkflowSteps.
func (s *Store) ListWorkflowSteps(ctx context.Context, instanceID int64) ([]workflows.StepState, error) {
	rows, err := s.q.ListWorkflowSteps(ctx, s.conn, instanceID)
	if err != nil {
		return nil, dbError("ListWorkflowSteps", err)
	}
	out := make([]workflows.StepState, len(rows))
	for i, r := range rows {
		out[i] = toStepState(r)
	}
	return out, nil
}

// GetWorkflowStepByEpisode runs GetWorkflowStepByEpisode.
func (s *Store) GetWorkflowStepByEpisode(ctx context.Context, episodeID int64) (workflows.StepState, bool, error) {
	r, err := s.q.GetWorkflowStepByEpisode(ctx, s.conn, episodeID)
	if errors.Is(err, sql.ErrNoRows) {
		return workflows.StepState{}, false, nil
	}
	if err != nil {
		return workflows.StepState{}, false, dbError("GetWorkflowStepByEpisode", err)
	}
	return toStepState(sqlitedb.ListWorkflowStepsRow(r)), true, nil
}

// StartWorkflowStep runs StartWorkflowStep; false when the step was not in
// the expected state.
func (s *Store) StartWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode, newEpisode int64) (bool, error) {
	n, err := s.q.StartWorkflowStep(ctx, s.conn, sqlitedb.StartWorkflowStepParams{
		NewEpisodeID: newEpisode, InstanceID: instanceID, StepID: stepID, FromStatus: fromStatus, FromEpisodeID: fromEpisode,
	})
	if err != nil {
		return false, dbError("StartWorkflowStep", err)
	}
	return n == 1, nil
}

// EndWorkflowStep runs EndWorkflowStep; false when the step no longer runs
// that episode.
func (s *Store) EndWorkflowStep(ctx context.Context, instanceID int64, stepID string, episodeID int64, status string) (bool, error) {
	n, err := s.q.EndWorkflowStep(ctx, s.conn, sqlitedb.EndWorkflowStepParams{Status: status, InstanceID: instanceID, StepID: stepID, EpisodeID: episodeID})
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
	n, err := s.q.FinishWorkflowInstance(ctx, s.conn, sqlitedb.FinishWorkflowInstanceParams{Status: status, ErrorDetail: jsonText(detail), ID: id})
	if err != nil {
		return false, dbError("FinishWorkflowInstance", err)
	}
	return n == 1, nil
}

// ListStalledWorkflowSteps runs ListStalledWorkflowSteps.
func (s *Store) ListStalledWorkflowSteps(ctx context.Context, q workflows.StalledQuery) ([]workflows.Stalled, error) {
	rows, err := s.q.ListStalledWorkflowSteps(ctx, s.conn, sqlitedb.ListStalledWorkflowStepsParams{
		Env: q.Env, SourceStack: q.Stack, MaxRows: rowLimit(q.Limit),
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
	n, err := s.q.ParkWorkflowInstance(ctx, s.conn, sqlitedb.ParkWorkflowInstanceParams{ParkedReason: r, ID: id})
	if err != nil {
		return false, dbError("ParkWorkflowInstance", err)
	}
	return n == 1, nil
}

// ListWorkflowInstances runs ListWorkflowInstances, an operator read.
func (s *Store) ListWorkflowInstances(ctx context.Context, q workflows.ListQuery) ([]workflows.Instance, error) {
	rows, err := s.q.ListWorkflowInstances(ctx, s.conn, sqlitedb.ListWorkflowInstancesParams{
		WorkflowID: q.WorkflowID, Subject: q.Subject, Status: q.Status, Env: q.Env, ParkedOnly: q.ParkedOnly, MaxRows: rowLimit(q.Limit),
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
	n, err := s.q.GetAgentMaxAttempts(ctx, s.conn, sqlitedb.GetAgentMaxAttemptsParams{ActorID: actorID, ExpectationID: expectationID})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, dbError("GetAgentMaxAttempts", err)
	}
	return int32(n), true, nil
}

// PutWorkflowDefinition runs PutWorkflowDefinition: a version already
// recorded is left as it is.
func (s *Store) PutWorkflowDefinition(ctx context.Context, d workflows.StoredDefinition) error {
	err := s.q.PutWorkflowDefinition(ctx, s.conn, sqlitedb.PutWorkflowDefinitionParams{
		WorkflowID: d.WorkflowID, Version: d.Version, Definition: string(d.Definition), RecordedBy: d.RecordedBy,
	})
	if err != nil {
		return dbError("PutWorkflowDefinition", err)
	}
	return nil
}

// GetWorkflowDefinition runs GetWorkflowDefinition; found is false when no
// definition is recorded for the workflow at that version.
func (s *Store) GetWorkflowDefinition(ctx context.Context, workflowID, version string) (json.RawMessage, bool, error) {
	raw, err := s.q.GetWorkflowDefinition(ctx, s.conn, sqlitedb.GetWorkflowDefinitionParams{WorkflowID: workflowID, Version: version})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, dbError("GetWorkflowDefinition", err)
	}
	return json.RawMessage(raw), true, nil
}

// MoveWorkflowStep runs MoveWorkflowStep; false when the step was not in
// the expected state.
func (s *Store) MoveWorkflowStep(ctx context.Context, instanceID int64, stepID, newStepID string, maxAttempts int32, fromStatus string, fromEpisode int64) (bool, error) {
	n, err := s.q.MoveWorkflowStep(ctx, s.conn, sqlitedb.MoveWorkflowStepParams{
		NewStepID: newStepID, MaxAttempts: int64(maxAttempts), InstanceID: instanceID, StepID: stepID, FromStatus: fromStatus, FromEpisodeID: fromEpisode,
	})
	if err != nil {
		return false, dbError("MoveWorkflowStep", err)
	}
	return n == 1, nil
}

// DeleteWorkflowStep runs DeleteWorkflowStep; false when the step was not
// in the expected state (or is running).
func (s *Store) DeleteWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode int64) (bool, error) {
	n, err := s.q.DeleteWorkflowStep(ctx, s.conn, sqlitedb.DeleteWorkflowStepParams{
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
	n, err := s.q.SetWorkflowDefinitionVersion(ctx, s.conn, sqlitedb.SetWorkflowDefinitionVersionParams{DefinitionVersion: version, ID: id})
	if err != nil {
		return false, dbError("SetWorkflowDefinitionVersion", err)
	}
	return n == 1, nil
}
