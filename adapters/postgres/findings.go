package postgres

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/findings"
)

var _ findings.Store = (*Store)(nil)

// RaiseFinding runs RaiseFinding.
func (s *Store) RaiseFinding(ctx context.Context, t claims.Token, episodeID int64, r findings.Raise) (findings.Finding, error) {
	row, err := s.q.RaiseFinding(ctx, s.conn, db.RaiseFindingParams{
		ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, EpisodeID: episodeID,
		FindingKey: r.Key, Class: r.Class, Severity: r.Severity, Summary: r.Summary, Data: r.Data,
	})
	if err != nil {
		return findings.Finding{}, dbError("RaiseFinding", err)
	}
	if row.LeaseHeld == 0 {
		return findings.Finding{}, findings.ErrLeaseLost
	}
	if row.ID == nil {
		// The insert either inserts or absorbs; no row with the lease held
		// would mean the statement no longer does what it says.
		return findings.Finding{}, errors.New("postgres: RaiseFinding: lease held but no finding returned")
	}
	return findings.Finding{
		ID: *row.ID, Key: *row.FindingKey, Env: *row.Env, Status: *row.Status, Class: *row.Class,
		Severity: *row.Severity, Summary: *row.Summary, Data: row.Data, ActorID: *row.ActorID,
		SourceStack: *row.SourceStack, RaisedByEpisode: *row.RaisedByEpisode,
		UpdatedByEpisode: *row.UpdatedByEpisode, RaiseCount: *row.RaiseCount,
		RaisedAt: *row.RaisedAt, UpdatedAt: *row.UpdatedAt,
	}, nil
}

// UpdateFinding runs UpdateFinding.
func (s *Store) UpdateFinding(ctx context.Context, t claims.Token, episodeID int64, key string, u findings.Update) (bool, error) {
	row, err := s.q.UpdateFinding(ctx, s.conn, db.UpdateFindingParams{
		ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, EpisodeID: episodeID,
		Severity: u.Severity, Summary: u.Summary, Data: u.Data, FindingKey: key,
	})
	if err != nil {
		return false, dbError("UpdateFinding", err)
	}
	if row.LeaseHeld == 0 {
		return false, findings.ErrLeaseLost
	}
	return row.Updated > 0, nil
}

// ClearFinding runs ClearFinding.
func (s *Store) ClearFinding(ctx context.Context, t claims.Token, episodeID int64, key string) (bool, error) {
	row, err := s.q.ClearFinding(ctx, s.conn, db.ClearFindingParams{
		ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, EpisodeID: episodeID, FindingKey: key,
	})
	if err != nil {
		return false, dbError("ClearFinding", err)
	}
	if row.LeaseHeld == 0 {
		return false, findings.ErrLeaseLost
	}
	return row.Cleared > 0, nil
}

// ActiveFindings runs ListActiveFindings.
func (s *Store) ActiveFindings(ctx context.Context, q findings.Query) ([]findings.Finding, error) {
	rows, err := s.q.ListActiveFindings(ctx, s.conn, db.ListActiveFindingsParams{
		Env: q.Env, Class: q.Class, ActorID: q.ActorID, FindingKey: q.Key, MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ListActiveFindings", err)
	}
	out := make([]findings.Finding, len(rows))
	for i, r := range rows {
		out[i] = findings.Finding{
			ID: r.ID, Key: r.FindingKey, Env: r.Env, Status: r.Status, Class: r.Class, Severity: r.Severity,
			Summary: r.Summary, Data: r.Data, ActorID: r.ActorID, SourceStack: r.SourceStack,
			RaisedByEpisode: r.RaisedByEpisode, UpdatedByEpisode: r.UpdatedByEpisode, RaiseCount: r.RaiseCount,
			RaisedAt: r.RaisedAt, UpdatedAt: r.UpdatedAt,
		}
	}
	return out, nil
}
