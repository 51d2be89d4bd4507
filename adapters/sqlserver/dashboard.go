package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// The dashboard's reads (package ui): the batches of
// sql/queries/sqlserver/dashboard.sql. None carries a lock hint.

// The result columns of the dashboard's batches, listed in resultColumns:
// those of the Postgres statements of the same names.
var (
	dashboardClockColumns       = []string{"db_now"}
	dashboardNodesColumns       = []string{"node_id", "stack", "env", "mode", "draining", "started_at", "heartbeat_at", "heartbeat_age_ms", "live_leases", "expired_leases", "running_episodes"}
	dashboardDefinitionsColumns = []string{"actor_id", "expectation_id", "recovery_policy", "max_attempts", "updated_at"}
	dashboardStatusColumns      = []string{"actor_id", "status", "episodes"}
	dashboardOutcomesColumns    = []string{"bucket", "status", "episodes"}
	dashboardHandoversColumns   = []string{"bucket", "kind", "handovers", "avg_latency_ms", "max_latency_ms"}
	dashboardEpisodesColumns    = []string{
		"id", "actor_id", "expectation_id", "trigger_type", "dedupe_key", "status", "phase",
		"attempts", "max_attempts", "source_stack", "source_env", "owner_node", "error_class",
		"created_at", "started_at", "finished_at", "last_step_at", "archived_at", "cancel_requested_at",
		"claim_fence", "claim_live",
	}
	dashboardEpisodeColumns = []string{
		"id", "actor_id", "expectation_id", "trigger_type", "trigger_ref",
		"dedupe_key", "status", "phase", "attempts", "max_attempts", "budget",
		"source_stack", "source_env", "owner_node", "payload", "result",
		"error_class", "error_detail", "queued_at", "created_at", "started_at",
		"finished_at", "last_step_at", "archived_at", "cancel_requested_at", "trace_parent",
		"claim_key", "claim_state", "claim_owner", "claim_fence", "claim_attempt", "claim_grant",
		"claim_work_type", "claim_claimed_at", "claim_lease_until", "claim_heartbeat_at",
		"claim_finished_at", "claim_error_detail", "claim_live", "claim_lease_left_ms",
		"run_after", "workflow_instance_id", "workflow_step_id", "journal_steps",
	}
	dashboardGrantsColumns    = []string{"fence", "steps", "first_step_no", "last_step_no", "first_at", "last_at"}
	dashboardJournalColumns   = []string{"step_no", "fence", "data", "created_at"}
	dashboardWorkflowsColumns = []string{
		"id", "workflow_id", "subject", "env", "source_stack", "status", "payload",
		"error_detail", "created_at", "finished_at", "parked_reason", "definition_version",
		"step_id", "step_status", "step_episode_id", "step_attempts", "step_max_attempts",
		"step_updated_at", "episode_status", "episode_error_class",
	}
	dashboardFindingsColumns = []string{
		"id", "finding_key", "env", "status", "class", "severity", "summary", "data",
		"actor_id", "source_stack", "raised_by_episode", "updated_by_episode",
		"cleared_by_episode", "raise_count", "raised_at", "updated_at", "cleared_at",
	}
)

// DashboardClock runs DashboardClock: the database's now.
func (s *Store) DashboardClock(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.queryRow(ctx, "DashboardClock").Scan(&now); err != nil {
		return time.Time{}, err
	}
	return now, nil
}

// DashboardNodes runs DashboardNodes.
func (s *Store) DashboardNodes(ctx context.Context) ([]inspect.Node, error) {
	rows, err := s.query(ctx, "DashboardNodes")
	if err != nil {
		return nil, err
	}
	out := make([]inspect.Node, 0, len(rows.rows))
	for rows.Next() {
		var (
			n        inspect.Node
			draining sql.NullBool
			ageMs    int64
		)
		if err := rows.Scan(&n.ID, &n.Stack, &n.Env, &n.Mode, &draining, &n.StartedAt, &n.HeartbeatAt,
			&ageMs, &n.LiveLeases, &n.ExpiredLeases, &n.RunningEpisodes); err != nil {
			return nil, err
		}
		n.Draining, n.HeartbeatAge = draining.Bool, time.Duration(ageMs)*time.Millisecond
		out = append(out, n)
	}
	return out, nil
}

