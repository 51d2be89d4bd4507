package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/recovery"
)

var _ recovery.BatchRequeuer = (*Store)(nil)

// ListOrphans runs ListOrphanedEpisodes.
func (s *Store) ListOrphans(ctx context.Context, q episodes.OrphanQuery) ([]episodes.Orphan, error) {
	rows, err := s.q.ListOrphanedEpisodes(ctx, s.conn, sqlitedb.ListOrphanedEpisodesParams{
		MaxRows: rowLimit(q.Limit), SourceStack: q.Stack, SourceEnv: q.Env, StaleAfterMs: q.StaleAfter.Milliseconds(),
	})
	if err != nil {
		return nil, dbError("ListOrphanedEpisodes", err)
	}
	out := make([]episodes.Orphan, len(rows))
	for i, r := range rows {
		out[i] = episodes.Orphan{
			Episode: episodes.Episode{
				ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, Status: episodes.Status(r.Status),
				DedupeKey: deref(r.DedupeKey), Attempts: int32(r.Attempts), MaxAttempts: int32(r.MaxAttempts),
				SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, OwnerNode: deref(r.OwnerNode),
			},
			LastSeenAt: fromMs(r.LastSeenAt), ClaimState: r.ClaimState, ClaimOwner: r.ClaimOwner, GivenBack: r.GivenBack,
		}
		if r.ClaimState != "" {
			until := fromMs(r.ClaimLeaseUntil)
			out[i].ClaimLeaseUntil = &until
		}
	}
	return out, nil
}

// ClaimForRecovery runs ClaimForRecoveryGrant and ClaimForRecovery in one
// transaction, in the write gate's takeover lane; claims.ErrBusy when the
// episode is not (or no longer) an orphan, or another sweeper won it.
func (s *Store) ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error) {
	ctx = withLane(ctx, laneTakeover)
	var (
		ep episodes.Episode
		c  claims.Claim
	)
	sent := time.Now()
	err := s.inTx(ctx, func(s *Store) error {
		g, err := s.q.ClaimForRecoveryGrant(ctx, s.conn, sqlitedb.ClaimForRecoveryGrantParams{
			OwnerNode: owner, LeaseMs: lease.Milliseconds(), ID: id, StaleAfterMs: staleAfter.Milliseconds(),
		})
		if errors.Is(err, sql.ErrNoRows) {
			return claims.ErrBusy
		}
		if err != nil {
			return dbError("ClaimForRecoveryGrant", err)
		}
		r, err := s.q.ClaimForRecovery(ctx, s.conn, sqlitedb.ClaimForRecoveryParams{
			OwnerNode: owner, ID: id, ClaimKey: g.DedupeKey, Fence: g.Fence,
		})
		if errors.Is(err, sql.ErrNoRows) {
			return claims.ErrBusy
		}
		if err != nil {
			return dbError("ClaimForRecovery", err)
		}
		ep = episodes.Episode{
			ID: r.ID, ActorID: r.ActorID, ExpectationID: r.ExpectationID, TriggerType: episodes.TriggerType(r.TriggerType),
			TriggerRef: jsonRaw(r.TriggerRef), DedupeKey: deref(r.DedupeKey), Status: episodes.StatusQueued, Phase: "recovering",
			Attempts: int32(r.Attempts), MaxAttempts: int32(r.MaxAttempts), SourceStack: r.SourceStack, SourceEnv: r.SourceEnv,
			OwnerNode: owner, Payload: jsonRaw(r.Payload), CreatedAt: fromMs(r.CreatedAt),
		}
		c = episodes.GrantedClaim(s.grantStart(sent), g.DedupeKey, owner, g.Fence, int32(g.Attempt), fromMs(g.LeaseUntil), fromMs(g.ClaimedAt), g.GrantKind)
		return nil
	})
	if err != nil {
		return episodes.Episode{}, claims.Claim{}, err
	}
	return ep, c, nil
}

// RequeueOrphan runs RequeueOrphanTarget, RequeueOrphanFence (when the
// orphan has a claim) and RequeueOrphan in one transaction: recovery's
// restart, the orphan becomes available again, due at once, as its next
// attempt, or the same one when its grant was given back (or ends canceled
// if a cancel was requested).
// attempts is the count the sweeper listed; claims.ErrBusy when it is not
// (or no longer) an orphan, another sweeper took it, or it has no attempt
// left. RequeueOrphanTarget runs once before, as a plain read: a sweeper
// that lost the race to another finds out without the write lock. The
// transaction is in the write gate's takeover lane.
func (s *Store) RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error) {
	ctx = withLane(ctx, laneTakeover)
	targetParams := sqlitedb.RequeueOrphanTargetParams{ID: id, Attempts: int64(attempts), StaleAfterMs: staleAfter.Milliseconds()}
	if _, inCallersTx := s.conn.(*sql.Tx); !inCallersTx {
		_, err := s.q.RequeueOrphanTarget(ctx, s.conn, targetParams)
		if errors.Is(err, sql.ErrNoRows) {
			return episodes.Requeued{}, claims.ErrBusy
		}
		if err != nil {
			return episodes.Requeued{}, dbError("RequeueOrphanTarget", err)
		}
	}
	var out episodes.Requeued
	err := s.inTx(ctx, func(s *Store) error {
		target, err := s.q.RequeueOrphanTarget(ctx, s.conn, targetParams)
		if errors.Is(err, sql.ErrNoRows) {
			return claims.ErrBusy
		}
		if err != nil {
			return dbError("RequeueOrphanTarget", err)
		}
		if target.HasClaim {
			_, err := s.q.RequeueOrphanFence(ctx, s.conn, sqlitedb.RequeueOrphanFenceParams{OwnerNode: owner, ClaimKey: deref(target.ClaimKey)})
			if errors.Is(err, sql.ErrNoRows) {
				return claims.ErrBusy
			}
			if err != nil {
				return dbError("RequeueOrphanFence", err)
			}
		}
		ep, err := s.q.RequeueOrphan(ctx, s.conn, sqlitedb.RequeueOrphanParams{GivenBack: target.GivenBack, ID: id, Attempts: int64(attempts)})
		if errors.Is(err, sql.ErrNoRows) {
			return claims.ErrBusy
		}
		if err != nil {
			return dbError("RequeueOrphan", err)
		}
		out = episodes.Requeued{Status: episodes.Status(ep.Status), Attempts: int32(ep.Attempts), MaxAttempts: int32(ep.MaxAttempts)}
		return nil
	})
	if err != nil {
		return episodes.Requeued{}, err
	}
	return out, nil
}

