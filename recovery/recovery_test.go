package recovery_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// orphans inserts n episodes left behind by a dead node: running, last step
// an hour ago (database time), with an expired claim (fence 1) unless
// claimless. Returns their ids.
type orphanSpec struct {
	n                    int
	actor, expectation   string
	stack, env, status   string
	claimless, liveClaim bool
	maxAttempts          int
}

func insertOrphans(t *testing.T, pool *pgxpool.Pool, s orphanSpec) []int64 {
	t.Helper()
	if s.actor == "" {
		s.actor, s.expectation = "worker", "job"
	}
	if s.status == "" {
		s.status = "running"
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = 3
	}
	prefix := fmt.Sprintf("orphan:%s:%s:%s:%d", s.stack, s.env, s.status, time.Now().UnixNano())
	rows, err := pool.Query(context.Background(), `INSERT INTO leasehold_episodes
		(actor_id, expectation_id, trigger_type, dedupe_key, key_version, status, max_attempts, source_stack, source_env,
		 owner_node, created_at, started_at, last_step_at)
		SELECT $1, $2, 'event', $3 || ':' || g, 2, $4, $5, $6, $7, 'dead-node',
		       now() - interval '2 hours', now() - interval '1 hour', now() - interval '1 hour'
		FROM generate_series(1, $8::int) AS g RETURNING id, dedupe_key`,
		s.actor, s.expectation, prefix, s.status, s.maxAttempts, s.stack, s.env, s.n)
	require.NoError(t, err)
	var ids []int64
	var keys []string
	for rows.Next() {
		var id int64
		var key string
		require.NoError(t, rows.Scan(&id, &key))
		ids, keys = append(ids, id), append(keys, key)
	}
	require.NoError(t, rows.Err())
	if !s.claimless {
		lease := "now() - interval '1 minute'"
		if s.liveClaim {
			lease = "now() + interval '1 hour'"
		}
		_, err := pool.Exec(context.Background(), `INSERT INTO leasehold_work_claims
			(dedupe_key, state, owner_node, lease_until, claimed_at, attempt, fence)
			SELECT k, 'claimed', 'dead-node', `+lease+`, now() - interval '1 hour', 1, 1 FROM unnest($1::text[]) AS k`, keys)
		require.NoError(t, err)
	}
	return ids
}

func newRecoverer(t *testing.T, c nodetest.Cluster, i int) *recovery.Recoverer {
	t.Helper()
	r, err := recovery.New(postgres.New(c.Pool), c.Nodes[i], slog.New(slog.DiscardHandler), c.Sigs[i])
	require.NoError(t, err)
	return r
}

func worker(policy runner.RecoveryPolicy, s runner.Strategy, maxConcurrent int) runner.Actor {
	return runner.Actor{ID: "worker", MaxConcurrent: maxConcurrent, Expectations: []runner.Expectation{
		{ID: "job", Trigger: runner.Manual{}, Strategy: s, Recovery: policy},
	}}
}

var journalOnce = nodetest.Strategy{StepFunc: func(_ context.Context, r *runner.Run) (runner.StepResult, error) {
	return runner.StepResult{Data: map[string]int32{"attempt": r.Attempt}, Done: true}, nil
}}

