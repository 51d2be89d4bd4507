package sqlserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/leasehold/leasehold/claims"
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

// InTx runs fn on a copy of the Store bound to one READ COMMITTED
// transaction on one pooled connection, committed when fn returns nil and
// rolled back otherwise. Every batch the Tx sends, FinishEpisode and
// CreateDeferredEpisode included, runs in that transaction; those two nest
// in it (no transaction of their own) instead of ending it, except that a
// FinishEpisode that matched no row THROWs and so rolls it back, as any
// error does.
//
// Nothing is retried inside the transaction: an error in any batch has
// rolled the whole transaction back (XACT_ABORT), so a batch sent again
// would run in autocommit. fn's error is returned as it is; a deadlock
// victim's or a lock timeout's is claims.ErrRetryable, after which the
// caller may run the whole transaction again (the runner does, for
// FinishEpisode). A Store already bound to a transaction refuses to begin
// another.
//
// Every batch of the transaction is sent behind BoundTransaction with
// claims.TxBoundFrom(ctx): a statement that waits longer than that for a
// lock fails with 1222 and rolls the transaction back (retryable). SQL
// Server cannot also end a transaction left idle (Postgres's
// idle_in_transaction_session_timeout): if this node freezes inside fn, its
// locks stay until it resumes or its connection is dropped, and other
// nodes' takeovers fail fast (BoundLockWait) and retry meanwhile.
func (s *Store) InTx(ctx context.Context, fn func(workflows.Tx) error) error {
	if s.tx != nil {
		return errors.New("sqlserver: InTx: already inside a transaction")
	}
	if s.db == nil {
		return errors.New("sqlserver: InTx: the Store has no database (New was given a nil *sql.DB)")
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return dbError("InTx: begin", err)
	}
	// After Commit this is a no-op (sql.ErrTxDone); after an error that
	// XACT_ABORT already rolled back, go-mssqldb sends nothing.
	defer func() { _ = tx.Rollback() }()
	if err := fn(s.inTx(tx, claims.TxBoundFrom(ctx))); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return dbError("InTx: commit", err)
	}
	return nil
}

