package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// faultyStore is the Postgres adapter with faults a test switches on:
//   - slowGrants: every statement that grants a claim answers this much
//     later (the grant is made on the server at once, the answer is late);
//   - renewFails: every lease renewal fails as if the database were
//     unreachable (so a lease is never extended after its grant);
//   - cut: every statement hangs until its context is done, like a
//     connection whose packets a partition holds;
//   - journalFails: AppendStep fails with a retryable error.
type faultyStore struct {
	*postgres.Store
	slowGrants   atomic.Int64 // time.Duration
	renewFails   atomic.Bool
	cut          atomic.Bool
	journalFails atomic.Bool
	// probed receives one value per membership refresh attempted.
	probed chan error
}

var errUnreachable = fmt.Errorf("test: %w: dial tcp: connection refused", claims.ErrRetryable)

func (f *faultyStore) hang(ctx context.Context) error {
	if !f.cut.Load() {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("test: partitioned: %w", ctx.Err())
}

func (f *faultyStore) slow() { time.Sleep(time.Duration(f.slowGrants.Load())) } // a late answer, not a wait for expiry

func (f *faultyStore) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	c, err := f.Store.Acquire(ctx, p)
	f.slow()
	return c, err
}

func (f *faultyStore) CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error) {
	if err := f.hang(ctx); err != nil {
		return episodes.Created{}, err
	}
	res, err := f.Store.CreateEpisode(ctx, n)
	f.slow()
	return res, err
}

func (f *faultyStore) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	ds, err := f.Store.ClaimAvailable(ctx, q)
	f.slow()
	return ds, err
}

func (f *faultyStore) ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error) {
	ep, c, err := f.Store.ClaimForRecovery(ctx, id, owner, lease, staleAfter)
	f.slow()
	return ep, c, err
}

func (f *faultyStore) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	if f.renewFails.Load() {
		return nil, errUnreachable
	}
	if err := f.hang(ctx); err != nil {
		return nil, err
	}
	return f.Store.RenewMany(ctx, owner, held, lease)
}

func (f *faultyStore) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error {
	if f.journalFails.Load() {
		return errUnreachable
	}
	if err := f.hang(ctx); err != nil {
		return err
	}
	return f.Store.AppendStep(ctx, id, t, stepNo, data, lease)
}

func (f *faultyStore) FinishEpisode(ctx context.Context, id int64, t claims.Token, fin episodes.Finish) error {
	if err := f.hang(ctx); err != nil {
		return err
	}
	return f.Store.FinishEpisode(ctx, id, t, fin)
}

func (f *faultyStore) ReleaseMany(ctx context.Context, owner string, held []claims.Held) ([]claims.Held, error) {
	if err := f.hang(ctx); err != nil {
		return nil, err
	}
	return f.Store.ReleaseMany(ctx, owner, held)
}

func (f *faultyStore) HeartbeatNode(ctx context.Context, m membership.Member) error {
	err := f.hang(ctx)
	if err == nil {
		err = f.Store.HeartbeatNode(ctx, m)
	}
	select {
	case f.probed <- err:
	default:
	}
	return err
}

func (f *faultyStore) DeregisterNode(ctx context.Context, id string) error {
	if err := f.hang(ctx); err != nil {
		return err
	}
	return f.Store.DeregisterNode(ctx, id)
}

// startFaulty starts one node on a faultyStore.
func startFaulty(t *testing.T, lease time.Duration, tune func(*runner.Config), actors ...runner.Actor) (nodetest.Cluster, *faultyStore) {
	t.Helper()
	var fs *faultyStore
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) {
		fs = &faultyStore{Store: cfg.Store.(*postgres.Store), probed: make(chan error, 1)}
		cfg.Store, cfg.Lease = fs, lease
		if tune != nil {
			tune(cfg)
		}
	}, actors...)
	return c, fs
}

// liveOnDatabase reports whether the grant's lease is still live on the
// database clock at the moment of the call.
func liveOnDatabase(c nodetest.Cluster, tok claims.Token) (bool, error) {
	var live bool
	err := c.Pool.QueryRow(context.Background(), `SELECT lease_until > clock_timestamp()
		FROM leasehold_work_claims WHERE dedupe_key = $1 AND fence = $2`, tok.Key, tok.Fence).Scan(&live)
	return live, err
}

