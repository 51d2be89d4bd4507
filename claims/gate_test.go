package claims_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/claims/memory"
	"github.com/leasehold/leasehold/telemetry"
)

func TestGateRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]claims.GateConfig{
		"empty owner":    {Lease: time.Minute},
		"long owner":     {Owner: strings.Repeat("x", claims.MaxOwnerLen+1), Lease: time.Minute},
		"negative lease": {Owner: "a", Lease: -time.Second},
		"sub-ms lease":   {Owner: "a", Lease: time.Microsecond},
	} {
		_, err := claims.NewGate(memory.New(), cfg)
		require.ErrorIs(t, err, claims.ErrInvalid, name)
	}
	g, err := claims.NewGate(memory.New(), claims.GateConfig{Owner: "a"})
	require.NoError(t, err)
	require.Equal(t, claims.DefaultLease, g.Lease())
}

func TestGatePassthroughWritesNothing(t *testing.T) {
	rec := &telemetry.Recorder{}
	g, err := claims.NewGate(nil, claims.GateConfig{Owner: "a", Observer: rec})
	require.NoError(t, err)
	require.False(t, g.Enabled())

	c, err := g.Acquire(t.Context(), "k", "episode")
	require.NoError(t, err)
	require.True(t, c.Passthrough)
	_, err = g.Renew(t.Context(), c)
	require.NoError(t, err)
	require.NoError(t, g.Complete(t.Context(), c))
	require.NoError(t, g.Fail(t.Context(), c, map[string]string{"x": "y"}))
	require.NoError(t, g.Release(t.Context(), c))
	expired, err := g.ListExpired(t.Context(), 10)
	require.NoError(t, err)
	require.Empty(t, expired)
	require.Empty(t, rec.Events())
}

func TestGateTelemetry(t *testing.T) {
	rec := &telemetry.Recorder{}
	s := memory.New()
	a, err := claims.NewGate(s, claims.GateConfig{Owner: "a", Lease: time.Minute, Observer: rec})
	require.NoError(t, err)
	b, err := claims.NewGate(s, claims.GateConfig{Owner: "b", Lease: time.Minute, Observer: rec})
	require.NoError(t, err)

	ca, err := a.Acquire(t.Context(), "k", "episode")
	require.NoError(t, err)
	_, err = b.Acquire(t.Context(), "k", "episode")
	require.ErrorIs(t, err, claims.ErrBusy)
	s.Expire("k")
	cb, err := b.Acquire(t.Context(), "k", "episode")
	require.NoError(t, err)
	require.ErrorIs(t, a.Complete(t.Context(), ca), claims.ErrNotOwner)
	_, err = b.Renew(t.Context(), cb)
	require.NoError(t, err)
	require.NoError(t, b.Fail(t.Context(), cb, map[string]string{"reason": "boom"}))
	cb, err = b.Acquire(t.Context(), "k", "episode")
	require.NoError(t, err)
	require.NoError(t, b.Release(t.Context(), cb))
	cb, err = b.Acquire(t.Context(), "k", "episode")
	require.NoError(t, err)
	require.NoError(t, b.Complete(t.Context(), cb))

	var names []string
	for _, e := range rec.Events() {
		names = append(names, e.Name)
	}
	require.Equal(t, []string{
		claims.EventAcquired, claims.EventBusy, claims.EventSteal, claims.EventLeaseLost,
		claims.EventRenewed, claims.EventFailed, claims.EventAcquired, claims.EventReleased,
		claims.EventAcquired, claims.EventCompleted,
	}, names)
}

func TestGateRejectsBadInputBeforeWriting(t *testing.T) {
	s := memory.New()
	g, err := claims.NewGate(s, claims.GateConfig{Owner: "a", Lease: time.Minute})
	require.NoError(t, err)
	c, err := g.Acquire(t.Context(), "k", "")
	require.NoError(t, err)

	_, err = g.Acquire(t.Context(), "k2", strings.Repeat("w", claims.MaxWorkTypeLen+1))
	require.ErrorIs(t, err, claims.ErrInvalid)
	require.ErrorIs(t, g.Fail(t.Context(), c, func() {}), claims.ErrInvalid, "detail that is not JSON")
	bad := c
	bad.Fence = 0
	require.ErrorIs(t, g.Complete(t.Context(), bad), claims.ErrInvalid)
	_, err = g.ListExpired(t.Context(), 0)
	require.ErrorIs(t, err, claims.ErrInvalid)
	require.Equal(t, 1, s.Len())
	row, _ := s.Row("k")
	require.Equal(t, claims.StateClaimed, row.State)
}
