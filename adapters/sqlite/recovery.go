package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
)

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
			LastSeenAt: fromMs(r.LastSeenAt), ClaimState: r.ClaimState, ClaimOwner: r.ClaimOwner,
		}
		if r.ClaimState != "" {
			until := fromMs(r.ClaimLeaseUntil)
			out[i].ClaimLeaseUntil = &until
		}
	}
	return out, nil
}

// ClaimForRecovery runs ClaimForRecoveryGrant and ClaimForRecovery in one
// transaction; claims.ErrBusy when the episode is not (or no longer) an
// orphan, or another sweeper won it.
func (s *Store) ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error) {
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
		c = episodes.GrantedClaim(sent, g.DedupeKey, owner, g.Fence, int32(g.Attempt), fromMs(g.LeaseUntil), fromMs(g.ClaimedAt), g.GrantKind)
		return nil
	})
	if err != nil {
		return episodes.Episode{}, claims.Claim{}, err
	}
	return ep, c, nil
}

// RequeueOrphan runs RequeueOrphanTarget, RequeueOrphanFence (when the
// orphan has a claim), RequeueOrphan and, unless it ended canceled,
// ReopenTriggerRequest in one transaction: recovery's restart, the orphan
// becomes available again as its next attempt (or ends canceled if a
// cancel was requested). attempts is the count the sweeper listed;
// claims.ErrBusy when it is not (or no longer) an orphan, another sweeper
// took it (its attempts changed), or it has no attempt left.
func (s *Store) RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error) {
	var out episodes.Requeued
	err := s.inTx(ctx, func(s *Store) error {
		target, err := s.q.RequeueOrphanTarget(ctx, s.conn, sqlitedb.RequeueOrphanTargetParams{
			ID: id, Attempts: int64(attempts), StaleAfterMs: staleAfter.Milliseconds(),
		})
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
		ep, err := s.q.RequeueOrphan(ctx, s.conn, sqlitedb.RequeueOrphanParams{ID: id, Attempts: int64(attempts)})
		if errors.Is(err, sql.ErrNoRows) {
			return claims.ErrBusy
		}
		if err != nil {
			return dbError("RequeueOrphan", err)
		}
		out = episodes.Requeued{Status: episodes.Status(ep.Status), Attempts: int32(ep.Attempts), MaxAttempts: int32(ep.MaxAttempts)}
		if out.Status != episodes.StatusQueued {
			return nil
		}
		req, err := s.q.ReopenTriggerRequest(ctx, s.conn, sqlitedb.ReopenTriggerRequestParams{SourceNode: owner, EpisodeID: id})
		if errors.Is(err, sql.ErrNoRows) {
			return claims.ErrBusy
		}
		if err != nil {
			return dbError("ReopenTriggerRequest", err)
		}
		out.RequestID = req.ID
		return nil
	})
	if err != nil {
		return episodes.Requeued{}, err
	}
	return out, nil
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
