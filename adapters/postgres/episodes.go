package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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
		TraceParent:   nullable(n.TraceParent),
		KeyVersion:    episodes.KeyVersionOf(n.KeyVersion),
		OwnerNode:     n.Owner,
		Start:         n.Start,
		LeaseMs:       n.Lease.Milliseconds(),
	})
	if err != nil {
		return episodes.Created{}, dbError("CreateEpisode", err)
	}
	if !row.Created {
		id, err := s.liveEpisode(ctx, n.DedupeKey, row.ID)
		return episodes.Created{ExistingID: id}, err
	}
	ep := n.Queued(row.ID, row.CreatedAt)
	if row.Status == string(episodes.StatusRunning) {
		ep.Status, ep.OwnerNode, ep.StartedAt = episodes.StatusRunning, n.Owner, &row.CreatedAt
	}
	return episodes.Created{
		Created: true,
		Episode: ep,
		Claim:   episodes.GrantedClaim(sent, row.ClaimKey, n.Owner, row.Fence, row.Attempt, row.LeaseUntil, row.ClaimedAt, row.GrantKind),
		Started: ep.Status == episodes.StatusRunning,
	}, nil
}

// FindLiveEpisode runs FindLiveEpisode: the live (not archived) episode
// that holds key, 0 for none. Read-only; it decides nothing
// (runner.LiveEpisodeFinder).
func (s *Store) FindLiveEpisode(ctx context.Context, key string) (int64, error) {
	id, err := s.q.FindLiveEpisode(ctx, s.conn, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, dbError("FindLiveEpisode", err)
	}
	return id, nil
}

// liveEpisode is the live episode holding key, for a duplicate trigger:
// seen, when the creating statement's snapshot showed it, else read by
// FindLiveEpisode (its winner committed after that snapshot began). 0 when
// it was archived meanwhile or could not be read (the read decides nothing).
func (s *Store) liveEpisode(ctx context.Context, key string, seen int64) (int64, error) {
	if seen != 0 || key == "" {
		return seen, nil
	}
	id, err := s.q.FindLiveEpisode(ctx, s.conn, key)
	if err != nil {
		// Best effort (no row: archived meanwhile): the trigger was a
		// duplicate whatever this read says.
		return 0, nil
	}
	return id, nil
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

// FinishEpisode runs FinishEpisode; episodes.ErrLeaseLost when it matched
// no row (the grant is gone, or the episode already ended), having written
// nothing. Bound to a transaction (New(tx): Run.CompleteTx, Run.FailTx, the
// workflow engine's InTx), it then also makes that transaction unable to
// commit (doomTransaction): nothing written in it can commit, and a caller
// that ignores the error and commits gets the commit's error, not a
// zombie's effect.
func (s *Store) FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	err := s.finishEpisode(ctx, id, t, f)
	if tx, inTx := s.conn.(pgx.Tx); inTx && errors.Is(err, episodes.ErrLeaseLost) {
		return s.doomTransaction(ctx, tx, t, err)
	}
	return err
}

// doomTransaction makes tx unable to commit after a fenced write in it
// matched no row (lost), and returns lost. It runs DoomTransaction
// (leasehold_lease_lost, migration 00011), which raises LH001 and so aborts
// the transaction, under ctx like every other statement of the run: the
// run's context ends at its lease's local deadline, and a slow or frozen
// link must not keep the caller past it. Whatever stops the statement,
// the transaction cannot commit: it raised, or another Postgres error
// aborted the transaction, or a round trip that ctx interrupted closed the
// connection (pgx closes it); and when nothing was sent (ctx was done
// already) or the statement did not raise, the connection is closed here,
// so the server rolls the transaction back.
func (s *Store) doomTransaction(ctx context.Context, tx pgx.Tx, t claims.Token, lost error) error {
	err := s.q.DoomTransaction(ctx, s.conn, db.DoomTransactionParams{ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == HoldLostCode:
		return fmt.Errorf("postgres: FinishEpisode: %s: %w (the transaction is aborted)", t, lost)
	case errors.As(err, &pgErr):
		// Another error aborted the transaction just as well.
		return errors.Join(lost, dbError("DoomTransaction", err))
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), doomCloseTimeout)
	defer cancel()
	_ = tx.Conn().Close(closeCtx) // closes the socket whatever it returns
	if err == nil {
		return fmt.Errorf("postgres: FinishEpisode: %s: %w, and DoomTransaction did not raise (the connection was closed instead)", t, lost)
	}
	return errors.Join(lost, dbError("DoomTransaction", err), errors.New("postgres: the transaction's connection was closed, so it cannot commit"))
}

// doomCloseTimeout bounds doomTransaction's close of a connection: the
// Terminate message it sends first is a courtesy; the socket is closed
// however that ends.
const doomCloseTimeout = 100 * time.Millisecond

func (s *Store) finishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
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
	return episodes.Retried{Attempts: row.Attempts, RunAfter: row.RunAfter,
		Canceled: row.Status == string(episodes.StatusCanceled)}, nil
}

// CancelEpisode runs CancelEpisode: the episode ends canceled now when
// nobody holds a live lease on it, else its holder is asked to stop it.
// episodes.ErrNotFound or episodes.ErrNotLive when there is nothing to
// cancel.
func (s *Store) CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error) {
	row, err := s.q.CancelEpisode(ctx, s.conn, db.CancelEpisodeParams{ID: id, ErrorDetail: detail})
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Canceled{}, s.whyNot(ctx, id, episodes.ErrNotLive)
	}
	if err != nil {
		return episodes.Canceled{}, dbError("CancelEpisode", err)
	}
	st := episodes.Status(row.Status)
	return episodes.Canceled{EpisodeID: row.ID, Ended: st == episodes.StatusCanceled, Status: st, RequestedAt: row.CancelRequestedAt}, nil
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

