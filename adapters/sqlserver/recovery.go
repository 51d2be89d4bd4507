package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// ListOrphans runs ListOrphanedEpisodes.
func (s *Store) ListOrphans(ctx context.Context, q episodes.OrphanQuery) ([]episodes.Orphan, error) {
	rows, err := s.query(ctx, "ListOrphanedEpisodes",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("source_stack", q.Stack),
		sql.Named("source_env", q.Env),
		sql.Named("stale_after_ms", q.StaleAfter.Milliseconds()),
	)
	if err != nil {
		return nil, err
	}
	out := make([]episodes.Orphan, 0, len(rows.rows))
	for rows.Next() {
		var (
			o                                episodes.Orphan
			status                           string
			dedupeKey, owner, cState, cOwner sql.NullString
			cLeaseUntil                      sql.NullTime
		)
		e := &o.Episode
		err := rows.Scan(&e.ID, &e.ActorID, &e.ExpectationID, &status, &dedupeKey, &e.Attempts,
			&e.MaxAttempts, &e.SourceStack, &e.SourceEnv, &owner, &o.LastSeenAt,
			&cState, &cOwner, &cLeaseUntil, &o.GivenBack)
		if err != nil {
			return nil, err
		}
		e.Status, e.DedupeKey, e.OwnerNode = episodes.Status(status), dedupeKey.String, owner.String
		o.ClaimState, o.ClaimOwner, o.ClaimLeaseUntil = cState.String, cOwner.String, timePtr(cLeaseUntil)
		out = append(out, o)
	}
	return out, nil
}

// ClaimForRecovery runs ClaimForRecovery; claims.ErrBusy when the episode is
// not (or no longer) an orphan, or another sweeper won it (an empty result,
// or a duplicate-key error from a concurrent first grant of its claim).
func (s *Store) ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error) {
	var (
		ep                 episodes.Episode
		c                  claims.Claim
		triggerType, grant string
		dedupeKey, payload sql.NullString
		triggerRef         sql.NullString
	)
	sent := time.Now()
	err := s.queryRow(ctx, "ClaimForRecovery",
		sql.Named("id", id),
		sql.Named("stale_after_ms", staleAfter.Milliseconds()),
		sql.Named("owner_node", owner),
		sql.Named("lease_ms", lease.Milliseconds()),
	).Scan(
		&ep.ID, &ep.ActorID, &ep.ExpectationID, &triggerType, &triggerRef, &dedupeKey,
		&ep.Attempts, &ep.MaxAttempts, &ep.SourceStack, &ep.SourceEnv, &payload,
		&ep.CreatedAt, &c.Key, &c.Fence, &c.Attempt, &c.LeaseUntil, &c.ClaimedAt, &grant,
	)
	if errors.Is(err, sql.ErrNoRows) || isDuplicate(err) {
		return episodes.Episode{}, claims.Claim{}, claims.ErrBusy
	}
	if err != nil {
		return episodes.Episode{}, claims.Claim{}, err
	}
	ep.TriggerType, ep.DedupeKey, ep.Payload = episodes.TriggerType(triggerType), dedupeKey.String, rawJSON(payload)
	ep.TriggerRef = rawJSON(triggerRef)
	ep.Status, ep.Phase, ep.OwnerNode = episodes.StatusQueued, "recovering", owner
	c.Owner, c.State, c.Grant, c.WorkType = owner, claims.StateClaimed, claims.GrantKind(grant), "episode"
	c.SetLocalStart(sent)
	return ep, c, nil
}

// RequeueOrphans is RequeueOrphan for each of items (recovery's
// BatchRequeuer): the same statement and outcome, orphan by orphan, up to
// requeuesAtOnce at a time on the pool (a quarter of MaxOpenConns at most
// when it is set), so the row-lock waits of one sweep's requeues overlap
// instead of adding up (see the Postgres adapter's RequeueOrphans, where
// this was measured). Inside a transaction, one at a time.
func (s *Store) RequeueOrphans(ctx context.Context, items []episodes.RequeueItem, owner string, staleAfter time.Duration) []episodes.RequeueResult {
	atOnce := 1
	if s.tx == nil {
		atOnce = requeuesAtOnce
		if m := s.db.Stats().MaxOpenConnections; m > 0 {
			atOnce = min(atOnce, m/4)
		}
	}
	return episodes.RequeueEach(items, atOnce, func(it episodes.RequeueItem) (episodes.Requeued, error) {
		return s.RequeueOrphan(ctx, it.ID, it.Attempts, owner, staleAfter)
	})
}

// requeuesAtOnce bounds the requeues one RequeueOrphans runs at a time.
const requeuesAtOnce = 4

// RequeueOrphan runs RequeueOrphan, recovery's restart: the orphan becomes
// available again as its next attempt, or the same one when its grant was
// given back (or ends canceled if a cancel was requested). attempts is the
// count the sweeper listed; claims.ErrBusy when it is not (or no longer) an
// orphan, another sweeper took it, or it has no attempt left.
func (s *Store) RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error) {
	var (
		out    episodes.Requeued
		got    int64
		status string
	)
	err := s.queryRow(ctx, "RequeueOrphan",
		sql.Named("id", id),
		sql.Named("attempts", attempts),
		sql.Named("stale_after_ms", staleAfter.Milliseconds()),
		sql.Named("owner_node", owner),
	).Scan(&got, &status, &out.Attempts, &out.MaxAttempts)
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.Requeued{}, claims.ErrBusy
	}
	if err != nil {
		return episodes.Requeued{}, err
	}
	out.Status = episodes.Status(status)
	return out, nil
}

// AgentRecoveryPolicy runs GetAgentRecoveryPolicy; found is false when the
// actor's expectation has no definition.
func (s *Store) AgentRecoveryPolicy(ctx context.Context, actorID, expectationID string) (policy string, found bool, err error) {
	err = s.queryRow(ctx, "GetAgentRecoveryPolicy",
		sql.Named("actor_id", actorID),
		sql.Named("expectation_id", expectationID),
	).Scan(&policy)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return policy, true, nil
}

// PutAgentDefinition runs PutAgentDefinition.
func (s *Store) PutAgentDefinition(ctx context.Context, d episodes.Definition) error {
	var maxAttempts any // nil: NULL, not recorded
	if d.MaxAttempts > 0 {
		maxAttempts = d.MaxAttempts
	}
	return s.exec(ctx, "PutAgentDefinition",
		sql.Named("actor_id", d.ActorID),
		sql.Named("expectation_id", d.ExpectationID),
		sql.Named("recovery_policy", d.RecoveryPolicy),
		sql.Named("max_attempts", maxAttempts),
	)
}
