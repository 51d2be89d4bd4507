package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// InspectEpisodes runs InspectEpisodes, an operator read.
func (s *Store) InspectEpisodes(ctx context.Context, q inspect.EpisodeQuery) ([]episodes.Episode, error) {
	rows, err := s.q.InspectEpisodes(ctx, s.conn, db.InspectEpisodesParams{
		Status: string(q.Status), ActorID: q.ActorID, ErrorClass: q.ErrorClass, DedupeKey: q.DedupeKey,
		StaleOnly: q.StaleOnly, StaleAfterMs: q.StaleAfter.Milliseconds(), MaxRows: int32(min(max(q.Limit, 0), 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("InspectEpisodes", err)
	}
	out := make([]episodes.Episode, len(rows))
	for i, r := range rows {
		out[i] = episodes.Episode{
			ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
			DedupeKey: deref(r.DedupeKey), Status: episodes.Status(r.Status), Phase: deref(r.Phase),
			Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, SourceStack: r.SourceStack, SourceEnv: r.SourceEnv,
			OwnerNode: deref(r.OwnerNode), ErrorClass: deref(r.ErrorClass), CreatedAt: r.CreatedAt,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, LastStepAt: r.LastStepAt,
		}
	}
	return out, nil
}

// InspectEpisode runs InspectEpisode: the episode with its claim, trigger
// request and journal size; episodes.ErrNotFound when there is no such
// episode.
func (s *Store) InspectEpisode(ctx context.Context, id int64) (inspect.Episode, error) {
	r, err := s.q.InspectEpisode(ctx, s.conn, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return inspect.Episode{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return inspect.Episode{}, dbError("InspectEpisode", err)
	}
	out := inspect.Episode{
		Episode: episodes.Episode{
			ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
			TriggerRef: r.TriggerRef, DedupeKey: deref(r.DedupeKey), Status: episodes.Status(r.Status), Phase: deref(r.Phase),
			Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, SourceStack: r.SourceStack, SourceEnv: r.SourceEnv,
			OwnerNode: deref(r.OwnerNode), Payload: r.Payload, Result: r.Result, ErrorClass: deref(r.ErrorClass),
			ErrorDetail: r.ErrorDetail, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
			LastStepAt: r.LastStepAt, ArchivedAt: r.ArchivedAt,
		},
		ClaimKey:     r.ClaimKey,
		JournalSteps: r.JournalSteps,
	}
	if r.ClaimState != "" {
		out.Claim = &inspect.Claim{
			Key: r.ClaimKey, State: claims.State(r.ClaimState), Owner: r.ClaimOwner, Fence: r.ClaimFence,
			Attempt: r.ClaimAttempt, Grant: claims.GrantKind(r.ClaimGrant), WorkType: r.ClaimWorkType,
			ClaimedAt: timeOrZero(r.ClaimClaimedAt), LeaseUntil: timeOrZero(r.ClaimLeaseUntil),
			HeartbeatAt: r.ClaimHeartbeatAt, Live: r.ClaimLive,
		}
	}
	out.RunAfter = r.RunAfter
	return out, nil
}

// InspectJournal runs InspectJournal: the last limit steps of an episode's
// journal, returned in step order.
func (s *Store) InspectJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error) {
	rows, err := s.q.InspectJournal(ctx, s.conn, db.InspectJournalParams{
		EpisodeID: episodeID, MaxRows: int32(min(max(limit, 0), 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("InspectJournal", err)
	}
	out := make([]inspect.Step, len(rows))
	for i, r := range rows {
		out[i] = inspect.Step{StepNo: r.StepNo, Fence: r.Fence, Owner: r.OwnerNode, Data: r.Data, CreatedAt: r.CreatedAt}
	}
	slices.Reverse(out) // read last first
	return out, nil
}

// timeOrZero is *t, the zero time for nil (a column of a row that a LEFT
// JOIN did not find, when its presence is told by another column).
func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
