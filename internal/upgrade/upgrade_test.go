package upgrade_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// fromSchema is the release whose databases these tests upgrade.
const fromSchema = 10

// claimSeed is an episode's work claim as schema 10 kept it.
type claimSeed struct {
	state   string
	leaseMs int64 // lease_until - now, in milliseconds
	fence   int64
	attempt int
}

// requestSeed is an episode's trigger request as schema 10 kept it.
type requestSeed struct {
	status     string
	runAfterMs int64  // run_after - now
	claimedBy  string // a poller that claimed it, whose claim lapsed a minute ago
}

// seed is one episode of the older release, and what this release must do
// with it.
type seed struct {
	key      string
	status   string
	attempts int
	claim    *claimSeed
	request  *requestSeed
	// held: not to be run until the test ends what holds it (a live lease,
	// a due time an hour away).
	held bool
	// attempt is the Run.Attempt this release must run it as; 0: never run.
	attempt int32
}

const hour = int64(time.Hour / time.Millisecond)

// seeds covers every state a live episode of schema 10 can be in, and the
// two ended ones.
var seeds = []seed{
	// Running on a node that died: its lease ended long ago. Recovery
	// restarts it as its next attempt.
	{key: "running-orphan", status: "running", claim: &claimSeed{"claimed", -hour + 600_000, 3, 1}, attempt: 2},
	// Running on a node of the older release that is still alive: nobody
	// may take it while its lease lasts; when it ends, recovery restarts it.
	{key: "running-live", status: "running", claim: &claimSeed{"claimed", hour, 2, 1}, held: true, attempt: 2},
	// Available now (a trigger_only node's, or an overflow).
	{key: "available", status: "queued", request: &requestSeed{"pending", 0, ""}, attempt: 1},
	// A delayed run, due in an hour.
	{key: "delayed", status: "queued", request: &requestSeed{"pending", hour, ""}, held: true, attempt: 1},
	// A retry waiting out its backoff: the first attempt failed, its claim
	// was released.
	{key: "retrying", status: "queued", attempts: 1, claim: &claimSeed{"released", -1000, 1, 1},
		request: &requestSeed{"pending", hour, ""}, held: true, attempt: 2},
	// A request a poller claimed and died before handing over.
	{key: "claimed-lapsed", status: "queued", request: &requestSeed{"claimed", 0, "node-gone"}, attempt: 1},
	// Queued under a live node's claim (its slot queue), not started yet.
	{key: "queued-held", status: "queued", claim: &claimSeed{"claimed", hour, 1, 1}, held: true, attempt: 1},
	// Ended: never run again.
	{key: "failed", status: "failed", attempts: 2, claim: &claimSeed{"failed", -hour, 3, 3}},
	{key: "done", status: "done", claim: &claimSeed{"done", -hour, 1, 1}},
}

// dialect is what the test needs of a database: its clock expression, how
// to run a statement, how to reach it from nodes.
type dialect struct {
	plus   func(ms int64) string // now + ms
	json   func(s string) string // a JSON literal
	exec   func(q string) int64  // runs a test-only statement
	one    func(q string) int64  // reads one integer
	node   func(i int) runner.Config
	sweep  func() recovery.Store // a store for a sweeper
	status func(id int64) string // an episode's status
	expire func(key string)      // leaseholdtest.ExpireLease
	due    func(id int64)        // leaseholdtest.MakeDue
}

