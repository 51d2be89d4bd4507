package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// capturing passes statements through to the pool and keeps the last
// Query's text and arguments, so the test can EXPLAIN exactly what the
// adapter sent.
type capturing struct {
	pool *pgxpool.Pool // not embedded: no SendBatch, so takeovers send plain statements
	sql  string
	args []any
}

func (c *capturing) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return c.pool.Query(ctx, sql, args...)
}

func (c *capturing) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.pool.QueryRow(ctx, sql, args...)
}

func (c *capturing) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.pool.Exec(ctx, sql, args...)
}

// TestHandOverPlansReachRowsByKey: on a fresh, never analyzed schema (the
// planner's worst guesses) with 10,000 available episodes, claiming 500
// requests and handing 64 over reach each row by key: no join filter
// compares a CTE's rows with the whole table. Before the statements passed
// their ids as arrays, a claim of 500 compared 5,000,000 pairs (2.4 s) and
// a hand-over of 500 10,000,000 (4.6 s).
func TestHandOverPlansReachRowsByKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	ctx := t.Context()
	s := postgres.New(pool)
	items := make([]episodes.BatchItem, 10_000)
	for i := range items {
		items[i] = episodes.BatchItem{DedupeKey: fmt.Sprintf("event:a:e:%d", i)}
	}
	for i := 0; i < len(items); i += 500 {
		_, err := s.CreateDeferredEpisodes(ctx, episodes.DeferredBatch{
			New:        episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerEvent, MaxAttempts: 3},
			SourceNode: "trigger-node", Items: items[i : i+500],
		})
		require.NoError(t, err)
	}

	explain := func(c *capturing) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var plan []map[string]any
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+c.sql, c.args...).Scan(&plan))
		var worst float64
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if r, ok := n["Rows Removed by Join Filter"].(float64); ok {
				worst = max(worst, r)
			}
			for _, p := range asNodes(n["Plans"]) {
				walk(p)
			}
		}
		walk(plan[0]["Plan"].(map[string]any))
		js, _ := json.MarshalIndent(plan, "", " ")
		require.Less(t, worst, 5_000.0, "a join filter compared too many rows:\n%s", js)
	}

	claim := &capturing{pool: pool}
	reqs, err := postgres.New(claim).ClaimTriggerRequests(ctx, episodes.RequestQuery{
		Owner: "poller", Lease: time.Minute, ActorIDs: []string{"a"}, Limit: 500,
	})
	require.NoError(t, err)
	require.Len(t, reqs, 500)
	explain(claim)

	dispatch := &capturing{pool: pool}
	ds, err := postgres.New(dispatch).DispatchTriggerRequests(ctx, "poller", reqs[:64], time.Minute)
	require.NoError(t, err)
	require.Len(t, ds, 64)
	// The same statement for the next 64, explained (and rolled back).
	_, err = postgres.New(dispatch).DispatchTriggerRequests(ctx, "poller", reqs[64:128], time.Minute)
	require.NoError(t, err)
	explain(dispatch)
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
