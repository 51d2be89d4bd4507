package maintenance_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/telemetry"
)

// fakeStore answers Maintain with next (Ran with no counts when nil) and
// signals each call on calls when set.
type fakeStore struct {
	next  func(ctx context.Context, call int) (maintenance.Result, error)
	calls chan int

	mu    sync.Mutex
	plans []maintenance.Plan
}

func (f *fakeStore) Maintain(ctx context.Context, p maintenance.Plan) (maintenance.Result, error) {
	f.mu.Lock()
	f.plans = append(f.plans, p)
	n := len(f.plans)
	f.mu.Unlock()
	res, err := maintenance.Result{Ran: true}, error(nil)
	if f.next != nil {
		res, err = f.next(ctx, n)
	}
	if f.calls != nil {
		select {
		case f.calls <- n:
		case <-ctx.Done():
		}
	}
	return res, err
}

func (f *fakeStore) Plans() []maintenance.Plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]maintenance.Plan(nil), f.plans...)
}

type bundle struct {
	runner   *maintenance.Runner
	store    *fakeStore
	recorder *telemetry.Recorder
	log      *bytes.Buffer
}

func setup(t *testing.T, store *fakeStore, cfg maintenance.Config) bundle {
	t.Helper()
	b := bundle{store: store, recorder: &telemetry.Recorder{}, log: &bytes.Buffer{}}
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: b.log}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := maintenance.NewRunner(store, cfg, logger, b.recorder)
	require.NoError(t, err)
	b.runner = r
	return b
}

// lockedWriter serializes writes from Run's goroutine; tests read the
// buffer only once nothing logs any more.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func returns(res maintenance.Result, err error) func(context.Context, int) (maintenance.Result, error) {
	return func(context.Context, int) (maintenance.Result, error) { return res, err }
}

func TestRunOnceRan(t *testing.T) {
	t.Parallel()
	did := maintenance.Result{Ran: true, Archived: 3, StepsPurged: 40, JournalsMarked: 2, EpisodesExpired: 5,
		ClaimsDeleted: 6, NodesDeleted: 1, WaitingRaised: 2, WaitingCleared: 7}
	b := setup(t, &fakeStore{next: returns(did, nil)}, maintenance.Config{})

	res, err := b.runner.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, did, res)
	require.Equal(t, []maintenance.Plan{b.runner.Plan()}, b.store.Plans())

	events := b.recorder.Events()
	require.Len(t, events, 1)
	require.Equal(t, maintenance.EventRan, events[0].Name)
	require.Equal(t, map[string]int{"archived": 3, "steps_purged": 40, "journals_marked": 2, "episodes_expired": 5,
		"claims_deleted": 6, "nodes_deleted": 1, "waiting_raised": 2, "waiting_cleared": 7}, events[0].Counts)
	require.NoError(t, events[0].Err)
	require.GreaterOrEqual(t, events[0].Duration, time.Duration(0))

	require.Contains(t, b.log.String(), `level=INFO msg="leasehold: maintenance ran" archived=3 steps_purged=40 `+
		`journals_marked=2 episodes_expired=5 claims_deleted=6 nodes_deleted=1 waiting_raised=2 `+
		`waiting_cleared=7 duration=`)
}

func TestRunOnceSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t, &fakeStore{next: returns(maintenance.Result{}, nil)}, maintenance.Config{})

	res, err := b.runner.RunOnce(t.Context())
	require.NoError(t, err, "another node's run is not a failure")
	require.False(t, res.Ran)
	events := b.recorder.Events()
	require.Len(t, events, 1)
	require.Equal(t, maintenance.EventSkipped, events[0].Name)
	require.Nil(t, events[0].Counts)
	require.Contains(t, b.log.String(), `level=DEBUG msg="leasehold: maintenance skipped`)
	require.NotContains(t, b.log.String(), "level=INFO")
}

func TestRunOnceFailed(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	b := setup(t, &fakeStore{next: returns(maintenance.Result{}, boom)}, maintenance.Config{})

	_, err := b.runner.RunOnce(t.Context())
	require.ErrorIs(t, err, boom)
	events := b.recorder.Events()
	require.Len(t, events, 1)
	require.Equal(t, maintenance.EventFailed, events[0].Name)
	require.ErrorIs(t, events[0].Err, boom)
	require.Contains(t, b.log.String(), `level=WARN msg="leasehold: maintenance failed; retrying next interval" error=boom`)
}

func TestRunOnceCutShortByItsContextIsNoFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, &fakeStore{next: func(ctx context.Context, _ int) (maintenance.Result, error) {
		return maintenance.Result{}, ctx.Err()
	}}, maintenance.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := b.runner.RunOnce(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, b.recorder.Events())
	require.Empty(t, b.log.String())
}

func TestRunRetriesAfterAFailureUntilCanceled(t *testing.T) {
	t.Parallel()
	store := &fakeStore{
		calls: make(chan int),
		next: func(_ context.Context, call int) (maintenance.Result, error) {
			if call == 1 {
				return maintenance.Result{}, errors.New("connection refused")
			}
			return maintenance.Result{Ran: true, Archived: 1}, nil
		},
	}
	b := setup(t, store, maintenance.Config{Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.runner.Run(ctx) }()

	for want := 1; want <= 3; want++ {
		require.Equal(t, want, <-store.calls)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, 1, b.recorder.Count(maintenance.EventFailed))
	require.GreaterOrEqual(t, b.recorder.Count(maintenance.EventRan), 2)
}

func TestRunReturnsDuringTheInitialDelay(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	b := setup(t, store, maintenance.Config{Interval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.runner.Run(ctx) }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Empty(t, store.Plans())
}

func TestInitialDelayIsAtMostHalfAnInterval(t *testing.T) {
	t.Parallel()
	b := setup(t, &fakeStore{}, maintenance.Config{Interval: 10 * time.Minute})
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := maintenance.InitialDelay(b.runner)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, 5*time.Minute)
		seen[d] = true
	}
	require.Greater(t, len(seen), 1, "the delay is random, so nodes started together spread out")
}
