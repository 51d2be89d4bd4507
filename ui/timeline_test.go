package ui

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// TestTimeline: how each history the schema can hold reads as grants. The
// inputs are what the three dashboard reads return: the episode with its
// claim row, the journal's fences, the loaded steps.
func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ptr := func(x time.Time) *time.Time { return &x }
	journaled := func(fence int64, from, to int) inspect.Grant {
		return inspect.Grant{Fence: fence, Steps: 2, FirstStepNo: int32(from), LastStepNo: int32(from + 1), FirstAt: at(from), LastAt: at(to)}
	}
	ep := func(status episodes.Status, phase string, c *inspect.Claim) inspect.EpisodeDetail {
		d := inspect.EpisodeDetail{Episode: inspect.Episode{Episode: episodes.Episode{ID: 7, DedupeKey: "k", Status: status,
			Phase: phase, CreatedAt: t0, MaxAttempts: 3}, ClaimKey: "k", Claim: c}}
		if status == episodes.StatusDone || status == episodes.StatusFailed || status == episodes.StatusCanceled {
			d.FinishedAt = ptr(at(100))
		}
		return d
	}
	claim := func(state claims.State, fence int64, live bool, owner string) *inspect.Claim {
		return &inspect.Claim{Key: "k", State: state, Owner: owner, Fence: fence, ClaimedAt: at(50), LeaseUntil: at(90), Live: live}
	}
	type want struct {
		fence   int64
		outcome string
		owner   string
	}
	for _, tc := range []struct {
		name   string
		d      inspect.EpisodeDetail
		grants []inspect.Grant
		want   []want
	}{
		{"done at once", ep(episodes.StatusDone, "", claim(claims.StateDone, 1, false, "a")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outDone, "a"}}},
		{"retried, then done", ep(episodes.StatusDone, "", claim(claims.StateDone, 2, false, "b")),
			[]inspect.Grant{journaled(1, 1, 3), journaled(2, 60, 70)}, []want{{1, outRetry, ""}, {2, outDone, "b"}}},
		{"taken over by recovery, then done", ep(episodes.StatusDone, "", claim(claims.StateDone, 3, false, "c")),
			[]inspect.Grant{journaled(1, 1, 3), journaled(3, 60, 70)}, []want{{1, outTakeover, ""}, {2, outFenceOut, ""}, {3, outDone, "c"}}},
		{"running under a live lease", ep(episodes.StatusRunning, "", claim(claims.StateClaimed, 1, true, "a")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outLive, "a"}}},
		{"its holder died", ep(episodes.StatusRunning, "", claim(claims.StateClaimed, 1, false, "a")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outExpired, "a"}}},
		{"recovery fenced it out and made it available", ep(episodes.StatusQueued, "recovering", claim(claims.StateReleased, 2, false, "sweeper")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outTakeover, ""}, {2, outFenceOut, "sweeper"}}},
		{"a cancel fenced out an expired grant", ep(episodes.StatusCanceled, "", claim(claims.StateFailed, 2, false, "dead")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outTakeover, ""}, {2, outFenceOut, ""}}},
		{"a failed attempt waits for its retry", ep(episodes.StatusQueued, "retrying", claim(claims.StateReleased, 1, false, "a")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outRetry, "a"}}},
		{"released on drain, not taken over yet", ep(episodes.StatusRunning, "", claim(claims.StateReleased, 1, false, "a")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outReleased, "a"}}},
		{"failed by recovery", func() inspect.EpisodeDetail {
			d := ep(episodes.StatusFailed, "", claim(claims.StateFailed, 2, false, "sweeper"))
			d.ErrorClass = episodes.ClassOrphaned
			return d
		}(), []inspect.Grant{journaled(1, 1, 3)}, []want{{1, outTakeover, ""}, {2, outFailed, "sweeper"}}},
		{"failed by its holder", ep(episodes.StatusFailed, "", claim(claims.StateFailed, 1, false, "a")),
			[]inspect.Grant{journaled(1, 1, 3)}, []want{{1, outFailed, "a"}}},
		{"the claim row belongs to a later run of the key", func() inspect.EpisodeDetail {
			d := ep(episodes.StatusDone, "", claim(claims.StateClaimed, 5, true, "later"))
			d.Claim.ClaimedAt = at(200)
			return d
		}(), []inspect.Grant{journaled(1, 1, 3)}, []want{{1, outDone, ""}}},
		{"grants before the first journaled one", ep(episodes.StatusDone, "", claim(claims.StateDone, 3, false, "c")),
			[]inspect.Grant{journaled(3, 60, 70)}, []want{{1, outFenceOut, ""}, {3, outDone, "c"}}},
		{"available, never claimed", ep(episodes.StatusQueued, "", nil), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := timeline(tc.d, tc.grants, nil, at(120))
			var have []want
			for _, g := range got {
				have = append(have, want{g.Fence, g.Outcome, g.Owner})
				require.NotEmpty(t, g.Label, "fence %d", g.Fence)
				require.NotEmpty(t, g.Why, "fence %d", g.Fence)
			}
			require.Equal(t, tc.want, have)
		})
	}

	t.Run("a long gap is folded", func(t *testing.T) {
		d := ep(episodes.StatusDone, "", claim(claims.StateDone, 40, false, "z"))
		got := timeline(d, []inspect.Grant{journaled(1, 1, 3), journaled(40, 60, 70)}, nil, at(120))
		require.Len(t, got, 3)
		require.Equal(t, outTakeover, got[0].Outcome)
		require.Contains(t, got[1].Label, "fences 2–39: 38 grants wrote nothing")
		require.Equal(t, outDone, got[2].Outcome)
	})

	t.Run("steps hang under their fence, bars share one axis", func(t *testing.T) {
		d := ep(episodes.StatusDone, "", claim(claims.StateDone, 3, false, "c"))
		steps := []inspect.Step{{StepNo: 2, Fence: 1, CreatedAt: at(3)}, {StepNo: 3, Fence: 3, CreatedAt: at(70)}}
		g1, g3 := journaled(1, 1, 3), journaled(3, 60, 70)
		got := timeline(d, []inspect.Grant{g1, g3}, steps, at(120))
		require.Len(t, got[0].Shown, 1)
		require.Equal(t, int64(1), got[0].Hidden, "one of its two steps was not loaded")
		require.Len(t, got[2].Shown, 1)
		require.True(t, got[1].Bar.None, "the fence-out has no time")
		require.Less(t, got[0].Bar.X, got[2].Bar.X)
		for _, g := range got {
			require.GreaterOrEqual(t, g.Bar.X, 0.0)
			require.LessOrEqual(t, g.Bar.X+g.Bar.W, 100.0+1e-9)
		}
	})
}

func TestVisible(t *testing.T) {
	require.Equal(t, "plain key <b>", visible("plain key <b>"))
	require.Equal(t, `"a\nb"`, visible("a\nb"))
	require.Equal(t, `"\u202eevil"`, visible("\u202eevil"))
	require.Equal(t, `"\xff"`, visible("\xff"))
	require.Equal(t, "{\n  \"a\": \"x\\u001by\"\n}", jsonDoc([]byte(`{"a":"x\u001by"}`)))
	require.Equal(t, `"not json"`, jsonDoc([]byte(`not json`)))
	require.Equal(t, "", jsonDoc(nil))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", traceID("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;vendor=x"))
	require.Empty(t, traceID("garbage"))
	require.Empty(t, traceID("00-00000000000000000000000000000000-00f067aa0ba902b7-01"))
	require.Equal(t, "30s", bucket(30*time.Second))
	require.Equal(t, "2m", bucket(2*time.Minute))
	require.Equal(t, "6h", bucket(6*time.Hour))
}