// DashboardDefinitions runs DashboardDefinitions.
func (s *Store) DashboardDefinitions(ctx context.Context) ([]inspect.Definition, error) {
	rows, err := s.query(ctx, "DashboardDefinitions")
	if err != nil {
		return nil, err
	}
	out := make([]inspect.Definition, 0, len(rows.rows))
	for rows.Next() {
		var (
			d           inspect.Definition
			maxAttempts sql.NullInt32
		)
		if err := rows.Scan(&d.ActorID, &d.ExpectationID, &d.RecoveryPolicy, &maxAttempts, &d.UpdatedAt); err != nil {
			return nil, err
		}
		if maxAttempts.Valid {
			d.MaxAttempts = &maxAttempts.Int32
		}
		out = append(out, d)
	}
	return out, nil
}

// DashboardStatusCounts runs DashboardStatusCounts.
func (s *Store) DashboardStatusCounts(ctx context.Context) ([]inspect.StatusCount, error) {
	rows, err := s.query(ctx, "DashboardStatusCounts")
	if err != nil {
		return nil, err
	}
	out := make([]inspect.StatusCount, 0, len(rows.rows))
	for rows.Next() {
		var (
			c      inspect.StatusCount
			status string
		)
		if err := rows.Scan(&c.ActorID, &status, &c.Episodes); err != nil {
			return nil, err
		}
		c.Status = episodes.Status(status)
		out = append(out, c)
	}
	return out, nil
}

// maxSeriesWindow bounds a chart's window: the batches add it in an int of
// milliseconds (DATEADD).
const maxSeriesWindow = 24 * 24 * time.Hour

// seriesParams checks q and returns its bucket and window in milliseconds.
func seriesParams(q inspect.SeriesQuery) (bucketMs, windowMs int64, err error) {
	if q.Bucket < time.Millisecond || q.Window < q.Bucket || q.Window > maxSeriesWindow {
		return 0, 0, fmt.Errorf("sqlserver: series window %v in buckets of %v: want 1ms <= bucket <= window <= %v", q.Window, q.Bucket, maxSeriesWindow)
	}
	return q.Bucket.Milliseconds(), q.Window.Milliseconds(), nil
}

// bucketStart is the start of bucket n of bucketMs milliseconds from the
// Unix epoch.
func bucketStart(n, bucketMs int64) time.Time { return time.UnixMilli(n * bucketMs).UTC() }

// DashboardOutcomes runs DashboardOutcomes.
func (s *Store) DashboardOutcomes(ctx context.Context, q inspect.SeriesQuery) ([]inspect.Outcome, error) {
	bucket, window, err := seriesParams(q)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, "DashboardOutcomes",
		sql.Named("bucket_ms", bucket),
		sql.Named("window_ms", window),
	)
	if err != nil {
		return nil, err
	}
	out := make([]inspect.Outcome, 0, len(rows.rows))
	for rows.Next() {
		var (
			o      inspect.Outcome
			n      int64
			status string
		)
		if err := rows.Scan(&n, &status, &o.Episodes); err != nil {
			return nil, err
		}
		o.Start, o.Status = bucketStart(n, bucket), episodes.Status(status)
		out = append(out, o)
	}
	return out, nil
}

