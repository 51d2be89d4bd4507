package claims_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/claims/memory"
	"github.com/leasehold/leasehold/telemetry"
)

// flaky fails RenewMany while down is set, as a database that went away.
type flaky struct {
	*memory.Store
	mu   sync.Mutex
	down bool
}

func (f *flaky) setDown(d bool) { f.mu.Lock(); f.down = d; f.mu.Unlock() }

func (f *flaky) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return nil, errors.New("connection refused")
	}
	return f.Store.RenewMany(ctx, owner, held, lease)
}

// localClock is the node's monotonic clock under the test's control.
type localClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *localClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *localClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

type heartbeatFixture struct {
	store *flaky
	gate  *claims.Gate
	hb    *claims.Heartbeat
	clock *localClock
	rec   *telemetry.Recorder
}

func setupHeartbeat(t *testing.T, cfg claims.HeartbeatConfig) heartbeatFixture {
	t.Helper()
	f := heartbeatFixture{store: &flaky{Store: memory.New()}, clock: &localClock{now: time.Now()}, rec: &telemetry.Recorder{}}
	var err error
	f.gate, err = claims.NewGate(f.store, claims.GateConfig{Owner: "node-a", Lease: 30 * time.Second, Observer: f.rec})
	require.NoError(t, err)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f.hb, err = claims.NewHeartbeat(f.gate, cfg)
	require.NoError(t, err)
	f.hb.SetClock(f.clock.Now)
	return f
}

func (f heartbeatFixture) hold(t *testing.T, key string) (claims.Claim, context.Context) {
	t.Helper()
	c, err := f.gate.Acquire(t.Context(), key, "test")
	require.NoError(t, err)
	ctx, stop := f.hb.Hold(t.Context(), c)
	t.Cleanup(stop)
	return c, ctx
}

func TestHeartbeatCancelsOnlyLostLeases(t *testing.T) {
	f := setupHeartbeat(t, claims.HeartbeatConfig{})
	_, keptCtx := f.hold(t, "kept")
	_, stolenCtx := f.hold(t, "stolen")
	done, doneCtx := f.hold(t, "finished-elsewhere")
	require.Equal(t, 3, f.hb.Len())

	f.store.Expire("stolen")
	_, err := f.store.Acquire(t.Context(), claims.AcquireParams{Key: "stolen", Owner: "node-b", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, f.store.Complete(t.Context(), done.Token))

	require.NoError(t, f.hb.RenewOnce(t.Context()))
	require.NoError(t, keptCtx.Err())
	for _, ctx := range []context.Context{stolenCtx, doneCtx} {
		require.ErrorIs(t, ctx.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(ctx), claims.ErrLeaseLost)
	}
	require.Equal(t, 1, f.hb.Len())
	require.Equal(t, 2, f.rec.Count(claims.EventLeaseLost))
	require.Equal(t, 1, f.rec.Count(claims.EventRenewed))
}

func TestHeartbeatRetriesErrorsThenStopsAtTheLocalDeadline(t *testing.T) {
	f := setupHeartbeat(t, claims.HeartbeatConfig{Interval: 10 * time.Second, Margin: 5 * time.Second})
	_, ctx := f.hold(t, "k")
	// Local deadline: acquire start + 30s lease - 5s margin.

	f.store.setDown(true)
	f.clock.Advance(20 * time.Second)
	require.Error(t, f.hb.RenewOnce(t.Context()))
	require.NoError(t, ctx.Err(), "a failed renewal before the deadline is retried, not fatal")
	require.Equal(t, 1, f.rec.Count(claims.EventRenewFailed))

	f.clock.Advance(6 * time.Second) // 26s: past 25s without a renewal
	_ = f.hb.RenewOnce(t.Context())
	require.ErrorIs(t, context.Cause(ctx), claims.ErrLeaseLost)
	require.Zero(t, f.hb.Len())
}

func TestHeartbeatRenewalMovesTheLocalDeadline(t *testing.T) {
	f := setupHeartbeat(t, claims.HeartbeatConfig{Interval: 10 * time.Second, Margin: 5 * time.Second})
	_, ctx := f.hold(t, "k")

	f.clock.Advance(20 * time.Second)
	require.NoError(t, f.hb.RenewOnce(t.Context())) // deadline now 20+25 = 45s
	f.store.setDown(true)
	f.clock.Advance(24 * time.Second) // 44s
	require.Error(t, f.hb.RenewOnce(t.Context()))
	require.NoError(t, ctx.Err())
	f.clock.Advance(time.Second) // 45s
	_ = f.hb.RenewOnce(t.Context())
	require.ErrorIs(t, context.Cause(ctx), claims.ErrLeaseLost)
}

func TestHeartbeatRunStopsLostWorkAndExits(t *testing.T) {
	f := setupHeartbeat(t, claims.HeartbeatConfig{Interval: 5 * time.Millisecond})
	f.hb.SetClock(time.Now) // Run uses real timers; deadlines are far away
	_, ctx := f.hold(t, "k")

	runCtx, stop := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.hb.Run(runCtx) }()

	f.store.Expire("k")
	_, err := f.store.Acquire(t.Context(), claims.AcquireParams{Key: "k", Owner: "node-b", Lease: time.Minute})
	require.NoError(t, err)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not cancel the work of a stolen lease")
	}
	require.ErrorIs(t, context.Cause(ctx), claims.ErrLeaseLost)

	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
}

