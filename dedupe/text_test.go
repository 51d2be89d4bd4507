package dedupe_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/dedupe"
)

// angled is a TextMarshaler with a value receiver, pupper one with a
// pointer receiver (encoding/json uses it on addressable values only).
type angled struct{ s string }

func (a angled) MarshalText() ([]byte, error) { return []byte("<" + a.s + ">"), nil }

type pupper struct{ s string }

func (p *pupper) MarshalText() ([]byte, error) { return []byte(p.s), nil }

type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

type inner struct{ Note string }

type order struct {
	inner
	ID     string   `json:"id"`
	Tags   []string `json:"tags,omitempty"`
	Ref    *string  `json:"ref"`
	Hidden string   `json:"-"`
	secret string
	Blob   []byte `json:"blob"`
}

// The reproduction: json.Marshal turns both blobs into U+FFFD, so
// they hashed alike and the second event was dropped as a duplicate.
func TestCanonicalRefusesInvalidUTF8InGoValues(t *testing.T) {
	for _, blob := range []string{"\xff\x01", "\xfe\x01"} {
		_, err := dedupe.PayloadHash(map[string]any{"blob": blob})
		require.ErrorIs(t, err, dedupe.ErrInvalid)
		require.ErrorContains(t, err, `payload["blob"] is not valid UTF-8`)
	}

	bad := "a\xffb"
	tests := []struct {
		name string
		in   any
		at   string
	}{
		{"string", bad, "payload "},
		{"map value", map[string]string{"k": bad}, `payload["k"]`},
		{"map key", map[string]int{bad: 1}, `payload["a\xffb"]`},
		{"nested", map[string]any{"a": []any{1, map[string]any{"b": bad}}}, `payload["a"][1]["b"]`},
		{"struct field", order{ID: bad}, "payload.id"},
		{"slice in a struct", order{Tags: []string{"ok", bad}}, "payload.tags[1]"},
		{"pointer field", order{Ref: &bad}, "payload.ref"},
		{"embedded field", order{inner: inner{Note: bad}}, "payload.inner.Note"},
		{"pointer to struct", &order{ID: bad}, "payload.id"},
		{"TextMarshaler", map[string]angled{"u": {bad}}, `payload["u"]`},
		{"TextMarshaler key", map[angled]int{{bad}: 1}, `payload["<a\xffb>"]`},
		{"addressable pointer-receiver TextMarshaler", &struct{ P pupper }{pupper{bad}}, "payload.P"},
		{"array", [2]string{"x", bad}, "payload[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dedupe.Canonical(tc.in)
			require.ErrorIs(t, err, dedupe.ErrInvalid)
			require.Nil(t, got)
			require.ErrorContains(t, err, "at "+tc.at)
		})
	}
}

func TestCanonicalKeepsWhatSurvives(t *testing.T) {
	bad := "\xff"
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"U+FFFD itself", map[string]string{"r": "\uFFFD"}, "{\"r\":\"\uFFFD\"}"},
		{"a \\ufffd escape from MarshalJSON", map[string]any{"r": rawJSON(`"\ufffd"`)}, "{\"r\":\"\uFFFD\"}"},
		{"a raw \\ufffd escape", json.RawMessage(`"\ufffd"`), "\"\uFFFD\""},
		{"the text \\ufffd", `\ufffd`, `"\\ufffd"`},
		{"fields encoding/json skips", order{Hidden: bad, secret: bad, ID: `\ufffd`}, `{"Note":"","blob":null,"id":"\\ufffd","ref":null}`},
		{"bytes are base64", []byte(bad), `"/w=="`},
		{"unaddressable pointer-receiver TextMarshaler is a struct", struct{ P pupper }{pupper{bad}}, `{"P":{}}`},
		{"escaped backslash before u0000", json.RawMessage(`"\\u0000"`), `"\\u0000"`},
		{"surrogate pair", json.RawMessage(`"\ud83d\ude00"`), `"😀"`},
		{"escaped backslash before ud800", json.RawMessage(`"\\ud800"`), `"\\ud800"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dedupe.Canonical(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}

// NUL cannot be stored by Postgres jsonb (22P05); refused on every dialect.
// Lone surrogate escapes decode to U+FFFD, so they would merge payloads.
func TestCanonicalRefusesNULAndLoneSurrogates(t *testing.T) {
	for name, in := range map[string]any{
		"NUL in a Go string":       map[string]any{"a": "x\x00y"},
		"NUL in a Go map key":      map[string]int{"\x00": 1},
		"NUL in a struct field":    order{ID: "\x00"},
		"raw \\u0000":              json.RawMessage(`{"a":"\u0000"}`),
		"raw \\u0000 in a key":     json.RawMessage(`{"\u0000":1}`),
		"raw \\u0000 after \\\\":   json.RawMessage(`["\\\u0000"]`),
		"lone high surrogate":      json.RawMessage(`"\ud800"`),
		"lone low surrogate":       json.RawMessage(`"\udc00"`),
		"high then text":           json.RawMessage(`"\uD800x"`),
		"high then non-low escape": json.RawMessage(`"\ud800\u0041"`),
		"high, high, low":          json.RawMessage(`"\ud800\ud83d\ude00"`),
		"low, high":                json.RawMessage(`"\ude00\ud83d"`),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := dedupe.Canonical(in)
			require.ErrorIs(t, err, dedupe.ErrInvalid)
			require.Nil(t, got)
			_, err = dedupe.EventKey("a", "e", "", in)
			require.ErrorIs(t, err, dedupe.ErrInvalid)
		})
	}
	// Before: both surrogates decoded to U+FFFD and shared one hash.
	_, err1 := dedupe.PayloadHash(json.RawMessage(`{"blob":"\ud800"}`))
	_, err2 := dedupe.PayloadHash(json.RawMessage(`{"blob":"\udbff"}`))
	require.ErrorIs(t, err1, dedupe.ErrInvalid)
	require.ErrorIs(t, err2, dedupe.ErrInvalid)
}

func TestInEnvRefusesNUL(t *testing.T) {
	_, err := dedupe.InEnv("r\x00c", "event:a:e:1")
	require.ErrorIs(t, err, dedupe.ErrInvalid)
}

// FuzzCanonicalGoText: a Go string anywhere in a value is refused exactly
// when it would not arrive unchanged (invalid UTF-8, NUL), and otherwise
// decodes back to itself.
func FuzzCanonicalGoText(f *testing.F) {
	for _, s := range []string{"", "a", "\xff\x01", "\xfe\x01", "\x00", "\uFFFD", `\ufffd`, `\u0000`, "\u2028", "<&>", "\ud7ff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := map[string]any{s: []any{s, struct{ S string }{s}}}
		got, err := dedupe.Canonical(v)
		bad := !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0
		if bad {
			if !errors.Is(err, dedupe.ErrInvalid) {
				t.Fatalf("Canonical(%q) = %q, %v: want ErrInvalid", s, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Canonical(%q): %v", s, err)
		}
		var back map[string][]json.RawMessage
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("decode %q: %v", got, err)
		}
		var s0 string
		var s1 struct{ S string }
		if err := json.Unmarshal(back[s][0], &s0); err != nil || s0 != s {
			t.Fatalf("%q came back as %q (%v)", s, s0, err)
		}
		if err := json.Unmarshal(back[s][1], &s1); err != nil || s1.S != s {
			t.Fatalf("%q came back as %q (%v)", s, s1.S, err)
		}
	})
}
