package recovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/sql/queries"
)

// historySize is the number of episodes in every loaded table.
const historySize = 100_000

// sweepLimit lets one sweep take every stale row of the largest case.
const sweepLimit = 20_000

// BenchmarkSweep measures one recovery sweep over a table of historySize
// episodes of which stale are orphans: running, their claim expired an hour
// ago. The orphans' expectation recovers with RecoveryFail, so each costs a
// claim and a fail and runs no strategy. Every iteration first puts the same
// stale rows back to running with an expired claim (untimed), so each sweep
// finds a fresh set. "list/stale=N" times ListOrphans alone on the same data.
func BenchmarkSweep(b *testing.B) {
	for _, stale := range []int{1_000, 10_000} {
		f := newSweepFixture(b, episodeMix{stale: stale, running: 2_000, queued: 500})

		b.Run(fmt.Sprintf("stale=%d", stale), func(b *testing.B) {
			ctx := context.Background()
			var swept time.Duration
			found := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f.resetStale(b)
				b.StartTimer()

				start := time.Now()
				rep, err := f.rec.Sweep(ctx, recovery.Options{Limit: sweepLimit})
				swept += time.Since(start)
				require.NoError(b, err)
				require.Equal(b, stale, rep.Found)
				require.Equal(b, stale, rep.Failed, "claimed %d, skipped %d", rep.Claimed, rep.Skipped)
				found += rep.Found
			}
			b.StopTimer()
			require.Equal(b, stale, f.c.Count(b, "id BETWEEN $1 AND $2 AND status = 'failed' AND error_class = 'orphaned'", f.staleFrom, f.staleTo))
			b.ReportMetric(float64(found)/float64(b.N), "orphans/op")
			b.ReportMetric(swept.Seconds()*1000/float64(b.N), "ms/sweep")
			b.ReportMetric(float64(found)/swept.Seconds(), "orphans/s")
		})

		b.Run(fmt.Sprintf("list/stale=%d", stale), func(b *testing.B) {
			ctx := context.Background()
			f.resetStale(b)
			q := episodes.OrphanQuery{StaleAfter: recovery.DefaultStaleAfter, Limit: sweepLimit}
			listed := 0
			for b.Loop() {
				orphans, err := f.store.ListOrphans(ctx, q)
				require.NoError(b, err)
				require.Len(b, orphans, stale)
				listed += len(orphans)
			}
			b.ReportMetric(float64(listed)/float64(b.N), "orphans/op")
			b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/list")
			b.ReportMetric(float64(listed)/b.Elapsed().Seconds(), "orphans/s")
		})
	}
}

