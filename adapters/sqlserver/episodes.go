package sqlserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// CreateEpisode runs CreateEpisode: the episode and, when n.Owner is set,
// its work claim, in one transaction. Created is false when a live episode
// already holds the dedupe key (another node won the trigger), whether the
// batch says so with an empty result or the filtered unique index with a
// duplicate-key error.
func (s *Store) CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error) {
	var (
		created                     bool
		id                          int64
		createdAt                   time.Time
		status, claimKey, grantKind string
		fence                       int64
		attempt                     int32
		leaseUntil, claimedAt       time.Time
	)
	sent := time.Now()
	err := s.queryRow(ctx, "CreateEpisode",
		sql.Named("actor_id", n.ActorID),
		sql.Named("expectation_id", n.ExpectationID),
		sql.Named("trigger_type", string(n.TriggerType)),
		sql.Named("trigger_ref", jsonArg(n.TriggerRef)),
		sql.Named("dedupe_key", nullString(n.DedupeKey)),
		sql.Named("max_attempts", n.MaxAttempts),
		sql.Named("budget", jsonArg(n.Budget)),
		sql.Named("source_stack", n.SourceStack),
		sql.Named("source_env", n.SourceEnv),
		sql.Named("payload", jsonArg(n.Payload)),
		sql.Named("trace_parent", nullString(n.TraceParent)),
		sql.Named("key_version", episodes.KeyVersionOf(n.KeyVersion)),
		sql.Named("owner_node", n.Owner),
		sql.Named("start", n.Start),
		sql.Named("lease_ms", n.Lease.Milliseconds()),
	).Scan(&created, &id, &createdAt, &status, &claimKey, &fence, &attempt, &leaseUntil, &claimedAt, &grantKind)
	if errors.Is(err, sql.ErrNoRows) || isDuplicate(err) {
		id, err := s.liveEpisode(ctx, n.DedupeKey, 0)
		return episodes.Created{ExistingID: id}, err
	}
	if err != nil {
		return episodes.Created{}, err
	}
	if !created {
		id, err := s.liveEpisode(ctx, n.DedupeKey, id)
		return episodes.Created{ExistingID: id}, err
	}
	ep := n.Queued(id, createdAt)
	if status == string(episodes.StatusRunning) {
		ep.Status, ep.OwnerNode, ep.StartedAt = episodes.StatusRunning, n.Owner, &createdAt
	}
	return episodes.Created{
		Created: true,
		Episode: ep,
		Claim:   episodes.GrantedClaim(sent, claimKey, n.Owner, fence, attempt, leaseUntil, claimedAt, grantKind),
		Started: ep.Status == episodes.StatusRunning,
	}, nil
}

// FindLiveEpisode runs FindLiveEpisode: the live (not archived) episode
// that holds key, 0 for none. Read-only; it decides nothing
// (runner.LiveEpisodeFinder).
func (s *Store) FindLiveEpisode(ctx context.Context, key string) (int64, error) {
	var id int64
	err := s.queryRow(ctx, "FindLiveEpisode", sql.Named("dedupe_key", key)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlserver: FindLiveEpisode: %w", err)
	}
	return id, nil
}

// liveEpisode is the live episode holding key, for a duplicate trigger:
// seen when the batch read it, else read by FindLiveEpisode. 0 when it was
// archived meanwhile or could not be read (the read decides nothing).
func (s *Store) liveEpisode(ctx context.Context, key string, seen int64) (int64, error) {
	if seen != 0 || key == "" {
		return seen, nil
	}
	var id int64
	if err := s.queryRow(ctx, "FindLiveEpisode", sql.Named("dedupe_key", key)).Scan(&id); err != nil {
		// Best effort: the trigger was a duplicate whatever this read says.
		return 0, nil
	}
	return id, nil
}

// StartEpisode runs StartEpisode and returns the next free step number.
func (s *Store) StartEpisode(ctx context.Context, id int64, t claims.Token) (int32, error) {
	var (
		gotID int64
		next  int32
	)
	err := s.queryRow(ctx, "StartEpisode",
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
		sql.Named("id", id),
	).Scan(&gotID, &next)
	if err != nil {
		return 0, episodeFenced(err)
	}
	return next, nil
}

