package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
)

// CreateDeferredEpisode runs CreateDeferredEpisode: the unclaimed episode and
// its trigger request in one statement. A duplicate writes nothing.
func (s *Store) CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error) {
	n := d.New
	row, err := s.q.CreateDeferredEpisode(ctx, s.conn, db.CreateDeferredEpisodeParams{
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
		SourceNode:    d.SourceNode,
		Opts:          d.Opts,
		DelayMs:       d.Delay.Milliseconds(),
	})
	if err != nil {
		return episodes.DeferredCreated{}, dbError("CreateDeferredEpisode", err)
	}
	if !row.Created {
		id, err := s.liveEpisode(ctx, n.DedupeKey, row.ID)
		return episodes.DeferredCreated{ExistingID: id}, err
	}
	return episodes.DeferredCreated{
		Created:   true,
		Episode:   n.Queued(row.ID, row.CreatedAt),
		RequestID: row.RequestID,
	}, nil
}

// ClaimTriggerRequests runs ClaimTriggerRequests (FOR UPDATE SKIP LOCKED).
func (s *Store) ClaimTriggerRequests(ctx context.Context, q episodes.RequestQuery) ([]episodes.TriggerRequest, error) {
	if len(q.Runnable) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return nil, fmt.Errorf("postgres: ClaimTriggerRequests: %w", err)
	}
	rows, err := s.q.ClaimTriggerRequests(ctx, unnamedStatement{s.conn}, db.ClaimTriggerRequestsParams{
		OwnerNode: q.Owner, LeaseMs: q.Lease.Milliseconds(), SourceEnv: q.Env, SourceStack: q.Stack,
		Runnable: runnable, MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ClaimTriggerRequests", err)
	}
	out := make([]episodes.TriggerRequest, len(rows))
	for i, r := range rows {
		out[i] = episodes.TriggerRequest{
			ID: r.ID, EpisodeID: r.EpisodeID, ActorID: r.ActorID, ExpectationID: r.ExpectationID,
			SourceNode: r.SourceNode, Owner: q.Owner, Fence: r.Fence, Opts: r.Opts,
		}
	}
	return out, nil
}

// DispatchTriggerRequest runs DispatchTriggerRequest: completes the request,
// grants its episode's work claim to the request's owner and starts the
// episode under that grant. claims.ErrLeaseLost when the request claim
// lapsed and another poller holds it.
func (s *Store) DispatchTriggerRequest(ctx context.Context, r episodes.TriggerRequest, lease time.Duration) (episodes.Dispatched, error) {
	sent := time.Now()
	row, err := s.q.DispatchTriggerRequest(ctx, s.conn, db.DispatchTriggerRequestParams{
		BoundMs: s.lockBound(ctx), ID: r.ID, OwnerNode: r.Owner, Fence: r.Fence, LeaseMs: lease.Milliseconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return episodes.Dispatched{}, claims.ErrLeaseLost
	}
	if err != nil {
		return episodes.Dispatched{}, dbError("DispatchTriggerRequest", err)
	}
	return dispatched(sent, r.Owner, row), nil
}

// DispatchTriggerRequests runs DispatchTriggerRequests: the requests of one
// poller (owner) handed over in one statement, each fenced on its own
// request claim. It returns one Dispatched per request that was still the
// poller's, in request id order; a request missing from the result lapsed
// (claims.ErrLeaseLost for it alone).
func (s *Store) DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	js, err := episodes.HandOverItems(owner, reqs)
	if err != nil {
		return nil, fmt.Errorf("postgres: DispatchTriggerRequests: %w", err)
	}
	sent := time.Now()
	rows, err := s.q.DispatchTriggerRequests(ctx, s.conn, db.DispatchTriggerRequestsParams{
		BoundMs: s.lockBound(ctx), Items: js, OwnerNode: owner, LeaseMs: lease.Milliseconds(),
	})
	if err != nil {
		return nil, dbError("DispatchTriggerRequests", err)
	}
	out := make([]episodes.Dispatched, len(rows))
	for i, row := range rows {
		out[i] = dispatched(sent, owner, db.DispatchTriggerRequestRow(row))
	}
	return out, nil
}

// dispatched converts a hand-over's row; both statements return the same
// columns. sent is the instant before the statement was sent, where the
// grant's local lease clock starts.
func dispatched(sent time.Time, owner string, row db.DispatchTriggerRequestRow) episodes.Dispatched {
	d := episodes.Dispatched{
		RequestID: row.RequestID,
		EpisodeID: row.EpisodeID,
		Claim:     episodes.GrantedClaim(sent, row.ClaimKey, owner, row.ClaimFence, row.Attempt, row.LeaseUntil, row.ClaimedAt, row.GrantKind),
		Started:   row.Started,
		NextStep:  row.NextStepNo,
	}
	if row.Started {
		d.Episode = episodes.Episode{
			ID: row.EpisodeID, ActorID: deref(row.ActorID), ExpectationID: deref(row.ExpectationID),
			TriggerType: episodes.TriggerType(deref(row.TriggerType)), TriggerRef: row.TriggerRef,
			DedupeKey: deref(row.DedupeKey), Status: episodes.StatusRunning,
			Attempts: deref(row.Attempts), MaxAttempts: deref(row.MaxAttempts),
			SourceStack: deref(row.SourceStack), SourceEnv: deref(row.SourceEnv), OwnerNode: owner,
			Payload: row.Payload, Result: row.Result, ErrorClass: deref(row.ErrorClass), ErrorDetail: row.ErrorDetail,
			CreatedAt: deref(row.CreatedAt), StartedAt: row.StartedAt, LastStepAt: row.LastStepAt,
			TraceParent: deref(row.TraceParent),
		}
	}
	return d
}