// seedSQL writes s as schema 10's statements left it.
func seedSQL(d dialect, s seed) []string {
	ago := d.plus(-hour)
	ended := "NULL"
	if s.status == "done" || s.status == "failed" {
		ended = d.plus(-hour + 60_000)
	}
	started, owner, errClass := "NULL", "NULL", "NULL"
	if s.status == "running" || s.status == "done" || s.status == "failed" {
		started = ago
	}
	if s.status == "running" {
		owner = "'node-old'"
	}
	if s.status == "failed" || s.attempts > 0 {
		errClass = "'error'"
	}
	out := []string{fmt.Sprintf(`INSERT INTO leasehold_episodes (actor_id, expectation_id, trigger_type, dedupe_key, status,
		attempts, max_attempts, owner_node, payload, error_class, queued_at, started_at, last_step_at, finished_at, created_at)
		VALUES ('upgrade', 'run', 'event', '%s', '%s', %d, 3, %s, %s, %s, %s, %s, %s, %s, %s)`,
		s.key, s.status, s.attempts, owner, d.json(`{"key": "`+s.key+`"}`), errClass, ago, started, started, ended, ago)}
	id := fmt.Sprintf(`(SELECT id FROM leasehold_episodes WHERE dedupe_key = '%s')`, s.key)
	if c := s.claim; c != nil {
		out = append(out, fmt.Sprintf(`INSERT INTO leasehold_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at,
			last_heartbeat_at, finished_at, attempt, fence, grant_kind, work_type)
			VALUES ('%s', '%s', 'node-old', %s, %s, %s, %s, %d, %d, 'fresh', 'episode')`,
			s.key, c.state, d.plus(c.leaseMs), ago, ago, ended, c.attempt, c.fence))
	}
	if r := s.request; r != nil {
		claimedBy, claimUntil, fence := "NULL", "NULL", 0
		if r.claimedBy != "" {
			claimedBy, claimUntil, fence = "'"+r.claimedBy+"'", d.plus(-60_000), 1
		}
		out = append(out, fmt.Sprintf(`INSERT INTO leasehold_trigger_requests (episode_id, actor_id, expectation_id, source_node,
			status, claimed_by, claim_until, fence, created_at, run_after)
			VALUES (%s, 'upgrade', 'run', 'node-old', '%s', %s, %s, %d, %s, %s)`,
			id, r.status, claimedBy, claimUntil, fence, ago, d.plus(r.runAfterMs)))
	}
	return out
}

// runs records every call of the strategy: episode id → attempts seen.
type runs struct {
	mu    sync.Mutex
	calls map[int64][]int32
}

func (r *runs) strategy() nodetest.Strategy {
	return nodetest.Strategy{StepFunc: func(_ context.Context, run *runner.Run) (runner.StepResult, error) {
		r.mu.Lock()
		r.calls[run.EpisodeID()] = append(r.calls[run.EpisodeID()], run.Attempt)
		r.mu.Unlock()
		return runner.StepResult{Done: true}, nil
	}}
}

func (r *runs) of(id int64) []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int32(nil), r.calls[id]...)
}

