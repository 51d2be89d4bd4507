package claimhistory_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/claimhistory"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// TestConcurrentClaimsAreLinearizable is the in-process variant of the
// chaos suite's check: owners contending for a few keys through claims.Gate
// and claims.Heartbeat on the Postgres adapter, under short leases, calls
// cancelled mid-flight (unknown outcomes) and leases backdated by a test
// helper, every operation recorded and the history checked with porcupine.
func TestConcurrentClaimsAreLinearizable(t *testing.T) {
	f := setup(t)
	w := f.workload(claimhistory.Store{Store: postgres.New(f.pool), Rec: f.rec})
	w.cancels = true
	tally := w.run(t, func(time.Duration) bool { return false }, 2*time.Second)

	rep, err := claimhistory.Check(f.rec.Ops(), claimhistory.Options{Skew: f.skew})
	t.Logf("%v", rep)
	t.Logf("workload: %s", tally)
	require.NoError(t, err)
	require.Positive(t, tally.grants.Load())
	require.Positive(t, tally.steals.Load(), "no lease was taken over after it expired")
	require.Positive(t, tally.busy.Load())
	require.Positive(t, rep.Unknown, "no call was cancelled mid-flight")
}

// TestCheckerRejectsBrokenStores is the negative control: a store with a
// deliberate bug produces a history the checker must reject, with its
// visualization written.
func TestCheckerRejectsBrokenStores(t *testing.T) {
	for _, tc := range []struct {
		name string
		bug  bug
		// play drives two owners through the broken store, deterministically.
		play func(t *testing.T, f fixture, a, b *claims.Gate)
	}{
		{"acquire ignores a live lease", ignoresLiveLease, func(t *testing.T, f fixture, a, b *claims.Gate) {
			_, err := a.Acquire(t.Context(), "k", "w")
			require.NoError(t, err)
			_, err = b.Acquire(t.Context(), "k", "w")
			require.NoError(t, err, "the broken store grants over a live lease")
		}},
		{"acquire does not move the fence", keepsFence, func(t *testing.T, f fixture, a, b *claims.Gate) {
			_, err := a.Acquire(t.Context(), "k", "w")
			require.NoError(t, err)
			f.backdate(t, "k")
			c, err := b.Acquire(t.Context(), "k", "w")
			require.NoError(t, err)
			require.EqualValues(t, 1, c.Fence, "the broken store reuses the fence")
		}},
		{"renew ignores the fence", renewsAnyGrant, func(t *testing.T, f fixture, a, b *claims.Gate) {
			ca, err := a.Acquire(t.Context(), "k", "w")
			require.NoError(t, err)
			f.backdate(t, "k")
			_, err = b.Acquire(t.Context(), "k", "w")
			require.NoError(t, err)
			_, err = a.Renew(t.Context(), ca)
			require.NoError(t, err, "the broken store renews a fenced-out grant")
		}},
		{"acquire ignores a live lease, under concurrency", ignoresLiveLease, func(t *testing.T, f fixture, _, _ *claims.Gate) {
			bs := f.broken(ignoresLiveLease)
			w := f.workload(claimhistory.Store{Store: bs, Rec: f.rec})
			w.run(t, func(time.Duration) bool { return bs.forced.Load() >= 5 }, 5*time.Second)
			require.GreaterOrEqual(t, bs.forced.Load(), int64(5), "the broken store never granted over a live lease")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			store := claimhistory.Store{Store: f.broken(tc.bug), Rec: f.rec}
			a, err := claims.NewGate(store, claims.GateConfig{Owner: "a", Lease: time.Minute})
			require.NoError(t, err)
			b, err := claims.NewGate(store, claims.GateConfig{Owner: "b", Lease: time.Minute})
			require.NoError(t, err)
			tc.play(t, f, a, b)

			dir := t.TempDir()
			rep, err := claimhistory.Check(f.rec.Ops(), claimhistory.Options{Skew: f.skew, Dir: dir})
			t.Logf("%v", rep)
			require.ErrorIs(t, err, claimhistory.ErrNotLinearizable)
			require.NotEmpty(t, rep.Illegal)
			require.FileExists(t, rep.Visualization)
			html, err := os.ReadFile(rep.Visualization)
			require.NoError(t, err)
			require.Contains(t, string(html), "<html")
		})
	}
}

type fixture struct {
	pool *pgxpool.Pool
	rec  *claimhistory.Recorder
	skew time.Duration
}