// Every path that grants a claim — a trigger's creation, a deferred
// episode's dispatch, a recovered one's, a direct acquire — starts the local
// lease clock before its statement was sent: with the grant's answer seconds
// late and no renewal getting through afterwards, the run is stopped while
// its lease is still live on the database, so no other node can be running
// the same work yet.
func TestEveryGrantPathStopsTheRunBeforeItsLeaseExpires(t *testing.T) {
	t.Parallel()
	const (
		// The run must stop by its local start + lease - margin = 5 s; the
		// lease ends on the database at the grant + 7 s, which leaves the
		// stopped run margin (testbound.Margin) to wake up and ask the
		// database. Starting the clock at the answer instead (3 s late)
		// would run until 8 s, past the database's end. The answer comes
		// testbound.Margin before the local deadline, so a loaded host
		// still calls the strategy most of the time.
		margin = testbound.Margin
		late   = margin + time.Second
		lease  = margin + late + testbound.Margin
	)
	type stopped struct {
		episode     int64
		tok         claims.Token
		live        bool
		cause, qerr error
	}
	stops := make(chan stopped, 16)
	var c nodetest.Cluster
	waits := nodetest.Strategy{
		InitFunc: func(ctx context.Context, r *runner.Run) error {
			<-ctx.Done()
			live, err := liveOnDatabase(c, r.Token())
			stops <- stopped{episode: r.EpisodeID(), tok: r.Token(), live: live, cause: context.Cause(ctx), qerr: err}
			return ctx.Err()
		},
		StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{Done: true}, nil
		},
	}
	actor := runner.Actor{ID: "slow", MaxConcurrent: 4, Expectations: []runner.Expectation{{
		ID: "wait", Trigger: runner.Event{Name: "go"}, Strategy: waits, Recovery: runner.RecoveryRestart, MaxAttempts: 10,
	}}}
	c, fs := startFaulty(t, lease, func(cfg *runner.Config) {
		cfg.Poll.Disabled, cfg.TriggerWaker = true, nil
		cfg.Heartbeat.Margin = margin
	}, actor)
	node, ctx := c.Nodes[0], context.Background()
	fs.slowGrants.Store(int64(late))
	fs.renewFails.Store(true)
	// check waits for the run of episode to stop; every run that stops
	// meanwhile (earlier episodes, recovered again) must have stopped in
	// time too.
	//
	// A host so slow that the late answer came after the local deadline
	// stops the run before its strategy is called (no Init, so no stop
	// reported; the ending is lease lost, or not started when the start
	// itself ran out of lease): the episode's ending with no stop before
	// it is that, in time by construction.
	verify := func(path string, s stopped) {
		t.Helper()
		require.NoError(t, s.qerr)
		require.ErrorIs(t, s.cause, claims.ErrLeaseLost, "%s: stopped by the local deadline", path)
		require.True(t, s.live, "%s: the run of %s outlived its lease on the database", path, s.tok)
	}
	check := func(path string, episode int64) {
		t.Helper()
		for {
			select {
			case s := <-stops:
				verify(path, s)
				if s.episode == episode {
					return
				}
			case e := <-c.Sigs[0].Ended():
				if e.EpisodeID != episode {
					continue
				}
				for drained := false; !drained; { // a stop reported before the ending may still be buffered
					select {
					case s := <-stops:
						verify(path, s)
						if s.episode == episode {
							return
						}
					default:
						drained = true
					}
				}
				// Lost at the check before Init, or earlier: StartEpisode's
				// retries ran out at the local deadline (not started).
				require.Contains(t, []string{runner.EventLeaseLost, runner.EventNotStarted}, e.Name,
					"%s: episode %d ended before its strategy was called", path, episode)
				t.Logf("%s: the answer came after the local deadline; episode %d stopped before its strategy was called", path, episode)
				return
			case <-time.After(time.Minute):
				t.Fatalf("%s: no run of episode %d stopped within a minute", path, episode)
			}
		}
	}

	// 1. A trigger whose CreateEpisode answer is late.
	fired, err := node.Fire(ctx, "slow", "go", map[string]int{"n": 1}, runner.FireOptions{})
	require.NoError(t, err)
	check("CreateEpisode", fired[0].EpisodeID)

	// 2. A deferred episode taken by this node's poll.
	deferred := episodes.New{ActorID: "slow", ExpectationID: "wait", TriggerType: episodes.TriggerEvent,
		DedupeKey: "event:slow:wait:deferred", MaxAttempts: 10}
	d, err := postgres.New(c.Pool).CreateDeferredEpisode(ctx, episodes.Deferred{New: deferred})
	require.NoError(t, err)
	n, err := node.PollOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	check("ClaimAvailable", d.Episode.ID)

	// 3. An orphan recovered by this node (its claim's owner is gone): the
	// sweep makes it available again (RequeueOrphan), and the poll that
	// takes it grants the lease the run holds.
	orphan := deferred
	orphan.DedupeKey, orphan.Owner, orphan.Lease = "event:slow:wait:orphan", "gone", time.Minute
	created, err := postgres.New(c.Pool).CreateEpisode(ctx, orphan)
	require.NoError(t, err)
	_, err = postgres.New(c.Pool).StartEpisode(ctx, created.Episode.ID, created.Claim.Token)
	require.NoError(t, err)
	pgtest.ExpireClaim(t, c.Pool, orphan.DedupeKey)
	rcv, err := recovery.New(fs, node, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	rep, err := rcv.Sweep(ctx, recovery.Options{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, rep.Restarted, 1) // the earlier runs' leases expired too
	n, err = node.PollOnce(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	check("RequeueOrphan, ClaimAvailable", created.Episode.ID)

	// 4. A direct claims user: Gate.Acquire, then Hold.
	gate, err := claims.NewGate(fs, claims.GateConfig{Owner: "direct", Lease: lease})
	require.NoError(t, err)
	hb, err := claims.NewHeartbeat(gate, claims.HeartbeatConfig{Margin: margin, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() { _ = hb.Run(hbCtx); close(hbDone) }()
	defer func() { stopHB(); <-hbDone }()
	claim, err := gate.Acquire(ctx, "direct-work", "job")
	require.NoError(t, err)
	work, unhold := hb.Hold(ctx, claim)
	defer unhold()
	<-work.Done()
	require.ErrorIs(t, context.Cause(work), claims.ErrLeaseLost)
	live, err := liveOnDatabase(c, claim.Token)
	require.NoError(t, err)
	require.True(t, live, "direct: the work outlived its lease on the database")
}

// A journal write the database keeps refusing with a retryable error
// (connect refused), and its renewals with it, is retried only while the
// lease's local time remains, not for the 30 s WriteTimeout: the run ends,
// and its episode is handed to recovery, before another node could take
// the lease. (While renewals land, a write keeps its place instead:
// TestJournalWriteWaitsWhileTheLeaseIsRenewed.)
func TestJournalRetriesStopAtTheLeasesLocalDeadline(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	actor := runner.Actor{ID: "work", Expectations: []runner.Expectation{{ID: "job", Trigger: runner.Manual{},
		Strategy: nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			return runner.StepResult{Data: "step"}, nil
		}}}}}
	c, fs := startFaulty(t, lease, nil, actor)
	fs.journalFails.Store(true)
	fs.renewFails.Store(true)
	began := time.Now()
	_, err := c.Nodes[0].RunManual(context.Background(), "work", "job", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs[0])
	took := time.Since(began)
	// The local deadline is at lease - margin (0.8 s); before, the retries
	// went on for the 30 s WriteTimeout.
	t.Logf("the run ended %v after it started", took.Round(time.Millisecond))
	require.Less(t, took, lease+testbound.Margin, "retried past the lease's local deadline (%v)", took)
	require.Equal(t, 1, c.Count(t, "status = 'running'"), "handed to recovery, not failed")
}

// A journal write that meets a short outage (retryable errors for 150 ms)
// is retried within the lease, so the run carries on: one run, a contiguous
// journal, no restart.
func TestShortOutageDoesNotRestartLiveWork(t *testing.T) {
	t.Parallel()
	var fs *faultyStore
	var once sync.Once
	actor := runner.Actor{ID: "work", Expectations: []runner.Expectation{{ID: "job", Trigger: runner.Manual{},
		Recovery: runner.RecoveryRestart,
		Strategy: nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
			if r.StepNo == 3 {
				once.Do(func() {
					fs.journalFails.Store(true)
					time.AfterFunc(150*time.Millisecond, func() { fs.journalFails.Store(false) })
				})
			}
			return runner.StepResult{Data: r.StepNo, Done: r.StepNo == 6}, nil
		}}}}}
	c, fs := startFaulty(t, 3*time.Second, nil, actor)
	out, err := c.Nodes[0].RunManual(context.Background(), "work", "job", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs[0])
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done' AND attempts = 0", out.EpisodeID))
	steps, err := postgres.New(c.Pool).ListSteps(context.Background(), out.EpisodeID)
	require.NoError(t, err)
	require.Len(t, steps, 6, "one run, every step journaled once")
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventStarted))
}

