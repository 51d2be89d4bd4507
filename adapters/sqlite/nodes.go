package sqlite

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/membership"
)

var _ membership.Store = (*Store)(nil)

// RegisterNode runs RegisterNode.
func (s *Store) RegisterNode(ctx context.Context, m membership.Member) error {
	err := s.q.RegisterNode(ctx, s.conn, sqlitedb.RegisterNodeParams{NodeID: m.ID, Stack: m.Stack, Env: m.Env, Mode: m.Mode})
	if err != nil {
		return dbError("RegisterNode", err)
	}
	return nil
}

// HeartbeatNode runs HeartbeatNode.
func (s *Store) HeartbeatNode(ctx context.Context, m membership.Member) error {
	err := s.q.HeartbeatNode(ctx, s.conn, sqlitedb.HeartbeatNodeParams{
		NodeID: m.ID, Stack: m.Stack, Env: m.Env, Mode: m.Mode, Draining: m.Draining,
	})
	if err != nil {
		return dbError("HeartbeatNode", err)
	}
	return nil
}

// DeregisterNode runs DeregisterNode.
func (s *Store) DeregisterNode(ctx context.Context, id string) error {
	if err := s.q.DeregisterNode(ctx, s.conn, id); err != nil {
		return dbError("DeregisterNode", err)
	}
	return nil
}

// ListNodes runs ListNodes, an operator read.
func (s *Store) ListNodes(ctx context.Context) ([]membership.Row, error) {
	rows, err := s.q.ListNodes(ctx, s.conn)
	if err != nil {
		return nil, dbError("ListNodes", err)
	}
	out := make([]membership.Row, len(rows))
	for i, r := range rows {
		out[i] = membership.Row{
			Member:    membership.Member{ID: r.NodeID, Stack: r.Stack, Env: r.Env, Mode: r.Mode, Draining: r.Draining},
			StartedAt: fromMs(r.StartedAt), HeartbeatAt: fromMs(r.HeartbeatAt),
			HeartbeatAge: time.Duration(r.HeartbeatAgeMs) * time.Millisecond, LiveLeases: r.LiveLeases,
		}
	}
	return out, nil
}
