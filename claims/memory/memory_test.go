package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/claims/memory"
)

const lease = time.Minute

func acquire(t *testing.T, s *memory.Store, key, owner string) claims.Claim {
	t.Helper()
	c, err := s.Acquire(context.Background(), claims.AcquireParams{Key: key, Owner: owner, Lease: lease, WorkType: "job"})
	require.NoError(t, err)
	return c
}

func TestAcquireTransitions(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// setup leaves key "k" in the state under test.
		setup       func(t *testing.T, s *memory.Store)
		wantErr     error
		wantGrant   claims.GrantKind
		wantAttempt int32
		wantFence   int64
	}{
		{
			name:        "fresh key",
			setup:       func(*testing.T, *memory.Store) {},
			wantGrant:   claims.GrantFresh,
			wantAttempt: 1,
			wantFence:   1,
		},
		{
			// Not re-entrant: a restarted holder must not run the work twice.
			name:    "live lease, same owner",
			setup:   func(t *testing.T, s *memory.Store) { acquire(t, s, "k", "b") },
			wantErr: claims.ErrBusy,
		},
		{
			name:    "live lease, other owner",
			setup:   func(t *testing.T, s *memory.Store) { acquire(t, s, "k", "a") },
			wantErr: claims.ErrBusy,
		},
		{
			name: "one millisecond before the deadline",
			setup: func(t *testing.T, s *memory.Store) {
				acquire(t, s, "k", "a")
				s.Advance(lease - time.Millisecond)
			},
			wantErr: claims.ErrBusy,
		},
		{
			// lease_until <= now(): a lease due exactly now is stealable.
			name: "Advance to the deadline",
			setup: func(t *testing.T, s *memory.Store) {
				acquire(t, s, "k", "a")
				s.Advance(lease)
			},
			wantGrant:   claims.GrantSteal,
			wantAttempt: 2,
			wantFence:   2,
		},
		{
			name: "Expire",
			setup: func(t *testing.T, s *memory.Store) {
				acquire(t, s, "k", "a")
				s.Expire("k")
			},
			wantGrant:   claims.GrantSteal,
			wantAttempt: 2,
			wantFence:   2,
		},
		{
			// Attempt is 2 before completion, so the reset is visible.
			name: "done resets attempt",
			setup: func(t *testing.T, s *memory.Store) {
				acquire(t, s, "k", "a")
				s.Expire("k")
				c := acquire(t, s, "k", "a")
				require.NoError(t, s.Complete(ctx, c.Token))
			},
			wantGrant:   claims.GrantReclaim,
			wantAttempt: 1,
			wantFence:   3,
		},
		{
			name: "failed counts another attempt",
			setup: func(t *testing.T, s *memory.Store) {
				c := acquire(t, s, "k", "a")
				require.NoError(t, s.Fail(ctx, c.Token, json.RawMessage(`{"why":"boom"}`)))
			},
			wantGrant:   claims.GrantReclaim,
			wantAttempt: 2,
			wantFence:   2,
		},
		{
			name: "released counts another attempt",
			setup: func(t *testing.T, s *memory.Store) {
				c := acquire(t, s, "k", "a")
				require.NoError(t, s.Release(ctx, c.Token))
			},
			wantGrant:   claims.GrantReclaim,
			wantAttempt: 2,
			wantFence:   2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := memory.New()
			tt.setup(t, s)
			before, _ := s.Row("k")

			got, err := s.Acquire(ctx, claims.AcquireParams{Key: "k", Owner: "b", Lease: lease, WorkType: "job2"})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				after, _ := s.Row("k")
				require.Equal(t, before, after, "a refused acquire must not touch the row")
				return
			}
			require.NoError(t, err)
			require.False(t, got.LocalStart().IsZero(), "a grant carries its local start")
			got.SetLocalStart(time.Time{})
			now := s.Now()
			require.Equal(t, claims.Claim{
				Token:      claims.Token{Key: "k", Owner: "b", Fence: tt.wantFence},
				State:      claims.StateClaimed,
				Attempt:    tt.wantAttempt,
				LeaseUntil: now.Add(lease),
				ClaimedAt:  now,
				Grant:      tt.wantGrant,
				WorkType:   "job2",
			}, got)

			row, ok := s.Row("k")
			require.True(t, ok)
			require.Equal(t, now, row.LastHeartbeatAt)
			require.Nil(t, row.FinishedAt, "a new grant clears finished_at")
			require.Nil(t, row.ErrorDetail, "a new grant clears error_detail")
		})
	}
}