// During a partition, Drain returns by its deadline plus DrainGrace, and
// its summary says what happened: the cut-off runs were interrupted and
// their claims could not be released (they expire instead); none is
// reported lost.
func TestDrainKeepsItsDeadlineDuringAPartition(t *testing.T) {
	t.Parallel()
	inStep := make(chan struct{}, 4)
	actor := runner.Actor{ID: "work", MaxConcurrent: 4, Expectations: []runner.Expectation{{ID: "job", Trigger: runner.Manual{},
		Strategy: nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			if r.StepNo == 2 {
				inStep <- struct{}{}
			}
			select {
			case <-ctx.Done():
				return runner.StepResult{}, ctx.Err()
			case <-time.After(20 * time.Millisecond): // a step's work
			}
			return runner.StepResult{Data: "step"}, nil
		}}}}}
	const grace = 200 * time.Millisecond
	c, fs := startFaulty(t, 10*time.Second, func(cfg *runner.Config) { cfg.DrainGrace = grace }, actor)
	node := c.Nodes[0]
	for range 3 {
		_, err := node.RunManual(context.Background(), "work", "job", nil)
		require.NoError(t, err)
	}
	for range 3 {
		<-inStep
	}
	fs.cut.Store(true)
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	began := time.Now()
	sum, err := node.Drain(ctx)
	took := time.Since(began)
	t.Logf("Drain returned after %v (deadline %v + grace %v)", took.Round(time.Millisecond), deadline, grace)
	require.Less(t, took, deadline+grace+testbound.Margin, "Drain overran its deadline (%v)", took) // before: 30 s
	require.Error(t, err, "claims not released are an error")
	require.Equal(t, 3, sum.Tracked)
	require.Equal(t, sum.Tracked, sum.Graceful+sum.Forced+sum.Abandoned)
	require.Zero(t, sum.Released)
	require.Zero(t, sum.Lost, "a partition loses no lease")
	require.Equal(t, 3, sum.Unreleased+sum.Abandoned)
	require.Zero(t, c.Sigs[0].Count(runner.EventLeaseLost), "lease_lost is for lost leases only")
}