func TestThreeNodesRestartEachOrphanExactlyOnce(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 3, nil, worker(runner.RecoveryRestart, journalOnce, 16))
	ids := insertOrphans(t, c.Pool, orphanSpec{n: 300})

	reports := make([]recovery.Report, 3)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range c.Nodes {
		r := newRecoverer(t, c, i)
		wg.Go(func() {
			<-start
			rep, err := r.Sweep(t.Context(), recovery.Options{})
			require.NoError(t, err)
			reports[i] = rep
		})
	}
	close(start)
	wg.Wait()
	nodetest.WaitEnded(t, len(ids), c.Sigs...)

	restarted := 0
	for _, rep := range reports {
		require.LessOrEqual(t, rep.Found, 300) // a slower node lists after others requeued some
		restarted += rep.Restarted
	}
	require.Equal(t, 300, restarted, "each orphan requeued exactly once: %+v", reports)
	require.Equal(t, 300, c.Count(t, "status = 'done' AND attempts = 1"))

	// Exactly one run per orphan: one journal entry each, written under the
	// grant the poller's dispatch made (fence 3: the dead node's was 1, the
	// requeue fenced it out with 2), and every claim finished at fence 3.
	var steps, badFence, claimsAtFence3 int
	require.NoError(t, c.Pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE fence <> 3)
		FROM leasehold_episode_steps WHERE episode_id = ANY($1)`, ids).Scan(&steps, &badFence))
	require.Equal(t, 300, steps)
	require.Zero(t, badFence)
	require.NoError(t, c.Pool.QueryRow(t.Context(), `SELECT count(*) FROM leasehold_work_claims
		WHERE fence = 3 AND state = 'done'`).Scan(&claimsAtFence3))
	if claimsAtFence3 != 300 {
		rows, _ := c.Pool.Query(t.Context(), `SELECT dedupe_key, state, owner_node, fence, attempt, grant_kind FROM leasehold_work_claims WHERE NOT (fence = 3 AND state = 'done')`)
		for rows.Next() {
			v, _ := rows.Values()
			t.Log(v...)
		}
	}
	require.Equal(t, 300, claimsAtFence3)
}

func TestAliveEpisodesAreNotRecovered(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 1, nil, worker(runner.RecoveryFail, journalOnce, 1))
	store := postgres.New(c.Pool)
	queued := insertOrphans(t, c.Pool, orphanSpec{n: 1, status: "queued", liveClaim: true})
	queuedNoClaim := insertOrphans(t, c.Pool, orphanSpec{n: 1, status: "queued", claimless: true})
	liveOld := insertOrphans(t, c.Pool, orphanSpec{n: 1, liveClaim: true})

	rep, err := newRecoverer(t, c, 0).Sweep(t.Context(), recovery.Options{StaleAfter: time.Millisecond})
	require.NoError(t, err)
	require.Zero(t, rep.Found, "%+v", rep.Decisions)
	for _, id := range append(append(queued, queuedNoClaim...), liveOld...) {
		_, _, err := store.ClaimForRecovery(t.Context(), id, "sweeper", time.Minute, time.Millisecond)
		require.ErrorIs(t, err, claims.ErrBusy, "episode %d", id)
	}
	require.Equal(t, 2, c.Count(t, "status = 'queued' AND attempts = 0"))
	require.Equal(t, 1, c.Count(t, "status = 'running' AND attempts = 0"))
}

func TestEpisodeThatJournalsAfterListingIsNotRecovered(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 1, nil, worker(runner.RecoveryFail, journalOnce, 1))
	store := postgres.New(c.Pool)
	id := insertOrphans(t, c.Pool, orphanSpec{n: 1})[0]
	orphans, err := store.ListOrphans(t.Context(), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 10})
	require.NoError(t, err)
	require.Len(t, orphans, 1)

	// The "dead" node was only slow: it journals a step with its old grant.
	owner := claims.Token{Key: orphans[0].Episode.DedupeKey, Owner: "dead-node", Fence: 1}
	require.NoError(t, store.AppendStep(t.Context(), id, owner, 1, []byte(`"late but alive"`), time.Minute))

	_, _, err = store.ClaimForRecovery(t.Context(), id, "sweeper", time.Minute, time.Minute)
	require.ErrorIs(t, err, claims.ErrBusy)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'running' AND attempts = 0", id))

	// Claim-less episodes: a step since listing makes them fresh too.
	id2 := insertOrphans(t, c.Pool, orphanSpec{n: 1, claimless: true})[0]
	_, err = c.Pool.Exec(t.Context(), `UPDATE leasehold_episodes SET last_step_at = now() WHERE id = $1`, id2)
	require.NoError(t, err)
	_, _, err = store.ClaimForRecovery(t.Context(), id2, "sweeper", time.Minute, time.Minute)
	require.ErrorIs(t, err, claims.ErrBusy)
}

func TestPolicyResolutionOrder(t *testing.T) {
	t.Parallel()
	registered := runner.Actor{ID: "compiled", Expectations: []runner.Expectation{
		{ID: "restarts", Trigger: runner.Manual{}, Strategy: journalOnce, Recovery: runner.RecoveryRestart},
		{ID: "fails", Trigger: runner.Manual{}, Strategy: journalOnce},
	}}
	c := nodetest.Start(t, 1, nil, registered)
	store := postgres.New(c.Pool)
	require.NoError(t, store.PutAgentDefinition(t.Context(), episodes.Definition{ActorID: "dynamic", ExpectationID: "restarts", RecoveryPolicy: "restart"}))
	require.NoError(t, store.PutAgentDefinition(t.Context(), episodes.Definition{ActorID: "compiled", ExpectationID: "fails", RecoveryPolicy: "restart"})) // registry wins
	for _, a := range [][2]string{{"compiled", "restarts"}, {"compiled", "fails"}, {"dynamic", "restarts"}, {"unknown", "x"}, {"resolved", "x"}} {
		insertOrphans(t, c.Pool, orphanSpec{n: 1, actor: a[0], expectation: a[1]})
	}
	rep, err := newRecoverer(t, c, 0).Sweep(t.Context(), recovery.Options{DryRun: true,
		Resolve: func(ep episodes.Episode) (recovery.Policy, bool) {
			return recovery.PolicyRestart, ep.ActorID == "resolved" || ep.ExpectationID == "restarts"
		}})
	require.NoError(t, err)
	got := map[string]string{}
	for _, d := range rep.Decisions {
		got[d.ActorID+"/"+d.ExpectationID] = string(d.Policy) + " from " + d.PolicySource
	}
	require.Equal(t, map[string]string{
		"compiled/restarts": "restart from resolver",
		"compiled/fails":    "fail from registry",
		"dynamic/restarts":  "restart from resolver",
		"unknown/x":         " from unknown",
		"resolved/x":        "restart from resolver",
	}, got)
	require.Equal(t, 5, c.Count(t, "status = 'running' AND attempts = 0"), "a dry run claims nothing")

	rep, err = newRecoverer(t, c, 0).Sweep(t.Context(), recovery.Options{DryRun: true})
	require.NoError(t, err)
	got = map[string]string{}
	for _, d := range rep.Decisions {
		got[d.ActorID+"/"+d.ExpectationID] = string(d.Policy) + " from " + d.PolicySource
	}
	require.Equal(t, "restart from registry", got["compiled/restarts"])
	require.Equal(t, "restart from table", got["dynamic/restarts"])
	require.Equal(t, " from unknown", got["resolved/x"])

	// For real: orphans whose policy nobody here knows are left alone, not
	// claimed (a node that runs them will); the dynamic actor's restart
	// makes it available work, which waits for a node that runs the actor
	// (none here).
	rep, err = newRecoverer(t, c, 0).Sweep(t.Context(), recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, recovery.Report{Found: 5, Claimed: 3, Restarted: 2, Failed: 1, Skipped: 2}, withoutDecisions(rep))
	nodetest.WaitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Count(t, "status = 'queued' AND actor_id = 'dynamic' AND attempts = 1 AND run_after IS NOT NULL"),
		"available, for a node that registers the dynamic actor")
	require.Equal(t, 1, c.Count(t, "status = 'failed' AND error_class = 'orphaned'"))
	require.Equal(t, 2, c.Count(t, "status = 'running' AND attempts = 0 AND actor_id IN ('unknown', 'resolved')"), "unknown policy: untouched")
	var last telemetry.Event
	for _, e := range c.Sigs[0].Events() {
		if e.Name == recovery.EventSweep {
			last = e
		}
	}
	require.Equal(t, map[string]int{"found": 5, "claimed": 3, "restarted": 2, "failed": 1, "skipped": 2}, last.Counts)
	require.Equal(t, 1, c.Count(t, "status = 'done' AND actor_id = 'compiled'"))
}

func TestRestartsAreBackpressured(t *testing.T) {
	t.Parallel()
	var running, peak atomic.Int32
	gate := make(chan struct{})
	started := make(chan struct{}, 10)
	slow := nodetest.Strategy{StepFunc: func(ctx context.Context, _ *runner.Run) (runner.StepResult, error) {
		started <- struct{}{}
		now := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.Start(t, 1, nil, worker(runner.RecoveryRestart, slow, 2))
	insertOrphans(t, c.Pool, orphanSpec{n: 10})
	rep, err := newRecoverer(t, c, 0).Sweep(t.Context(), recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 10, rep.Restarted, "recovered work is queued, never dropped")
	<-started
	<-started // two slots taken; the rest wait in the database
	require.Equal(t, 8, c.Count(t, "status = 'queued'"))
	close(gate)
	nodetest.WaitEnded(t, 10, c.Sigs...)
	require.Equal(t, 10, c.Count(t, "status = 'done'"))
	require.LessOrEqual(t, peak.Load(), int32(2))
}

func TestPoisonEpisodeStopsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 10)
	hang := nodetest.Strategy{StepFunc: func(ctx context.Context, _ *runner.Run) (runner.StepResult, error) {
		started <- struct{}{}
		<-ctx.Done() // the process "dies" every time this episode runs
		return runner.StepResult{}, ctx.Err()
	}}
	c := nodetest.Start(t, 1, nil, worker(runner.RecoveryRestart, hang, 4))
	// MaxAttempts 3: the dead node's run was attempt 1; recovery starts
	// attempts 2 and 3, and fails the episode rather than start a fourth.
	id := insertOrphans(t, c.Pool, orphanSpec{n: 1, maxAttempts: 3})[0]
	key := ""
	require.NoError(t, c.Pool.QueryRow(t.Context(), `SELECT dedupe_key FROM leasehold_episodes WHERE id = $1`, id).Scan(&key))
	r := newRecoverer(t, c, 0)
	seen := make(chan int32, 4)
	for attempt := int32(2); attempt <= 3; attempt++ {
		rep, err := r.Sweep(t.Context(), recovery.Options{})
		require.NoError(t, err)
		require.Equal(t, 1, rep.Restarted, "attempt %d", attempt)
		<-started
		got, err := postgres.New(c.Pool).GetEpisode(t.Context(), id)
		require.NoError(t, err)
		seen <- got.Attempt()
		_, err = c.Pool.Exec(t.Context(), `UPDATE leasehold_work_claims SET lease_until = now() - interval '1 second' WHERE dedupe_key = $1`, key)
		require.NoError(t, err)
	}
	require.Equal(t, int32(2), <-seen)
	require.Equal(t, int32(3), <-seen)
	dry, err := r.Sweep(t.Context(), recovery.Options{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, recovery.ActionExhausted, dry.Decisions[0].Action)
	require.Contains(t, dry.Decisions[0].Reason, "would be attempt 4 of at most 3")
	rep, err := r.Sweep(t.Context(), recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Failed)
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'failed' AND error_class = 'recovery_exhausted' AND attempts = 3", id),
		"the stored count of restarts is 3: the recovery that found it exhausted counted itself")
}

func TestScopeByStackAndEnv(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 1, func(_ int, cfg *runner.Config) { cfg.StackSlug = "a" })
	ids := map[string]int64{}
	for _, stack := range []string{"a", "b", ""} {
		for _, env := range []string{"", "rc"} {
			ids[stack+"/"+env] = insertOrphans(t, c.Pool, orphanSpec{n: 1, stack: stack, env: env})[0]
		}
	}
	swept := func(opts recovery.Options) []string {
		opts.DryRun = true
		rep, err := newRecoverer(t, c, 0).Sweep(t.Context(), opts)
		require.NoError(t, err)
		var got []string
		for name, id := range ids {
			for _, d := range rep.Decisions {
				if d.EpisodeID == id {
					got = append(got, name)
				}
			}
		}
		return got
	}
	str := func(s string) *string { return &s }
	require.ElementsMatch(t, []string{"a/", "/"}, swept(recovery.Options{}), "own stack + unstamped rows, unset env only")
	require.ElementsMatch(t, []string{"a/rc", "/rc"}, swept(recovery.Options{Env: str("rc")}))
	require.ElementsMatch(t, []string{"b/", "/"}, swept(recovery.Options{Stack: str("b")}))
	require.ElementsMatch(t, []string{"a/", "b/", "/"}, swept(recovery.Options{Stack: str("")}), "no stack: every stack")

	failAll := func(episodes.Episode) (recovery.Policy, bool) { return recovery.PolicyFail, true }
	rep, err := newRecoverer(t, c, 0).Sweep(t.Context(), recovery.Options{Resolve: failAll})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Failed)
	require.Equal(t, 4, c.Count(t, "status = 'running'"))
}

func withoutDecisions(r recovery.Report) recovery.Report {
	r.Decisions = nil
	return r
}

// Recovery never runs what it restarts: a sweep from a node that does not
// run the actor locally (trigger_only) makes the orphan available, and a
// full node's poller runs it.
func TestTriggerOnlyNodesSweepFeedsFullNodes(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 2, func(i int, cfg *runner.Config) {
		if i == 0 {
			cfg.Mode = runner.ModeTriggerOnly
		}
	}, worker(runner.RecoveryRestart, journalOnce, 1))
	id := insertOrphans(t, c.Pool, orphanSpec{n: 1})[0]
	require.False(t, c.Nodes[0].Executes())

	rep, err := newRecoverer(t, c, 0).Sweep(t.Context(), recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Restarted, "%+v", rep.Decisions)
	require.Contains(t, rep.Decisions[0].Reason, "available again as attempt 2")
	nodetest.WaitEnded(t, 1, c.Sigs[1])
	require.Equal(t, 1, c.Count(t, "id = $1 AND status = 'done' AND owner_node = 'node-1' AND attempts = 1", id))
}

// Recovered work flows to free capacity: 1,000 orphans, three nodes whose
// first sweeps are 300 ms apart (the first requeues nearly all of them),
// and every node runs 20-50% of them, each exactly once, never more at
// once than its actor's MaxConcurrent.
func TestRecoveredWorkSpreadsAcrossNodes(t *testing.T) {
	t.Parallel()
	const orphans, slots = 1000, 8
	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	step := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
		node := r.Episode.OwnerNode
		mu.Lock()
		running[node]++
		peak[node] = max(peak[node], running[node])
		mu.Unlock()
		defer func() { mu.Lock(); running[node]--; mu.Unlock() }()
		select {
		case <-time.After(10 * time.Millisecond): // the work itself
		case <-ctx.Done():
			return runner.StepResult{}, ctx.Err()
		}
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.Start(t, 3, func(_ int, cfg *runner.Config) { cfg.Poll.Interval = 100 * time.Millisecond },
		worker(runner.RecoveryRestart, step, slots))
	ids := insertOrphans(t, c.Pool, orphanSpec{n: orphans})

	start := time.Now()
	var wg sync.WaitGroup
	for i := range c.Nodes {
		r := newRecoverer(t, c, i)
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 300 * time.Millisecond) // staggered first sweeps
			_, err := r.Sweep(t.Context(), recovery.Options{})
			require.NoError(t, err)
		})
	}
	wg.Wait()
	nodetest.WaitEnded(t, orphans, c.Sigs...)
	took := time.Since(start)

	require.Equal(t, orphans, c.Count(t, "id = ANY($1) AND status = 'done' AND attempts = 1", ids))
	var steps int
	require.NoError(t, c.Pool.QueryRow(t.Context(), `SELECT count(*) FROM leasehold_episode_steps WHERE episode_id = ANY($1)`, ids).Scan(&steps))
	require.Equal(t, orphans, steps, "each orphan ran exactly once")
	shares := map[string]int{}
	rows, err := c.Pool.Query(t.Context(), `SELECT owner_node, count(*) FROM leasehold_episodes WHERE id = ANY($1) GROUP BY owner_node`, ids)
	require.NoError(t, err)
	for rows.Next() {
		var node string
		var n int
		require.NoError(t, rows.Scan(&node, &n))
		shares[node] = n
	}
	require.NoError(t, rows.Err())
	t.Logf("1,000 recovered orphans ran in %v: shares %v, peak concurrency %v", took.Round(time.Millisecond), shares, peak)
	require.Len(t, shares, 3)
	for node, n := range shares {
		require.GreaterOrEqual(t, n, orphans/5, "%s ran %d of %d: %v", node, n, orphans, shares)
		require.LessOrEqual(t, n, orphans/2, "%s ran %d of %d: %v", node, n, orphans, shares)
		require.LessOrEqual(t, peak[node], slots, "%s ran more than MaxConcurrent at once", node)
	}
}

// batchStore is a Postgres store that is a recovery.BatchRequeuer: it
// records each batch and answers it with RequeueOrphan per item, except
// the ids in busy, which it reports taken by another sweeper, and those in
// locked, whose rows another transaction holds.
type batchStore struct {
	*postgres.Store
	mu      sync.Mutex
	batches [][]episodes.RequeueItem
	busy    map[int64]bool
	locked  map[int64]bool
}

func (s *batchStore) RequeueOrphans(ctx context.Context, items []episodes.RequeueItem, owner string, staleAfter time.Duration) []episodes.RequeueResult {
	s.mu.Lock()
	s.batches = append(s.batches, items)
	s.mu.Unlock()
	out := make([]episodes.RequeueResult, len(items))
	for i, it := range items {
		if s.busy[it.ID] {
			out[i].Err = claims.ErrBusy
			continue
		}
		if s.locked[it.ID] {
			out[i].Err = fmt.Errorf("%w: %w", claims.ErrBusy, claims.ErrLocked)
			continue
		}
		out[i].Requeued, out[i].Err = s.RequeueOrphan(ctx, it.ID, it.Attempts, owner, staleAfter)
	}
	return out
}

// A sweep hands every restart it decided to a BatchRequeuer in one call,
// and each orphan's decision is that orphan's own outcome.
func TestSweepHandsItsRestartsToABatchRequeuer(t *testing.T) {
	t.Parallel()
	c := nodetest.Start(t, 1, nil, worker(runner.RecoveryRestart, journalOnce, 10))
	ids := insertOrphans(t, c.Pool, orphanSpec{n: 5})
	store := &batchStore{Store: postgres.New(c.Pool), busy: map[int64]bool{ids[2]: true}, locked: map[int64]bool{ids[3]: true}}
	r, err := recovery.New(store, c.Nodes[0], slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)

	rep, err := r.Sweep(t.Context(), recovery.Options{})
	require.NoError(t, err)
	require.Len(t, store.batches, 1, "one batch for the whole sweep")
	require.Len(t, store.batches[0], 5)
	require.Equal(t, recovery.Report{Found: 5, Claimed: 3, Restarted: 3, Skipped: 2, Locked: 1}, withoutDecisions(rep))
	for _, d := range rep.Decisions {
		want := recovery.ActionRestart
		if d.EpisodeID == ids[2] || d.EpisodeID == ids[3] {
			want = recovery.ActionSkip
		}
		require.Equal(t, want, d.Action, "episode %d: %s", d.EpisodeID, d.Reason)
		if d.EpisodeID == ids[3] {
			require.Contains(t, d.Reason, "another transaction holds its rows", "a locked orphan says so")
		}
	}
	nodetest.WaitEnded(t, 3, c.Sigs...)
	require.Equal(t, 3, c.Count(t, "status = 'done' AND attempts = 1"), "the three requeued ran once each")
	require.Equal(t, 2, c.Count(t, "status = 'running' AND id IN ($1, $2)", ids[2], ids[3]),
		"the one another sweeper took, and the locked one, are left alone")
}
