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
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/membership"
)

// The dashboard's reads (package ui): the statements of
// sql/queries/sqlite/dashboard.sql. Each is a plain SELECT: none takes the
// write lock, none waits for a writer (WAL).

// DashboardClock runs DashboardClock: the database's now.
func (s *Store) DashboardClock(ctx context.Context) (time.Time, error) {
	now, err := s.q.DashboardClock(ctx, s.conn)
	if err != nil {
		return time.Time{}, dbError("DashboardClock", err)
	}
	return fromMs(now), nil
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
				StartedAt: fromMs(r.StartedAt), HeartbeatAt: fromMs(r.HeartbeatAt),
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
			RecoveryPolicy: r.RecoveryPolicy, UpdatedAt: fromMs(r.UpdatedAt)}
		if r.MaxAttempts != nil {
			n := int32(*r.MaxAttempts)
			out[i].MaxAttempts = &n
		}
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
	bucket, window, err := dashboardSeries(q)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.DashboardOutcomes(ctx, s.conn, sqlitedb.DashboardOutcomesParams{BucketMs: bucket, WindowMs: window})
	if err != nil {
		return nil, dbError("DashboardOutcomes", err)
	}
	out := make([]inspect.Outcome, len(rows))
	for i, r := range rows {
		out[i] = inspect.Outcome{Start: dashboardBucketStart(r.Bucket, bucket), Status: episodes.Status(r.Status), Episodes: r.Episodes}
	}
	return out, nil
}

// DashboardHandovers runs DashboardHandovers.
func (s *Store) DashboardHandovers(ctx context.Context, q inspect.SeriesQuery) ([]inspect.Handover, error) {
	bucket, window, err := dashboardSeries(q)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.DashboardHandovers(ctx, s.conn, sqlitedb.DashboardHandoversParams{BucketMs: bucket, WindowMs: window})
	if err != nil {
		return nil, dbError("DashboardHandovers", err)
	}
	out := make([]inspect.Handover, len(rows))
	for i, r := range rows {
		out[i] = inspect.Handover{
			Start: dashboardBucketStart(r.Bucket, bucket), Kind: r.Kind, Handovers: r.Handovers,
			AvgLatency: time.Duration(r.AvgLatencyMs) * time.Millisecond,
			MaxLatency: time.Duration(r.MaxLatencyMs) * time.Millisecond,
		}
	}
	return out, nil
}

// maxDashboardWindow bounds a chart's window as the other dialects do (the
// SQL Server twin adds it in an int of milliseconds), so that every dialect
// takes the same queries.
const maxDashboardWindow = 24 * 24 * time.Hour

// dashboardSeries checks q and returns its bucket and window in
// milliseconds.
func dashboardSeries(q inspect.SeriesQuery) (bucketMs, windowMs int64, err error) {
	if q.Bucket < time.Millisecond || q.Window < q.Bucket || q.Window > maxDashboardWindow {
		return 0, 0, fmt.Errorf("sqlite: series window %v in buckets of %v: want 1ms <= bucket <= window <= %v", q.Window, q.Bucket, maxDashboardWindow)
	}
	return q.Bucket.Milliseconds(), q.Window.Milliseconds(), nil
}

// dashboardBucketStart is the start of bucket n of bucketMs milliseconds
// from the Unix epoch.
func dashboardBucketStart(n, bucketMs int64) time.Time {
	return time.UnixMilli(n * bucketMs).UTC()
}

