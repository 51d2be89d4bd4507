package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
)

// CreateEpisode runs CreateEpisode; created is false when a live episode
// already holds the dedupe key (another node won the trigger).
func (s *Store) CreateEpisode(ctx context.Context, n episodes.New) (ep episodes.Episode, created bool, err error) {
	row, err := s.q.CreateEpisode(ctx, s.conn, db.CreateEpisodeParams{
		ActorID:       n.ActorID,
		ExpectationID: n.ExpectationID,
		TriggerType:   string(n.TriggerType),
		TriggerRef:    n.TriggerRef,
		DedupeKey:     nullable(n.DedupeKey),
		MaxAttempts:   n.MaxAttempts,
		Budget:        n.Budget,
		SourceStack:   n.SourceStack,
		SourceEnv:     n.SourceEnv,
		Payload:       n.Payload,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Episode{}, false, nil
	}
	if err != nil {
		return episodes.Episode{}, false, dbError("CreateEpisode", err)
	}
	return episodes.Episode{
		ID: row.ID, ActorID: n.ActorID, ExpectationID: n.ExpectationID, TriggerType: n.TriggerType,
		TriggerRef: n.TriggerRef, DedupeKey: n.DedupeKey, Status: episodes.StatusQueued,
		MaxAttempts: n.MaxAttempts, SourceStack: n.SourceStack, SourceEnv: n.SourceEnv,
		Payload: n.Payload, CreatedAt: row.CreatedAt,
	}, true, nil
}

// StartEpisode runs StartEpisode and returns the next free step number.
func (s *Store) StartEpisode(ctx context.Context, id int64, t claims.Token) (int32, error) {
	row, err := s.q.StartEpisode(ctx, s.conn, db.StartEpisodeParams{ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, ID: id})
	if err != nil {
		return 0, episodeFenced("StartEpisode", err)
	}
	return row.NextStepNo, nil
}

// AppendStep runs AppendStep.
func (s *Store) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage) error {
	_, err := s.q.AppendStep(ctx, s.conn, db.AppendStepParams{
		ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, ID: id, StepNo: stepNo, Data: data,
	})
	return episodeFenced("AppendStep", err)
}

// FinishEpisode runs FinishEpisode.
func (s *Store) FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	_, err := s.q.FinishEpisode(ctx, s.conn, db.FinishEpisodeParams{
		Status:      string(f.Status),
		Result:      f.Result,
		ErrorClass:  nullable(f.ErrorClass),
		ErrorDetail: f.ErrorDetail,
		ID:          id,
		ClaimState:  f.ClaimState(),
		ClaimKey:    t.Key,
		OwnerNode:   t.Owner,
		Fence:       t.Fence,
	})
	return episodeFenced("FinishEpisode", err)
}

// GetEpisode runs GetEpisode.
func (s *Store) GetEpisode(ctx context.Context, id int64) (episodes.Episode, error) {
	r, err := s.q.GetEpisode(ctx, s.conn, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Episode{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return episodes.Episode{}, dbError("GetEpisode", err)
	}
	return episodes.Episode{
		ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
		TriggerRef: r.TriggerRef, DedupeKey: deref(r.DedupeKey), Status: episodes.Status(r.Status),
		Phase: deref(r.Phase), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, OwnerNode: deref(r.OwnerNode),
		Payload: r.Payload, Result: r.Result, ErrorClass: deref(r.ErrorClass), ErrorDetail: r.ErrorDetail,
		CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		LastStepAt: r.LastStepAt, ArchivedAt: r.ArchivedAt,
	}, nil
}

// ListSteps runs ListSteps: the journal of one episode, in step order.
func (s *Store) ListSteps(ctx context.Context, episodeID int64) ([]episodes.Step, error) {
	rows, err := s.q.ListSteps(ctx, s.conn, episodeID)
	if err != nil {
		return nil, dbError("ListSteps", err)
	}
	out := make([]episodes.Step, len(rows))
	for i, r := range rows {
		out[i] = episodes.Step{EpisodeID: r.EpisodeID, StepNo: r.StepNo, Fence: r.Fence, Data: r.Data, CreatedAt: r.CreatedAt}
	}
	return out, nil
}

func episodeFenced(query string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return episodes.ErrLeaseLost
	default:
		return dbError(query, err)
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
