// Package membership is leasehold's advisory record of the nodes sharing a
// database: identity, stack, env, mode, whether a node is draining, when it
// started and when it last showed life. heartbeat_at is written from the
// database clock (now() / SYSUTCDATETIME()) by the statements in
// sql/queries/<dialect>/nodes.sql.
//
// Membership decides nothing. Who may run an episode is decided by its work
// claim and fence alone; a node row can be stale, missing or duplicated
// after a crash without any effect on correctness. Operators read it
// (leasehold nodes ls) and placement may use it as a hint.
package membership

import (
	"context"
	"time"
)

// Member is what a node says about itself.
type Member struct {
	ID       string
	Stack    string
	Env      string
	Mode     string // full, trigger_only or disabled
	Draining bool
}

// Row is a node row as listed, with ages on the database clock.
type Row struct {
	Member
	StartedAt    time.Time
	HeartbeatAt  time.Time
	HeartbeatAge time.Duration // now() - heartbeat_at
	LiveLeases   int64         // claims the node holds with a lease in the future
}

// Store is what membership needs from a dialect adapter.
type Store interface {
	// RegisterNode upserts the node's row on start (started_at reset).
	RegisterNode(ctx context.Context, m Member) error
	// HeartbeatNode refreshes heartbeat_at, mode and draining, recreating
	// the row if it was removed.
	HeartbeatNode(ctx context.Context, m Member) error
	// DeregisterNode deletes the node's row (drained).
	DeregisterNode(ctx context.Context, id string) error
	// ListNodes lists every node row, by id.
	ListNodes(ctx context.Context) ([]Row, error)
}
