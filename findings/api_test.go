package findings_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/runner"
)

// A strategy passes its *runner.Run as the Holder.
var _ findings.Holder = (*runner.Run)(nil)

type bundle struct {
	store *fakeStore
	f     *findings.Findings
}

// setup returns Findings for a node of env nodeEnv over a fake store where
// episode 1 runs in env "" and episode 2 in env "rc".
func setup(t *testing.T, nodeEnv string) bundle {
	t.Helper()
	s := newFakeStore(map[int64]string{1: "", 2: "rc"})
	f, err := findings.New(s, nodeEnv)
	require.NoError(t, err)
	return bundle{store: s, f: f}
}

func TestNew(t *testing.T) {
	t.Parallel()
	s := newFakeStore(nil)
	for name, env := range map[string]string{
		"bad UTF-8": "\xff",
		"NUL":       "a\x00b",
		"too long":  strings.Repeat("é", findings.MaxEnvLen+1),
	} {
		_, err := findings.New(s, env)
		require.ErrorIs(t, err, findings.ErrInvalid, name)
	}
	_, err := findings.New(nil, "")
	require.ErrorIs(t, err, findings.ErrInvalid)

	for _, env := range []string{"", "rc", strings.Repeat("é", findings.MaxEnvLen)} {
		f, err := findings.New(s, env)
		require.NoError(t, err)
		require.Equal(t, env, f.Env())
	}
}

func TestRaiseValidation(t *testing.T) {
	t.Parallel()
	ok := findings.Raise{Key: "k", Class: "c", Severity: "s", Summary: "x", Data: json.RawMessage(`{"a":1}`)}
	with := func(change func(r *findings.Raise)) findings.Raise {
		r := ok
		change(&r)
		return r
	}
	for name, tc := range map[string]struct {
		h    findings.Holder
		r    findings.Raise
		want string
	}{
		"no holder":           {nil, ok, "no holder"},
		"no episode":          {run{tok: newRun(1).tok}, ok, "episode id 0"},
		"no claim":            {run{id: 1}, ok, "no work claim"},
		"token without owner": {run{id: 1, tok: claims.Token{Key: "episode:1", Fence: 1}}, ok, "no key or owner"},
		"empty key":           {newRun(1), with(func(r *findings.Raise) { r.Key = "" }), "key is empty"},
		"key too long": {newRun(1), with(func(r *findings.Raise) { r.Key = strings.Repeat("é", 513) }),
			"key is 513 characters, the limit is 512"},
		"key not UTF-8": {newRun(1), with(func(r *findings.Raise) { r.Key = "k\xff" }), "key is not valid UTF-8"},
		"key with NUL":  {newRun(1), with(func(r *findings.Raise) { r.Key = "k\x00" }), "key contains a NUL"},
		"class too long": {newRun(1), with(func(r *findings.Raise) { r.Class = strings.Repeat("c", 129) }),
			"class is 129 characters, the limit is 128"},
		"severity too long": {newRun(1), with(func(r *findings.Raise) { r.Severity = strings.Repeat("s", 33) }),
			"severity is 33 characters, the limit is 32"},
		"summary not UTF-8": {newRun(1), with(func(r *findings.Raise) { r.Summary = "\xc3\x28" }), "summary is not valid UTF-8"},
		"data not JSON":     {newRun(1), with(func(r *findings.Raise) { r.Data = json.RawMessage(`{"a":`) }), "data is not valid JSON"},
		"data whitespace":   {newRun(1), with(func(r *findings.Raise) { r.Data = json.RawMessage(` `) }), "data is not valid JSON"},
		"data not UTF-8":    {newRun(1), with(func(r *findings.Raise) { r.Data = json.RawMessage("\"\xff\"") }), "data is not valid JSON"},
		"data with NUL":     {newRun(1), with(func(r *findings.Raise) { r.Data = json.RawMessage(`{"a":"x\u0000"}`) }), `\u0000`},
		"lone high surrogate": {newRun(1), with(func(r *findings.Raise) { r.Data = json.RawMessage(`["\ud83d"]`) }),
			"unpaired surrogate \\ud83d"},
		"high then not low": {newRun(1), with(func(r *findings.Raise) { r.Data = json.RawMessage(`["\ud83d\u0041"]`) }),
			"unpaired surrogate"},
		"lone low surrogate": {newRun(1), with(func(r *findings.Raise) { r.Data = json.RawMessage(`{"\uDE00":1}`) }),
			"unpaired surrogate \\ude00"},
	} {
		b := setup(t, "")
		_, err := b.f.Raise(t.Context(), tc.h, tc.r)
		require.ErrorIs(t, err, findings.ErrInvalid, name)
		require.ErrorContains(t, err, tc.want, name)
		require.Zero(t, b.store.calls, "%s: nothing reaches the store", name)
	}

	for name, r := range map[string]findings.Raise{
		"key of 512":         with(func(r *findings.Raise) { r.Key = strings.Repeat("é", 512) }),
		"class of 128":       with(func(r *findings.Raise) { r.Class = strings.Repeat("é", 128) }),
		"severity of 32":     with(func(r *findings.Raise) { r.Severity = strings.Repeat("é", 32) }),
		"surrogate pair":     with(func(r *findings.Raise) { r.Data = json.RawMessage(`"\ud83d\ude00"`) }),
		"escaped backslash":  with(func(r *findings.Raise) { r.Data = json.RawMessage(`"\\u0000 is text"`) }),
		"JSON null":          with(func(r *findings.Raise) { r.Data = json.RawMessage(`null`) }),
		"only the key":       {Key: "k"},
		"long summary":       with(func(r *findings.Raise) { r.Summary = strings.Repeat("s", 100_000) }),
		"non-ASCII escapes":  with(func(r *findings.Raise) { r.Data = json.RawMessage(`{"\u00e9":"\u2603"}`) }),
		"escapes after text": with(func(r *findings.Raise) { r.Data = json.RawMessage(`{"a":"\"\n\t\/"}`) }),
	} {
		b := setup(t, "")
		_, err := b.f.Raise(t.Context(), newRun(1), r)
		require.NoError(t, err, name)
		require.Equal(t, 1, b.store.calls, name)
	}
}

