package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
)

var (
	_ membership.Store         = (*Store)(nil)
	_ membership.WaitingReader = (*Store)(nil)
)

// RegisterNode runs RegisterNode.
func (s *Store) RegisterNode(ctx context.Context, m membership.Member) error {
	runnable, err := episodes.RunnableJSON(m.Runnable)
	if err != nil {
		return fmt.Errorf("sqlite: RegisterNode: %w", err)
	}
	err = s.q.RegisterNode(ctx, s.conn, sqlitedb.RegisterNodeParams{
		NodeID: m.ID, Stack: m.Stack, Env: m.Env, Mode: m.Mode, Runnable: runnable, KeyVersion: int64(m.KeyVersionColumn()),
	})
	if err != nil {
		return dbError("RegisterNode", err)
	}
	return nil
}

// HeartbeatNode runs HeartbeatNode.
func (s *Store) HeartbeatNode(ctx context.Context, m membership.Member) error {
	runnable, err := episodes.RunnableJSON(m.Runnable)
	if err != nil {
		return fmt.Errorf("sqlite: HeartbeatNode: %w", err)
	}
	err = s.q.HeartbeatNode(ctx, s.conn, sqlitedb.HeartbeatNodeParams{
		NodeID: m.ID, Stack: m.Stack, Env: m.Env, Mode: m.Mode, Draining: m.Draining, Runnable: runnable,
		KeyVersion: int64(m.KeyVersionColumn()),
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

// ListWaitingForNode runs ListWaitingForNode, a read that decides nothing:
// the due queued work of each (actor, expectation) pair that no live node
// can run.
func (s *Store) ListWaitingForNode(ctx context.Context, q membership.WaitingQuery) ([]membership.Waiting, error) {
	if q.SilentAfter <= 0 {
		q.SilentAfter = membership.DefaultSilentAfter
	}
	rows, err := s.q.ListWaitingForNode(ctx, s.conn, sqlitedb.ListWaitingForNodeParams{
		SilentAfterMs: q.SilentAfter.Milliseconds(), OverdueAfterMs: max(q.OverdueAfter, 0).Milliseconds(),
	})
	if err != nil {
		return nil, dbError("ListWaitingForNode", err)
	}
	out := make([]membership.Waiting, len(rows))
	for i, r := range rows {
		w := membership.Waiting{
			Env: r.SourceEnv, ActorID: r.ActorID, ExpectationID: r.ExpectationID, Episodes: r.Waiting,
			Since: fromMs(r.WaitingSince), OldestEpisodeID: r.OldestEpisodeID, Overdue: r.Overdue, LastNode: r.LastNodeID,
		}
		if r.LastHeartbeatAt != nil {
			w.LastHeartbeatAt = fromMs(*r.LastHeartbeatAt)
		}
		out[i] = w
	}
	return out, nil
}