// DashboardEpisodes runs DashboardEpisodes: one page, newest first. The
// dedupe-key search is a literal, case-sensitive substring match, as on
// Postgres.
func (s *Store) DashboardEpisodes(ctx context.Context, f inspect.EpisodeFilter) ([]inspect.EpisodeRow, error) {
	rows, err := s.q.DashboardEpisodes(ctx, s.conn, sqlitedb.DashboardEpisodesParams{
		BeforeID: f.BeforeID, Status: string(f.Status), ActorID: f.ActorID, ExpectationID: f.ExpectationID,
		ErrorClass: f.ErrorClass, OwnerNode: f.Node, SourceEnv: f.Env, SourceStack: f.Stack,
		DedupeContains: f.DedupeKeyContains, MaxRows: rowLimit(f.Limit),
	})
	if err != nil {
		return nil, dbError("DashboardEpisodes", err)
	}
	out := make([]inspect.EpisodeRow, len(rows))
	for i, r := range rows {
		out[i] = inspect.EpisodeRow{
			Episode: episodes.Episode{
				ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
				DedupeKey: inspectText(r.DedupeKey), Status: episodes.Status(r.Status), Phase: inspectText(r.Phase),
				Attempts: int32(r.Attempts), MaxAttempts: int32(r.MaxAttempts), SourceStack: r.SourceStack, SourceEnv: r.SourceEnv,
				OwnerNode: inspectText(r.OwnerNode), ErrorClass: inspectText(r.ErrorClass), CreatedAt: fromMs(r.CreatedAt),
				StartedAt: fromMsPtr(r.StartedAt), FinishedAt: fromMsPtr(r.FinishedAt), LastStepAt: fromMsPtr(r.LastStepAt),
				ArchivedAt: fromMsPtr(r.ArchivedAt),
			},
			CancelRequestedAt: fromMsPtr(r.CancelRequestedAt), ClaimFence: r.ClaimFence, ClaimLive: r.ClaimLive,
		}
	}
	return out, nil
}

// DashboardEpisode runs DashboardEpisode; episodes.ErrNotFound when there
// is no such episode.
func (s *Store) DashboardEpisode(ctx context.Context, id int64) (inspect.EpisodeDetail, error) {
	r, err := s.q.DashboardEpisode(ctx, s.conn, id)
	if errors.Is(err, sql.ErrNoRows) {
		return inspect.EpisodeDetail{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return inspect.EpisodeDetail{}, dbError("DashboardEpisode", err)
	}
	out := inspect.EpisodeDetail{
		Episode: inspect.Episode{
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
		},
		Budget: jsonRaw(r.Budget), QueuedAt: fromMsPtr(r.QueuedAt), CancelRequestedAt: fromMsPtr(r.CancelRequestedAt),
		TraceParent: inspectText(r.TraceParent), WorkflowInstanceID: r.WorkflowInstanceID, WorkflowStepID: r.WorkflowStepID,
	}
	if r.ClaimState != "" {
		out.Claim = &inspect.Claim{
			Key: r.ClaimKey, State: claims.State(r.ClaimState), Owner: r.ClaimOwner, Fence: r.ClaimFence,
			Attempt: int32(r.ClaimAttempt), Grant: claims.GrantKind(r.ClaimGrant), WorkType: r.ClaimWorkType,
			ClaimedAt: inspectTime(r.ClaimClaimedAt), LeaseUntil: inspectTime(r.ClaimLeaseUntil),
			HeartbeatAt: fromMsPtr(r.ClaimHeartbeatAt), Live: r.ClaimLive,
		}
		out.ClaimFinishedAt, out.ClaimErrorDetail = fromMsPtr(r.ClaimFinishedAt), jsonRaw(r.ClaimErrorDetail)
		out.ClaimLeaseLeft = time.Duration(r.ClaimLeaseLeftMs) * time.Millisecond
	}
	out.RunAfter = fromMsPtr(r.RunAfter)
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
		out[i] = inspect.Grant{Fence: r.Fence, Steps: r.Steps, FirstStepNo: int32(r.FirstStepNo), LastStepNo: int32(r.LastStepNo),
			FirstAt: fromMs(r.FirstAt), LastAt: fromMs(r.LastAt)}
	}
	return out, nil
}

// DashboardJournal runs DashboardJournal: the last limit steps, returned
// in step order. Owner is left "" (the dashboard attributes steps to
// grants itself).
func (s *Store) DashboardJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error) {
	rows, err := s.q.DashboardJournal(ctx, s.conn, sqlitedb.DashboardJournalParams{EpisodeID: episodeID, MaxRows: rowLimit(limit)})
	if err != nil {
		return nil, dbError("DashboardJournal", err)
	}
	out := make([]inspect.Step, len(rows))
	for i, r := range rows {
		out[i] = inspect.Step{StepNo: int32(r.StepNo), Fence: r.Fence, Data: jsonRaw(r.Data), CreatedAt: fromMs(r.CreatedAt)}
	}
	slices.Reverse(out) // read last first
	return out, nil
}