func TestRaisePassesTheRunAndNormalizesData(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	h := newRun(2)
	fd, err := b.f.Raise(t.Context(), h, findings.Raise{Key: "k", Data: json.RawMessage{}})
	require.NoError(t, err)
	require.Equal(t, h.tok, b.store.lastTok)
	require.EqualValues(t, 2, b.store.lastEp)
	require.Nil(t, b.store.lastData, "empty data is sent as NULL")
	require.Equal(t, "rc", fd.Env, "the env is the episode's")
}

func TestUpdateAndClearValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	for name, call := range map[string]func() error{
		"update empty key": func() error {
			_, err := b.f.Update(t.Context(), newRun(1), "", findings.Update{})
			return err
		},
		"update long severity": func() error {
			_, err := b.f.Update(t.Context(), newRun(1), "k", findings.Update{Severity: strings.Repeat("s", 33)})
			return err
		},
		"update bad data": func() error {
			_, err := b.f.Update(t.Context(), newRun(1), "k", findings.Update{Data: json.RawMessage(`nope`)})
			return err
		},
		"update without claim": func() error {
			_, err := b.f.Update(t.Context(), run{id: 1}, "k", findings.Update{})
			return err
		},
		"clear long key": func() error {
			_, err := b.f.Clear(t.Context(), newRun(1), strings.Repeat("k", 513))
			return err
		},
		"clear without holder": func() error {
			_, err := b.f.Clear(t.Context(), nil, "k")
			return err
		},
	} {
		require.ErrorIs(t, call(), findings.ErrInvalid, name)
	}
	require.Zero(t, b.store.calls)
}

func TestLeaseLostIsWrapped(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.store.err = findings.ErrLeaseLost
	_, err := b.f.Raise(t.Context(), newRun(1), findings.Raise{Key: "disk:/var"})
	require.ErrorIs(t, err, claims.ErrLeaseLost)
	require.ErrorContains(t, err, `raise finding "disk:/var"`)
	_, err = b.f.Update(t.Context(), newRun(1), "disk:/var", findings.Update{})
	require.ErrorIs(t, err, findings.ErrLeaseLost)
	_, err = b.f.Clear(t.Context(), newRun(1), "disk:/var")
	require.ErrorIs(t, err, findings.ErrLeaseLost)
}

func TestActiveForEnv(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		node    string
		filter  findings.Filter
		wantEnv string
	}{
		"node env by default":         {"rc", findings.Filter{}, "rc"},
		"unset node env by default":   {"", findings.Filter{}, ""},
		"override to another env":     {"rc", findings.Filter{Env: new("demo")}, "demo"},
		"override to the unset env":   {"rc", findings.Filter{Env: new("")}, ""},
		"override from the unset env": {"", findings.Filter{Env: new("rc")}, "rc"},
	} {
		b := setup(t, tc.node)
		_, err := b.f.ActiveFor(t.Context(), tc.filter)
		require.NoError(t, err, name)
		require.Equal(t, tc.wantEnv, b.store.lastQ.Env, name)
	}
}

func TestActiveForLimitAndFilters(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	_, err := b.f.ActiveFor(t.Context(), findings.Filter{Class: "c", ActorID: "a", Key: "k"})
	require.NoError(t, err)
	require.Equal(t, findings.Query{Env: "", Class: "c", ActorID: "a", Key: "k", Limit: findings.DefaultLimit}, b.store.lastQ)

	for _, limit := range []int{1, findings.MaxLimit} {
		_, err := b.f.ActiveFor(t.Context(), findings.Filter{Limit: limit})
		require.NoError(t, err)
		require.Equal(t, limit, b.store.lastQ.Limit)
	}
	calls := b.store.calls
	for name, q := range map[string]findings.Filter{
		"negative limit":  {Limit: -1},
		"limit too large": {Limit: findings.MaxLimit + 1},
		"long class":      {Class: strings.Repeat("c", findings.MaxClassLen+1)},
		"long actor":      {ActorID: strings.Repeat("a", findings.MaxActorLen+1)},
		"long key":        {Key: strings.Repeat("k", findings.MaxKeyLen+1)},
		"bad env":         {Env: new("\xff")},
	} {
		_, err := b.f.ActiveFor(t.Context(), q)
		require.ErrorIs(t, err, findings.ErrInvalid, name)
	}
	require.Equal(t, calls, b.store.calls, "invalid reads reach no store")
}