func TestStaleTokenIsRejected(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	stale := acquire(t, s, "k", "a").Token
	s.Expire("k")
	current := acquire(t, s, "k", "b").Token
	before, _ := s.Row("k")

	ops := map[string]func() error{
		"renew":    func() error { _, err := s.Renew(ctx, stale, lease); return err },
		"complete": func() error { return s.Complete(ctx, stale) },
		"fail":     func() error { return s.Fail(ctx, stale, nil) },
		"release":  func() error { return s.Release(ctx, stale) },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, op(), claims.ErrNotOwner)
			after, _ := s.Row("k")
			require.Equal(t, before, after)
		})
	}

	// Same owner, old fence: the A->B->A case a heartbeat must not renew.
	s.Advance(time.Second)
	got, err := s.RenewMany(ctx, "b", []claims.Held{{Key: "k", Fence: stale.Fence}, {Key: "k", Fence: current.Fence}}, lease)
	require.NoError(t, err)
	require.Equal(t, []claims.Renewed{{Key: "k", Fence: current.Fence, LeaseUntil: s.Now().Add(lease)}}, got)
}

func TestRenewDoesNotCheckExpiry(t *testing.T) {
	s := memory.New()
	c := acquire(t, s, "k", "a")
	s.Advance(2 * lease)

	until, err := s.Renew(context.Background(), c.Token, lease)
	require.NoError(t, err, "an expired lease nobody re-acquired is still the only grant")
	require.Equal(t, s.Now().Add(lease), until)

	_, err = s.Acquire(context.Background(), claims.AcquireParams{Key: "k", Owner: "b", Lease: lease})
	require.ErrorIs(t, err, claims.ErrBusy)
}

func TestListExpired(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	// Deadlines 1s apart, acquired out of key order so sorting is by deadline.
	for _, key := range []string{"c", "a", "d", "b"} {
		acquire(t, s, key, "owner")
		s.Advance(time.Second)
	}
	acquire(t, s, "live", "owner")
	done := acquire(t, s, "done", "owner")
	require.NoError(t, s.Complete(ctx, done.Token))
	s.Advance(lease - time.Second) // "b" is due exactly now: stealable, not listed.

	tests := []struct {
		limit int
		want  []string
	}{
		{limit: 10, want: []string{"c", "a", "d"}},
		{limit: 2, want: []string{"c", "a"}},
		{limit: 0, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("limit ", tt.limit), func(t *testing.T) {
			got, err := s.ListExpired(ctx, tt.limit)
			require.NoError(t, err)
			keys := []string{}
			for _, c := range got {
				require.Equal(t, claims.StateClaimed, c.State)
				keys = append(keys, c.Key)
			}
			require.Equal(t, tt.want, keys)
		})
	}
}

func TestCancelledContext(t *testing.T) {
	s := memory.New()
	c := acquire(t, s, "k", "a")
	before, _ := s.Row("k")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	ops := map[string]func() error{
		"acquire": func() error {
			_, err := s.Acquire(ctx, claims.AcquireParams{Key: "other", Owner: "a", Lease: lease})
			return err
		},
		"renew": func() error { _, err := s.Renew(ctx, c.Token, lease); return err },
		"renew many": func() error {
			_, err := s.RenewMany(ctx, "a", []claims.Held{{Key: "k", Fence: c.Fence}}, lease)
			return err
		},
		"complete": func() error { return s.Complete(ctx, c.Token) },
		"fail":     func() error { return s.Fail(ctx, c.Token, nil) },
		"release":  func() error { return s.Release(ctx, c.Token) },
		"list expired": func() error {
			_, err := s.ListExpired(ctx, 10)
			return err
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, op(), context.Canceled)
		})
	}
	after, _ := s.Row("k")
	require.Equal(t, before, after)
	require.Equal(t, 1, s.Len())
}

func TestConcurrentAcquireGrantsOnce(t *testing.T) {
	s := memory.New()
	acquire(t, s, "k", "first")
	s.Expire("k")

	const n = 32
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []claims.Claim
		busy int
	)
	for i := range n {
		wg.Go(func() {
			c, err := s.Acquire(context.Background(), claims.AcquireParams{Key: "k", Owner: fmt.Sprint("node-", i), Lease: lease})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, c)
			case errors.Is(err, claims.ErrBusy):
				busy++
			default:
				t.Errorf("acquire: %v", err)
			}
		})
	}
	wg.Wait()
	require.Len(t, won, 1, "two stealers of one expired lease cannot both win")
	require.Equal(t, n-1, busy)
	require.Equal(t, int64(2), won[0].Fence)
	require.Equal(t, claims.GrantSteal, won[0].Grant)
}
