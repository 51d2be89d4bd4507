package sqlserver

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/findings"
)

var _ findings.Store = (*Store)(nil)

// findingColumns are the finding columns RaiseFinding (after lease_held) and
// ListActiveFindings return, in the Postgres order.
var findingColumns = []string{
	"id", "finding_key", "env", "status", "class", "severity", "summary", "data",
	"actor_id", "source_stack", "raised_by_episode", "updated_by_episode", "raise_count",
	"raised_at", "updated_at",
}

// RaiseFinding runs RaiseFinding: inserts the finding in the episode's env,
// or counts one more raise of the active one. findings.ErrLeaseLost when t
// is not the live claim of running episode episodeID.
//
// The batch's UPDLOCK, HOLDLOCK upsert should never lose an insert race; if
// a concurrent raiser's insert does win (a duplicate-key error, and this
// batch rolled back whole), the batch is sent once more, and then finds and
// updates that raiser's row, as Postgres's ON CONFLICT DO UPDATE would.
func (s *Store) RaiseFinding(ctx context.Context, t claims.Token, episodeID int64, r findings.Raise) (findings.Finding, error) {
	var (
		f   findings.Finding
		err error
	)
	for try := 1; try <= 2; try++ {
		f, err = s.raiseFinding(ctx, t, episodeID, r)
		if !isDuplicate(err) {
			break
		}
	}
	return f, err
}

func (s *Store) raiseFinding(ctx context.Context, t claims.Token, episodeID int64, r findings.Raise) (findings.Finding, error) {
	var (
		held                              int32
		id, raisedBy, updatedBy           sql.NullInt64
		key, env, status, class, severity sql.NullString
		summary, data, actorID, stack     sql.NullString
		raiseCount                        sql.NullInt32
		raisedAt, updatedAt               sql.NullTime
	)
	err := s.queryRow(ctx, "RaiseFinding",
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
		sql.Named("episode_id", episodeID),
		sql.Named("finding_key", r.Key),
		sql.Named("class", r.Class),
		sql.Named("severity", r.Severity),
		sql.Named("summary", r.Summary),
		sql.Named("data", jsonArg(r.Data)),
	).Scan(&held, &id, &key, &env, &status, &class, &severity, &summary, &data,
		&actorID, &stack, &raisedBy, &updatedBy, &raiseCount, &raisedAt, &updatedAt)
	if err != nil {
		return findings.Finding{}, err
	}
	if held == 0 {
		return findings.Finding{}, findings.ErrLeaseLost
	}
	if !id.Valid {
		// The batch inserts or absorbs whenever the lease is held; no
		// finding then means it no longer does what it says.
		return findings.Finding{}, errors.New("sqlserver: RaiseFinding: lease held but no finding returned")
	}
	return findings.Finding{
		ID: id.Int64, Key: key.String, Env: env.String, Status: status.String,
		Class: class.String, Severity: severity.String, Summary: summary.String,
		Data: rawJSON(data), ActorID: actorID.String, SourceStack: stack.String,
		RaisedByEpisode: raisedBy.Int64, UpdatedByEpisode: updatedBy.Int64,
		RaiseCount: raiseCount.Int32, RaisedAt: raisedAt.Time, UpdatedAt: updatedAt.Time,
	}, nil
}

// UpdateFinding runs UpdateFinding; false when no finding with key is active
// in the episode's env, findings.ErrLeaseLost when t is not the live claim of
// running episode episodeID.
func (s *Store) UpdateFinding(ctx context.Context, t claims.Token, episodeID int64, key string, u findings.Update) (bool, error) {
	var held, updated int32
	err := s.queryRow(ctx, "UpdateFinding",
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
		sql.Named("episode_id", episodeID),
		sql.Named("severity", u.Severity),
		sql.Named("summary", u.Summary),
		sql.Named("data", jsonArg(u.Data)),
		sql.Named("finding_key", key),
	).Scan(&held, &updated)
	return findingWritten(held, updated, err)
}

// ClearFinding runs ClearFinding; false when no finding with key was active
// in the episode's env, findings.ErrLeaseLost as for UpdateFinding.
func (s *Store) ClearFinding(ctx context.Context, t claims.Token, episodeID int64, key string) (bool, error) {
	var held, cleared int32
	err := s.queryRow(ctx, "ClearFinding",
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
		sql.Named("episode_id", episodeID),
		sql.Named("finding_key", key),
	).Scan(&held, &cleared)
	return findingWritten(held, cleared, err)
}

// findingWritten reads the (lease_held, n) row of UpdateFinding and
// ClearFinding. The batches always answer one row; none is a broken batch,
// not a lost lease.
func findingWritten(held, n int32, err error) (bool, error) {
	switch {
	case err != nil:
		return false, err
	case held == 0:
		return false, findings.ErrLeaseLost
	}
	return n > 0, nil
}

// ActiveFindings runs ListActiveFindings.
func (s *Store) ActiveFindings(ctx context.Context, q findings.Query) ([]findings.Finding, error) {
	rows, err := s.query(ctx, "ListActiveFindings",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("env", q.Env),
		sql.Named("class", q.Class),
		sql.Named("actor_id", q.ActorID),
		sql.Named("finding_key", q.Key),
	)
	if err != nil {
		return nil, err
	}
	out := make([]findings.Finding, 0, len(rows.rows))
	for rows.Next() {
		var (
			f    findings.Finding
			data sql.NullString
		)
		if err := rows.Scan(
			&f.ID, &f.Key, &f.Env, &f.Status, &f.Class, &f.Severity, &f.Summary,
			&data, &f.ActorID, &f.SourceStack, &f.RaisedByEpisode,
			&f.UpdatedByEpisode, &f.RaiseCount, &f.RaisedAt, &f.UpdatedAt,
		); err != nil {
			return nil, err
		}
		f.Data = rawJSON(data)
		out = append(out, f)
	}
	return out, nil
}