// CreateWorkflowInstance runs CreateWorkflowInstance; created is false when
// an instance with the same workflow, subject and env is running. Outside a
// transaction a surfaced duplicate-key error means the same (the statement
// wrote nothing); inside one it is an error, since it has rolled the
// transaction back.
func (s *Store) CreateWorkflowInstance(ctx context.Context, n workflows.NewInstance) (int64, bool, error) {
	var (
		id        int64
		createdAt time.Time
	)
	err := s.queryRow(ctx, "CreateWorkflowInstance",
		sql.Named("workflow_id", n.WorkflowID),
		sql.Named("subject", n.Subject),
		sql.Named("env", n.Env),
		sql.Named("source_stack", n.SourceStack),
		sql.Named("payload", jsonArg(n.Payload)),
		sql.Named("definition_version", n.DefinitionVersion),
	).Scan(&id, &createdAt)
	if errors.Is(err, sql.ErrNoRows) || s.lostRace(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return id, true, nil
}

// GetRunningWorkflowInstance runs GetRunningWorkflowInstance; workflows.ErrNoInstance
// when none is running.
func (s *Store) GetRunningWorkflowInstance(ctx context.Context, workflowID, subject, env string) (workflows.Instance, error) {
	return scanInstance(s.queryRow(ctx, "GetRunningWorkflowInstance",
		sql.Named("workflow_id", workflowID),
		sql.Named("subject", subject),
		sql.Named("env", env),
	))
}

// GetWorkflowInstance runs GetWorkflowInstance.
func (s *Store) GetWorkflowInstance(ctx context.Context, id int64) (workflows.Instance, error) {
	return scanInstance(s.queryRow(ctx, "GetWorkflowInstance",
		sql.Named("id", id),
	))
}

// LockWorkflowInstance runs LockWorkflowInstance (UPDLOCK, HOLDLOCK,
// ROWLOCK: held until the transaction ends).
func (s *Store) LockWorkflowInstance(ctx context.Context, id int64) (workflows.Instance, error) {
	return scanInstance(s.queryRow(ctx, "LockWorkflowInstance",
		sql.Named("id", id),
	))
}

func scanInstance(r scanner) (workflows.Instance, error) {
	var (
		in              workflows.Instance
		payload, detail sql.NullString
		parked          sql.NullString
		finished        sql.NullTime
	)
	err := r.Scan(&in.ID, &in.WorkflowID, &in.Subject, &in.Env, &in.SourceStack, &in.Status,
		&payload, &detail, &in.CreatedAt, &finished, &parked, &in.DefinitionVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return workflows.Instance{}, workflows.ErrNoInstance
	}
	if err != nil {
		return workflows.Instance{}, err
	}
	in.Payload, in.ErrorDetail, in.FinishedAt = rawJSON(payload), rawJSON(detail), timePtr(finished)
	in.ParkedReason = parked.String
	return in, nil
}

// InsertWorkflowStep runs InsertWorkflowStep.
func (s *Store) InsertWorkflowStep(ctx context.Context, instanceID int64, stepID string, maxAttempts int32) error {
	return s.exec(ctx, "InsertWorkflowStep",
		sql.Named("instance_id", instanceID),
		sql.Named("step_id", stepID),
		sql.Named("max_attempts", maxAttempts),
	)
}

// ListWorkflowSteps runs ListWorkflowSteps.
func (s *Store) ListWorkflowSteps(ctx context.Context, instanceID int64) ([]workflows.StepState, error) {
	rows, err := s.query(ctx, "ListWorkflowSteps",
		sql.Named("instance_id", instanceID),
	)
	if err != nil {
		return nil, err
	}
	out := make([]workflows.StepState, 0, len(rows.rows))
	for rows.Next() {
		st, err := scanStep(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// GetWorkflowStepByEpisode runs GetWorkflowStepByEpisode; found is false
// for an episode of no step.
func (s *Store) GetWorkflowStepByEpisode(ctx context.Context, episodeID int64) (workflows.StepState, bool, error) {
	st, err := scanStep(s.queryRow(ctx, "GetWorkflowStepByEpisode",
		sql.Named("episode_id", episodeID),
	))
	if errors.Is(err, sql.ErrNoRows) {
		return workflows.StepState{}, false, nil
	}
	if err != nil {
		return workflows.StepState{}, false, err
	}
	return st, true, nil
}

func scanStep(r scanner) (workflows.StepState, error) {
	var st workflows.StepState
	err := r.Scan(&st.InstanceID, &st.StepID, &st.Status, &st.EpisodeID, &st.Attempts, &st.MaxAttempts, &st.UpdatedAt)
	return st, err
}

// StartWorkflowStep runs StartWorkflowStep; false when the step was not in
// the expected state.
func (s *Store) StartWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode, newEpisode int64) (bool, error) {
	n, err := s.execRows(ctx, "StartWorkflowStep",
		sql.Named("new_episode_id", newEpisode),
		sql.Named("instance_id", instanceID),
		sql.Named("step_id", stepID),
		sql.Named("from_status", fromStatus),
		sql.Named("from_episode_id", fromEpisode),
	)
	return n == 1, err
}

// EndWorkflowStep runs EndWorkflowStep; false when the step no longer runs
// that episode.
func (s *Store) EndWorkflowStep(ctx context.Context, instanceID int64, stepID string, episodeID int64, status string) (bool, error) {
	n, err := s.execRows(ctx, "EndWorkflowStep",
		sql.Named("status", status),
		sql.Named("instance_id", instanceID),
		sql.Named("step_id", stepID),
		sql.Named("episode_id", episodeID),
	)
	return n == 1, err
}

// SkipPendingWorkflowSteps runs SkipPendingWorkflowSteps.
func (s *Store) SkipPendingWorkflowSteps(ctx context.Context, instanceID int64) (int64, error) {
	return s.execRows(ctx, "SkipPendingWorkflowSteps",
		sql.Named("instance_id", instanceID),
	)
}

// FinishWorkflowInstance runs FinishWorkflowInstance; false when the
// instance was not running.
func (s *Store) FinishWorkflowInstance(ctx context.Context, id int64, status string, detail json.RawMessage) (bool, error) {
	n, err := s.execRows(ctx, "FinishWorkflowInstance",
		sql.Named("status", status),
		sql.Named("error_detail", jsonArg(detail)),
		sql.Named("id", id),
	)
	return n == 1, err
}

// ListStalledWorkflowSteps runs ListStalledWorkflowSteps, the read
// reconciliation starts from.
func (s *Store) ListStalledWorkflowSteps(ctx context.Context, q workflows.StalledQuery) ([]workflows.Stalled, error) {
	rows, err := s.query(ctx, "ListStalledWorkflowSteps",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("env", q.Env),
		sql.Named("source_stack", q.Stack),
	)
	if err != nil {
		return nil, err
	}
	out := make([]workflows.Stalled, 0, len(rows.rows))
	for rows.Next() {
		var (
			st     workflows.Stalled
			status string
		)
		if err := rows.Scan(&st.InstanceID, &st.StepID, &st.EpisodeID, &status); err != nil {
			return nil, err
		}
		st.EpisodeStatus = episodes.Status(status)
		out = append(out, st)
	}
	return out, nil
}

// ParkWorkflowInstance runs ParkWorkflowInstance: reason "" clears it;
// false when the instance is not running.
func (s *Store) ParkWorkflowInstance(ctx context.Context, id int64, reason string) (bool, error) {
	n, err := s.execRows(ctx, "ParkWorkflowInstance",
		sql.Named("parked_reason", nullString(reason)),
		sql.Named("id", id),
	)
	return n == 1, err
}

// ListWorkflowInstances runs ListWorkflowInstances, an operator read.
func (s *Store) ListWorkflowInstances(ctx context.Context, q workflows.ListQuery) ([]workflows.Instance, error) {
	var env sql.NullString
	if q.Env != nil {
		env = sql.NullString{String: *q.Env, Valid: true}
	}
	rows, err := s.query(ctx, "ListWorkflowInstances",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("workflow_id", q.WorkflowID),
		sql.Named("subject", q.Subject),
		sql.Named("status", q.Status),
		sql.Named("env", env),
		sql.Named("parked_only", q.ParkedOnly),
	)
	if err != nil {
		return nil, err
	}
	out := make([]workflows.Instance, 0, len(rows.rows))
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// GetAgentMaxAttempts runs GetAgentMaxAttempts; found is false when no
// node recorded the expectation's max attempts.
func (s *Store) GetAgentMaxAttempts(ctx context.Context, actorID, expectationID string) (int32, bool, error) {
	var n int32
	err := s.queryRow(ctx, "GetAgentMaxAttempts",
		sql.Named("actor_id", actorID),
		sql.Named("expectation_id", expectationID),
	).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return n, true, nil
}

// PutWorkflowDefinition runs PutWorkflowDefinition: a version already
// recorded is left as it is.
func (s *Store) PutWorkflowDefinition(ctx context.Context, d workflows.StoredDefinition) error {
	return s.exec(ctx, "PutWorkflowDefinition",
		sql.Named("workflow_id", d.WorkflowID),
		sql.Named("version", d.Version),
		sql.Named("definition", string(d.Definition)),
		sql.Named("recorded_by", d.RecordedBy),
	)
}

// GetWorkflowDefinition runs GetWorkflowDefinition; found is false when no
// definition is recorded for the workflow at that version.
func (s *Store) GetWorkflowDefinition(ctx context.Context, workflowID, version string) (json.RawMessage, bool, error) {
	var raw string
	err := s.queryRow(ctx, "GetWorkflowDefinition",
		sql.Named("workflow_id", workflowID),
		sql.Named("version", version),
	).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return json.RawMessage(raw), true, nil
}

// MoveWorkflowStep runs MoveWorkflowStep; false when the step was not in
// the expected state.
func (s *Store) MoveWorkflowStep(ctx context.Context, instanceID int64, stepID, newStepID string, maxAttempts int32, fromStatus string, fromEpisode int64) (bool, error) {
	n, err := s.execRows(ctx, "MoveWorkflowStep",
		sql.Named("new_step_id", newStepID),
		sql.Named("max_attempts", maxAttempts),
		sql.Named("instance_id", instanceID),
		sql.Named("step_id", stepID),
		sql.Named("from_status", fromStatus),
		sql.Named("from_episode_id", fromEpisode),
	)
	return n == 1, err
}

// DeleteWorkflowStep runs DeleteWorkflowStep; false when the step was not
// in the expected state (or is running).
func (s *Store) DeleteWorkflowStep(ctx context.Context, instanceID int64, stepID, fromStatus string, fromEpisode int64) (bool, error) {
	n, err := s.execRows(ctx, "DeleteWorkflowStep",
		sql.Named("instance_id", instanceID),
		sql.Named("step_id", stepID),
		sql.Named("from_status", fromStatus),
		sql.Named("from_episode_id", fromEpisode),
	)
	return n == 1, err
}

// SetWorkflowDefinitionVersion runs SetWorkflowDefinitionVersion; false
// when the instance is not running.
func (s *Store) SetWorkflowDefinitionVersion(ctx context.Context, id int64, version string) (bool, error) {
	n, err := s.execRows(ctx, "SetWorkflowDefinitionVersion",
		sql.Named("definition_version", version),
		sql.Named("id", id),
	)
	return n == 1, err
}
