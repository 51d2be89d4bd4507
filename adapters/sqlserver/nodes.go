package sqlserver

import (
	"context"
	"database/sql"
	"time"

	"github.com/leasehold/leasehold/membership"
)

// RegisterNode runs RegisterNode: the node's row upserted, started_at reset.
func (s *Store) RegisterNode(ctx context.Context, m membership.Member) error {
	return s.exec(ctx, "RegisterNode",
		sql.Named("node_id", m.ID),
		sql.Named("stack", m.Stack),
		sql.Named("env", m.Env),
		sql.Named("mode", m.Mode),
	)
}

// HeartbeatNode runs HeartbeatNode: heartbeat_at, mode and draining
// refreshed, the row recreated if it was removed.
func (s *Store) HeartbeatNode(ctx context.Context, m membership.Member) error {
	return s.exec(ctx, "HeartbeatNode",
		sql.Named("node_id", m.ID),
		sql.Named("stack", m.Stack),
		sql.Named("env", m.Env),
		sql.Named("mode", m.Mode),
		sql.Named("draining", m.Draining),
	)
}

// DeregisterNode runs DeregisterNode.
func (s *Store) DeregisterNode(ctx context.Context, id string) error {
	return s.exec(ctx, "DeregisterNode", sql.Named("node_id", id))
}

// ListNodes runs ListNodes, an operator read.
func (s *Store) ListNodes(ctx context.Context) ([]membership.Row, error) {
	rows, err := s.query(ctx, "ListNodes")
	if err != nil {
		return nil, err
	}
	out := make([]membership.Row, 0, len(rows.rows))
	for rows.Next() {
		var (
			r        membership.Row
			draining sql.NullBool
			ageMs    int64
		)
		if err := rows.Scan(&r.ID, &r.Stack, &r.Env, &r.Mode, &draining, &r.StartedAt, &r.HeartbeatAt,
			&ageMs, &r.LiveLeases); err != nil {
			return nil, err
		}
		r.Draining, r.HeartbeatAge = draining.Bool, time.Duration(ageMs)*time.Millisecond
		out = append(out, r)
	}
	return out, nil
}
