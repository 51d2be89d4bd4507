package sqlite_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/ui"
)

// The dashboard serves from the SQLite adapter as from the others.
var _ ui.Store = (*sqlite.Store)(nil)

// TestDashboardReads runs the statements of dashboard.sql against a real
// database file, as adapters/postgres/dashboard_test.go does on Postgres:
// what the charts derive from the journal's fences (a retry one fence up,
// a takeover two up, with its latency), the outcome buckets, keyset pages
// and the literal dedupe-key search, and an episode with its trace
// context, claim and due time while available. It also reads the episodes through
// inspect.sql (`leasehold episodes ls|show`).
func TestDashboardReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	const lease = time.Minute
	create := func(key, owner, trace string) (int64, claims.Token) {
		t.Helper()
		c, err := s.CreateEpisode(ctx, episodes.New{ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerEvent,
			DedupeKey: key, MaxAttempts: 3, Owner: owner, Lease: lease, Start: true, TraceParent: trace})
		require.NoError(t, err)
		return c.Episode.ID, c.Claim.Token
	}
	take := func(id int64, owner string) (claims.Token, int32) {
		t.Helper()
		ds, err := s.ClaimAvailable(ctx, episodes.AvailableQuery{Owner: owner, Lease: lease, Runnable: []episodes.Runnable{{ActorID: "billing", ExpectationID: "charge"}}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, id, ds[0].EpisodeID)
		require.True(t, ds[0].Started)
		return ds[0].Claim.Token, ds[0].NextStep
	}

	// A retry: fences 1 then 2.
	retried, tk := create("k:retry", "a", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.NoError(t, s.AppendStep(ctx, retried, tk, 1, json.RawMessage(`{}`), lease))
	_, err := s.RetryEpisode(ctx, retried, tk, episodes.Retry{ErrorClass: "error", StepNo: 2, StepData: json.RawMessage(`{"error":"x"}`)})
	require.NoError(t, err)
	d, err := s.DashboardEpisode(ctx, retried)
	require.NoError(t, err)
	require.NotNil(t, d.RunAfter, "available while its retry waits")
	require.WithinDuration(t, time.Now(), *d.RunAfter, time.Minute)
	ie, err := s.InspectEpisode(ctx, retried)
	require.NoError(t, err)
	require.Equal(t, d.RunAfter, ie.RunAfter)
	tk, next := take(retried, "b")
	require.NoError(t, s.FinishEpisode(ctx, retried, tk, episodes.Finish{Status: episodes.StatusDone, StepNo: next, StepData: json.RawMessage(`{}`)}))

	// A takeover: fences 1 then 3 (recovery's fence-out is 2), the new
	// grant's first step 1.5 s after the old grant's last.
	taken, tk := create("k:taken%_", "a", "")
	require.NoError(t, s.AppendStep(ctx, taken, tk, 1, json.RawMessage(`{}`), lease))
	sqlitetest.ExpireClaim(t, db, "k:taken%_")
	_, err = s.RequeueOrphan(ctx, taken, 0, "sweeper", time.Minute)
	require.NoError(t, err)
	tk, next = take(taken, "c")
	require.NoError(t, s.AppendStep(ctx, taken, tk, next, json.RawMessage(`{}`), lease))
	sqlitetest.Exec(t, db, `UPDATE leasehold_episode_steps SET created_at = created_at - 1500
		WHERE episode_id = ? AND fence = 1`, taken)
	require.NoError(t, s.FinishEpisode(ctx, taken, tk, episodes.Finish{Status: episodes.StatusFailed, ErrorClass: "error"}))

	q := inspect.SeriesQuery{Window: time.Hour, Bucket: time.Hour}
	hs, err := s.DashboardHandovers(ctx, q)
	require.NoError(t, err)
	kinds := map[string]inspect.Handover{}
	for _, h := range hs {
		kinds[h.Kind] = h
	}
	require.Len(t, kinds, 2, "%+v", hs)
	require.Equal(t, int64(1), kinds[inspect.HandoverRetry].Handovers)
	require.Equal(t, int64(1), kinds[inspect.HandoverTakeover].Handovers)
	lat := kinds[inspect.HandoverTakeover].MaxLatency
	require.True(t, lat >= 1500*time.Millisecond && lat < time.Minute, "takeover latency %v", lat)
	require.Equal(t, lat, kinds[inspect.HandoverTakeover].AvgLatency, "one takeover: its average is itself")
	require.Equal(t, time.Duration(0), kinds[inspect.HandoverTakeover].Start.Sub(kinds[inspect.HandoverTakeover].Start.Truncate(time.Hour)),
		"buckets are aligned to the epoch")

	outs, err := s.DashboardOutcomes(ctx, q)
	require.NoError(t, err)
	byStatus := map[episodes.Status]int64{}
	for _, o := range outs {
		byStatus[o.Status] += o.Episodes
	}
	require.Equal(t, map[episodes.Status]int64{episodes.StatusDone: 1, episodes.StatusFailed: 1}, byStatus)
	_, err = s.DashboardOutcomes(ctx, inspect.SeriesQuery{Window: 30 * 24 * time.Hour, Bucket: time.Hour})
	require.Error(t, err, "longer than the SQL Server twin can add")

	// The search is literal: "%_" matches only the key that holds it, and
	// case-sensitive, as Postgres's LIKE is (SQLite's LIKE is not).
	rows, err := s.DashboardEpisodes(ctx, inspect.EpisodeFilter{DedupeKeyContains: "%_", Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, taken, rows[0].ID)
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{DedupeKeyContains: "K:TAKEN", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, rows, "the search is case-sensitive")
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []int64{taken}, []int64{rows[0].ID})
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{BeforeID: taken, Limit: 5})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, retried, rows[0].ID, "the next page starts below the last ID shown")
	unset := ""
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Env: &unset, Node: "c", Status: episodes.StatusFailed, Limit: 5})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	other := "prod"
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Env: &other, Limit: 5})
	require.NoError(t, err)
	require.Empty(t, rows)

	d, err = s.DashboardEpisode(ctx, retried)
	require.NoError(t, err)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", d.TraceParent)
	require.NotNil(t, d.Claim)
	require.Equal(t, int64(2), d.Claim.Fence)
	require.Equal(t, "b", d.Claim.Owner)
	require.Nil(t, d.RunAfter, "taken: no longer available")
	grants, err := s.DashboardGrants(ctx, taken)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3}, []int64{grants[0].Fence, grants[1].Fence})
	_, err = s.DashboardEpisode(ctx, 999_999)
	require.True(t, errors.Is(err, episodes.ErrNotFound), "%v", err)

	journal, err := s.DashboardJournal(ctx, taken, 10)
	require.NoError(t, err)
	require.Len(t, journal, 2)
	require.Equal(t, []int64{1, 3}, []int64{journal[0].Fence, journal[1].Fence}, "in step order")

	clock, err := s.DashboardClock(ctx)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), clock, time.Minute)

	// inspect.sql: `episodes ls` and `episodes show`.
	eps, err := s.InspectEpisodes(ctx, inspect.EpisodeQuery{ErrorClass: "error", Limit: 10})
	require.NoError(t, err)
	require.NotEmpty(t, eps)
	require.Equal(t, taken, eps[0].ID, "newest first: %+v", eps)
	eps, err = s.InspectEpisodes(ctx, inspect.EpisodeQuery{DedupeKey: "k:retry", Limit: 10})
	require.NoError(t, err)
	require.Len(t, eps, 1)
	require.Equal(t, retried, eps[0].ID)
	ie, err = s.InspectEpisode(ctx, taken)
	require.NoError(t, err)
	require.Equal(t, "k:taken%_", ie.ClaimKey)
	require.NotNil(t, ie.Claim)
	require.Equal(t, int64(3), ie.Claim.Fence)
	require.False(t, ie.Claim.Live, "the claim ended with the episode")
	require.Equal(t, int64(2), ie.JournalSteps)
	steps, err := s.InspectJournal(ctx, taken, 10)
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, "", steps[0].Owner, "an earlier grant's owner is not recorded")
	require.Equal(t, "c", steps[1].Owner)
	_, err = s.InspectEpisode(ctx, 999_999)
	require.True(t, errors.Is(err, episodes.ErrNotFound), "%v", err)
}

