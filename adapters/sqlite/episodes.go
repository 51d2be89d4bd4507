package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
)

// errNoMatch rolls back an operation of several statements (inTx)
// whose later statement matched nothing; the caller maps it to the
// operation's own outcome (claims.ErrLeaseLost, claims.ErrBusy).
var errNoMatch = errors.New("sqlite: a statement of the transaction matched nothing")

// CreateEpisode runs CreateEpisode and, when n.Owner is set, then
// CreateEpisodeGrant, in one transaction: the episode and its work claim
// land together. A duplicate reads the live episode's id (FindLiveEpisode)
// in the same transaction.
func (s *Store) CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error) {
	ctx = withLane(ctx, laneOther) // new work: see the package's Lock section
	var out episodes.Created
	sent := time.Now()
	err := s.inTx(ctx, func(s *Store) error {
		out = episodes.Created{}
		row, err := s.q.CreateEpisode(ctx, s.conn, sqlitedb.CreateEpisodeParams{
			ActorID:       n.ActorID,
			ExpectationID: n.ExpectationID,
			TriggerType:   string(n.TriggerType),
			TriggerRef:    jsonArg(n.TriggerRef),
			DedupeKey:     nullable(n.DedupeKey),
			MaxAttempts:   int64(n.MaxAttempts),
			Budget:        jsonArg(n.Budget),
			SourceStack:   n.SourceStack,
			SourceEnv:     n.SourceEnv,
			Payload:       jsonArg(n.Payload),
			TraceParent:   nullable(n.TraceParent),
			KeyVersion:    int64(episodes.KeyVersionOf(n.KeyVersion)),
			OwnerNode:     n.Owner,
			Start:         boolInt(n.Start),
		})
		if errors.Is(err, sql.ErrNoRows) {
			out.ExistingID, err = s.liveEpisode(ctx, n.DedupeKey)
			return err
		}
		if err != nil {
			return dbError("CreateEpisode", err)
		}
		ep := n.Queued(row.ID, fromMs(row.CreatedAt))
		if row.Status == string(episodes.StatusRunning) {
			started := ep.CreatedAt
			ep.Status, ep.OwnerNode, ep.StartedAt = episodes.StatusRunning, n.Owner, &started
		}
		out = episodes.Created{Created: true, Episode: ep, Started: ep.Status == episodes.StatusRunning}
		if n.Owner == "" {
			return nil
		}
		g, err := s.q.CreateEpisodeGrant(ctx, s.conn, sqlitedb.CreateEpisodeGrantParams{
			OwnerNode: n.Owner, LeaseMs: n.Lease.Milliseconds(), ID: row.ID,
		})
		if errors.Is(err, sql.ErrNoRows) {
			return nil // busy: the key's claim is held live elsewhere
		}
		if err != nil {
			return dbError("CreateEpisodeGrant", err)
		}
		out.Claim = episodes.GrantedClaim(s.grantStart(sent), g.DedupeKey, n.Owner, g.Fence, int32(g.Attempt),
			fromMs(g.LeaseUntil), fromMs(g.ClaimedAt), g.GrantKind)
		return nil
	})
	if err != nil {
		return episodes.Created{}, err
	}
	return out, nil
}

// FindLiveEpisode runs FindLiveEpisode: the live (not archived) episode
// that holds key, 0 for none. Read-only; it decides nothing
// (runner.LiveEpisodeFinder).
func (s *Store) FindLiveEpisode(ctx context.Context, key string) (int64, error) {
	return s.liveEpisode(ctx, key)
}

// liveEpisode is the live episode holding key, for a duplicate trigger,
// read by FindLiveEpisode in the duplicate's transaction. 0 for no key (a
// keyless insert is never a duplicate) or no live row.
func (s *Store) liveEpisode(ctx context.Context, key string) (int64, error) {
	if key == "" {
		return 0, nil
	}
	id, err := s.q.FindLiveEpisode(ctx, s.conn, key)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, dbError("FindLiveEpisode", err)
	}
	return id, nil
}

// StartEpisode runs StartEpisode and returns the next free step number.
func (s *Store) StartEpisode(ctx context.Context, id int64, t claims.Token) (int32, error) {
	ctx = withLane(ctx, laneHeld) // on behalf of a held lease: see the package's Lock section
	row, err := s.q.StartEpisode(ctx, s.conn, sqlitedb.StartEpisodeParams{ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, ID: id})
	if err != nil {
		return 0, episodeFenced("StartEpisode", err)
	}
	return int32(row.Column2), nil // Column2: the next free step number
}

