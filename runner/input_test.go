package runner_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/runner"
)

// Input that would reach the database as a driver error (SQLSTATE 22021,
// 22P05) or merge two different events is refused up front, ErrInvalid.

func TestRegisterRefusesTextTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	node, err := runner.NewNode(runner.Config{Store: postgres.New(nil), Identity: "n"})
	require.NoError(t, err)
	exp := func(id string, tr runner.Trigger) []runner.Expectation {
		return []runner.Expectation{{ID: id, Trigger: tr, Strategy: oneStep}}
	}
	for name, tc := range map[string]struct {
		actor runner.Actor
		want  string
	}{
		"NUL in actor id":                 {runner.Actor{ID: "a\x00", Expectations: exp("e", runner.Manual{})}, "actor ID"},
		"NUL in expectation id":           {runner.Actor{ID: "a", Expectations: exp("e\x00", runner.Manual{})}, "expectation ID"},
		"NUL in event name":               {runner.Actor{ID: "a", Expectations: exp("e", runner.Event{Name: "resource\x00updated"})}, "event name"},
		"invalid UTF-8 in event name":     {runner.Actor{ID: "a", Expectations: exp("e", runner.Event{Name: "r\xff"})}, "event name"},
		"invalid UTF-8 in expectation id": {runner.Actor{ID: "a", Expectations: exp("\xfe", runner.Manual{})}, "expectation ID"},
	} {
		err := node.Register(tc.actor)
		require.ErrorIs(t, err, runner.ErrInvalid, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}

// The window key names one UTC minute (dedupe.CronWindow) agreed by every
// node; what it cannot represent is refused with a message saying what to
// use instead.
func TestRegisterRefusesSchedulesTheKeyCannotRepresent(t *testing.T) {
	t.Parallel()
	node, err := runner.NewNode(runner.Config{Store: postgres.New(nil), Identity: "n"})
	require.NoError(t, err)
	sched := func(spec string) runner.Actor {
		return runner.Actor{ID: "a", Expectations: []runner.Expectation{{ID: "e", Trigger: runner.Schedule{Cron: spec}, Strategy: oneStep}}}
	}
	for spec, want := range map[string]string{
		"@every 30s":                      "use Schedule{Every: d}",
		"@every 1m":                       "use Schedule{Every: d}",
		"@every 90s":                      "use Schedule{Every: d}",
		"CRON_TZ=Europe/Paris 0 9 * * *":  "cron schedules are evaluated in UTC",
		"TZ=America/New_York 0 9 * * *":   "cron schedules are evaluated in UTC",
		"TZ=UTC 0 9 * * *":                "cron schedules are evaluated in UTC",
		"TZ=UTC":                          "cron schedules are evaluated in UTC", // robfig/cron panics on it
		"CRON_TZ=Europe/Paris @every 30s": "cron schedules are evaluated in UTC",
		"0 0 30 2 *":                      "never fires",
	} {
		var err error
		require.NotPanics(t, func() { err = node.Register(sched(spec)) }, spec)
		require.ErrorIs(t, err, runner.ErrInvalid, spec)
		require.ErrorContains(t, err, want, spec)
		require.ErrorContains(t, err, `cron "`+spec+`"`, spec)
	}
	for i, spec := range []string{"0 * * * *", "*/5 * * * *", "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "0 0 29 2 *"} {
		n, err := runner.NewNode(runner.Config{Store: postgres.New(nil), Identity: "n"})
		require.NoError(t, err)
		require.NoError(t, n.Register(sched(spec)), "%d: %s", i, spec)
	}
}

func TestFireAndRunManualRefuseBadInputBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 255) // a valid id, but the key would exceed dedupe.MaxKeyLen
	c := setup(t, 1, nil,
		runner.Actor{ID: "monitor", Expectations: []runner.Expectation{
			{ID: "check", Trigger: runner.Event{Name: "resource.updated"}, Strategy: oneStep},
			{ID: "by-hand", Trigger: runner.Manual{}, Strategy: oneStep},
		}},
		runner.Actor{ID: long, Expectations: []runner.Expectation{
			{ID: long, Trigger: runner.Event{Name: "e"}, Strategy: oneStep},
			{ID: long[1:] + "s", Trigger: runner.Schedule{Every: time.Hour}, Strategy: oneStep},
		}},
	)
	node, ctx := c.Nodes[0], t.Context()
	fire := func(event string, payload any, opts runner.FireOptions) error {
		_, err := node.Fire(ctx, "monitor", event, payload, opts)
		return err
	}
	nul := "r\x00c"

	// json.Marshal turned both blobs into U+FFFD: the second was reported
	// duplicate and never ran.
	for _, blob := range []string{"\xff\x01", "\xfe\x01"} {
		err := fire("resource.updated", map[string]any{"blob": blob}, runner.FireOptions{})
		require.ErrorIs(t, err, runner.ErrInvalid)
		require.ErrorIs(t, err, dedupe.ErrInvalid, "the cause stays in the chain")
		require.ErrorContains(t, err, `payload["blob"] is not valid UTF-8`)
	}
	for name, err := range map[string]error{
		// Each of these reached Postgres: 22P05 (jsonb \u0000), 22021 (text NUL).
		"NUL in a Go payload":         fire("resource.updated", map[string]string{"a": "x\x00y"}, runner.FireOptions{}),
		"NUL in a raw payload":        fire("resource.updated", json.RawMessage(`{"a":"\u0000"}`), runner.FireOptions{}),
		"NUL in a struct field":       fire("resource.updated", struct{ Name string }{"\x00"}, runner.FireOptions{}),
		"lone surrogate":              fire("resource.updated", json.RawMessage(`["\ud800"]`), runner.FireOptions{}),
		"NUL in the event id":         fire("resource.updated", nil, runner.FireOptions{EventID: "id\x00"}),
		"unencodable payload":         fire("resource.updated", map[string]any{"f": func() {}}, runner.FireOptions{}),
		"key longer than the column":  func() error { _, err := node.Fire(ctx, long, "e", nil, runner.FireOptions{}); return err }(),
		"tick key longer than column": func() error { _, err := node.Tick(ctx, long, long[1:]+"s", time.Now()); return err }(),
		"run: NUL in a payload": func() error {
			_, err := node.RunManual(ctx, "monitor", "by-hand", map[string]string{"a": "\x00"})
			return err
		}(),
		"run: invalid UTF-8 in a payload": func() error {
			_, err := node.RunManual(ctx, "monitor", "by-hand", []string{"\xff"})
			return err
		}(),
	} {
		require.ErrorIs(t, err, runner.ErrInvalid, name)
		require.ErrorIs(t, err, dedupe.ErrInvalid, name)
	}
	err := fire("resource.updated", nil, runner.FireOptions{Env: &nul})
	require.ErrorIs(t, err, runner.ErrInvalid, "NUL in the env")
	require.ErrorContains(t, err, "env")
	for name, event := range map[string]string{"NUL": "resource\x00updated", "invalid UTF-8": "resource.\xff", "empty": ""} {
		err := fire(event, nil, runner.FireOptions{})
		require.ErrorIs(t, err, runner.ErrInvalid, "event name: %s", name)
		require.ErrorContains(t, err, "event name", name)
	}
	require.Zero(t, c.Count(t, "true"), "nothing was written")

	// Valid text still goes through, U+FFFD itself included.
	out, err := node.Fire(ctx, "monitor", "resource.updated", map[string]string{"blob": "\uFFFD\x01"}, runner.FireOptions{})
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.False(t, out[0].Duplicate)
	waitEnded(t, 1, c.Sigs...)
}