// upgradeWithLiveWork seeds every seed into a database at fromSchema that
// upgrade then migrates to the newest schema, starts two nodes of this
// release and a sweeper, and checks each episode: the free ones run once
// at once, the held ones not until what holds them ends, then once; the
// ended ones never.
func upgradeWithLiveWork(t *testing.T, d dialect, upgrade func()) {
	ctx := context.Background()
	for _, s := range seeds {
		for _, q := range seedSQL(d, s) {
			require.EqualValues(t, 1, d.exec(q), "seed %s: %s", s.key, q)
		}
	}
	upgrade()

	ids := map[string]int64{}
	for _, s := range seeds {
		ids[s.key] = d.one(fmt.Sprintf(`SELECT id FROM leasehold_episodes WHERE dedupe_key = '%s'`, s.key))
	}
	rs := &runs{calls: map[int64][]int32{}}
	actor := runner.Actor{ID: "upgrade", Expectations: []runner.Expectation{{ID: "run", Trigger: runner.Manual{},
		Strategy: rs.strategy(), Recovery: runner.RecoveryRestart, MaxAttempts: 3}}}
	var nodes []*runner.Node
	ended := nodetest.NewSignals() // every node's ended episodes
	for i := range 2 {
		cfg := d.node(i)
		cfg.Observer = ended
		node, err := runner.NewNode(cfg)
		require.NoError(t, err)
		require.NoError(t, node.Register(actor))
		require.NoError(t, node.Start(ctx))
		t.Cleanup(func() {
			stop, cancel := context.WithCancel(context.Background())
			cancel()
			_ = node.Stop(stop)
		})
		nodes = append(nodes, node)
	}
	rcv, err := recovery.New(d.sweep(), nodes[0], slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	sweepAndPoll := func() {
		_, err := rcv.Sweep(ctx, recovery.Options{})
		require.NoError(t, err)
		for _, n := range nodes {
			n.PollNow()
		}
	}
	status := func(key string) string { return d.status(ids[key]) }
	// waitDone sweeps and polls until every key's episode is done, woken by
	// each episode that ends. The bound: a sweep and a poll each round; the
	// margin covers a loaded host.
	waitDone := func(keys ...string) {
		deadline := time.Now().Add(3 * testbound.Margin)
		for {
			pending := []string{}
			for _, k := range keys {
				if st := status(k); st != "done" {
					pending = append(pending, k+"="+st)
				}
			}
			if len(pending) == 0 {
				return
			}
			require.True(t, time.Now().Before(deadline), "not done after the upgrade: %s", strings.Join(pending, ", "))
			sweepAndPoll()
			// Until an episode ends; a sweep after a quarter second in
			// case one was given back meanwhile and needs requeuing.
			select {
			case <-ended.Ended():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}

	var free, held []string
	for _, s := range seeds {
		switch {
		case s.attempt == 0:
		case s.held:
			held = append(held, s.key)
		default:
			free = append(free, s.key)
		}
	}
	waitDone(free...)
	for _, k := range held {
		require.Empty(t, rs.of(ids[k]), "%s ran while its lease or its due time held it", k)
		require.NotEqual(t, "done", status(k), k)
	}

	// What held them ends: the older node's leases run out, the due times
	// come.
	d.expire("running-live")
	d.expire("queued-held")
	d.due(ids["delayed"])
	d.due(ids["retrying"])
	waitDone(held...)

	for _, s := range seeds {
		got := rs.of(ids[s.key])
		if s.attempt == 0 {
			require.Empty(t, got, "%s had ended before the upgrade and ran again", s.key)
			require.Equal(t, s.status, status(s.key), "%s changed", s.key)
			continue
		}
		require.Equal(t, []int32{s.attempt}, got, "%s: exactly one run, as attempt %d", s.key, s.attempt)
	}
}

func TestUpgradeFromSchema10WithLiveWorkOnPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t, pgtest.Options{UpTo: fromSchema})
	ctx := context.Background()
	d := dialect{
		plus: func(ms int64) string { return fmt.Sprintf("(now() + %d * interval '1 millisecond')", ms) },
		json: func(s string) string { return "'" + s + "'::jsonb" },
		exec: func(q string) int64 { return pgtest.Exec(t, pool, q) },
		one: func(q string) int64 {
			var n int64
			require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
			return n
		},
		node: func(i int) runner.Config {
			p := pgtest.Another(t, pool, pgtest.Options{MaxConns: 8})
			return runner.Config{Store: postgres.New(p), TriggerWaker: postgres.NewNotifier(p),
				Identity: fmt.Sprintf("node-new-%d", i), NoJitter: true,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		},
		sweep: func() recovery.Store { return postgres.New(pool) },
		status: func(id int64) string {
			var st string
			require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM leasehold_episodes WHERE id = $1`, id).Scan(&st))
			return st
		},
		expire: func(key string) { leaseholdtest.ExpireLease(t, pool, key) },
		due:    func(id int64) { leaseholdtest.MakeDue(t, pool, id) },
	}
	upgradeWithLiveWork(t, d, func() {
		db := stdlib.OpenDBFromPool(pool)
		defer db.Close()
		require.NoError(t, postgres.Migrate(ctx, db))
	})
}

func TestUpgradeFromSchema10WithLiveWorkOnSQLite(t *testing.T) {
	t.Parallel()
	db := sqlitetest.OpenUnmigrated(t, t.TempDir()+"/upgrade.db")
	ctx := context.Background()
	p, err := sqlite.NewMigrator(db)
	require.NoError(t, err)
	_, err = p.UpTo(ctx, fromSchema)
	require.NoError(t, err)
	require.NoError(t, sqlitetest.OffsetIdentities(ctx, db))
	d := dialect{
		plus: func(ms int64) string { return fmt.Sprintf("(%s + %d)", sqlitetest.Now, ms) },
		json: func(s string) string { return "'" + s + "'" },
		exec: func(q string) int64 { return sqlitetest.Exec(t, db, q) },
		one: func(q string) int64 {
			var n int64
			require.NoError(t, db.QueryRow(q).Scan(&n))
			return n
		},
		node: func(i int) runner.Config {
			return runner.Config{Store: sqlite.New(sqlitetest.Another(t, db)),
				Identity: fmt.Sprintf("node-new-%d", i), NoJitter: true,
				Poll:   runner.PollConfig{Interval: 20 * time.Millisecond},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		},
		sweep: func() recovery.Store { return sqlite.New(db) },
		status: func(id int64) string {
			var st string
			require.NoError(t, db.QueryRow(`SELECT status FROM leasehold_episodes WHERE id = ?`, id).Scan(&st))
			return st
		},
		expire: func(key string) { leaseholdtest.ExpireLease(t, db, key) },
		due:    func(id int64) { leaseholdtest.MakeDue(t, db, id) },
	}
	upgradeWithLiveWork(t, d, func() { require.NoError(t, sqlite.Migrate(ctx, db)) })
}