// Drain releases each episode as soon as it reaches a step boundary, not
// after the slowest step: with one step that takes until the test says,
// the seven others are released (and takeable) while it still runs.
func TestDrainReleasesEachEpisodeAtItsBoundary(t *testing.T) {
	t.Parallel()
	slowGate := make(chan struct{})
	running := make(chan struct{}, 8)
	actor := runner.Actor{ID: "work", MaxConcurrent: 8, Expectations: []runner.Expectation{{ID: "job", Trigger: runner.Manual{},
		Strategy: nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
			var p struct{ Slow bool }
			if err := r.Payload(&p); err != nil {
				return runner.StepResult{}, err
			}
			switch {
			case p.Slow && r.StepNo == 2:
				running <- struct{}{} // in its slow step
				<-slowGate            // ignores ctx until the test lets it go
			case !p.Slow && r.StepNo == 1:
				running <- struct{}{}
			}
			time.Sleep(5 * time.Millisecond) // a step's work
			return runner.StepResult{Data: "step"}, nil
		}}}}}
	released := make(chan telemetry.Event, 8)
	c, _ := startFaulty(t, time.Minute, func(cfg *runner.Config) {
		cfg.Observer = watch{Observer: cfg.Observer, name: runner.EventReleased, ch: released}
	}, actor)
	node, ctx := c.Nodes[0], context.Background()
	for i := range 8 {
		_, err := node.RunManual(ctx, "work", "job", map[string]bool{"slow": i == 0})
		require.NoError(t, err)
	}
	for range 8 {
		<-running
	}
	drained := make(chan runner.DrainSummary, 1)
	go func() {
		sum, err := node.Drain(ctx) // no deadline: every run gets to its boundary
		require.NoError(t, err)
		drained <- sum
	}()
	for i := range 7 {
		select {
		case <-released:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 7 episodes released while the slow step runs", i)
		}
	}
	var n int
	require.NoError(t, c.Pool.QueryRow(ctx, `SELECT count(*) FROM leasehold_work_claims WHERE state = 'released'`).Scan(&n))
	require.Equal(t, 7, n, "released in the database, takeable at once")
	close(slowGate)
	sum := <-drained
	sum.Duration = 0
	require.Equal(t, runner.DrainSummary{Tracked: 8, Graceful: 8, Released: 8}, sum)
	require.Zero(t, c.Sigs[0].Count(runner.EventLeaseLost))
}

