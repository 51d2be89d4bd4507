package sqlserver

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// TestUnitDashboard: the Go side of the dashboard's reads, against the fake
// driver (it says nothing about the T-SQL): filters travel as the batches
// expect (a LIKE pattern with every wildcard escaped, NULL for "any env",
// an empty string for the unset env), bucket numbers turn into times, workflow rows
// group into instances, and an unknown episode is episodes.ErrNotFound.
func TestUnitDashboard(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFake(t)
	var answer map[string][][]driver.Value
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: answer[name]}
	}
	s := f.store

	t.Run("episode filters", func(t *testing.T) {
		unset := ""
		_, err := s.DashboardEpisodes(ctx, inspect.EpisodeFilter{Env: &unset, DedupeKeyContains: `50%_[x]\`, Limit: 5})
		require.NoError(t, err)
		p := f.params["DashboardEpisodes"]
		require.Equal(t, `%50\%\_\[x]\\%`, p["dedupe_like"])
		require.Equal(t, "", p["source_env"], "the unset env is N'', not NULL")
		require.Nil(t, p["source_stack"], "no stack filter is NULL")
		require.Equal(t, int32(5), p["max_rows"])

		_, err = s.DashboardEpisodes(ctx, inspect.EpisodeFilter{})
		require.NoError(t, err)
		require.Equal(t, "", f.params["DashboardEpisodes"]["dedupe_like"], "no search is N''")
	})

	t.Run("series", func(t *testing.T) {
		answer = map[string][][]driver.Value{
			"DashboardOutcomes":  {{int64(29_453_000), "done", int64(4)}},
			"DashboardHandovers": {{int64(29_453_000), "takeover", int64(2), int64(1500), int64(2900)}},
		}
		q := inspect.SeriesQuery{Window: time.Hour, Bucket: time.Minute}
		out, err := s.DashboardOutcomes(ctx, q)
		require.NoError(t, err)
		require.Equal(t, []inspect.Outcome{{Start: time.UnixMilli(29_453_000 * 60_000).UTC(), Status: episodes.StatusDone, Episodes: 4}}, out)
		require.Equal(t, map[string]any{"bucket_ms": int64(60_000), "window_ms": int64(3_600_000)}, f.params["DashboardOutcomes"])
		h, err := s.DashboardHandovers(ctx, q)
		require.NoError(t, err)
		require.Equal(t, []inspect.Handover{{Start: time.UnixMilli(29_453_000 * 60_000).UTC(), Kind: inspect.HandoverTakeover,
			Handovers: 2, AvgLatency: 1500 * time.Millisecond, MaxLatency: 2900 * time.Millisecond}}, h)

		_, err = s.DashboardOutcomes(ctx, inspect.SeriesQuery{Window: 30 * 24 * time.Hour, Bucket: time.Hour})
		require.Error(t, err, "a window DATEADD cannot add")
		_, err = s.DashboardHandovers(ctx, inspect.SeriesQuery{Window: time.Minute, Bucket: time.Hour})
		require.Error(t, err, "a bucket wider than its window")
	})

	t.Run("workflows group by instance", func(t *testing.T) {
		row := func(id int64, step, status string, ep int64) []driver.Value {
			return []driver.Value{id, "report", "c-42", "", "", "running", nil, nil, now, nil, nil, "0123456789abcdef",
				step, status, ep, int64(1), int64(3), now, "running", ""}
		}
		answer = map[string][][]driver.Value{"DashboardWorkflows": {
			row(7, "enrich", "running", 12), row(7, "extract", "done", 11), row(6, "", "", 0),
		}}
		got, err := s.DashboardWorkflows(ctx, inspect.WorkflowQuery{Limit: 2})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, int64(7), got[0].ID)
		require.Equal(t, []string{"enrich", "extract"}, []string{got[0].Steps[0].StepID, got[0].Steps[1].StepID})
		require.Equal(t, int64(12), got[0].Steps[0].EpisodeID)
		require.Equal(t, "0123456789abcdef", got[0].DefinitionVersion)
		require.Empty(t, got[1].Steps, "an instance without step rows")
	})

	t.Run("episode", func(t *testing.T) {
		answer = map[string][][]driver.Value{"DashboardEpisode": {{
			int64(9), "billing", "charge", "manual", nil,
			"bill\n1", "running", nil, int64(0), int64(3), nil,
			"", "", "node-a", `{"html":"<b>x</b>"}`, nil,
			nil, nil, now, now, now,
			nil, now, nil, now, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"bill\n1", "claimed", "node-a", int64(3), int64(1), "steal",
			"episode", now, now, now,
			nil, nil, true, int64(2500),
			nil, int64(4), "enrich", int64(6),
		}}}
		got, err := s.DashboardEpisode(ctx, 9)
		require.NoError(t, err)
		require.Equal(t, "bill\n1", got.DedupeKey)
		require.Equal(t, json.RawMessage(`{"html":"<b>x</b>"}`), got.Payload)
		require.NotNil(t, got.Claim)
		require.Equal(t, int64(3), got.Claim.Fence)
		require.True(t, got.Claim.Live)
		require.Equal(t, 2500*time.Millisecond, got.ClaimLeaseLeft)
		require.Nil(t, got.RunAfter, "not available")
		require.Equal(t, &now, got.CancelRequestedAt)
		require.Equal(t, int64(4), got.WorkflowInstanceID)
		require.Equal(t, "enrich", got.WorkflowStepID)
		require.Equal(t, int64(6), got.JournalSteps)
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", got.TraceParent)

		answer = nil
		_, err = s.DashboardEpisode(ctx, 10)
		require.True(t, errors.Is(err, episodes.ErrNotFound), "%v", err)
	})
}