func TestHeartbeatRejectsBadConfig(t *testing.T) {
	g, err := claims.NewGate(memory.New(), claims.GateConfig{Owner: "a", Lease: 30 * time.Second})
	require.NoError(t, err)
	for name, cfg := range map[string]claims.HeartbeatConfig{
		"interval equals lease":  {Interval: 30 * time.Second},
		"interval beyond lease":  {Interval: time.Minute},
		"negative interval":      {Interval: -time.Second},
		"margin leaves no retry": {Interval: 10 * time.Second, Margin: 20 * time.Second},
		"negative margin":        {Margin: -time.Second},
		"negative retry":         {RetryInterval: -time.Second},
	} {
		_, err := claims.NewHeartbeat(g, cfg)
		require.ErrorIs(t, err, claims.ErrInvalid, name)
	}
	_, err = claims.NewHeartbeat(nil, claims.HeartbeatConfig{})
	require.ErrorIs(t, err, claims.ErrInvalid)
}

func TestHeartbeatPassthrough(t *testing.T) {
	g, err := claims.NewGate(nil, claims.GateConfig{Owner: "a"})
	require.NoError(t, err)
	hb, err := claims.NewHeartbeat(g, claims.HeartbeatConfig{})
	require.NoError(t, err)
	c, err := g.Acquire(t.Context(), "k", "")
	require.NoError(t, err)
	ctx, stop := hb.Hold(t.Context(), c)
	defer stop()
	require.Equal(t, t.Context(), ctx)
	require.Zero(t, hb.Len())

	runCtx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, hb.Run(runCtx), context.Canceled)
}

// slowRenew answers RenewMany as the memory store does, recording the
// deadline of each call, and reports start as each renewal's Start.
type slowRenew struct {
	*memory.Store
	deadlines []time.Duration
	start     time.Time
}

func (s *slowRenew) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	if d, ok := ctx.Deadline(); ok {
		s.deadlines = append(s.deadlines, time.Until(d))
	}
	out, err := s.Store.RenewMany(ctx, owner, held, lease)
	for i := range out {
		out[i].Start = s.start
	}
	return out, err
}

// A renewal may wait for the database until the lease's local deadline,
// not only an interval: one queued behind other writes (SQLite's write lock
// on a loaded host) keeps its place instead of giving up and starting again
// at the back. And the deadline it sets counts from the Start the adapter
// reports, when that is later than the call (the instant the statement got
// the lock), so a renewal that queued does not shorten the lease.
func TestHeartbeatRenewalWaitsUntilTheLocalDeadline(t *testing.T) {
	store := &slowRenew{Store: memory.New()}
	g, err := claims.NewGate(store, claims.GateConfig{Owner: "node-a", Lease: 30 * time.Second})
	require.NoError(t, err)
	hb, err := claims.NewHeartbeat(g, claims.HeartbeatConfig{Interval: 10 * time.Second, Margin: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	clock := &localClock{now: time.Now()}
	hb.SetClock(clock.Now)
	c, err := g.Acquire(t.Context(), "k", "test")
	require.NoError(t, err)
	_, stop := hb.Hold(t.Context(), c)
	defer stop()

	// The local deadline is 25 s away; the interval 10 s.
	store.start = clock.Now().Add(3 * time.Second) // the statement got the lock 3 s after the call
	require.NoError(t, hb.RenewOnce(t.Context()))
	require.Len(t, store.deadlines, 1)
	require.Greater(t, store.deadlines[0], 20*time.Second, "the renewal may wait until the local deadline")
	left, held := hb.Remaining(c)
	require.True(t, held)
	require.Equal(t, 28*time.Second, left, "counted from the reported start: 3 s + 30 s lease - 5 s margin")

	// A lease not (or no longer) held here: its write context is done.
	gone, cancel := hb.WithLease(t.Context(), claims.Claim{Token: claims.Token{Key: "other", Owner: "node-a", Fence: 1}})
	defer cancel()
	require.Error(t, gone.Err())
	live, cancelLive := hb.WithLease(t.Context(), c)
	require.NoError(t, live.Err())
	cancelLive()
	require.Error(t, live.Err())
}