// AppendStep runs AppendStep; the step also extends the lease to lease.
func (s *Store) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error {
	var got int32
	return episodeFenced(s.queryRow(ctx, "AppendStep",
		sql.Named("lease_ms", lease.Milliseconds()),
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
		sql.Named("id", id),
		sql.Named("step_no", stepNo),
		sql.Named("data", jsonArg(data)),
	).Scan(&got))
}

// FinishEpisode runs FinishEpisode; episodes.ErrLeaseLost when it matched
// no row (the grant is gone, or the episode already ended). On its own the
// batch then changes nothing. Bound to a transaction (WithTx: Run.CompleteTx,
// Run.FailTx; InTx) it THROWs 51001 (HoldLostError), which XACT_ABORT turns
// into a rollback of that whole transaction: nothing written in it
// commits, and go-mssqldb fails the transaction's later batches and its
// COMMIT, so a caller that ignores the error lands nothing.
func (s *Store) FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	err := s.finishEpisode(ctx, id, t, f)
	var msErr mssql.Error
	if errors.As(err, &msErr) && msErr.Number == HoldLostError {
		return fmt.Errorf("sqlserver: FinishEpisode: %s: %w (the transaction is rolled back)", t, episodes.ErrLeaseLost)
	}
	return err
}

func (s *Store) finishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	var got int64
	return episodeFenced(s.queryRow(ctx, "FinishEpisode",
		sql.Named("status", string(f.Status)),
		sql.Named("result", jsonArg(f.Result)),
		sql.Named("error_class", nullString(f.ErrorClass)),
		sql.Named("error_detail", jsonArg(f.ErrorDetail)),
		sql.Named("id", id),
		sql.Named("claim_state", f.ClaimState()),
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
		sql.Named("step_no", f.StepNo),
		sql.Named("step_data", jsonArg(f.StepData)),
	).Scan(&got))
}

// RetryEpisode runs RetryEpisode; claims.ErrLeaseLost when the grant no
// longer holds the claim.
func (s *Store) RetryEpisode(ctx context.Context, id int64, t claims.Token, r episodes.Retry) (episodes.Retried, error) {
	var out episodes.Retried
	var got int64
	var status string
	err := episodeFenced(s.queryRow(ctx, "RetryEpisode",
		sql.Named("error_detail", jsonArg(r.ErrorDetail)),
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
		sql.Named("id", id),
		sql.Named("step_no", r.StepNo),
		sql.Named("step_data", jsonArg(r.StepData)),
		sql.Named("error_class", nullString(r.ErrorClass)),
		sql.Named("backoff_ms", r.Backoff.Milliseconds()),
	).Scan(&got, &out.Attempts, &status, &out.RunAfter))
	if err != nil {
		return episodes.Retried{}, err
	}
	out.Canceled = status == string(episodes.StatusCanceled)
	return out, nil
}

// CancelEpisode runs CancelEpisode: the episode ends canceled now when
// nobody holds a live lease on it, else its holder is asked to stop it.
// episodes.ErrNotFound or episodes.ErrNotLive when there is nothing to
// cancel.
func (s *Store) CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error) {
	var (
		out       episodes.Canceled
		status    string
		requested sql.NullTime
	)
	err := s.queryRow(ctx, "CancelEpisode", sql.Named("id", id), sql.Named("error_detail", jsonArg(detail))).
		Scan(&out.EpisodeID, &status, &requested)
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.Canceled{}, s.whyNot(ctx, id, episodes.ErrNotLive)
	}
	if err != nil {
		return episodes.Canceled{}, err
	}
	out.Status = episodes.Status(status)
	out.Ended, out.RequestedAt = out.Status == episodes.StatusCanceled, requested.Time
	return out, nil
}

// ListCancelRequests runs ListCancelRequests for the holder owner.
func (s *Store) ListCancelRequests(ctx context.Context, owner string) ([]episodes.CancelRequest, error) {
	rows, err := s.query(ctx, "ListCancelRequests", sql.Named("owner_node", owner))
	if err != nil {
		return nil, err
	}
	out := make([]episodes.CancelRequest, 0, len(rows.rows))
	for rows.Next() {
		var r episodes.CancelRequest
		if err := rows.Scan(&r.EpisodeID, &r.Fence); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// RequeueEpisode runs RequeueEpisode: a failed or canceled episode becomes
// available again as its next attempt, due at once. by names who asked; it
// is not stored. episodes.ErrNotFound or episodes.ErrNotRetryable when it
// cannot be.
func (s *Store) RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error) {
	var out episodes.Retried
	var got int64
	err := s.queryRow(ctx, "RequeueEpisode", sql.Named("id", id)).
		Scan(&got, &out.Attempts, &out.RunAfter)
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.Retried{}, s.whyNot(ctx, id, episodes.ErrNotRetryable)
	}
	if err != nil {
		return episodes.Retried{}, err
	}
	return out, nil
}

