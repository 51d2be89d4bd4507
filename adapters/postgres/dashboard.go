package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/membership"
)

// The dashboard's reads (package ui): the statements of
// sql/queries/postgres/dashboard.sql. None locks anything.

// DashboardClock runs DashboardClock: the database's now.
func (s *Store) DashboardClock(ctx context.Context) (time.Time, error) {
	now, err := s.q.DashboardClock(ctx, s.conn)
	if err != nil {
		return time.Time{}, dbError("DashboardClock", err)
	}
	return now, nil
}

// DashboardNodes runs DashboardNodes.
func (s *Store) DashboardNodes(ctx context.Context) ([]inspect.Node, error) {
	rows, err := s.q.DashboardNodes(ctx, s.conn)
	if err != nil {
		return nil, dbError("DashboardNodes", err)
	}
	out := make([]inspect.Node, len(rows))
	for i, r := range rows {
		out[i] = inspect.Node{
			Row: membership.Row{
				Member:    membership.Member{ID: r.NodeID, Stack: r.Stack, Env: r.Env, Mode: r.Mode, Draining: r.Draining},
				StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt,
				HeartbeatAge: time.Duration(r.HeartbeatAgeMs) * time.Millisecond, LiveLeases: r.LiveLeases,
			},
			ExpiredLeases: r.ExpiredLeases, RunningEpisodes: r.RunningEpisodes,
		}
	}
	return out, nil
}

