package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
)

// CreateDeferredEpisode runs CreateDeferredEpisode: the episode, created
// available, in one statement. A duplicate writes nothing.
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
		Created: true,
		Episode: n.Queued(row.ID, row.CreatedAt),
	}, nil
}

// ClaimAvailable runs ClaimAvailable: a poll, in one statement. Every
// picked episode comes back; one granted to q.Owner was started under that
// grant, whose claim is stamped with the instant before the statement was
// sent (where its local lease clock starts).
func (s *Store) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	if len(q.Runnable) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return nil, fmt.Errorf("postgres: ClaimAvailable: %w", err)
	}
	sent := time.Now()
	rows, err := s.q.ClaimAvailable(ctx, unnamedStatement{s.conn}, db.ClaimAvailableParams{
		BoundMs: s.lockBound(ctx), OwnerNode: q.Owner, LeaseMs: q.Lease.Milliseconds(),
		SourceEnv: q.Env, SourceStack: q.Stack, Runnable: runnable, MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ClaimAvailable", err)
	}
	out := make([]episodes.Dispatched, len(rows))
	for i, row := range rows {
		out[i] = dispatched(sent, q.Owner, row)
	}
	return out, nil
}

// dispatched converts one of ClaimAvailable's rows. sent is the instant
// before the statement was sent, where the grant's local lease clock
// starts.
func dispatched(sent time.Time, owner string, row db.ClaimAvailableRow) episodes.Dispatched {
	d := episodes.Dispatched{
		EpisodeID:     row.EpisodeID,
		ActorID:       row.PickedActorID,
		ExpectationID: row.PickedExpectationID,
		Opts:          row.Opts,
		Claim:         episodes.GrantedClaim(sent, row.ClaimKey, owner, row.ClaimFence, row.Attempt, row.LeaseUntil, row.ClaimedAt, row.GrantKind),
		Started:       row.Started,
		NextStep:      row.NextStepNo,
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

// ExpireAvailable runs ExpireAvailable and returns the episodes it
// canceled.
func (s *Store) ExpireAvailable(ctx context.Context, q episodes.ExpireQuery) ([]int64, error) {
	ids, err := s.q.ExpireAvailable(ctx, s.conn, db.ExpireAvailableParams{
		SourceEnv: q.Env, SourceStack: q.Stack, TtlMs: q.TTL.Milliseconds(), AllEnvs: q.AllEnvs,
	})
	if err != nil {
		return nil, dbError("ExpireAvailable", err)
	}
	return ids, nil
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
		DelayMs: b.Delay.Milliseconds(),
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
			out[i] = episodes.DeferredCreated{Created: true, Episode: b.Episode(i, r.ID, r.CreatedAt)}
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

// NextAvailableDue runs NextAvailableDue for q's scope (Env, Stack,
// Runnable): how long until its next available episode falls due on the
// database clock; false when none is waiting.
func (s *Store) NextAvailableDue(ctx context.Context, q episodes.AvailableQuery) (time.Duration, bool, error) {
	if len(q.Runnable) == 0 {
		return 0, false, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return 0, false, fmt.Errorf("postgres: NextAvailableDue: %w", err)
	}
	ms, err := s.q.NextAvailableDue(ctx, s.conn, db.NextAvailableDueParams{
		SourceEnv: q.Env, SourceStack: q.Stack, Runnable: runnable,
	})
	if err != nil {
		return 0, false, dbError("NextAvailableDue", err)
	}
	wait, ok := episodes.DueWait(ms)
	return wait, ok, nil
}