// ExpireTriggerRequests runs ExpireTriggerRequests.
func (s *Store) ExpireTriggerRequests(ctx context.Context, q episodes.ExpireQuery) ([]episodes.Expired, error) {
	rows, err := s.q.ExpireTriggerRequests(ctx, s.conn, db.ExpireTriggerRequestsParams{
		SourceEnv: q.Env, SourceStack: q.Stack, TtlMs: q.TTL.Milliseconds(), AllEnvs: q.AllEnvs,
	})
	if err != nil {
		return nil, dbError("ExpireTriggerRequests", err)
	}
	out := make([]episodes.Expired, len(rows))
	for i, r := range rows {
		out[i] = episodes.Expired{RequestID: r.ID, EpisodeID: r.EpisodeID, EpisodeCanceled: r.EpisodeCanceled}
	}
	return out, nil
}

// ListTriggerRequests runs ListTriggerRequests, an operator read.
func (s *Store) ListTriggerRequests(ctx context.Context, q episodes.RequestListQuery) ([]episodes.RequestInfo, error) {
	rows, err := s.q.ListTriggerRequests(ctx, s.conn, db.ListTriggerRequestsParams{
		SourceEnv: q.Env, Status: q.Status, MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ListTriggerRequests", err)
	}
	out := make([]episodes.RequestInfo, len(rows))
	for i, r := range rows {
		out[i] = episodes.RequestInfo{
			ID: r.ID, EpisodeID: r.EpisodeID, ActorID: r.ActorID, ExpectationID: r.ExpectationID,
			SourceNode: r.SourceNode, SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, Status: r.Status,
			ClaimedBy: r.ClaimedBy, Fence: r.Fence, Opts: r.Opts, CreatedAt: r.CreatedAt,
			ClaimedAt: r.ClaimedAt, ClaimUntil: r.ClaimUntil, FinishedAt: r.FinishedAt,
		}
	}
	return out, nil
}

// CreateDeferredEpisodes runs CreateDeferredEpisodes: b's items created
// available in one statement, each deduplicated on its own key. One result
// per item, in b.Items' order.
func (s *Store) CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error) {
	if len(b.Items) == 0 {
		return nil, nil
	}
	cols, err := b.Columns()
	if err != nil {
		return nil, err
	}
	rows, err := s.q.CreateDeferredEpisodes(ctx, s.conn, db.CreateDeferredEpisodesParams{
		DedupeKeys: cols.DedupeKeys, KeyVersions: cols.KeyVersions, TriggerRefs: cols.TriggerRefs,
		Payloads: cols.Payloads, TraceParents: cols.TraceParents, ActorID: b.ActorID, ExpectationID: b.ExpectationID, TriggerType: string(b.TriggerType),
		MaxAttempts: b.MaxAttempts, Budget: b.Budget, SourceStack: b.SourceStack, SourceEnv: b.SourceEnv,
		SourceNode: b.SourceNode, DelayMs: b.Delay.Milliseconds(),
	})
	if err != nil {
		return nil, dbError("CreateDeferredEpisodes", err)
	}
	byKey := make(map[string]db.CreateDeferredEpisodesRow, len(rows))
	for _, r := range rows {
		byKey[r.DedupeKey] = r
	}
	out := make([]episodes.DeferredCreated, len(b.Items))
	for i, it := range b.Items {
		r, ok := byKey[it.DedupeKey]
		switch {
		case ok && r.Created:
			out[i] = episodes.DeferredCreated{Created: true, Episode: b.Episode(i, r.ID, r.CreatedAt), RequestID: r.RequestID}
		default:
			id, err := s.liveEpisode(ctx, it.DedupeKey, r.ID)
			if err != nil {
				return nil, err
			}
			out[i] = episodes.DeferredCreated{ExistingID: id}
		}
	}
	return out, nil
}

// ReleaseTriggerRequests runs ReleaseTriggerRequests: owner's claims on
// reqs given back, each fenced on its own request claim, and the pollers
// woken. It returns the ids released; a request missing from them was not
// this poller's any more (its claim lapsed, or it was handed over).
func (s *Store) ReleaseTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest) ([]int64, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	js, err := episodes.HandOverItems(owner, reqs)
	if err != nil {
		return nil, fmt.Errorf("postgres: ReleaseTriggerRequests: %w", err)
	}
	ids, err := s.q.ReleaseTriggerRequests(ctx, s.conn, db.ReleaseTriggerRequestsParams{Items: js, OwnerNode: owner})
	if err != nil {
		return nil, dbError("ReleaseTriggerRequests", err)
	}
	return ids, nil
}

// NextTriggerRequestDue runs NextTriggerRequestDue for q's scope (Env,
// Stack, Runnable): how long until its next request becomes claimable on
// the database clock; false when none is waiting.
func (s *Store) NextTriggerRequestDue(ctx context.Context, q episodes.RequestQuery) (time.Duration, bool, error) {
	if len(q.Runnable) == 0 {
		return 0, false, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return 0, false, fmt.Errorf("postgres: NextTriggerRequestDue: %w", err)
	}
	ms, err := s.q.NextTriggerRequestDue(ctx, s.conn, db.NextTriggerRequestDueParams{
		SourceEnv: q.Env, SourceStack: q.Stack, Runnable: runnable,
	})
	if err != nil {
		return 0, false, dbError("NextTriggerRequestDue", err)
	}
	wait, ok := episodes.DueWait(ms)
	return wait, ok, nil
}