// RequeueEpisode runs RequeueEpisode: a failed or canceled episode becomes
// available again as its next attempt, due at once. by names who asked; it
// is not stored. episodes.ErrNotFound or episodes.ErrNotRetryable when it
// cannot be.
func (s *Store) RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error) {
	row, err := s.q.RequeueEpisode(ctx, s.conn, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Retried{}, s.whyNot(ctx, id, episodes.ErrNotRetryable)
	}
	if err != nil {
		return episodes.Retried{}, dbError("RequeueEpisode", err)
	}
	return episodes.Retried{Attempts: row.Attempts, RunAfter: row.RunAfter}, nil
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
		LastStepAt: r.LastStepAt, ArchivedAt: r.ArchivedAt, TraceParent: deref(r.TraceParent),
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

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
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
			LastSeenAt: r.LastSeenAt, ClaimState: r.ClaimState, ClaimOwner: r.ClaimOwner, GivenBack: r.GivenBack,
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
	r, err := s.q.ClaimForRecovery(ctx, s.conn, db.ClaimForRecoveryParams{
		BoundMs: s.lockBound(ctx), ID: id, StaleAfterMs: staleAfter.Milliseconds(), OwnerNode: owner, LeaseMs: lease.Milliseconds(),
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

// RequeueOrphan runs RequeueOrphanLock and RequeueOrphan in one pipelined
// batch (one implicit transaction), recovery's restart: the orphan becomes available again as its
// next attempt, or the same one when its grant was given back (or ends
// canceled if a cancel was requested). attempts is the count the sweeper
// listed; claims.ErrBusy when it is not (or no longer) an orphan, another
// sweeper took it, or it has no attempt left.
func (s *Store) RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error) {
	conn := s.pipeline()
	// Queued on the pipeline (sent with RequeueOrphan) outside a caller's
	// transaction; run at once inside one.
	if err := s.q.RequeueOrphanLock(ctx, conn, id); err != nil {
		return episodes.Requeued{}, dbError("RequeueOrphanLock", err)
	}
	r, err := s.q.RequeueOrphan(ctx, conn, db.RequeueOrphanParams{
		BoundMs: s.lockBound(ctx), ID: id, Attempts: attempts, StaleAfterMs: staleAfter.Milliseconds(), OwnerNode: owner,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Requeued{}, claims.ErrBusy
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
		// RequeueOrphanLock's NOWAIT (or RequeueOrphan's lock_timeout on
		// the episode row): another sweeper or the holder has the orphan's
		// rows, and nothing was applied. The next sweep looks again.
		return episodes.Requeued{}, fmt.Errorf("postgres: RequeueOrphan: %w: %w: %w", claims.ErrBusy, claims.ErrLocked, err)
	}
	if err != nil {
		return episodes.Requeued{}, dbError("RequeueOrphan", err)
	}
	return episodes.Requeued{Status: episodes.Status(r.Status), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts}, nil
}

// RequeueOrphans is RequeueOrphan for each of items (recovery's
// BatchRequeuer): the same statements, conditions and outcomes, orphan by
// orphan, but on a pool up to requeuesAtOnce of them at a time. Each is a
// round trip, and on a loaded host round trips are slow (a sweep of 40
// orphans, one at a time: 12 s); a requeue of a claim-less orphan may also
// wait on its episode row (up to claims.TxBound). Concurrent, they
// overlap. A Store over one connection or a caller's transaction requeues
// one at a time, as RequeueOrphan would.
func (s *Store) RequeueOrphans(ctx context.Context, items []episodes.RequeueItem, owner string, staleAfter time.Duration) []episodes.RequeueResult {
	atOnce := 1
	if pool, ok := s.conn.(*pgxpool.Pool); ok {
		// A quarter of the pool at most, so the node's own writes
		// (renewals first) still find a connection during a sweep.
		atOnce = min(requeuesAtOnce, int(pool.Config().MaxConns)/4)
	}
	return episodes.RequeueEach(items, atOnce, func(it episodes.RequeueItem) (episodes.Requeued, error) {
		return s.RequeueOrphan(ctx, it.ID, it.Attempts, owner, staleAfter)
	})
}

// requeuesAtOnce bounds the requeues one RequeueOrphans runs at a time.
const requeuesAtOnce = 4

// lockNotAvailable is SQLSTATE 55P03: a NOWAIT lock found the row locked,
// or a lock wait ran out of lock_timeout.
const lockNotAvailable = "55P03"

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

// FinishEpisodes runs FinishEpisodes: the terminal writes of items, all
// fenced by owner, in one statement. It returns the ids of the episodes
// finished; an item missing from them lost its grant.
func (s *Store) FinishEpisodes(ctx context.Context, owner string, items []episodes.FinishItem) ([]int64, error) {
	if len(items) == 0 {
		return nil, nil
	}
	rows, err := episodes.FinishRows(owner, items)
	if err != nil {
		return nil, err
	}
	ids, err := s.q.FinishEpisodes(ctx, s.conn, db.FinishEpisodesParams{Rows: rows, OwnerNode: owner})
	if err != nil {
		return nil, dbError("FinishEpisodes", err)
	}
	return ids, nil
}
