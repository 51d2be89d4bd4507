package membership

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/episodes"
)

// DefaultSilentAfter is how old a node's last heartbeat may be, on the
// database clock, before the node counts as silent (it may be dead): three
// membership refreshes of a node with the default heartbeat (a node
// refreshes its row every heartbeat interval, at most every 5 s). The
// dashboard marks such nodes (ui.Config.NodeSilentAfter), and
// ListWaitingForNode does not count them as able to run work.
const DefaultSilentAfter = 15 * time.Second

// Member is what a node says about itself.
type Member struct {
	ID       string
	Stack    string
	Env      string
	Mode     string // full, trigger_only or disabled
	Draining bool
	// Runnable is the (actor, expectation) pairs the node's poller asks
	// work for: those of its actors in mode full, the Runnable of its
	// ClaimAvailable (stored as episodes.RunnableJSON). Nil lists
	// none.
	Runnable []episodes.Runnable
	// KeyVersion is the newest dedupe key version (dedupe.KeyVersion) the
	// node computes: a database moves to a version only while every live
	// node computes it (SwitchKeyVersion). Zero is a node that computes
	// only version 1.
	KeyVersion int
}

// KeyVersionColumn is KeyVersion as the node row stores it: 1 for zero.
func (m Member) KeyVersionColumn() int16 {
	if m.KeyVersion <= 0 {
		return 1
	}
	return int16(m.KeyVersion)
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
	// HeartbeatNode refreshes heartbeat_at, mode, draining and the
	// runnable pairs, recreating the row if it was removed.
	HeartbeatNode(ctx context.Context, m Member) error
	// DeregisterNode deletes the node's row (drained).
	DeregisterNode(ctx context.Context, id string) error
	// ListNodes lists every node row, by id.
	ListNodes(ctx context.Context) ([]Row, error)
}

// WaitingQuery parameterizes ListWaitingForNode. Both durations are
// subtracted from the database clock inside the statement.
type WaitingQuery struct {
	// SilentAfter: a node whose heartbeat is older counts as gone.
	// DefaultSilentAfter when zero.
	SilentAfter time.Duration
	// OverdueAfter: Waiting.Overdue reports whether the pair's oldest
	// work has waited longer than this. Zero: any waiting work is overdue.
	OverdueAfter time.Duration
}

// Waiting is the queued work of one (actor, expectation) pair in one env
// that no live node can run (see the package documentation).
type Waiting struct {
	Env           string
	ActorID       string
	ExpectationID string
	// Episodes is how many queued episodes of the pair wait.
	Episodes int64
	// Since is when the oldest of them became due (its request's
	// run_after, database time): it has waited since then.
	Since time.Time
	// OldestEpisodeID is that oldest episode.
	OldestEpisodeID int64
	// Overdue: Since is longer ago than WaitingQuery.OverdueAfter, on the
	// database clock.
	Overdue bool
	// LastNode is the node row of the env that lists the pair and
	// heartbeated last, whatever its state (silent, draining, not full);
	// "" when no row lists it. LastHeartbeatAt is that row's heartbeat_at.
	LastNode        string
	LastHeartbeatAt time.Time
}

// Pair is "actor/expectation", as operators read it.
func (w Waiting) Pair() string { return w.ActorID + "/" + w.ExpectationID }

// WaitingReader is the read of work no live node can run
// (ListWaitingForNode in sql/queries/<dialect>/nodes.sql). Adapters
// implement it; it decides nothing.
type WaitingReader interface {
	// ListWaitingForNode lists, by env, actor and expectation, the pairs
	// whose due queued work no live node can run.
	ListWaitingForNode(ctx context.Context, q WaitingQuery) ([]Waiting, error)
}

// Reason says what the work waits for, as `leasehold episodes ls|show`,
// the dashboard and maintenance's finding word it: "waiting for a node
// that runs billing/refund (last seen on node-7 at 2026-01-02T03:04:05Z)",
// or "(no node that runs it has been seen)". Times are UTC, RFC 3339.
func (w Waiting) Reason() string {
	last := "no node that runs it has been seen"
	if w.LastNode != "" {
		last = "last seen on " + w.LastNode + " at " + w.LastHeartbeatAt.UTC().Format(time.RFC3339)
	}
	return "waiting for a node that runs " + w.Pair() + " (" + last + ")"
}
