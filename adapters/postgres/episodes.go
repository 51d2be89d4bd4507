package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
)

// CreateEpisode runs CreateEpisode: the episode and, when n.Owner is set,
// its work claim, in one statement.
func (s *Store) CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error) {
	sent := time.Now()
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
		OwnerNode:     n.Owner,
		LeaseMs:       n.Lease.Milliseconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Created{}, nil
	}
	if err != nil {
		return episodes.Created{}, dbError("CreateEpisode", err)
	}
	return episodes.Created{
		Created: true,
		Episode: n.Queued(row.ID, row.CreatedAt),
		Claim:   episodes.GrantedClaim(sent, row.ClaimKey, n.Owner, row.Fence, row.Attempt, row.LeaseUntil, row.ClaimedAt, row.GrantKind),
	}, nil
}

// StartEpisode runs StartEpisode and returns the next free step number.
func (s *Store) StartEpisode(ctx context.Context, id int64, t claims.Token) (int32, error) {
	row, err := s.q.StartEpisode(ctx, s.conn, db.StartEpisodeParams{ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, ID: id})
	if err != nil {
		return 0, episodeFenced("StartEpisode", err)
	}
	return row.NextStepNo, nil
}

// AppendStep runs AppendStep; the step also extends the lease to lease.
func (s *Store) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error {
	_, err := s.q.AppendStep(ctx, s.conn, db.AppendStepParams{
		LeaseMs: lease.Milliseconds(), ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, ID: id, StepNo: stepNo, Data: data,
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
		StepNo:      f.StepNo,
		StepData:    f.StepData,
	})
	return episodeFenced("FinishEpisode", err)
}

// RetryEpisode runs RetryEpisode; claims.ErrLeaseLost (episodes.ErrLeaseLost)
// when the grant no longer holds the claim.
func (s *Store) RetryEpisode(ctx context.Context, id int64, t claims.Token, r episodes.Retry) (episodes.Retried, error) {
	row, err := s.q.RetryEpisode(ctx, s.conn, db.RetryEpisodeParams{
		ErrorDetail: r.ErrorDetail,
		ClaimKey:    t.Key,
		OwnerNode:   t.Owner,
		Fence:       t.Fence,
		ID:          id,
		StepNo:      r.StepNo,
		StepData:    r.StepData,
		ErrorClass:  nullable(r.ErrorClass),
		BackoffMs:   r.Backoff.Milliseconds(),
	})
	if err := episodeFenced("RetryEpisode", err); err != nil {
		return episodes.Retried{}, err
	}
	return episodes.Retried{Attempts: row.Attempts, RequestID: row.RequestID, RunAfter: row.RunAfter}, nil
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

// ListOrphans runs ListOrphanedEpisodes.
func (s *Store) ListOrphans(ctx context.Context, q episodes.OrphanQuery) ([]episodes.Orphan, error) {
	rows, err := s.q.ListOrphanedEpisodes(ctx, s.conn, db.ListOrphanedEpisodesParams{
		MaxRows: int32(min(q.Limit, 1<<31-1)), SourceStack: q.Stack, SourceEnv: q.Env, StaleAfterMs: q.StaleAfter.Milliseconds(),
	})
	if err != nil {
		return nil, dbError("ListOrphanedEpisodes", err)
	}
	out := make([]episodes.Orphan, len(rows))
	for i, r := range rows {
		out[i] = episodes.Orphan{
			Episode: episodes.Episode{
				ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, Status: episodes.Status(r.Status),
				DedupeKey: deref(r.DedupeKey), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
				SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, OwnerNode: deref(r.OwnerNode),
			},
			LastSeenAt: r.LastSeenAt, ClaimState: r.ClaimState, ClaimOwner: r.ClaimOwner,
		}
		if r.ClaimState != "" {
			out[i].ClaimLeaseUntil = &r.ClaimLeaseUntil
		}
	}
	return out, nil
}

// ClaimForRecovery runs ClaimForRecovery; claims.ErrBusy when the episode is
// not (or no longer) an orphan, or another sweeper won it.
func (s *Store) ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error) {
	sent := time.Now()
	r, err := s.q.ClaimForRecovery(ctx, s.takeover(ctx), db.ClaimForRecoveryParams{
		ID: id, StaleAfterMs: staleAfter.Milliseconds(), OwnerNode: owner, LeaseMs: lease.Milliseconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Episode{}, claims.Claim{}, claims.ErrBusy
	}
	if err != nil {
		return episodes.Episode{}, claims.Claim{}, dbError("ClaimForRecovery", err)
	}
	ep := episodes.Episode{
		ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
		TriggerRef: r.TriggerRef, DedupeKey: deref(r.DedupeKey), Status: episodes.StatusQueued, Phase: "recovering", Attempts: r.Attempts,
		MaxAttempts: r.MaxAttempts, SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, OwnerNode: owner,
		Payload: r.Payload, CreatedAt: r.CreatedAt,
	}
	return ep, episodes.GrantedClaim(sent, r.ClaimKey, owner, r.Fence, r.ClaimAttempt, r.LeaseUntil, r.ClaimedAt, r.GrantKind), nil
}

// AgentRecoveryPolicy runs GetAgentRecoveryPolicy; found is false when the
// actor's expectation has no definition.
func (s *Store) AgentRecoveryPolicy(ctx context.Context, actorID, expectationID string) (policy string, found bool, err error) {
	p, err := s.q.GetAgentRecoveryPolicy(ctx, s.conn, db.GetAgentRecoveryPolicyParams{ActorID: actorID, ExpectationID: expectationID})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, dbError("GetAgentRecoveryPolicy", err)
	}
	return p, true, nil
}

// PutAgentDefinition runs PutAgentDefinition.
func (s *Store) PutAgentDefinition(ctx context.Context, d episodes.Definition) error {
	var maxAttempts *int32
	if d.MaxAttempts > 0 {
		maxAttempts = &d.MaxAttempts
	}
	err := s.q.PutAgentDefinition(ctx, s.conn, db.PutAgentDefinitionParams{
		ActorID: d.ActorID, ExpectationID: d.ExpectationID, RecoveryPolicy: d.RecoveryPolicy, MaxAttempts: maxAttempts,
	})
	if err != nil {
		return dbError("PutAgentDefinition", err)
	}
	return nil
}

// ListEpisodes runs ListEpisodes, an operator read.
func (s *Store) ListEpisodes(ctx context.Context, q episodes.ListQuery) ([]episodes.Episode, error) {
	rows, err := s.q.ListEpisodes(ctx, s.conn, db.ListEpisodesParams{
		Status: string(q.Status), ActorID: q.ActorID, StaleOnly: q.StaleOnly,
		StaleAfterMs: q.StaleAfter.Milliseconds(), MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ListEpisodes", err)
	}
	out := make([]episodes.Episode, len(rows))
	for i, r := range rows {
		out[i] = episodes.Episode{
			ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
			DedupeKey: deref(r.DedupeKey), Status: episodes.Status(r.Status), Phase: deref(r.Phase),
			Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, SourceStack: r.SourceStack, SourceEnv: r.SourceEnv,
			OwnerNode: deref(r.OwnerNode), CreatedAt: r.CreatedAt, StartedAt: r.StartedAt,
			FinishedAt: r.FinishedAt, LastStepAt: r.LastStepAt,
		}
	}
	return out, nil
}
