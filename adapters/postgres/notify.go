package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/db"
)

// Notifier wakes pollers the moment an episode becomes available, with
// LISTEN/NOTIFY: migration 00016 installs triggers on leasehold_episodes
// that notify channel leasehold_trigger_requests (the name it had when the
// trigger request was a row of its own). It holds one connection of the
// pool for as long as it listens. Notifications are wake-ups only; the
// poller still takes work with ClaimAvailable and still polls on its
// interval, so a notification lost while reconnecting delays pickup by at
// most one interval. Pass it as runner.Config.TriggerWaker.
type Notifier struct {
	pool *pgxpool.Pool
	// Backoff between reconnection attempts; default 1s.
	Backoff time.Duration
}

// NewNotifier returns a Notifier listening on a connection of pool.
func NewNotifier(pool *pgxpool.Pool) *Notifier { return &Notifier{pool: pool, Backoff: time.Second} }

// WaitTriggerRequests calls wake after each notification, and once after
// every (re)subscription to cover what was inserted while it was not
// listening, until ctx is done. Connection errors are retried.
func (n *Notifier) WaitTriggerRequests(ctx context.Context, wake func()) error {
	for {
		// listen returns only when the connection failed (or ctx is done):
		// reconnect after the backoff; the poll interval covers the gap.
		_ = n.listen(ctx, wake)
		t := time.NewTimer(n.Backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (n *Notifier) listen(ctx context.Context, wake func()) error {
	pooled, err := n.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: notifier: %w", err)
	}
	// The connection carries a LISTEN: take it out of the pool for good so
	// no other user inherits the subscription.
	conn := pooled.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if err := db.New().ListenTriggerRequests(ctx, conn); err != nil {
		return dbError("ListenTriggerRequests", err)
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
