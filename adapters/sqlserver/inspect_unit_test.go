package sqlserver

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// TestUnitInspect: the Go side of the operator reads, against the fake
// driver: the columns land in the right fields, a claim that the LEFT JOIN
// did not find is nil (and RunAfter unless the episode is available), the
// journal (read last first) comes back in step order, and an unknown
// episode is episodes.ErrNotFound.
func TestUnitInspect(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	ctx := context.Background()
	f := newFake(t)
	var answer map[string][][]driver.Value
	f.answer = func(name string, _ map[string]any) fakeResult {
		return fakeResult{cols: resultColumns[name], rows: answer[name]}
	}
	s := f.store

	t.Run("episode", func(t *testing.T) {
		answer = map[string][][]driver.Value{"InspectEpisode": {{
			int64(9), "billing", "charge", "manual", `{"by":"ops"}`,
			"bill-1", "failed", nil, int64(1), int64(3),
			"stack", "rc", "node-a", `{"amount":5}`, nil,
			"error", `{"message":"boom"}`, now, now,
			now, now, nil,
			"bill-1", "failed", "node-a", int64(4), int64(2), "steal",
			"episode", now, now, now, true,
			now, int64(7),
		}}}
		got, err := s.InspectEpisode(ctx, 9)
		require.NoError(t, err)
		require.Equal(t, inspect.Episode{
			Episode: episodes.Episode{
				ID: 9, ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerManual,
				TriggerRef: json.RawMessage(`{"by":"ops"}`), DedupeKey: "bill-1", Status: episodes.StatusFailed,
				Attempts: 1, MaxAttempts: 3, SourceStack: "stack", SourceEnv: "rc", OwnerNode: "node-a",
				Payload: json.RawMessage(`{"amount":5}`), ErrorClass: "error", ErrorDetail: json.RawMessage(`{"message":"boom"}`),
				CreatedAt: now, StartedAt: &now, FinishedAt: &now, LastStepAt: &now,
			},
			ClaimKey: "bill-1",
			Claim: &inspect.Claim{
				Key: "bill-1", State: claims.StateFailed, Owner: "node-a", Fence: 4, Attempt: 2, Grant: claims.GrantSteal,
				WorkType: "episode", ClaimedAt: now, LeaseUntil: now, HeartbeatAt: &now, Live: true,
			},
			RunAfter:     &now,
			JournalSteps: 7,
		}, got)
		require.Equal(t, map[string]any{"id": int64(9)}, f.params["InspectEpisode"])
	})

	t.Run("episode without claim, not available", func(t *testing.T) {
		answer = map[string][][]driver.Value{"InspectEpisode": {{
			int64(10), "mailer", "send", "event", nil,
			nil, "queued", nil, int64(0), int64(3),
			"", "", nil, nil, nil,
			nil, nil, now, nil,
			nil, nil, nil,
			"episode:10", "", "", int64(0), int64(0), "",
			"", nil, nil, nil, false,
			nil, int64(0),
		}}}
		got, err := s.InspectEpisode(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, "episode:10", got.ClaimKey)
		require.Nil(t, got.Claim)
		require.Nil(t, got.RunAfter)
		require.Nil(t, got.Payload)
		require.Equal(t, episodes.StatusQueued, got.Status)
	})

	t.Run("no episode", func(t *testing.T) {
		answer = nil
		_, err := s.InspectEpisode(ctx, 11)
		require.ErrorIs(t, err, episodes.ErrNotFound)
	})

	t.Run("journal", func(t *testing.T) {
		answer = map[string][][]driver.Value{"InspectJournal": {
			{int64(3), int64(2), "node-b", `{"n":3}`, now.Add(2 * time.Second)},
			{int64(2), int64(1), "", nil, now.Add(time.Second)},
		}}
		got, err := s.InspectJournal(ctx, 9, 2)
		require.NoError(t, err)
		require.Equal(t, []inspect.Step{
			{StepNo: 2, Fence: 1, CreatedAt: now.Add(time.Second)},
			{StepNo: 3, Fence: 2, Owner: "node-b", Data: json.RawMessage(`{"n":3}`), CreatedAt: now.Add(2 * time.Second)},
		}, got)
		require.Equal(t, map[string]any{"episode_id": int64(9), "max_rows": int32(2)}, f.params["InspectJournal"])
	})

	t.Run("list", func(t *testing.T) {
		answer = map[string][][]driver.Value{"InspectEpisodes": {{
			int64(9), "billing", "charge", "manual", "bill-1", "failed", nil,
			int64(1), int64(3), "", "rc", "node-a", "error",
			now, now, now, now,
		}}}
		got, err := s.InspectEpisodes(ctx, inspect.EpisodeQuery{ErrorClass: "error", DedupeKey: "bill-1", Limit: 5})
		require.NoError(t, err)
		require.Equal(t, []episodes.Episode{{
			ID: 9, ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerManual, DedupeKey: "bill-1",
			Status: episodes.StatusFailed, Attempts: 1, MaxAttempts: 3, SourceEnv: "rc", OwnerNode: "node-a",
			ErrorClass: "error", CreatedAt: now, StartedAt: &now, FinishedAt: &now, LastStepAt: &now,
		}}, got)
		require.Equal(t, map[string]any{
			"max_rows": int32(5), "status": "", "actor_id": "", "error_class": "error", "dedupe_key": "bill-1",
			"stale_only": false, "stale_after_ms": int64(0),
		}, f.params["InspectEpisodes"])
	})
}