// DashboardDefinitions runs DashboardDefinitions.
func (s *Store) DashboardDefinitions(ctx context.Context) ([]inspect.Definition, error) {
	rows, err := s.q.DashboardDefinitions(ctx, s.conn)
	if err != nil {
		return nil, dbError("DashboardDefinitions", err)
	}
	out := make([]inspect.Definition, len(rows))
	for i, r := range rows {
		out[i] = inspect.Definition{ActorID: r.ActorID, ExpectationID: r.ExpectationID,
			RecoveryPolicy: r.RecoveryPolicy, MaxAttempts: r.MaxAttempts, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}

// DashboardStatusCounts runs DashboardStatusCounts.
func (s *Store) DashboardStatusCounts(ctx context.Context) ([]inspect.StatusCount, error) {
	rows, err := s.q.DashboardStatusCounts(ctx, s.conn)
	if err != nil {
		return nil, dbError("DashboardStatusCounts", err)
	}
	out := make([]inspect.StatusCount, len(rows))
	for i, r := range rows {
		out[i] = inspect.StatusCount{ActorID: r.ActorID, Status: episodes.Status(r.Status), Episodes: r.Episodes}
	}
	return out, nil
}

// DashboardOutcomes runs DashboardOutcomes.
func (s *Store) DashboardOutcomes(ctx context.Context, q inspect.SeriesQuery) ([]inspect.Outcome, error) {
	bucket, window, err := seriesParams(q)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.DashboardOutcomes(ctx, s.conn, db.DashboardOutcomesParams{BucketMs: bucket, WindowMs: window})
	if err != nil {
		return nil, dbError("DashboardOutcomes", err)
	}
	out := make([]inspect.Outcome, len(rows))
	for i, r := range rows {
		out[i] = inspect.Outcome{Start: bucketStart(r.Bucket, bucket), Status: episodes.Status(r.Status), Episodes: r.Episodes}
	}
	return out, nil
}

// DashboardHandovers runs DashboardHandovers.
func (s *Store) DashboardHandovers(ctx context.Context, q inspect.SeriesQuery) ([]inspect.Handover, error) {
	bucket, window, err := seriesParams(q)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.DashboardHandovers(ctx, s.conn, db.DashboardHandoversParams{BucketMs: bucket, WindowMs: window})
	if err != nil {
		return nil, dbError("DashboardHandovers", err)
	}
	out := make([]inspect.Handover, len(rows))
	for i, r := range rows {
		out[i] = inspect.Handover{
			Start: bucketStart(r.Bucket, bucket), Kind: r.Kind, Handovers: r.Handovers,
			AvgLatency: time.Duration(r.AvgLatencyMs) * time.Millisecond,
			MaxLatency: time.Duration(r.MaxLatencyMs) * time.Millisecond,
		}
	}
	return out, nil
}

// maxSeriesWindow bounds a chart's window: the SQL Server twin adds it in
// an int of milliseconds, and both dialects take the same queries.
const maxSeriesWindow = 24 * 24 * time.Hour

// seriesParams checks q and returns its bucket and window in milliseconds.
func seriesParams(q inspect.SeriesQuery) (bucketMs, windowMs int64, err error) {
	if q.Bucket < time.Millisecond || q.Window < q.Bucket || q.Window > maxSeriesWindow {
		return 0, 0, fmt.Errorf("postgres: series window %v in buckets of %v: want 1ms <= bucket <= window <= %v", q.Window, q.Bucket, maxSeriesWindow)
	}
	return q.Bucket.Milliseconds(), q.Window.Milliseconds(), nil
}

// bucketStart is the start of bucket n of bucketMs milliseconds from the
// Unix epoch.
func bucketStart(n, bucketMs int64) time.Time {
	return time.UnixMilli(n * bucketMs).UTC()
}

// likeContains is a LIKE pattern (escape character '\') that matches the
// text holding s; "" for "" (any).
func likeContains(s string) string {
	if s == "" {
		return ""
	}
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(s) + "%"
}

// maxRows32 is a row limit for a LIMIT parameter.
func maxRows32(limit int) int32 { return int32(min(max(limit, 0), 1<<31-1)) }

// DashboardEpisodes runs DashboardEpisodes: one page, newest first.
func (s *Store) DashboardEpisodes(ctx context.Context, f inspect.EpisodeFilter) ([]inspect.EpisodeRow, error) {
	rows, err := s.q.DashboardEpisodes(ctx, s.conn, db.DashboardEpisodesParams{
		BeforeID: f.BeforeID, Status: string(f.Status), ActorID: f.ActorID, ExpectationID: f.ExpectationID,
		ErrorClass: f.ErrorClass, OwnerNode: f.Node, SourceEnv: f.Env, SourceStack: f.Stack,
		DedupeLike: likeContains(f.DedupeKeyContains), MaxRows: maxRows32(f.Limit),
	})
	if err != nil {
		return nil, dbError("DashboardEpisodes", err)
	}
	out := make([]inspect.EpisodeRow, len(rows))
	for i, r := range rows {
		out[i] = inspect.EpisodeRow{
			Episode: episodes.Episode{
				ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
				DedupeKey: deref(r.DedupeKey), Status: episodes.Status(r.Status), Phase: deref(r.Phase),
				Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, SourceStack: r.SourceStack, SourceEnv: r.SourceEnv,
				OwnerNode: deref(r.OwnerNode), ErrorClass: deref(r.ErrorClass), CreatedAt: r.CreatedAt,
				StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, LastStepAt: r.LastStepAt, ArchivedAt: r.ArchivedAt,
			},
			CancelRequestedAt: r.CancelRequestedAt, ClaimFence: r.ClaimFence, ClaimLive: r.ClaimLive,
		}
	}
	return out, nil
}

// DashboardEpisode runs DashboardEpisode; episodes.ErrNotFound when there
// is no such episode.
func (s *Store) DashboardEpisode(ctx context.Context, id int64) (inspect.EpisodeDetail, error) {
	r, err := s.q.DashboardEpisode(ctx, s.conn, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return inspect.EpisodeDetail{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return inspect.EpisodeDetail{}, dbError("DashboardEpisode", err)
	}
	out := inspect.EpisodeDetail{
		Episode: inspect.Episode{
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
		},
		Budget: r.Budget, QueuedAt: r.QueuedAt, CancelRequestedAt: r.CancelRequestedAt, TraceParent: deref(r.TraceParent),
		WorkflowInstanceID: r.WorkflowInstanceID, WorkflowStepID: r.WorkflowStepID,
	}
	if r.ClaimState != "" {
		out.Claim = &inspect.Claim{
			Key: r.ClaimKey, State: claims.State(r.ClaimState), Owner: r.ClaimOwner, Fence: r.ClaimFence,
			Attempt: r.ClaimAttempt, Grant: claims.GrantKind(r.ClaimGrant), WorkType: r.ClaimWorkType,
			ClaimedAt: timeOrZero(r.ClaimClaimedAt), LeaseUntil: timeOrZero(r.ClaimLeaseUntil),
			HeartbeatAt: r.ClaimHeartbeatAt, Live: r.ClaimLive,
		}
		out.ClaimFinishedAt, out.ClaimErrorDetail = r.ClaimFinishedAt, r.ClaimErrorDetail
		out.ClaimLeaseLeft = time.Duration(r.ClaimLeaseLeftMs) * time.Millisecond
	}
	out.RunAfter = r.RunAfter
	return out, nil
}

// DashboardGrants runs DashboardGrants: the journal's steps per fence, in
// fence order.
func (s *Store) DashboardGrants(ctx context.Context, episodeID int64) ([]inspect.Grant, error) {
	rows, err := s.q.DashboardGrants(ctx, s.conn, episodeID)
	if err != nil {
		return nil, dbError("DashboardGrants", err)
	}
	out := make([]inspect.Grant, len(rows))
	for i, r := range rows {
		out[i] = inspect.Grant{Fence: r.Fence, Steps: r.Steps, FirstStepNo: r.FirstStepNo, LastStepNo: r.LastStepNo,
			FirstAt: r.FirstAt, LastAt: r.LastAt}
	}
	return out, nil
}

// DashboardJournal runs DashboardJournal: the last limit steps, returned
// in step order. Owner is left "" (the dashboard attributes steps to
// grants itself).
func (s *Store) DashboardJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error) {
	rows, err := s.q.DashboardJournal(ctx, s.conn, db.DashboardJournalParams{EpisodeID: episodeID, MaxRows: maxRows32(limit)})
	if err != nil {
		return nil, dbError("DashboardJournal", err)
	}
	out := make([]inspect.Step, len(rows))
	for i, r := range rows {
		out[i] = inspect.Step{StepNo: r.StepNo, Fence: r.Fence, Data: r.Data, CreatedAt: r.CreatedAt}
	}
	slices.Reverse(out) // read last first
	return out, nil
}

// DashboardWorkflows runs DashboardWorkflows: a page of instances, newest
// first, each with its steps.
func (s *Store) DashboardWorkflows(ctx context.Context, q inspect.WorkflowQuery) ([]inspect.WorkflowInstance, error) {
	rows, err := s.q.DashboardWorkflows(ctx, s.conn, db.DashboardWorkflowsParams{
		BeforeID: q.BeforeID, InstanceID: q.InstanceID, WorkflowID: q.WorkflowID, Status: q.Status, MaxRows: maxRows32(q.Limit),
	})
	if err != nil {
		return nil, dbError("DashboardWorkflows", err)
	}
	var out []inspect.WorkflowInstance
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].ID != r.ID {
			out = append(out, inspect.WorkflowInstance{
				ID: r.ID, WorkflowID: r.WorkflowID, Subject: r.Subject, Env: r.Env, SourceStack: r.SourceStack,
				Status: r.Status, Payload: r.Payload, ErrorDetail: r.ErrorDetail, CreatedAt: r.CreatedAt,
				FinishedAt: r.FinishedAt, ParkedReason: deref(r.ParkedReason), DefinitionVersion: r.DefinitionVersion,
			})
		}
		if r.StepID == "" {
			continue // an instance without step rows
		}
		last := &out[len(out)-1]
		last.Steps = append(last.Steps, inspect.WorkflowStep{
			StepID: r.StepID, Status: r.StepStatus, EpisodeID: r.StepEpisodeID, Attempts: r.StepAttempts,
			MaxAttempts: r.StepMaxAttempts, UpdatedAt: timeOrZero(r.StepUpdatedAt),
			EpisodeStatus: episodes.Status(r.EpisodeStatus), EpisodeErrorClass: r.EpisodeErrorClass,
		})
	}
	return out, nil
}

