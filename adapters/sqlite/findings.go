package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/findings"
)

var _ findings.Store = (*Store)(nil)

// RaiseFinding runs RaiseFinding, one statement: no row back means the
// fence check failed and nothing was written.
func (s *Store) RaiseFinding(ctx context.Context, t claims.Token, episodeID int64, r findings.Raise) (findings.Finding, error) {
	row, err := s.q.RaiseFinding(ctx, s.conn, sqlitedb.RaiseFindingParams{
		ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, EpisodeID: episodeID,
		FindingKey: r.Key, Class: r.Class, Severity: r.Severity, Summary: r.Summary, Data: jsonText(r.Data),
	})
	if errors.Is(err, sql.ErrNoRows) {
		return findings.Finding{}, findings.ErrLeaseLost
	}
	if err != nil {
		return findings.Finding{}, dbError("RaiseFinding", err)
	}
	return toFinding(sqlitedb.ListActiveFindingsRow(row)), nil
}

// UpdateFinding runs UpdateFinding and, when it changed no row,
// FindingLeaseHeld, in one BEGIN IMMEDIATE transaction: false when no such
// finding is active, ErrLeaseLost when the fence check failed.
func (s *Store) UpdateFinding(ctx context.Context, t claims.Token, episodeID int64, key string, u findings.Update) (bool, error) {
	var updated bool
	err := s.inTx(ctx, func(tx *Store) error {
		_, err := tx.q.UpdateFinding(ctx, tx.conn, sqlitedb.UpdateFindingParams{
			ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, EpisodeID: episodeID,
			Severity: u.Severity, Summary: u.Summary, Data: jsonText(u.Data), FindingKey: key,
		})
		switch {
		case err == nil:
			updated = true
			return nil
		case errors.Is(err, sql.ErrNoRows):
			return tx.findingLeaseHeld(ctx, t, episodeID)
		default:
			return dbError("UpdateFinding", err)
		}
	})
	if err != nil {
		return false, err
	}
	return updated, nil
}

// ClearFinding runs ClearFinding and, when it changed no row,
// FindingLeaseHeld, in one BEGIN IMMEDIATE transaction: false when nothing
// was active, ErrLeaseLost when the fence check failed.
func (s *Store) ClearFinding(ctx context.Context, t claims.Token, episodeID int64, key string) (bool, error) {
	var cleared bool
	err := s.inTx(ctx, func(tx *Store) error {
		_, err := tx.q.ClearFinding(ctx, tx.conn, sqlitedb.ClearFindingParams{
			ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, EpisodeID: episodeID, FindingKey: key,
		})
		switch {
		case err == nil:
			cleared = true
			return nil
		case errors.Is(err, sql.ErrNoRows):
			return tx.findingLeaseHeld(ctx, t, episodeID)
		default:
			return dbError("ClearFinding", err)
		}
	})
	if err != nil {
		return false, err
	}
	return cleared, nil
}

// findingLeaseHeld runs FindingLeaseHeld after a fenced finding write that
// changed nothing: nil when the fence check passes (the finding was not
// active), ErrLeaseLost when it fails.
func (s *Store) findingLeaseHeld(ctx context.Context, t claims.Token, episodeID int64) error {
	held, err := s.q.FindingLeaseHeld(ctx, s.conn, sqlitedb.FindingLeaseHeldParams{
		ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence, EpisodeID: episodeID,
	})
	if err != nil {
		return dbError("FindingLeaseHeld", err)
	}
	if held == 0 {
		return findings.ErrLeaseLost
	}
	return nil
}

// ActiveFindings runs ListActiveFindings.
func (s *Store) ActiveFindings(ctx context.Context, q findings.Query) ([]findings.Finding, error) {
	rows, err := s.q.ListActiveFindings(ctx, s.conn, sqlitedb.ListActiveFindingsParams{
		Env: q.Env, Class: q.Class, ActorID: q.ActorID, FindingKey: q.Key, MaxRows: rowLimit(q.Limit),
	})
	if err != nil {
		return nil, dbError("ListActiveFindings", err)
	}
	out := make([]findings.Finding, len(rows))
	for i, r := range rows {
		out[i] = toFinding(r)
	}
	return out, nil
}

// toFinding converts a finding row; RaiseFinding and ListActiveFindings
// return the same columns.
func toFinding(r sqlitedb.ListActiveFindingsRow) findings.Finding {
	return findings.Finding{
		ID: r.ID, Key: r.FindingKey, Env: r.Env, Status: r.Status, Class: r.Class, Severity: r.Severity,
		Summary: r.Summary, Data: jsonRaw(r.Data), ActorID: r.ActorID, SourceStack: r.SourceStack,
		RaisedByEpisode: r.RaisedByEpisode, UpdatedByEpisode: r.UpdatedByEpisode, RaiseCount: int32(r.RaiseCount),
		RaisedAt: fromMs(r.RaisedAt), UpdatedAt: fromMs(r.UpdatedAt),
	}
}
