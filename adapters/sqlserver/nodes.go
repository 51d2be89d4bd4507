package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
)

var _ membership.WaitingReader = (*Store)(nil)

// RegisterNode runs RegisterNode: the node's row upserted, started_at reset.
func (s *Store) RegisterNode(ctx context.Context, m membership.Member) error {
	runnable, err := episodes.RunnableJSON(m.Runnable)
	if err != nil {
		return fmt.Errorf("sqlserver: RegisterNode: %w", err)
	}
	return s.exec(ctx, "RegisterNode",
		sql.Named("node_id", m.ID),
		sql.Named("stack", m.Stack),
		sql.Named("env", m.Env),
		sql.Named("mode", m.Mode),
		sql.Named("runnable", runnable),
		sql.Named("key_version", m.KeyVersionColumn()),
	)
}

// HeartbeatNode runs HeartbeatNode: heartbeat_at, mode and draining
// refreshed, the row recreated if it was removed.
func (s *Store) HeartbeatNode(ctx context.Context, m membership.Member) error {
	runnable, err := episodes.RunnableJSON(m.Runnable)
	if err != nil {
		return fmt.Errorf("sqlserver: HeartbeatNode: %w", err)
	}
	return s.exec(ctx, "HeartbeatNode",
		sql.Named("node_id", m.ID),
		sql.Named("stack", m.Stack),
		sql.Named("env", m.Env),
		sql.Named("mode", m.Mode),
		sql.Named("draining", m.Draining),
		sql.Named("runnable", runnable),
		sql.Named("key_version", m.KeyVersionColumn()),
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

// ListWaitingForNode runs ListWaitingForNode, a read that decides nothing:
// the due queued work of each (actor, expectation) pair that no live node
// can run.
func (s *Store) ListWaitingForNode(ctx context.Context, q membership.WaitingQuery) ([]membership.Waiting, error) {
	if q.SilentAfter <= 0 {
		q.SilentAfter = membership.DefaultSilentAfter
	}
	rows, err := s.query(ctx, "ListWaitingForNode",
		sql.Named("silent_after_ms", q.SilentAfter.Milliseconds()),
		sql.Named("overdue_after_ms", max(q.OverdueAfter, 0).Milliseconds()),
	)
	if err != nil {
		return nil, err
	}
	out := make([]membership.Waiting, 0, len(rows.rows))
	for rows.Next() {
		var (
			w       membership.Waiting
			overdue sql.NullBool
			last    sql.NullTime
		)
		if err := rows.Scan(&w.Env, &w.ActorID, &w.ExpectationID, &w.Episodes, &w.Since, &w.OldestEpisodeID,
			&overdue, &w.LastNode, &last); err != nil {
			return nil, err
		}
		w.Overdue, w.LastHeartbeatAt = overdue.Bool, last.Time
		out = append(out, w)
	}
	return out, nil
}
