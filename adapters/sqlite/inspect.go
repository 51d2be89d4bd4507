package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// The operator reads of `leasehold episodes ls|show` (package inspect): the
// statements of sql/queries/sqlite/inspect.sql, plain SELECTs that take no
// write lock.

// InspectEpisodes runs InspectEpisodes, an operator read.
func (s *Store) InspectEpisodes(ctx context.Context, q inspect.EpisodeQuery) ([]episodes.Episode, error) {
	rows, err := s.q.InspectEpisodes(ctx, s.conn, sqlitedb.InspectEpisodesParams{
		Status: string(q.Status), ActorID: q.ActorID, ErrorClass: q.ErrorClass, DedupeKey: q.DedupeKey,
		StaleOnly: q.StaleOnly, StaleAfterMs: q.StaleAfter.Milliseconds(), MaxRows: rowLimit(q.Limit),
	})
	if err != nil {
		return nil, dbError("InspectEpisodes", err)
	}
	out := make([]episodes.Episode, len(rows))
	for i, r := range rows {
		out[i] = episodes.Episode{
			ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
			DedupeKey: inspectText(r.DedupeKey), Status: episodes.Status(r.Status), Phase: inspectText(r.Phase),
			Attempts: int32(r.Attempts), MaxAttempts: int32(r.MaxAttempts), SourceStack: r.SourceStack, SourceEnv: r.SourceEnv,
			OwnerNode: inspectText(r.OwnerNode), ErrorClass: inspectText(r.ErrorClass), CreatedAt: fromMs(r.CreatedAt),
			StartedAt: fromMsPtr(r.StartedAt), FinishedAt: fromMsPtr(r.FinishedAt), LastStepAt: fromMsPtr(r.LastStepAt),
		}
	}
	return out, nil
}

// InspectEpisode runs InspectEpisode: the episode with its claim, trigger
// request and journal size; episodes.ErrNotFound when there is no such
// episode.
func (s *Store) InspectEpisode(ctx context.Context, id int64) (inspect.Episode, error) {
	r, err := s.q.InspectEpisode(ctx, s.conn, id)
	if errors.Is(err, sql.ErrNoRows) {
		return inspect.Episode{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return inspect.Episode{}, dbError("InspectEpisode", err)
	}
	out := inspect.Episode{
		Episode: episodes.Episode{
			ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
			TriggerRef: jsonRaw(r.TriggerRef), DedupeKey: inspectText(r.DedupeKey), Status: episodes.Status(r.Status),
			Phase: inspectText(r.Phase), Attempts: int32(r.Attempts), MaxAttempts: int32(r.MaxAttempts),
			SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, OwnerNode: inspectText(r.OwnerNode),
			Payload: jsonRaw(r.Payload), Result: jsonRaw(r.Result), ErrorClass: inspectText(r.ErrorClass),
			ErrorDetail: jsonRaw(r.ErrorDetail), CreatedAt: fromMs(r.CreatedAt), StartedAt: fromMsPtr(r.StartedAt),
			FinishedAt: fromMsPtr(r.FinishedAt), LastStepAt: fromMsPtr(r.LastStepAt), ArchivedAt: fromMsPtr(r.ArchivedAt),
		},
		ClaimKey:     r.ClaimKey,
		JournalSteps: r.JournalSteps,
	}
	if r.ClaimState != "" {
		out.Claim = &inspect.Claim{
			Key: r.ClaimKey, State: claims.State(r.ClaimState), Owner: r.ClaimOwner, Fence: r.ClaimFence,
			Attempt: int32(r.ClaimAttempt), Grant: claims.GrantKind(r.ClaimGrant), WorkType: r.ClaimWorkType,
			ClaimedAt: inspectTime(r.ClaimClaimedAt), LeaseUntil: inspectTime(r.ClaimLeaseUntil),
			HeartbeatAt: fromMsPtr(r.ClaimHeartbeatAt), Live: r.ClaimLive,
		}
	}
	out.RunAfter = fromMsPtr(r.RunAfter)
	return out, nil
}

// InspectJournal runs InspectJournal: the last limit steps of an episode's
// journal, returned in step order.
func (s *Store) InspectJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error) {
	rows, err := s.q.InspectJournal(ctx, s.conn, sqlitedb.InspectJournalParams{EpisodeID: episodeID, MaxRows: rowLimit(limit)})
	if err != nil {
		return nil, dbError("InspectJournal", err)
	}
	out := make([]inspect.Step, len(rows))
	for i, r := range rows {
		out[i] = inspect.Step{StepNo: int32(r.StepNo), Fence: r.Fence, Owner: r.OwnerNode, Data: jsonRaw(r.Data), CreatedAt: fromMs(r.CreatedAt)}
	}
	slices.Reverse(out) // read last first
	return out, nil
}

// inspectText is *s, "" for NULL.
func inspectText(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// inspectTime is fromMs(*ms), the zero time for NULL (a column of a row
// that a LEFT JOIN did not find, when its presence is told by another
// column).
func inspectTime(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return fromMs(*ms)
}