// whyNot tells an operator statement that matched nothing apart: no such
// episode (episodes.ErrNotFound), or not in a state it applies to (why).
func (s *Store) whyNot(ctx context.Context, id int64, why error) error {
	ep, err := s.GetEpisode(ctx, id)
	if err != nil {
		return err
	}
	return fmt.Errorf("episode %d is %s: %w", id, ep.Status, why)
}

// GetEpisode runs GetEpisode.
func (s *Store) GetEpisode(ctx context.Context, id int64) (episodes.Episode, error) {
	var (
		e                                        episodes.Episode
		triggerType, status                      string
		dedupeKey, phase, owner, errorClass      sql.NullString
		triggerRef, budget, payload, res, detail sql.NullString
		queued, started, finished, lastStep, arc sql.NullTime
		traceParent                              sql.NullString
	)
	err := s.queryRow(ctx, "GetEpisode",
		sql.Named("id", id),
	).Scan(
		&e.ID, &e.ActorID, &e.ExpectationID, &triggerType, &triggerRef, &dedupeKey,
		&status, &phase, &e.Attempts, &e.MaxAttempts, &budget, &e.SourceStack, &e.SourceEnv,
		&owner, &payload, &res, &errorClass, &detail, &queued,
		&started, &finished, &lastStep, &arc, &e.CreatedAt, &traceParent,
	)
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.Episode{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return episodes.Episode{}, err
	}
	e.TriggerType, e.Status = episodes.TriggerType(triggerType), episodes.Status(status)
	e.TriggerRef, e.Payload, e.Result, e.ErrorDetail = rawJSON(triggerRef), rawJSON(payload), rawJSON(res), rawJSON(detail)
	e.DedupeKey, e.Phase, e.OwnerNode, e.ErrorClass = dedupeKey.String, phase.String, owner.String, errorClass.String
	e.StartedAt, e.FinishedAt, e.LastStepAt, e.ArchivedAt = timePtr(started), timePtr(finished), timePtr(lastStep), timePtr(arc)
	e.TraceParent = traceParent.String
	return e, nil
}

// ListSteps runs ListSteps: the journal of one episode, in step order.
func (s *Store) ListSteps(ctx context.Context, episodeID int64) ([]episodes.Step, error) {
	rows, err := s.query(ctx, "ListSteps",
		sql.Named("episode_id", episodeID),
	)
	if err != nil {
		return nil, err
	}
	out := make([]episodes.Step, 0, len(rows.rows))
	for rows.Next() {
		var (
			st   episodes.Step
			data sql.NullString
		)
		if err := rows.Scan(&st.EpisodeID, &st.StepNo, &st.Fence, &data, &st.CreatedAt); err != nil {
			return nil, err
		}
		st.Data = rawJSON(data)
		out = append(out, st)
	}
	return out, nil
}

// episodeFenced maps "the fenced write matched nothing" to ErrLeaseLost.
func episodeFenced(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.ErrLeaseLost
	}
	return err
}

// timePtr turns a nullable datetime2 (already UTC) into a *time.Time.
func timePtr(nt sql.NullTime) *time.Time {
	if !nt.Valid {
		return nil
	}
	t := nt.Time
	return &t
}

// FinishEpisodes runs FinishEpisodes: the terminal writes of items, all
// fenced by owner, in one transaction. It returns the ids of the episodes
// finished; an item missing from them lost its grant.
func (s *Store) FinishEpisodes(ctx context.Context, owner string, items []episodes.FinishItem) ([]int64, error) {
	if len(items) == 0 {
		return nil, nil
	}
	raw, err := episodes.FinishRows(owner, items)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, "FinishEpisodes", sql.Named("rows", string(raw)), sql.Named("owner_node", owner))
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}