func setup(t *testing.T) fixture {
	t.Helper()
	pool := pgtest.Schema(t)
	return fixture{pool: pool, rec: claimhistory.NewRecorder("test", nil), skew: clockSkew(t, pool)}
}

// clockSkew bounds the difference between this process's clock and the
// database's: a database instant read between two local ones must lie
// between them (1ms at least: timestamps are truncated to microseconds).
func clockSkew(t *testing.T, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	var worst time.Duration
	for range 5 {
		before := time.Now()
		var db time.Time
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT clock_timestamp()").Scan(&db))
		after := time.Now()
		worst = max(worst, before.Sub(db), db.Sub(after))
	}
	return max(time.Millisecond, 2*worst+time.Millisecond)
}

// backdate ends key's claimed lease on the database clock instead of
// waiting for it, and records that as an expire: the history must contain
// every writer of its keys.
func (f fixture) backdate(t *testing.T, key string) {
	t.Helper()
	require.NoError(t, f.tryBackdate(t.Context(), key))
}

func (f fixture) tryBackdate(ctx context.Context, key string) error {
	call := f.rec.Call(claimhistory.Op{Kind: claimhistory.KindExpire, Source: "test backdate", Key: key, Owner: "test"})
	var until time.Time
	err := f.pool.QueryRow(ctx, `UPDATE leasehold_work_claims
		SET lease_until = now() - interval '1 millisecond'
		WHERE dedupe_key = $1 AND state = 'claimed'
		RETURNING lease_until`, key).Scan(&until)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		call.Return(claimhistory.Response{Outcome: claimhistory.Refused})
		return nil
	case err != nil:
		call.Return(claimhistory.Response{Outcome: claimhistory.Unknown, Err: err})
		return err
	}
	call.Return(claimhistory.Response{Outcome: claimhistory.OK, LeaseUntil: until})
	return nil
}

// workload is owners contending for keys: each acquires, renews (alone or
// with its heartbeat's batch), completes, fails, releases (alone or all at
// once) or abandons its claims at random, while a backdater ends random
// leases.
type workload struct {
	f       fixture
	store   claims.Store
	owners  int
	keys    int
	lease   time.Duration
	cancels bool // one call in cancelEvery gets a deadline of up to 1.5 ms: cancelled mid-flight, often
}

const cancelEvery = 5

func (f fixture) workload(store claims.Store) *workload {
	return &workload{f: f, store: store, owners: 6, keys: 8, lease: 200 * time.Millisecond}
}

type tally struct{ grants, steals, busy, backdated, calls atomic.Int64 }

func (t *tally) String() string {
	return fmt.Sprintf("%d calls, %d grants (%d steals of an expired lease), %d busy, %d leases backdated",
		t.calls.Load(), t.grants.Load(), t.steals.Load(), t.busy.Load(), t.backdated.Load())
}

// run runs the workload until done reports true for the time elapsed, or d.
func (w *workload) run(t *testing.T, done func(time.Duration) bool, d time.Duration) *tally {
	t.Helper()
	var tl tally
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	stop := func() bool { return ctx.Err() != nil || done(time.Since(began)) }
	var wg sync.WaitGroup
	for i := range w.owners {
		wg.Go(func() { w.owner(t, ctx, fmt.Sprintf("owner-%d", i), stop, &tl) })
	}
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !stop() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := w.f.tryBackdate(context.WithoutCancel(ctx), w.key()); err != nil {
				t.Errorf("backdate: %v", err)
				return
			}
			tl.backdated.Add(1)
		}
	})
	wg.Wait()
	return &tl
}

func (w *workload) key() string { return fmt.Sprintf("lin:%02d", rand.IntN(w.keys)) }

// callCtx is one call's context: a deadline of up to 1.5 ms for one call
// in cancelEvery when cancels is set, else 10 s.
func (w *workload) callCtx() (context.Context, context.CancelFunc) {
	if w.cancels && rand.IntN(cancelEvery) == 0 {
		return context.WithTimeout(context.Background(), time.Duration(rand.IntN(1500))*time.Microsecond)
	}
	return context.WithTimeout(context.Background(), 10*time.Second)
}

type held struct {
	c    claims.Claim
	stop func()
}