// TestDashboardStaleAndLive: the stale filter of `episodes ls` and the
// lease liveness of the dashboard are judged on the database clock.
func TestDashboardStaleAndLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqlitetest.DB(t)
	s := sqlite.New(db)
	c, err := s.CreateEpisode(ctx, episodes.New{ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerEvent,
		DedupeKey: "k:stale", MaxAttempts: 3, Owner: "a", Lease: time.Minute, Start: true})
	require.NoError(t, err)
	id := c.Episode.ID

	stale := inspect.EpisodeQuery{StaleOnly: true, StaleAfter: time.Minute, Limit: 10}
	eps, err := s.InspectEpisodes(ctx, stale)
	require.NoError(t, err)
	require.Empty(t, eps, "started just now")
	rows, err := s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Limit: 10})
	require.NoError(t, err)
	require.True(t, rows[0].ClaimLive)
	d, err := s.DashboardEpisode(ctx, id)
	require.NoError(t, err)
	require.True(t, d.ClaimLeaseLeft > 50*time.Second && d.ClaimLeaseLeft <= time.Minute, "%v", d.ClaimLeaseLeft)

	sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET started_at = started_at - 120000, last_step_at = NULL WHERE id = ?`, id)
	sqlitetest.ExpireClaim(t, db, "k:stale")
	eps, err = s.InspectEpisodes(ctx, stale)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, []int64{eps[0].ID})
	rows, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Limit: 10})
	require.NoError(t, err)
	require.False(t, rows[0].ClaimLive)
	d, err = s.DashboardEpisode(ctx, id)
	require.NoError(t, err)
	require.False(t, d.Claim.Live)
	require.Less(t, d.ClaimLeaseLeft, time.Duration(0))
	nodes, err := s.DashboardNodes(ctx)
	require.NoError(t, err)
	require.Empty(t, nodes, "no node registered")
}

// TestStaticReadsOnly: every statement of sqlite/dashboard.sql and
// sqlite/inspect.sql is one SELECT (a CTE's included) that writes nothing
// and so takes no write lock, and has its Postgres twin, of the same kind,
// in the file of the same name; every Postgres statement there has its
// SQLite twin.
func TestStaticReadsOnly(t *testing.T) {
	t.Parallel()
	load := func(dialect string) map[string]queries.Query {
		dir := filepath.Join("..", "..", "sql", "queries", dialect)
		qs, err := queries.Parse(os.DirFS(dir), "*.sql")
		require.NoError(t, err)
		return qs
	}
	lite, pg := load("sqlite"), load("postgres")
	code := func(sql string) string {
		sql = regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(sql, "")
		return regexp.MustCompile(`'(?:[^']|'')*'`).ReplaceAllString(sql, "''")
	}
	for _, file := range []string{"dashboard.sql", "inspect.sql"} {
		n := 0
		for name, q := range lite {
			if filepath.Base(q.File) != file {
				continue
			}
			n++
			c := code(q.SQL)
			require.Regexp(t, `(?i)^\s*(SELECT|WITH)\b`, c, name)
			require.NotRegexp(t, `(?i)\b(INSERT|UPDATE|DELETE|REPLACE|UPSERT|BEGIN|PRAGMA|ATTACH)\b`, c, "%s: a write", name)
			require.Equal(t, 1, len(regexp.MustCompile(`;\s*`).FindAllString(c, -1)), "%s: one statement", name)
			p, ok := pg[name]
			require.True(t, ok, "%s has no Postgres twin", name)
			require.Equal(t, file, filepath.Base(p.File), name)
			require.Equal(t, p.Kind, q.Kind, name)
		}
		require.NotZero(t, n, file)
		for name, p := range pg {
			if filepath.Base(p.File) == file {
				require.Contains(t, lite, name, "postgres/%s's %s has no SQLite twin", file, name)
			}
		}
	}
}
