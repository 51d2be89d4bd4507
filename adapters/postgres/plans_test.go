package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// capturing passes statements through to conn and keeps the last query's
// text and arguments, so the test can EXPLAIN exactly what the adapter
// sent. It has no SendBatch, so takeovers send plain statements.
type capturing struct {
	conn db.DBTX
	sql  string
	args []any
}

func (c *capturing) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return c.conn.Query(ctx, sql, args...)
}

func (c *capturing) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.sql, c.args = sql, args
	return c.conn.QueryRow(ctx, sql, args...)
}

func (c *capturing) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.conn.Exec(ctx, sql, args...)
}

// dryRun runs call on a Store inside a transaction it rolls back, and
// returns what the statement call sent, so that the database is as it was
// when the statement is explained.
func dryRun(t *testing.T, pool *pgxpool.Pool, call func(s *postgres.Store) error) *capturing {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	c := &capturing{conn: tx}
	require.NoError(t, call(postgres.New(c)))
	return c
}

// backlog makes n available episodes of actor a, expectation e, in
// batches of 500, as FireBatch would: never analyzed, the planner's worst
// guesses.
func backlog(t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	items := make([]episodes.BatchItem, n)
	for i := range items {
		items[i] = episodes.BatchItem{DedupeKey: fmt.Sprintf("event:a:e:%d", i)}
	}
	for i := 0; i < len(items); i += 500 {
		_, err := s.CreateDeferredEpisodes(t.Context(), episodes.DeferredBatch{
			New:   episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent, MaxAttempts: 3},
			Items: items[i:min(i+500, len(items))],
		})
		require.NoError(t, err)
	}
}

// TestPollPlanReachesRowsByKey: on a fresh, never analyzed schema (the
// planner's worst guesses) with 10,000 available episodes, a poll of 64
// and one of 500 read the available index in its order and reach every
// row they write by key: no scan reads the backlog, and no join filter
// compares a CTE's rows with the whole table. (The hand-over this poll
// replaced, before it passed its ids as arrays, compared 10,000,000 pairs
// for 500 hand-overs, 4.6 s, and scanned 20,000 rows per batch of 64 on
// stale estimates.)
func TestPollPlanReachesRowsByKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	ctx := t.Context()
	s := postgres.New(pool)
	backlog(t, s, 10_000)
	runnable := []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}

	// A poll that already took some: the next one skips nothing it must
	// read past (taken rows leave the index).
	ds, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "poller", Lease: time.Minute, Runnable: runnable, Limit: 500})
	require.NoError(t, err)
	require.Len(t, ds, 500)
	for _, limit := range []int{1, 64} { // the runner asks for 64 at most
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			poll := dryRun(t, pool, func(s *postgres.Store) error {
				ds, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "poller-2", Lease: time.Minute, Runnable: runnable, Limit: limit})
				require.Len(t, ds, limit)
				for _, d := range ds {
					require.True(t, d.Started)
				}
				return err
			})
			requireRowsByKey(t, pool, poll, 2*limit+10)
		})
	}
}