// DashboardHandovers runs DashboardHandovers.
func (s *Store) DashboardHandovers(ctx context.Context, q inspect.SeriesQuery) ([]inspect.Handover, error) {
	bucket, window, err := seriesParams(q)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, "DashboardHandovers",
		sql.Named("bucket_ms", bucket),
		sql.Named("window_ms", window),
	)
	if err != nil {
		return nil, err
	}
	out := make([]inspect.Handover, 0, len(rows.rows))
	for rows.Next() {
		var (
			h            inspect.Handover
			n            int64
			avgMs, maxMs int64
		)
		if err := rows.Scan(&n, &h.Kind, &h.Handovers, &avgMs, &maxMs); err != nil {
			return nil, err
		}
		h.Start = bucketStart(n, bucket)
		h.AvgLatency, h.MaxLatency = time.Duration(avgMs)*time.Millisecond, time.Duration(maxMs)*time.Millisecond
		out = append(out, h)
	}
	return out, nil
}

// likeContains is a LIKE pattern (escape character '\') that matches the
// text holding s; "" for "" (any). T-SQL's LIKE also reads '[' as the
// start of a character class, so it is escaped too.
func likeContains(s string) string {
	if s == "" {
		return ""
	}
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `[`, `\[`)
	return "%" + r.Replace(s) + "%"
}

// optString sends nil as NULL (any), else the string ("" included).
func optString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}

// DashboardEpisodes runs DashboardEpisodes: one page, newest first.
func (s *Store) DashboardEpisodes(ctx context.Context, f inspect.EpisodeFilter) ([]inspect.EpisodeRow, error) {
	rows, err := s.query(ctx, "DashboardEpisodes",
		sql.Named("max_rows", maxRows(f.Limit)),
		sql.Named("before_id", f.BeforeID),
		sql.Named("status", string(f.Status)),
		sql.Named("actor_id", f.ActorID),
		sql.Named("expectation_id", f.ExpectationID),
		sql.Named("error_class", f.ErrorClass),
		sql.Named("owner_node", f.Node),
		sql.Named("source_env", optString(f.Env)),
		sql.Named("source_stack", optString(f.Stack)),
		sql.Named("dedupe_like", likeContains(f.DedupeKeyContains)),
	)
	if err != nil {
		return nil, err
	}
	out := make([]inspect.EpisodeRow, 0, len(rows.rows))
	for rows.Next() {
		var (
			r                                   inspect.EpisodeRow
			e                                   = &r.Episode
			triggerType, status                 string
			dedupeKey, phase, owner, errorClass sql.NullString
			started, finished, lastStep         sql.NullTime
			archived, cancelRequested           sql.NullTime
			live                                sql.NullBool
		)
		if err := rows.Scan(
			&e.ID, &e.ActorID, &e.ExpectationID, &triggerType, &dedupeKey,
			&status, &phase, &e.Attempts, &e.MaxAttempts, &e.SourceStack, &e.SourceEnv,
			&owner, &errorClass, &e.CreatedAt, &started, &finished, &lastStep, &archived, &cancelRequested,
			&r.ClaimFence, &live,
		); err != nil {
			return nil, err
		}
		e.TriggerType, e.Status = episodes.TriggerType(triggerType), episodes.Status(status)
		e.DedupeKey, e.Phase, e.OwnerNode, e.ErrorClass = dedupeKey.String, phase.String, owner.String, errorClass.String
		e.StartedAt, e.FinishedAt, e.LastStepAt, e.ArchivedAt = timePtr(started), timePtr(finished), timePtr(lastStep), timePtr(archived)
		r.CancelRequestedAt, r.ClaimLive = timePtr(cancelRequested), live.Bool
		out = append(out, r)
	}
	return out, nil
}