// requeueHold bounds how long one transaction of RequeueOrphans holds
// the write lock before it commits and lets the lease writes waiting
// behind it in: it takes orphans while it has held the lock less than
// this, one at least. Quiet, a requeue holds the lock about a millisecond
// and one transaction serves a sweep's every orphan; on a loaded host
// (-race, two CPU hogs, four worker processes) about 50 ms, so a few share
// each transaction, each sparing the wait for the lock (about 200 ms on
// average there) and a commit.
const requeueHold = 200 * time.Millisecond

// RequeueOrphans is RequeueOrphan for each of items (recovery's
// BatchRequeuer), with the same statements and conditions, orphan by
// orphan, in as few write transactions as requeueHold allows: each orphan
// in a SAVEPOINT of its own, so one that is no longer this sweep's
// (claims.ErrBusy) is rolled back alone and the others go on. On a
// loaded host most of a lone requeue's time is the wait for SQLite's
// write lock; a sweep that restarts many orphans after a node died waits
// once per transaction instead of once per orphan (the chaos test's
// takeover of a killed worker's work went from 10-20 s to within its
// bound). Unlike RequeueOrphan's, no plain read comes first: under the
// lock, an orphan another sweeper took costs one primary-key read, less
// than a read of its own outside it (on a loaded host the CPU, not the
// lock, is what a sweep waits for most). A database error ends the transaction it happened in,
// rolled back, and is the outcome of every orphan not requeued before it.
func (s *Store) RequeueOrphans(ctx context.Context, items []episodes.RequeueItem, owner string, staleAfter time.Duration) []episodes.RequeueResult {
	out := make([]episodes.RequeueResult, len(items))
	if _, inCallersTx := s.conn.(*sql.Tx); inCallersTx {
		for i, it := range items {
			out[i].Requeued, out[i].Err = s.RequeueOrphan(ctx, it.ID, it.Attempts, owner, staleAfter)
		}
		return out
	}
	ctx = withLane(ctx, laneTakeover)
	todo := make([]int, len(items))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		var done []int
		err := s.inTx(ctx, func(tx *Store) error {
			done = done[:0]
			for _, i := range todo {
				if len(done) > 0 && time.Since(tx.lockedAt) >= requeueHold {
					break
				}
				res, err := tx.RequeueOrphan(ctx, items[i].ID, items[i].Attempts, owner, staleAfter)
				if err != nil && !errors.Is(err, claims.ErrBusy) {
					return err
				}
				out[i] = episodes.RequeueResult{Requeued: res, Err: err}
				done = append(done, i)
			}
			return nil
		})
		if err != nil {
			for _, i := range todo {
				out[i] = episodes.RequeueResult{Err: err}
			}
			break
		}
		todo = todo[len(done):]
	}
	return out
}

// AgentRecoveryPolicy runs GetAgentRecoveryPolicy; found is false when the
// actor's expectation has no definition.
func (s *Store) AgentRecoveryPolicy(ctx context.Context, actorID, expectationID string) (policy string, found bool, err error) {
	p, err := s.q.GetAgentRecoveryPolicy(ctx, s.conn, sqlitedb.GetAgentRecoveryPolicyParams{ActorID: actorID, ExpectationID: expectationID})
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, dbError("GetAgentRecoveryPolicy", err)
	}
	return p, true, nil
}

// PutAgentDefinition runs PutAgentDefinition.
func (s *Store) PutAgentDefinition(ctx context.Context, d episodes.Definition) error {
	var maxAttempts *int64
	if d.MaxAttempts > 0 {
		m := int64(d.MaxAttempts)
		maxAttempts = &m
	}
	err := s.q.PutAgentDefinition(ctx, s.conn, sqlitedb.PutAgentDefinitionParams{
		ActorID: d.ActorID, ExpectationID: d.ExpectationID, RecoveryPolicy: d.RecoveryPolicy, MaxAttempts: maxAttempts,
	})
	if err != nil {
		return dbError("PutAgentDefinition", err)
	}
	return nil
}