// DashboardFindings runs DashboardFindings: a page, newest first.
func (s *Store) DashboardFindings(ctx context.Context, q inspect.FindingQuery) ([]inspect.Finding, error) {
	rows, err := s.q.DashboardFindings(ctx, s.conn, db.DashboardFindingsParams{
		BeforeID: q.BeforeID, Status: q.Status, Env: q.Env, Class: q.Class,
		KeyLike: likeContains(q.KeyContains), MaxRows: maxRows32(q.Limit),
	})
	if err != nil {
		return nil, dbError("DashboardFindings", err)
	}
	return toDashboardFindings(rows), nil
}

// DashboardFindingHistory runs DashboardFindingHistory: every finding of
// key in env, newest first.
func (s *Store) DashboardFindingHistory(ctx context.Context, env, key string, limit int) ([]inspect.Finding, error) {
	rows, err := s.q.DashboardFindingHistory(ctx, s.conn, db.DashboardFindingHistoryParams{
		Env: env, FindingKey: key, MaxRows: maxRows32(limit),
	})
	if err != nil {
		return nil, dbError("DashboardFindingHistory", err)
	}
	return toDashboardFindings(rows), nil
}

func toDashboardFindings(rows []db.LeaseholdFinding) []inspect.Finding {
	out := make([]inspect.Finding, len(rows))
	for i, r := range rows {
		out[i] = inspect.Finding{
			Finding: findings.Finding{
				ID: r.ID, Key: r.FindingKey, Env: r.Env, Status: r.Status, Class: r.Class, Severity: r.Severity,
				Summary: r.Summary, Data: r.Data, ActorID: r.ActorID, SourceStack: r.SourceStack,
				RaisedByEpisode: r.RaisedByEpisode, UpdatedByEpisode: r.UpdatedByEpisode, RaiseCount: r.RaiseCount,
				RaisedAt: r.RaisedAt, UpdatedAt: r.UpdatedAt,
			},
			ClearedAt: r.ClearedAt,
		}
		if r.ClearedByEpisode != nil {
			out[i].ClearedByEpisode = *r.ClearedByEpisode
		}
	}
	return out
}