func (w *workload) owner(t *testing.T, ctx context.Context, owner string, stop func() bool, tl *tally) {
	gate, err := claims.NewGate(w.store, claims.GateConfig{Owner: owner, Lease: w.lease})
	if err != nil {
		t.Error(err)
		return
	}
	// The renewals the workload cancels fail by design: not worth a log line.
	hb, err := claims.NewHeartbeat(gate, claims.HeartbeatConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Error(err)
		return
	}
	var hs []held
	defer func() {
		for _, h := range hs {
			h.stop()
		}
	}()
	drop := func(i int) {
		hs[i].stop()
		hs = append(hs[:i], hs[i+1:]...)
	}
	for !stop() {
		cctx, cancel := w.callCtx()
		tl.calls.Add(1)
		i := rand.IntN(max(len(hs), 1))
		switch r := rand.IntN(100); {
		case len(hs) == 0 || (len(hs) < 3 && r < 40):
			c, err := gate.Acquire(cctx, w.key(), "lin")
			switch {
			case err == nil:
				tl.grants.Add(1)
				if c.Grant == claims.GrantSteal {
					tl.steals.Add(1)
				}
				_, unhold := hb.Hold(ctx, c)
				hs = append(hs, held{c, unhold})
			case errors.Is(err, claims.ErrBusy):
				tl.busy.Add(1)
			}
		case r < 55:
			if c, err := gate.Renew(cctx, hs[i].c); err == nil {
				hs[i].c = c
			}
		case r < 70:
			_ = hb.RenewOnce(cctx) // every held lease, one statement
		case r < 78:
			_ = gate.Complete(cctx, hs[i].c)
			drop(i)
		case r < 84:
			_ = gate.Fail(cctx, hs[i].c, map[string]string{"why": "test"})
			drop(i)
		case r < 90:
			_ = gate.Release(cctx, hs[i].c)
			drop(i)
		case r < 94:
			cs := make([]claims.Claim, len(hs))
			for j, h := range hs {
				cs[j] = h.c
			}
			_, _ = gate.ReleaseMany(cctx, cs)
			for len(hs) > 0 {
				drop(0)
			}
		default:
			drop(i) // abandoned: its lease runs out, or is backdated, and is stolen
		}
		cancel()
	}
}

// bug is a deliberate defect of brokenStore.
type bug int

const (
	ignoresLiveLease bug = iota + 1 // Acquire grants over a live lease (fence + 1)
	keepsFence                      // Acquire grants with the previous grant's fence
	renewsAnyGrant                  // Renew extends the key's lease whoever holds it
)

// brokenStore is the Postgres adapter with one bug, in test-only SQL.
type brokenStore struct {
	claims.Store
	pool   *pgxpool.Pool
	bug    bug
	forced atomic.Int64 // answers the correct statement would not have given
}

func (f fixture) broken(b bug) *brokenStore {
	return &brokenStore{Store: postgres.New(f.pool), pool: f.pool, bug: b}
}

func (s *brokenStore) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	sent := time.Now()
	c, err := s.Store.Acquire(ctx, p)
	switch {
	case s.bug == ignoresLiveLease && errors.Is(err, claims.ErrBusy):
		c = claims.Claim{Token: claims.Token{Key: p.Key, Owner: p.Owner}, State: claims.StateClaimed, Grant: claims.GrantSteal}
		err = s.pool.QueryRow(ctx, `UPDATE leasehold_work_claims
			SET owner_node = $2, lease_until = now() + $3::bigint * interval '1 millisecond', claimed_at = now(),
			    fence = fence + 1, grant_kind = 'steal'
			WHERE dedupe_key = $1
			RETURNING fence, lease_until`, p.Key, p.Owner, p.Lease.Milliseconds()).Scan(&c.Fence, &c.LeaseUntil)
		if err == nil {
			s.forced.Add(1)
		}
	case s.bug == keepsFence && err == nil && c.Fence > 1:
		err = s.pool.QueryRow(ctx, `UPDATE leasehold_work_claims SET fence = fence - 1
			WHERE dedupe_key = $1 RETURNING fence`, p.Key).Scan(&c.Fence)
		if err == nil {
			s.forced.Add(1)
		}
	}
	c.SetLocalStart(sent)
	return c, err
}

func (s *brokenStore) Renew(ctx context.Context, t claims.Token, lease time.Duration) (time.Time, error) {
	if s.bug != renewsAnyGrant {
		return s.Store.Renew(ctx, t, lease)
	}
	var until time.Time
	err := s.pool.QueryRow(ctx, `UPDATE leasehold_work_claims
		SET lease_until = now() + $2::bigint * interval '1 millisecond'
		WHERE dedupe_key = $1 AND state = 'claimed'
		RETURNING lease_until`, t.Key, lease.Milliseconds()).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, claims.ErrNotOwner
	}
	if err == nil {
		s.forced.Add(1)
	}
	return until, err
}