// DashboardWorkflows runs DashboardWorkflows: a page of instances, newest
// first, each with its steps.
func (s *Store) DashboardWorkflows(ctx context.Context, q inspect.WorkflowQuery) ([]inspect.WorkflowInstance, error) {
	rows, err := s.q.DashboardWorkflows(ctx, s.conn, sqlitedb.DashboardWorkflowsParams{
		BeforeID: q.BeforeID, InstanceID: q.InstanceID, WorkflowID: q.WorkflowID, Status: q.Status, MaxRows: rowLimit(q.Limit),
	})
	if err != nil {
		return nil, dbError("DashboardWorkflows", err)
	}
	var out []inspect.WorkflowInstance
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].ID != r.ID {
			out = append(out, inspect.WorkflowInstance{
				ID: r.ID, WorkflowID: r.WorkflowID, Subject: r.Subject, Env: r.Env, SourceStack: r.SourceStack,
				Status: r.Status, Payload: jsonRaw(r.Payload), ErrorDetail: jsonRaw(r.ErrorDetail), CreatedAt: fromMs(r.CreatedAt),
				FinishedAt: fromMsPtr(r.FinishedAt), ParkedReason: inspectText(r.ParkedReason),
				DefinitionVersion: r.DefinitionVersion,
			})
		}
		if r.StepID == "" {
			continue // an instance without step rows
		}
		last := &out[len(out)-1]
		last.Steps = append(last.Steps, inspect.WorkflowStep{
			StepID: r.StepID, Status: r.StepStatus, EpisodeID: r.StepEpisodeID, Attempts: int32(r.StepAttempts),
			MaxAttempts: int32(r.StepMaxAttempts), UpdatedAt: inspectTime(r.StepUpdatedAt),
			EpisodeStatus: episodes.Status(r.EpisodeStatus), EpisodeErrorClass: r.EpisodeErrorClass,
		})
	}
	return out, nil
}

// DashboardFindings runs DashboardFindings: a page, newest first. The key
// search is a literal, case-sensitive substring match, as on Postgres.
func (s *Store) DashboardFindings(ctx context.Context, q inspect.FindingQuery) ([]inspect.Finding, error) {
	rows, err := s.q.DashboardFindings(ctx, s.conn, sqlitedb.DashboardFindingsParams{
		BeforeID: q.BeforeID, Status: q.Status, Env: q.Env, Class: q.Class,
		KeyContains: q.KeyContains, MaxRows: rowLimit(q.Limit),
	})
	if err != nil {
		return nil, dbError("DashboardFindings", err)
	}
	return toDashboardFindings(rows), nil
}

// DashboardFindingHistory runs DashboardFindingHistory: every finding of
// key in env, newest first.
func (s *Store) DashboardFindingHistory(ctx context.Context, env, key string, limit int) ([]inspect.Finding, error) {
	rows, err := s.q.DashboardFindingHistory(ctx, s.conn, sqlitedb.DashboardFindingHistoryParams{
		Env: env, FindingKey: key, MaxRows: rowLimit(limit),
	})
	if err != nil {
		return nil, dbError("DashboardFindingHistory", err)
	}
	return toDashboardFindings(rows), nil
}

func toDashboardFindings(rows []sqlitedb.LeaseholdFinding) []inspect.Finding {
	out := make([]inspect.Finding, len(rows))
	for i, r := range rows {
		out[i] = inspect.Finding{
			Finding: findings.Finding{
				ID: r.ID, Key: r.FindingKey, Env: r.Env, Status: r.Status, Class: r.Class, Severity: r.Severity,
				Summary: r.Summary, Data: jsonRaw(r.Data), ActorID: r.ActorID, SourceStack: r.SourceStack,
				RaisedByEpisode: r.RaisedByEpisode, UpdatedByEpisode: r.UpdatedByEpisode, RaiseCount: int32(r.RaiseCount),
				RaisedAt: fromMs(r.RaisedAt), UpdatedAt: fromMs(r.UpdatedAt),
			},
			ClearedAt: fromMsPtr(r.ClearedAt),
		}
		if r.ClearedByEpisode != nil {
			out[i].ClearedByEpisode = *r.ClearedByEpisode
		}
	}
	return out
}