// DashboardEpisode runs DashboardEpisode; episodes.ErrNotFound when there
// is no such episode.
func (s *Store) DashboardEpisode(ctx context.Context, id int64) (inspect.EpisodeDetail, error) {
	var (
		out                                             inspect.EpisodeDetail
		e                                               = &out.Episode.Episode
		triggerType, status                             string
		dedupeKey, phase, owner, errorClass             sql.NullString
		triggerRef, budget, payload, res, detail        sql.NullString
		queued, started, finished, lastStep, archived   sql.NullTime
		cancelRequested                                 sql.NullTime
		traceParent                                     sql.NullString
		claimState, claimOwner, claimGrant, claimWT     string
		claimFence, leaseLeftMs                         int64
		claimAttempt                                    int32
		claimedAt, leaseUntil, heartbeatAt, claimFinish sql.NullTime
		claimDetail                                     sql.NullString
		live                                            sql.NullBool
		runAfter                                        sql.NullTime
		workflowInstance                                int64
		workflowStep                                    string
	)
	err := s.queryRow(ctx, "DashboardEpisode",
		sql.Named("id", id),
	).Scan(
		&e.ID, &e.ActorID, &e.ExpectationID, &triggerType, &triggerRef,
		&dedupeKey, &status, &phase, &e.Attempts, &e.MaxAttempts, &budget,
		&e.SourceStack, &e.SourceEnv, &owner, &payload, &res,
		&errorClass, &detail, &queued, &e.CreatedAt, &started,
		&finished, &lastStep, &archived, &cancelRequested, &traceParent,
		&out.ClaimKey, &claimState, &claimOwner, &claimFence, &claimAttempt, &claimGrant,
		&claimWT, &claimedAt, &leaseUntil, &heartbeatAt,
		&claimFinish, &claimDetail, &live, &leaseLeftMs,
		&runAfter, &workflowInstance, &workflowStep, &out.JournalSteps,
	)
	if errors.Is(err, sql.ErrNoRows) {
		return inspect.EpisodeDetail{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return inspect.EpisodeDetail{}, err
	}
	e.TriggerType, e.Status = episodes.TriggerType(triggerType), episodes.Status(status)
	e.TriggerRef, e.Payload, e.Result, e.ErrorDetail = rawJSON(triggerRef), rawJSON(payload), rawJSON(res), rawJSON(detail)
	e.DedupeKey, e.Phase, e.OwnerNode, e.ErrorClass = dedupeKey.String, phase.String, owner.String, errorClass.String
	e.StartedAt, e.FinishedAt, e.LastStepAt, e.ArchivedAt = timePtr(started), timePtr(finished), timePtr(lastStep), timePtr(archived)
	out.Budget, out.QueuedAt, out.CancelRequestedAt = rawJSON(budget), timePtr(queued), timePtr(cancelRequested)
	out.TraceParent, out.RunAfter = traceParent.String, timePtr(runAfter)
	out.WorkflowInstanceID, out.WorkflowStepID = workflowInstance, workflowStep
	if claimState != "" {
		out.Claim = &inspect.Claim{
			Key: out.ClaimKey, State: claims.State(claimState), Owner: claimOwner, Fence: claimFence,
			Attempt: claimAttempt, Grant: claims.GrantKind(claimGrant), WorkType: claimWT,
			ClaimedAt: claimedAt.Time, LeaseUntil: leaseUntil.Time, HeartbeatAt: timePtr(heartbeatAt), Live: live.Bool,
		}
		out.ClaimFinishedAt, out.ClaimErrorDetail = timePtr(claimFinish), rawJSON(claimDetail)
		out.ClaimLeaseLeft = time.Duration(leaseLeftMs) * time.Millisecond
	}
	return out, nil
}

// DashboardGrants runs DashboardGrants: the journal's steps per fence, in
// fence order.
func (s *Store) DashboardGrants(ctx context.Context, episodeID int64) ([]inspect.Grant, error) {
	rows, err := s.query(ctx, "DashboardGrants",
		sql.Named("episode_id", episodeID),
	)
	if err != nil {
		return nil, err
	}
	out := make([]inspect.Grant, 0, len(rows.rows))
	for rows.Next() {
		var g inspect.Grant
		if err := rows.Scan(&g.Fence, &g.Steps, &g.FirstStepNo, &g.LastStepNo, &g.FirstAt, &g.LastAt); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// DashboardJournal runs DashboardJournal: the last limit steps, returned
// in step order.
func (s *Store) DashboardJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error) {
	rows, err := s.query(ctx, "DashboardJournal",
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
		if err := rows.Scan(&st.StepNo, &st.Fence, &data, &st.CreatedAt); err != nil {
			return nil, err
		}
		st.Data = rawJSON(data)
		out = append(out, st)
	}
	slices.Reverse(out) // read last first
	return out, nil
}

// DashboardWorkflows runs DashboardWorkflows: a page of instances, newest
// first, each with its steps.
func (s *Store) DashboardWorkflows(ctx context.Context, q inspect.WorkflowQuery) ([]inspect.WorkflowInstance, error) {
	rows, err := s.query(ctx, "DashboardWorkflows",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("before_id", q.BeforeID),
		sql.Named("instance_id", q.InstanceID),
		sql.Named("workflow_id", q.WorkflowID),
		sql.Named("status", q.Status),
	)
	if err != nil {
		return nil, err
	}
	var out []inspect.WorkflowInstance
	for rows.Next() {
		var (
			in                      inspect.WorkflowInstance
			st                      inspect.WorkflowStep
			payload, detail, parked sql.NullString
			finished, stepUpdated   sql.NullTime
			episodeStatus           string
		)
		if err := rows.Scan(&in.ID, &in.WorkflowID, &in.Subject, &in.Env, &in.SourceStack, &in.Status, &payload,
			&detail, &in.CreatedAt, &finished, &parked, &in.DefinitionVersion,
			&st.StepID, &st.Status, &st.EpisodeID, &st.Attempts, &st.MaxAttempts,
			&stepUpdated, &episodeStatus, &st.EpisodeErrorClass); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].ID != in.ID {
			in.Payload, in.ErrorDetail, in.ParkedReason, in.FinishedAt = rawJSON(payload), rawJSON(detail), parked.String, timePtr(finished)
			out = append(out, in)
		}
		if st.StepID == "" {
			continue // an instance without step rows
		}
		st.UpdatedAt, st.EpisodeStatus = stepUpdated.Time, episodes.Status(episodeStatus)
		last := &out[len(out)-1]
		last.Steps = append(last.Steps, st)
	}
	return out, nil
}

// DashboardFindings runs DashboardFindings: a page, newest first.
func (s *Store) DashboardFindings(ctx context.Context, q inspect.FindingQuery) ([]inspect.Finding, error) {
	rows, err := s.query(ctx, "DashboardFindings",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("before_id", q.BeforeID),
		sql.Named("status", q.Status),
		sql.Named("env", optString(q.Env)),
		sql.Named("class", q.Class),
		sql.Named("key_like", likeContains(q.KeyContains)),
	)
	if err != nil {
		return nil, err
	}
	return scanDashboardFindings(rows)
}

// DashboardFindingHistory runs DashboardFindingHistory: every finding of
// key in env, newest first.
func (s *Store) DashboardFindingHistory(ctx context.Context, env, key string, limit int) ([]inspect.Finding, error) {
	rows, err := s.query(ctx, "DashboardFindingHistory",
		sql.Named("max_rows", maxRows(limit)),
		sql.Named("env", env),
		sql.Named("finding_key", key),
	)
	if err != nil {
		return nil, err
	}
	return scanDashboardFindings(rows)
}

func scanDashboardFindings(rows *resultSet) ([]inspect.Finding, error) {
	out := make([]inspect.Finding, 0, len(rows.rows))
	for rows.Next() {
		var (
			f         inspect.Finding
			data      sql.NullString
			clearedBy sql.NullInt64
			clearedAt sql.NullTime
		)
		if err := rows.Scan(&f.ID, &f.Key, &f.Env, &f.Status, &f.Class, &f.Severity, &f.Summary, &data,
			&f.ActorID, &f.SourceStack, &f.RaisedByEpisode, &f.UpdatedByEpisode,
			&clearedBy, &f.RaiseCount, &f.RaisedAt, &f.UpdatedAt, &clearedAt); err != nil {
			return nil, err
		}
		f.Data, f.ClearedByEpisode, f.ClearedAt = rawJSON(data), clearedBy.Int64, timePtr(clearedAt)
		out = append(out, f)
	}
	return out, nil
}