// AppendStep runs AppendStepLease, AppendStepEpisode and AppendStep in one
// transaction; the step also extends the lease to lease.
func (s *Store) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error {
	ctx = withLane(ctx, laneHeld) // on behalf of a held lease: see the package's Lock section
	return s.inTx(ctx, func(s *Store) error {
		if _, err := s.q.AppendStepLease(ctx, s.conn, sqlitedb.AppendStepLeaseParams{
			LeaseMs: lease.Milliseconds(), ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence,
		}); err != nil {
			return episodeFenced("AppendStepLease", err)
		}
		if _, err := s.q.AppendStepEpisode(ctx, s.conn, sqlitedb.AppendStepEpisodeParams{
			ID: id, OwnerNode: t.Owner, ClaimKey: t.Key, Fence: t.Fence,
		}); err != nil {
			return episodeFenced("AppendStepEpisode", err)
		}
		_, err := s.q.AppendStep(ctx, s.conn, sqlitedb.AppendStepParams{
			StepNo: int64(stepNo), Fence: t.Fence, Data: jsonArg(data), ID: id, OwnerNode: t.Owner, ClaimKey: t.Key,
		})
		return episodeFenced("AppendStep", err)
	})
}

// FinishEpisode runs FinishEpisodeClaim, FinishEpisodeStep (f.StepNo > 0)
// and FinishEpisode in one transaction (a savepoint of the caller's, when
// the Store is bound to one); episodes.ErrLeaseLost when they matched no
// row (the grant is gone, or the episode already ended), having written
// nothing. Bound to a transaction (WithTx: Run.CompleteTx, Run.FailTx, the
// workflow engine's InTx), it then also runs DoomTransaction in it, after
// the savepoint is rolled back: that transaction's COMMIT fails
// (SQLITE_CONSTRAINT_FOREIGNKEY) and rolls it back, so a caller that
// ignores the error and commits lands nothing of it.
func (s *Store) FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	ctx = withLane(ctx, laneHeld) // on behalf of a held lease: see the package's Lock section
	err := s.finishEpisode(ctx, id, t, f)
	if _, inTx := s.conn.(*sql.Tx); inTx && errors.Is(err, episodes.ErrLeaseLost) {
		return s.doomTransaction(ctx, "FinishEpisode", t)
	}
	return err
}

func (s *Store) finishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	return s.inTx(ctx, func(s *Store) error {
		if _, err := s.q.FinishEpisodeClaim(ctx, s.conn, sqlitedb.FinishEpisodeClaimParams{
			ClaimState: f.ClaimState(), ErrorDetail: jsonArg(f.ErrorDetail),
			ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, ID: id,
		}); err != nil {
			return episodeFenced("FinishEpisodeClaim", err)
		}
		if err := s.finishStep(ctx, id, t, f.StepNo, f.StepData); err != nil {
			return err
		}
		_, err := s.q.FinishEpisode(ctx, s.conn, sqlitedb.FinishEpisodeParams{
			Status: string(f.Status), Result: jsonArg(f.Result), ErrorClass: nullable(f.ErrorClass),
			ErrorDetail: jsonArg(f.ErrorDetail), StepNo: int64(f.StepNo),
			ID: id, ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence,
		})
		return episodeFenced("FinishEpisode", err)
	})
}

// finishStep runs FinishEpisodeStep when stepNo > 0.
func (s *Store) finishStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage) error {
	if stepNo <= 0 {
		return nil
	}
	if err := s.q.FinishEpisodeStep(ctx, s.conn, sqlitedb.FinishEpisodeStepParams{
		ID: id, StepNo: int64(stepNo), Fence: t.Fence, StepData: jsonArg(data), ClaimKey: t.Key, OwnerNode: t.Owner,
	}); err != nil {
		return dbError("FinishEpisodeStep", err)
	}
	return nil
}