// TestListOrphansUsesPartialIndexes checks that ListOrphanedEpisodes, as it
// stands in sql/queries/postgres/recovery.sql, reaches the running and queued
// episodes through their partial indexes on a table that is mostly history,
// instead of scanning the history.
func TestListOrphansUsesPartialIndexes(t *testing.T) {
	t.Parallel()
	const stale = 300
	pool := pgtest.Schema(t)
	loadEpisodes(t, pool, episodeMix{stale: stale, running: 2_000, queued: 500})

	sql, names := namedStatement(t, "../sql/queries/postgres/recovery.sql", "ListOrphanedEpisodes")
	values := map[string]any{
		"source_stack":   "",
		"source_env":     "",
		"stale_after_ms": recovery.DefaultStaleAfter.Milliseconds(),
		"max_rows":       int32(recovery.DefaultLimit),
	}
	args := make([]any, len(names))
	for i, name := range names {
		v, ok := values[name]
		require.True(t, ok, "no test value for sqlc.arg(%s)", name)
		args[i] = v
	}

	estimated := explain(t, pool, "EXPLAIN (FORMAT JSON) ", sql, args)
	indexes := map[string]bool{}
	estimated.walk(func(n planNode) {
		require.False(t, n.NodeType == "Seq Scan" && (n.RelationName == "leasehold_episodes" || n.RelationName == "leasehold_work_claims"),
			"the history is scanned:\n%s", estimated.text)
		if n.IndexName != "" {
			indexes[n.IndexName] = true
		}
	})
	require.True(t, indexes["leasehold_episodes_running_idx"], "running branch:\n%s", estimated.text)
	require.True(t, indexes["leasehold_episodes_queued_idx"], "queued branch:\n%s", estimated.text)

	analyzed := explain(t, pool, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ", sql, args)
	require.EqualValues(t, stale, analyzed.ActualRows, "orphans listed")
	t.Logf("ListOrphanedEpisodes over %d episodes (%d stale): %.0f rows in %.2f ms, shared buffers hit %d read %d",
		historySize, stale, analyzed.ActualRows, analyzed.executionMs, analyzed.SharedHitBlocks, analyzed.SharedReadBlocks)
	analyzed.walk(func(n planNode) {
		if n.RelationName == "" && n.IndexName == "" {
			return
		}
		t.Logf("  %-18s %-22s %-38s rows %6.0f x %d loops, removed by filter %d",
			n.NodeType, n.RelationName, n.IndexName, n.ActualRows, n.ActualLoops, n.RowsRemovedByFilter)
	})
}

// sweepFixture is a one-node cluster on a loaded table, with the id range of
// its stale rows.
type sweepFixture struct {
	c                  nodetest.Cluster
	store              *postgres.Store
	rec                *recovery.Recoverer
	stale              int
	staleFrom, staleTo int64
}

// newSweepFixture starts one node whose "worker"/"job" expectation recovers
// with RecoveryFail, loads m into its schema, and returns a Recoverer for it
// that logs nothing.
func newSweepFixture(b *testing.B, m episodeMix) *sweepFixture {
	b.Helper()
	c := nodetest.Start(b, 1, nil, worker(runner.RecoveryFail, journalOnce, 1))
	from, to := loadEpisodes(b, c.Pool, m)
	store := postgres.New(c.Pool)
	rec, err := recovery.New(store, c.Nodes[0], slog.New(slog.DiscardHandler), nil)
	require.NoError(b, err)
	return &sweepFixture{c: c, store: store, rec: rec, stale: m.stale, staleFrom: from, staleTo: to}
}

// resetStale puts the stale rows back as a dead node left them: running,
// never recovered, their claim held by dead-node and expired a minute ago.
// It then vacuums and analyzes, so every sweep starts from the same clean
// tables rather than from the dead tuples of the sweeps before it.
func (f *sweepFixture) resetStale(tb testing.TB) {
	tb.Helper()
	n := pgtest.Exec(tb, f.c.Pool, `WITH e AS (
			UPDATE leasehold_episodes
			SET status = 'running', phase = NULL, attempts = 0, owner_node = 'dead-node',
			    result = NULL, error_class = NULL, error_detail = NULL, finished_at = NULL
			WHERE id BETWEEN $1 AND $2
			RETURNING dedupe_key)
		UPDATE leasehold_work_claims AS c
		SET state = 'claimed', owner_node = 'dead-node', lease_until = now() - interval '1 minute',
		    claimed_at = now() - interval '1 hour', last_heartbeat_at = now() - interval '1 hour',
		    finished_at = NULL, error_detail = NULL
		FROM e
		WHERE c.dedupe_key = e.dedupe_key`, f.staleFrom, f.staleTo)
	require.EqualValues(tb, f.stale, n, "stale claims reset")
	pgtest.Exec(tb, f.c.Pool, `VACUUM (ANALYZE) leasehold_episodes, leasehold_work_claims`)
}

// episodeMix is the shape of a loaded episodes table: historySize rows, of
// which stale are orphans, running and queued hold live claims, and the rest
// are done.
type episodeMix struct {
	stale, running, queued int
}

// episodeColumns are the columns every load statement fills, in order.
const episodeColumns = `INSERT INTO leasehold_episodes
	(actor_id, expectation_id, trigger_type, dedupe_key, key_version, status, attempts, max_attempts,
	 owner_node, created_at, queued_at, started_at, last_step_at, finished_at) `

// loadEpisodes fills the schema behind pool with m using set-based inserts,
// gives every episode its work claim, analyzes both tables, and returns the
// (contiguous) id range of the stale rows.
//
//   - done: a month of history, one every 25 seconds; one in four is a
//     manual run with no dedupe key, its claim keyed by episode id.
//   - running: live on three other nodes, last step within 30 seconds.
//   - queued: waiting for a slot on those nodes, claim live.
//   - stale: like insertOrphans: "worker"/"job" running on dead-node, last
//     step an hour ago, claim expired; max_attempts 1000 so a recovery
//     always fails them as orphaned, never as exhausted.
func loadEpisodes(tb testing.TB, pool *pgxpool.Pool, m episodeMix) (staleFrom, staleTo int64) {
	tb.Helper()
	done := historySize - m.stale - m.running - m.queued
	require.Positive(tb, done)
	loads := []struct {
		n   int
		sql string
	}{
		{done, episodeColumns + `
			SELECT 'actor-' || g % 20, 'job', CASE WHEN g % 4 = 0 THEN 'manual' ELSE 'event' END,
			       CASE WHEN g % 4 = 0 THEN NULL ELSE 'done:' || g END, 2, 'done', 1, 3, 'node-' || g % 5,
			       t, t, t + interval '1 second', t + interval '20 seconds', t + interval '21 seconds'
			FROM generate_series(1, $1::int) AS g,
			     LATERAL (SELECT now() - g * interval '25 seconds' AS t) AS x`},
		{m.running, episodeColumns + `
			SELECT 'actor-' || g % 20, 'job', 'event', 'running:' || g, 2, 'running', 1, 3, 'live-node-' || g % 3,
			       now() - interval '2 minutes', now() - interval '2 minutes', now() - interval '1 minute',
			       now() - g % 30 * interval '1 second', NULL
			FROM generate_series(1, $1::int) AS g`},
		{m.queued, episodeColumns + `
			SELECT 'actor-' || g % 20, 'job', 'event', 'queued:' || g, 2, 'queued', 0, 3, 'live-node-' || g % 3,
			       now() - g * interval '100 milliseconds', now() - g * interval '100 milliseconds', NULL, NULL, NULL
			FROM generate_series(1, $1::int) AS g`},
		{m.stale, episodeColumns + `
			SELECT 'worker', 'job', 'event', 'stale:' || g, 2, 'running', 0, 1000, 'dead-node',
			       now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour',
			       now() - interval '1 hour', NULL
			FROM generate_series(1, $1::int) AS g`},
	}
	for _, l := range loads {
		require.EqualValues(tb, l.n, pgtest.Exec(tb, pool, l.sql, l.n))
	}
	// Done claims ended with their episode; the others are held, live
	// for an hour (longer than any benchmark) or expired for dead-node.
	pgtest.Exec(tb, pool, `INSERT INTO leasehold_work_claims
			(dedupe_key, state, owner_node, lease_until, claimed_at, last_heartbeat_at, finished_at, work_type)
		SELECT coalesce(dedupe_key, 'episode:' || id),
		       CASE WHEN status = 'done' THEN 'done' ELSE 'claimed' END, owner_node,
		       CASE WHEN status = 'done' THEN finished_at
		            WHEN owner_node = 'dead-node' THEN now() - interval '1 minute'
		            ELSE now() + interval '1 hour' END,
		       coalesce(started_at, created_at), coalesce(last_step_at, created_at), finished_at, 'episode'
		FROM leasehold_episodes`)
	pgtest.Exec(tb, pool, `ANALYZE leasehold_episodes, leasehold_work_claims`)

	var n int
	require.NoError(tb, pool.QueryRow(context.Background(), `SELECT count(*), min(id), max(id)
		FROM leasehold_episodes WHERE owner_node = 'dead-node'`).Scan(&n, &staleFrom, &staleTo))
	require.Equal(tb, m.stale, n)
	require.EqualValues(tb, m.stale, staleTo-staleFrom+1, "stale ids are contiguous")
	return staleFrom, staleTo
}

var sqlcArg = regexp.MustCompile(`sqlc\.arg\((\w+)\)`)

// namedStatement reads the statement headed "-- name: <name>" from the sqlc
// query file at path and returns it with each distinct sqlc.arg(x) replaced
// by $1, $2, … in order of first use, together with the argument names in
// that order. Comment lines and the final semicolon are dropped.
func namedStatement(t *testing.T, path, name string) (sql string, args []string) {
	t.Helper()
	qs, err := queries.Parse(os.DirFS(filepath.Dir(path)), filepath.Base(path))
	require.NoError(t, err)
	q, ok := qs[name]
	require.True(t, ok, "%s not found in %s", name, path)

	index := map[string]int{}
	sql = sqlcArg.ReplaceAllStringFunc(q.Statement(), func(m string) string {
		arg := sqlcArg.FindStringSubmatch(m)[1]
		if _, ok := index[arg]; !ok {
			index[arg] = len(args) + 1
			args = append(args, arg)
		}
		return fmt.Sprintf("$%d", index[arg])
	})
	require.NotContains(t, sql, "sqlc.", "an sqlc macro other than sqlc.arg")
	return sql, args
}

// planNode is the part of a Postgres JSON plan node the test looks at.
type planNode struct {
	NodeType            string     `json:"Node Type"`
	RelationName        string     `json:"Relation Name"`
	IndexName           string     `json:"Index Name"`
	ActualRows          float64    `json:"Actual Rows"`
	ActualLoops         int        `json:"Actual Loops"`
	RowsRemovedByFilter int        `json:"Rows Removed by Filter"`
	SharedHitBlocks     int        `json:"Shared Hit Blocks"`
	SharedReadBlocks    int        `json:"Shared Read Blocks"`
	Plans               []planNode `json:"Plans"`
}

// walk calls fn on n and every node below it, depth first.
func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

// plan is an EXPLAIN result: its root node, execution time (ANALYZE only)
// and the indented JSON for failure messages.
type plan struct {
	planNode
	executionMs float64
	text        string
}

// explain runs prefix+sql with args and decodes the JSON plan.
func explain(t *testing.T, pool *pgxpool.Pool, prefix, sql string, args []any) plan {
	t.Helper()
	var raw []byte
	require.NoError(t, pool.QueryRow(t.Context(), prefix+sql, args...).Scan(&raw))
	var out []struct {
		Plan          planNode `json:"Plan"`
		ExecutionTime float64  `json:"Execution Time"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Len(t, out, 1)
	var indented strings.Builder
	enc := json.NewEncoder(&indented)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(json.RawMessage(raw)))
	return plan{planNode: out[0].Plan, executionMs: out[0].ExecutionTime, text: indented.String()}
}
