package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// InspectEpisodes runs InspectEpisodes, an operator read.
func (s *Store) InspectEpisodes(ctx context.Context, q inspect.EpisodeQuery) ([]episodes.Episode, error) {
	rows, err := s.query(ctx, "InspectEpisodes",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("status", string(q.Status)),
		sql.Named("actor_id", q.ActorID),
		sql.Named("error_class", q.ErrorClass),
		sql.Named("dedupe_key", q.DedupeKey),
		sql.Named("stale_only", q.StaleOnly),
		sql.Named("stale_after_ms", q.StaleAfter.Milliseconds()),
	)
	if err != nil {
		return nil, err
	}
	out := make([]episodes.Episode, 0, len(rows.rows))
	for rows.Next() {
		var (
			e                                   episodes.Episode
			triggerType, status                 string
			dedupeKey, phase, owner, errorClass sql.NullString
			started, finished, lastStep         sql.NullTime
		)
		if err := rows.Scan(
			&e.ID, &e.ActorID, &e.ExpectationID, &triggerType, &dedupeKey,
			&status, &phase, &e.Attempts, &e.MaxAttempts, &e.SourceStack, &e.SourceEnv,
			&owner, &errorClass, &e.CreatedAt, &started, &finished, &lastStep,
		); err != nil {
			return nil, err
		}
		e.TriggerType, e.Status = episodes.TriggerType(triggerType), episodes.Status(status)
		e.DedupeKey, e.Phase, e.OwnerNode, e.ErrorClass = dedupeKey.String, phase.String, owner.String, errorClass.String
		e.StartedAt, e.FinishedAt, e.LastStepAt = timePtr(started), timePtr(finished), timePtr(lastStep)
		out = append(out, e)
	}
	return out, nil
}

// InspectEpisode runs InspectEpisode: the episode with its claim, trigger
// request and journal size; episodes.ErrNotFound when there is no such
// episode.
func (s *Store) InspectEpisode(ctx context.Context, id int64) (inspect.Episode, error) {
	var (
		out                                         inspect.Episode
		e                                           = &out.Episode
		triggerType, status                         string
		dedupeKey, phase, owner, errorClass         sql.NullString
		triggerRef, payload, res, detail            sql.NullString
		started, finished, lastStep, archived       sql.NullTime
		claimState, claimOwner, claimGrant, claimWT string
		claimFence                                  int64
		claimAttempt                                int32
		claimedAt, leaseUntil, heartbeatAt          sql.NullTime
		live                                        sql.NullBool
		runAfter                                    sql.NullTime
	)
	err := s.queryRow(ctx, "InspectEpisode",
		sql.Named("id", id),
	).Scan(
		&e.ID, &e.ActorID, &e.ExpectationID, &triggerType, &triggerRef,
		&dedupeKey, &status, &phase, &e.Attempts, &e.MaxAttempts,
		&e.SourceStack, &e.SourceEnv, &owner, &payload, &res,
		&errorClass, &detail, &e.CreatedAt, &started,
		&finished, &lastStep, &archived,
		&out.ClaimKey, &claimState, &claimOwner, &claimFence, &claimAttempt, &claimGrant, &claimWT,
		&claimedAt, &leaseUntil, &heartbeatAt, &live,
		&runAfter, &out.JournalSteps,
	)
	if errors.Is(err, sql.ErrNoRows) {
		return inspect.Episode{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return inspect.Episode{}, err
	}
	e.TriggerType, e.Status = episodes.TriggerType(triggerType), episodes.Status(status)
	e.TriggerRef, e.Payload, e.Result, e.ErrorDetail = rawJSON(triggerRef), rawJSON(payload), rawJSON(res), rawJSON(detail)
	e.DedupeKey, e.Phase, e.OwnerNode, e.ErrorClass = dedupeKey.String, phase.String, owner.String, errorClass.String
	e.StartedAt, e.FinishedAt, e.LastStepAt, e.ArchivedAt = timePtr(started), timePtr(finished), timePtr(lastStep), timePtr(archived)
	if claimState != "" {
		out.Claim = &inspect.Claim{
			Key: out.ClaimKey, State: claims.State(claimState), Owner: claimOwner, Fence: claimFence,
			Attempt: claimAttempt, Grant: claims.GrantKind(claimGrant), WorkType: claimWT,
			ClaimedAt: claimedAt.Time, LeaseUntil: leaseUntil.Time, HeartbeatAt: timePtr(heartbeatAt), Live: live.Bool,
		}
	}
	out.RunAfter = timePtr(runAfter)
	return out, nil
}

// InspectJournal runs InspectJournal: the last limit steps of an episode's
// journal, returned in step order.
func (s *Store) InspectJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error) {
	rows, err := s.query(ctx, "InspectJournal",
		sql.Named("max_rows", maxRows(limit)),
		sql.Named("episode_id", episodeID),
	)
	if err != nil {
		return nil, err
	}
	out := make([]inspect.Step, 0, len(rows.rows))
	for rows.Next() {
		var (
			st   inspect.Step
			data sql.NullString
		)
		if err := rows.Scan(&st.StepNo, &st.Fence, &st.Owner, &data, &st.CreatedAt); err != nil {
			return nil, err
		}
		st.Data = rawJSON(data)
		out = append(out, st)
	}
	slices.Reverse(out) // read last first
	return out, nil
}