func asNodes(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// TestExpiryPlanReachesRowsByKey: expiring 10,000 stale available
// episodes at once (maintenance's RequestTTL after an outage) reads each
// once.
func TestExpiryPlanReachesRowsByKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	ctx := t.Context()
	s := postgres.New(pool)
	backlog(t, s, 10_000)
	pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET run_after = run_after - interval '2 hours'`)
	expire := dryRun(t, pool, func(s *postgres.Store) error {
		expired, err := s.ExpireAvailable(ctx, episodes.ExpireQuery{TTL: time.Hour, AllEnvs: true})
		require.Len(t, expired, 10_000)
		return err
	})
	requireRowsByKey(t, pool, expire, 20_000) // every one of the 10,000 expires, and its claim is looked up
}

// requireRowsByKey runs EXPLAIN ANALYZE on the statement c captured last
// (rolled back) and fails when a join filter of its plan compared more
// than 5,000 rows: a CTE joined with a whole table, or with another large
// CTE, in a nested loop.
func requireRowsByKey(t *testing.T, pool *pgxpool.Pool, c *capturing, maxRead int) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []map[string]any
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+c.sql, c.args...).Scan(&plan))
	var worst, widest float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Rows Removed by Join Filter"].(float64); ok {
			worst = max(worst, r)
		}
		// A scan of a table or an index reads its rows once per loop; a
		// filter discards what it read beyond the rows it keeps.
		if strings.HasSuffix(n["Node Type"].(string), "Scan") && n["Relation Name"] != nil || strings.HasPrefix(n["Node Type"].(string), "Bitmap Index") {
			rows, _ := n["Actual Rows"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			widest = max(widest, rows*loops+removed)
		}
		for _, p := range asNodes(n["Plans"]) {
			walk(p)
		}
	}
	walk(plan[0]["Plan"].(map[string]any))
	js, _ := json.MarshalIndent(plan, "", " ")
	require.Less(t, worst, 5_000.0, "a join filter compared too many rows:\n%s", js)
	require.LessOrEqual(t, widest, float64(maxRead), "a scan read %.0f rows for a batch (the backlog, not the batch):\n%s", widest, js)
}

// TestBurnDownPlansReachRowsByKey: the other statements of a burn-down's
// hot path (a batch of finishes, a renewal and a release of a node's
// leases, a retry, the cancel check), explained on a never analyzed schema
// holding 10,000 available units and 64 running ones, read rows in
// proportion to their batch, not to the backlog, and a fenced write of one
// grant (the retry) reads its one claim row, not every lease of its owner.
// (One statement off the hot path still reads the backlog:
// ListOrphanedEpisodes, the queued episodes, once a sweep.)
func TestBurnDownPlansReachRowsByKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	ctx := t.Context()
	s := postgres.New(pool)
	backlog(t, s, 10_064)
	runnable := []episodes.Runnable{{ActorID: "a", ExpectationID: "e"}}
	ds, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: "poller", Lease: time.Minute, Runnable: runnable, Limit: 64})
	require.NoError(t, err)
	require.Len(t, ds, 64)
	finish := make([]episodes.FinishItem, len(ds))
	held := make([]claims.Held, len(ds))
	for i, d := range ds {
		finish[i] = episodes.FinishItem{ID: d.EpisodeID, Token: d.Claim.Token, Finish: episodes.Finish{Status: episodes.StatusDone}}
		held[i] = claims.Held{Key: d.Claim.Key, Fence: d.Claim.Fence}
	}
	for name, c := range map[string]struct {
		call    func(s *postgres.Store) error
		maxRead int
	}{
		"FinishEpisodes": {func(s *postgres.Store) error { _, err := s.FinishEpisodes(ctx, "poller", finish); return err }, 500},
		"RenewClaims":    {func(s *postgres.Store) error { _, err := s.RenewMany(ctx, "poller", held, time.Minute); return err }, 500},
		"ReleaseClaims":  {func(s *postgres.Store) error { _, err := s.ReleaseMany(ctx, "poller", held); return err }, 500},
		"RetryEpisode": {func(s *postgres.Store) error {
			_, err := s.RetryEpisode(ctx, ds[0].EpisodeID, ds[0].Claim.Token, episodes.Retry{Backoff: time.Second, ErrorClass: "error"})
			return err
		}, 10}, // before migration 00015, every one of the poller's 64 leases (the owner index)
		"ListCancelRequests": {func(s *postgres.Store) error { _, err := s.ListCancelRequests(ctx, "poller"); return err }, 500},
		"NextAvailableDue": {func(s *postgres.Store) error {
			_, _, err := s.NextAvailableDue(ctx, episodes.AvailableQuery{Runnable: runnable})
			return err
		}, 10},
	} {
		t.Run(name, func(t *testing.T) {
			requireRowsByKey(t, pool, dryRun(t, pool, c.call), c.maxRead)
		})
	}
}