// FinishEpisodes runs FinishEpisodesClaims, then FinishEpisodesSteps and
// FinishEpisodes with the rows whose claim matched, in one transaction:
// the terminal writes of items, all fenced by owner, one commit. It returns
// the ids of the episodes finished; an item missing from them lost its
// grant.
func (s *Store) FinishEpisodes(ctx context.Context, owner string, items []episodes.FinishItem) ([]int64, error) {
	ctx = withLane(ctx, laneHeld) // on behalf of a held lease: see the package's Lock section
	if len(items) == 0 {
		return nil, nil
	}
	rows, err := episodes.FinishRows(owner, items)
	if err != nil {
		return nil, err
	}
	var ids []int64
	err = s.inTx(ctx, func(s *Store) error {
		ids = nil
		ended, err := s.q.FinishEpisodesClaims(ctx, s.conn, sqlitedb.FinishEpisodesClaimsParams{Rows: string(rows), OwnerNode: owner})
		if err != nil {
			return dbError("FinishEpisodesClaims", err)
		}
		if len(ended) == 0 {
			return nil
		}
		// The rows whose claim matched, as Postgres's matched CTE joins them.
		type grant struct {
			key   string
			fence int64
		}
		matched := make(map[grant]bool, len(ended))
		for _, c := range ended {
			matched[grant{c.DedupeKey, c.Fence}] = true
		}
		var keep []episodes.FinishItem
		for _, it := range items {
			if matched[grant{it.Token.Key, it.Token.Fence}] {
				keep = append(keep, it)
			}
		}
		kept, err := episodes.FinishRows(owner, keep)
		if err != nil {
			return err
		}
		if err := s.q.FinishEpisodesSteps(ctx, s.conn, sqlitedb.FinishEpisodesStepsParams{Rows: string(kept), OwnerNode: owner}); err != nil {
			return dbError("FinishEpisodesSteps", err)
		}
		ids, err = s.q.FinishEpisodes(ctx, s.conn, sqlitedb.FinishEpisodesParams{Rows: string(kept), OwnerNode: owner})
		if err != nil {
			return dbError("FinishEpisodes", err)
		}
		if len(ids) != len(keep) {
			// Every matched claim's episode was seen open by the claims
			// statement, under the same write lock: a mismatch would leave
			// a claim ended without its episode.
			return fmt.Errorf("sqlite: FinishEpisodes: %d claims ended, %d episodes finished: %w", len(keep), len(ids), errNoMatch)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// RetryEpisode runs RetryEpisodeClaim, FinishEpisodeStep (r.StepNo > 0)
// and RetryEpisode in one transaction: the episode is available again,
// due after r.Backoff, unless it ended canceled; claims.ErrLeaseLost
// (episodes.ErrLeaseLost) when the grant no longer holds the claim.
func (s *Store) RetryEpisode(ctx context.Context, id int64, t claims.Token, r episodes.Retry) (episodes.Retried, error) {
	ctx = withLane(ctx, laneHeld) // on behalf of a held lease: see the package's Lock section
	var out episodes.Retried
	err := s.inTx(ctx, func(s *Store) error {
		if _, err := s.q.RetryEpisodeClaim(ctx, s.conn, sqlitedb.RetryEpisodeClaimParams{
			ErrorDetail: jsonArg(r.ErrorDetail), ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, ID: id,
		}); err != nil {
			return episodeFenced("RetryEpisodeClaim", err)
		}
		if err := s.finishStep(ctx, id, t, r.StepNo, r.StepData); err != nil {
			return err
		}
		ep, err := s.q.RetryEpisode(ctx, s.conn, sqlitedb.RetryEpisodeParams{
			ErrorClass: nullable(r.ErrorClass), ErrorDetail: jsonArg(r.ErrorDetail), BackoffMs: r.Backoff.Milliseconds(),
			ID: id, ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence,
		})
		if err != nil {
			return episodeFenced("RetryEpisode", err)
		}
		out = episodes.Retried{Attempts: int32(ep.Attempts), Canceled: ep.Status == string(episodes.StatusCanceled)}
		switch {
		case ep.RunAfter != nil:
			out.RunAfter = fromMs(*ep.RunAfter)
		case ep.LastStepAt != nil: // canceled: the statement's instant
			out.RunAfter = fromMs(*ep.LastStepAt)
		}
		return nil
	})
	if err != nil {
		return episodes.Retried{}, err
	}
	return out, nil
}

// CancelEpisode runs CancelEpisodeTarget, CancelEpisode and, when it ended
// the episode, CancelEpisodeFence, in one transaction: the episode ends
// canceled now (and leaves the available set) when nobody holds a live
// lease on it, else its holder is asked to stop it. episodes.ErrNotFound
// or episodes.ErrNotLive when there is nothing to cancel.
func (s *Store) CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error) {
	var out episodes.Canceled
	err := s.inTx(ctx, func(s *Store) error {
		target, err := s.q.CancelEpisodeTarget(ctx, s.conn, id)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoMatch
		}
		if err != nil {
			return dbError("CancelEpisodeTarget", err)
		}
		held := boolInt(target.Held)
		row, err := s.q.CancelEpisode(ctx, s.conn, sqlitedb.CancelEpisodeParams{Held: held, ErrorDetail: jsonArg(detail), ID: id})
		if errors.Is(err, sql.ErrNoRows) {
			return errNoMatch
		}
		if err != nil {
			return dbError("CancelEpisode", err)
		}
		st := episodes.Status(row.Status)
		out = episodes.Canceled{EpisodeID: row.ID, Ended: st == episodes.StatusCanceled, Status: st}
		if row.CancelRequestedAt != nil { // always set by the statement
			out.RequestedAt = fromMs(*row.CancelRequestedAt)
		}
		if !out.Ended {
			return nil
		}
		if err := s.q.CancelEpisodeFence(ctx, s.conn, sqlitedb.CancelEpisodeFenceParams{ClaimKey: deref(target.ClaimKey), Held: held}); err != nil {
			return dbError("CancelEpisodeFence", err)
		}
		return nil
	})
	if errors.Is(err, errNoMatch) {
		return episodes.Canceled{}, s.whyNot(ctx, id, episodes.ErrNotLive)
	}
	if err != nil {
		return episodes.Canceled{}, err
	}
	return out, nil
}

// ListCancelRequests runs ListCancelRequests for the holder owner.
func (s *Store) ListCancelRequests(ctx context.Context, owner string) ([]episodes.CancelRequest, error) {
	rows, err := s.q.ListCancelRequests(ctx, s.conn, owner)
	if err != nil {
		return nil, dbError("ListCancelRequests", err)
	}
	out := make([]episodes.CancelRequest, len(rows))
	for i, r := range rows {
		out[i] = episodes.CancelRequest{EpisodeID: r.ID, Fence: r.Fence}
	}
	return out, nil
}

// RequeueEpisode runs RequeueEpisode, one statement: a failed or canceled
// episode becomes available again as its next attempt, due at once. by
// names who asked; it is not stored. episodes.ErrNotFound or episodes.ErrNotRetryable when it cannot
// be.
func (s *Store) RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error) {
	ep, err := s.q.RequeueEpisode(ctx, s.conn, id)
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.Retried{}, s.whyNot(ctx, id, episodes.ErrNotRetryable)
	}
	if err != nil {
		return episodes.Retried{}, dbError("RequeueEpisode", err)
	}
	out := episodes.Retried{Attempts: int32(ep.Attempts)}
	if ep.RunAfter != nil { // always set by the statement
		out.RunAfter = fromMs(*ep.RunAfter)
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
	r, err := s.q.GetEpisode(ctx, s.conn, id)
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.Episode{}, fmt.Errorf("episode %d: %w", id, episodes.ErrNotFound)
	}
	if err != nil {
		return episodes.Episode{}, dbError("GetEpisode", err)
	}
	return episodes.Episode{
		ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
		TriggerRef: jsonRaw(r.TriggerRef), DedupeKey: deref(r.DedupeKey), Status: episodes.Status(r.Status),
		Phase: deref(r.Phase), Attempts: int32(r.Attempts), MaxAttempts: int32(r.MaxAttempts),
		SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, OwnerNode: deref(r.OwnerNode),
		Payload: jsonRaw(r.Payload), Result: jsonRaw(r.Result), ErrorClass: deref(r.ErrorClass), ErrorDetail: jsonRaw(r.ErrorDetail),
		CreatedAt: fromMs(r.CreatedAt), StartedAt: fromMsPtr(r.StartedAt), FinishedAt: fromMsPtr(r.FinishedAt),
		LastStepAt: fromMsPtr(r.LastStepAt), ArchivedAt: fromMsPtr(r.ArchivedAt), TraceParent: deref(r.TraceParent),
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
		out[i] = episodes.Step{EpisodeID: r.EpisodeID, StepNo: int32(r.StepNo), Fence: r.Fence, Data: jsonRaw(r.Data), CreatedAt: fromMs(r.CreatedAt)}
	}
	return out, nil
}

// episodeFenced maps "no row matched the fenced statement" to
// episodes.ErrLeaseLost (claims.ErrLeaseLost).
func episodeFenced(query string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return episodes.ErrLeaseLost
	default:
		return dbError(query, err)
	}
}

// jsonArg is a JSON column's argument: nil (NULL) for no document, else
// its text (a TEXT value, which the schema's json_valid CHECK accepts).
func jsonArg(j json.RawMessage) *string {
	if len(j) == 0 {
		return nil
	}
	s := string(j)
	return &s
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

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