// A node that cannot reach its database is degraded, whether it holds
// leases or not, until it can again.
func TestReadinessDegradesWhileTheDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	blocks := make(chan struct{})
	entered := make(chan struct{}, 8)
	actor := runner.Actor{ID: "work", Expectations: []runner.Expectation{{ID: "job", Trigger: runner.Manual{},
		Strategy: nodetest.Strategy{
			InitFunc: func(ctx context.Context, r *runner.Run) error {
				entered <- struct{}{}
				select {
				case <-ctx.Done():
				case <-blocks:
				}
				return ctx.Err()
			},
			StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
				return runner.StepResult{Done: true}, nil
			},
		}}}}
	const lease = 600 * time.Millisecond // heartbeat and membership every 200 ms
	c, fs := startFaulty(t, lease, nil, actor)
	node := c.Nodes[0]
	// waitProbe waits for the membership refresh after the next one, so the
	// next one's outcome is already recorded.
	waitProbe := func(wantErr bool) {
		t.Helper()
		for seen := 0; seen < 2; {
			if err := <-fs.probed; (err != nil) == wantErr {
				seen++
			}
		}
	}

	// backReady: once probes pass again, ready within two membership
	// periods (heartbeat interval: lease/3) plus the scheduling margin.
	// Not at the second good probe exactly: a renewal that failed during
	// the cut may report after it, and the next renewal tick clears it.
	// Counted in probes, one per membership period.
	backReady := func() {
		t.Helper()
		probes := 2 + int(testbound.Margin/(lease/3))
		for seen := 0; node.Readiness().State != runner.StateReady; seen++ {
			require.Less(t, seen, probes, "not ready %d probes after the database came back: %+v", probes, node.Readiness())
			<-fs.probed
		}
	}

	waitProbe(false)
	require.Equal(t, runner.StateReady, node.Readiness().State)
	fs.cut.Store(true)
	waitProbe(true)
	require.Equal(t, runner.StateDegraded, node.Readiness().State, "idle and cut off")
	fs.cut.Store(false)
	waitProbe(false)
	backReady()

	// Holding a lease: the cut shows through the failing renewals, and
	// still after the lease is lost locally and nothing is held.
	// The cut comes once the run holds its lease inside Init. On a starved
	// host the 600 ms lease's grant can pass its local deadline before Init
	// (the run ends not started, holding nothing, renewing nothing): that
	// run proves nothing here, so another is fired.
	for tries := 1; ; tries++ {
		_, err := node.RunManual(context.Background(), "work", "job", nil)
		require.NoError(t, err)
		select {
		case <-entered:
		case e := <-c.Sigs[0].Ended():
			require.Less(t, tries, 5, "no run reached Init in %d tries; the node reported: %s", tries, nodetest.Seen(c.Sigs...))
			t.Logf("run %d ended %s before Init; firing another", tries, e.Name)
			continue
		}
		break
	}
	fs.cut.Store(true)
	ended := nodetest.WaitEnded(t, 1, c.Sigs[0])
	require.Equal(t, runner.EventLeaseLost, ended[0].Name, "the local deadline passed while renewals failed")
	require.Zero(t, node.Readiness().HeldLeases)
	// Nothing held, still cut off: degraded once the next probe fails. Not
	// at the lease loss itself: a membership probe sent just before the
	// cut may succeed after it (on a loaded host, it did) and say ready
	// until the next one fails.
	waitProbe(true)
	require.Equal(t, runner.StateDegraded, node.Readiness().State, "nothing held, still cut off")
	fs.cut.Store(false)
	waitProbe(false)
	backReady()
	close(blocks)
}

// A node that was stopped past a lease's local deadline (SIGSTOP, a long GC
// pause, here: the answer that granted it arriving after the deadline) does
// not begin the strategy on that lease: the check before Init (and before
// each Step) is synchronous, not left to the heartbeat's next tick. The
// episode stays running under the grant, for recovery once it expires.
func TestNoStrategyCallPastTheLocalDeadline(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	s := nodetest.Strategy{
		InitFunc: func(context.Context, *runner.Run) error { calls.Add(1); return nil },
		StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
			calls.Add(1)
			return runner.StepResult{Done: true}, nil
		},
	}
	c, fs := startFaulty(t, 2*time.Second, func(cfg *runner.Config) {
		cfg.Heartbeat.Margin = 600 * time.Millisecond // local deadline: sent + 1.4 s
		cfg.Heartbeat.Interval = 500 * time.Millisecond
	}, runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: s}}})
	fs.slowGrants.Store(int64(1500 * time.Millisecond)) // the grant's answer comes after the deadline
	_, err := c.Nodes[0].RunManual(context.Background(), "pay", "charge", nil)
	require.NoError(t, err)
	nodetest.WaitEnded(t, 1, c.Sigs...)
	require.Zero(t, calls.Load(), "no Init or Step on a lease past its local deadline")
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventLeaseLost))
	require.Zero(t, c.Count(t, "status = 'done'"))
}
