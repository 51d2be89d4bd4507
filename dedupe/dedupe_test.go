package dedupe_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/dedupe"
)

// ---------------------------------------------------------------- Canonical

func TestCanonicalEquivalentInputsGiveIdenticalBytes(t *testing.T) {
	type inner struct {
		Z []int  `json:"z"`
		Y string `json:"y"`
	}
	type outer struct {
		B     int    `json:"b"`
		A     string `json:"a"`
		Inner inner  `json:"inner"`
		List  []any  `json:"list"`
		Skip  string `json:"-"`
	}

	// Maps built in different insertion orders (Go randomises iteration
	// anyway, but the test states the intent).
	m1 := map[string]any{}
	m1["b"] = 1
	m1["a"] = "x"
	m1["c"] = true
	m2 := map[string]any{}
	m2["c"] = true
	m2["a"] = "x"
	m2["b"] = 1

	tests := []struct {
		name  string
		left  any
		right any
		want  string
	}{
		{
			name:  "maps in different insertion order",
			left:  m1,
			right: m2,
			want:  `{"a":"x","b":1,"c":true}`,
		},
		{
			name: "struct vs equivalent map",
			left: outer{B: 1, A: "x", Inner: inner{Z: []int{3, 2, 1}, Y: "y"}, List: []any{1, "two"}, Skip: "ignored"},
			right: map[string]any{
				"list":  []any{1, "two"},
				"inner": map[string]any{"y": "y", "z": []int{3, 2, 1}},
				"a":     "x",
				"b":     1,
			},
			want: `{"a":"x","b":1,"inner":{"y":"y","z":[3,2,1]},"list":[1,"two"]}`,
		},
		{
			name:  "RawMessage with whitespace and reordered keys vs map",
			left:  json.RawMessage(" {\n\t\"b\" : 1 ,\r\n \"a\" : [ 1 , 2 ] } \n"),
			right: map[string]any{"a": []int{1, 2}, "b": 1},
			want:  `{"a":[1,2],"b":1}`,
		},
		{
			name:  "RawMessage vs RawMessage, reordered keys",
			left:  json.RawMessage(`{"b":{"d":1,"c":2},"a":null}`),
			right: json.RawMessage(`{"a":null,"b":{"c":2,"d":1}}`),
			want:  `{"a":null,"b":{"c":2,"d":1}}`,
		},
		{
			name: "nested objects in arrays, reordered at every depth",
			left: json.RawMessage(`{"z":[{"y":1,"x":[{"q":1,"p":2}]},{"b":2,"a":1}],"a":{"c":{"e":1,"d":0}}}`),
			right: map[string]any{
				"a": map[string]any{"c": map[string]any{"d": 0, "e": 1}},
				"z": []any{
					map[string]any{"x": []any{map[string]any{"p": 2, "q": 1}}, "y": 1},
					map[string]any{"a": 1, "b": 2},
				},
			},
			want: `{"a":{"c":{"d":0,"e":1}},"z":[{"x":[{"p":2,"q":1}],"y":1},{"a":1,"b":2}]}`,
		},
		{
			name:  "RawMessage nested in a struct field is canonicalised too",
			left:  struct{ P json.RawMessage }{json.RawMessage(`{ "b":1, "a":2 }`)},
			right: map[string]any{"P": map[string]int{"a": 2, "b": 1}},
			want:  `{"P":{"a":2,"b":1}}`,
		},
		{
			name:  "pointer to RawMessage",
			left:  ptr(json.RawMessage(`{ "b":1, "a":2 }`)),
			right: json.RawMessage(`{"a":2,"b":1}`),
			want:  `{"a":2,"b":1}`,
		},
		{
			name:  "no HTML escaping",
			left:  map[string]string{"k": "<a&b>"},
			right: json.RawMessage(`{"k":"\u003ca\u0026b\u003e"}`),
			want:  `{"k":"<a&b>"}`,
		},
		{
			name:  "scalars: nil is null",
			left:  nil,
			right: json.RawMessage(` null `),
			want:  `null`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := dedupe.Canonical(tc.left)
			require.NoError(t, err)
			r, err := dedupe.Canonical(tc.right)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(l))
			require.Equal(t, l, r)
			require.True(t, json.Valid(l))
		})
	}
}

func TestCanonicalKeepsNumbersAsWritten(t *testing.T) {
	tests := []struct{ in, want string }{
		{`1.50`, `1.50`},
		{`{"price": 1.50, "qty": 10}`, `{"price":1.50,"qty":10}`},
		{`[1.0, 1e3, 1E+3, -0, 0.000, 12345678901234567890123456789]`, `[1.0,1e3,1E+3,-0,0.000,12345678901234567890123456789]`},
		{`{"big": 9007199254740993}`, `{"big":9007199254740993}`}, // not representable as float64
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := dedupe.Canonical(json.RawMessage(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}

func TestCanonicalNoHTMLEscaping(t *testing.T) {
	got, err := dedupe.Canonical("<a&b>")
	require.NoError(t, err)
	require.Equal(t, `"<a&b>"`, string(got))
	require.NotContains(t, string(got), `\u003c`)
	require.NotContains(t, string(got), `\u0026`)
}

func TestCanonicalErrors(t *testing.T) {
	tests := []struct {
		name string
		in   any
	}{
		{"invalid JSON RawMessage", json.RawMessage(`{"a":`)},
		{"unquoted key", json.RawMessage(`{a:1}`)},
		{"single quotes", json.RawMessage(`{'a':1}`)},
		{"trailing comma", json.RawMessage(`[1,2,]`)},
		{"empty RawMessage", json.RawMessage(``)},
		{"nil RawMessage", json.RawMessage(nil)},
		{"whitespace-only RawMessage", json.RawMessage(" \n\t")},
		{"trailing scalar after object", json.RawMessage(`{"a":1} 2`)},
		{"second object", json.RawMessage(`{"a":1}{"b":2}`)},
		{"trailing garbage after number", json.RawMessage(`1x`)},
		{"trailing garbage after array", json.RawMessage(`[1] x`)},
		{"two scalars", json.RawMessage(`1 2`)},
		{"channel", make(chan int)},
		{"func", func() {}},
		{"map holding a func", map[string]any{"f": func() {}}},
		{"NaN", math.NaN()},
		{"+Inf", math.Inf(1)},
		{"map with complex value", map[string]any{"c": complex(1, 2)}},
		{"duplicate key", json.RawMessage(`{"a":1,"a":2}`)},
		{"duplicate key, same value", json.RawMessage(`{"a":1,"a":1}`)},
		{"duplicate key in a nested object", json.RawMessage(`{"x":[{"b":true},{"b":1,"c":2,"b":1}]}`)},
		{"duplicate key written with an escape", json.RawMessage(`{"a":1,"\u0061":2}`)},
		{"duplicate key from a MarshalJSON", dupMarshaler{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dedupe.Canonical(tc.in)
			require.ErrorIs(t, err, dedupe.ErrInvalid)
			require.Nil(t, got)

			_, err = dedupe.PayloadHash(tc.in)
			require.ErrorIs(t, err, dedupe.ErrInvalid)

			key, err := dedupe.EventKey("actor", "exp", "", tc.in)
			require.ErrorIs(t, err, dedupe.ErrInvalid)
			require.Empty(t, key)
		})
	}
}

// dupMarshaler writes an object that names one key twice.
type dupMarshaler struct{}

func (dupMarshaler) MarshalJSON() ([]byte, error) { return []byte(`{"id":1,"id":2}`), nil }

// A payload that names a key twice is refused, with the path of the object
// and the key in the error: encoding/json would keep the last value
// silently, so {"a":1,"a":2} and {"a":2} used to hash alike.
func TestCanonicalRefusesDuplicateKeys(t *testing.T) {
	_, err := dedupe.Canonical(json.RawMessage(`{"order":{"id":7,"lines":[{"sku":"a"},{"sku":"b","sku":"c"}]}}`))
	require.ErrorIs(t, err, dedupe.ErrInvalid)
	require.ErrorContains(t, err, `$.order.lines[1] names the key "sku" twice`)

	_, err = dedupe.Canonical(json.RawMessage(`{"a b":{"k":1,"k":2}}`))
	require.ErrorContains(t, err, `$."a b" names the key "k" twice`)

	// The same keys in different objects, and a key equal to a value, are
	// not duplicates.
	got, err := dedupe.Canonical(json.RawMessage(`{"a":{"a":"a"},"b":[{"a":1},{"a":2}]}`))
	require.NoError(t, err)
	require.Equal(t, `{"a":{"a":"a"},"b":[{"a":1},{"a":2}]}`, string(got))
}

// -------------------------------------------------------------- PayloadHash

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestPayloadHash(t *testing.T) {
	t.Run("same payload in different key order gives same hash", func(t *testing.T) {
		h1, err := dedupe.PayloadHash(map[string]any{"b": 1, "a": map[string]any{"y": 2, "x": 3}})
		require.NoError(t, err)
		h2, err := dedupe.PayloadHash(json.RawMessage(`{"a":{"x":3,"y":2},"b":1}`))
		require.NoError(t, err)
		h3, err := dedupe.PayloadHash(json.RawMessage("{ \"a\" : { \"y\":2, \"x\":3 },\n\"b\":1 }"))
		require.NoError(t, err)
		require.Equal(t, h1, h2)
		require.Equal(t, h1, h3)
	})

	t.Run("different payloads give different hashes", func(t *testing.T) {
		payloads := []any{
			map[string]any{"a": 1},
			map[string]any{"a": 2},
			map[string]any{"b": 1},
			map[string]any{"a": "1"},
			map[string]any{"a": []int{1}},
			json.RawMessage(`{"a":1.0}`), // numbers as written: 1.0 is not 1
			[]any{1, 2},
			[]any{2, 1},
			nil,
			"",
		}
		seen := map[string]int{}
		for i, p := range payloads {
			h, err := dedupe.PayloadHash(p)
			require.NoError(t, err)
			if j, dup := seen[h]; dup {
				t.Fatalf("payloads %d and %d share hash %s", j, i, h)
			}
			seen[h] = i
		}
	})

	t.Run("1000 distinct payloads give 1000 distinct hashes", func(t *testing.T) {
		seen := make(map[string]struct{}, 1000)
		for i := range 1000 {
			h, err := dedupe.PayloadHash(map[string]any{"n": i})
			require.NoError(t, err)
			seen[h] = struct{}{}
		}
		require.Len(t, seen, 1000)
	})

	t.Run("64 lowercase hex characters", func(t *testing.T) {
		for _, p := range []any{nil, 0, "x", map[string]any{"a": 1}, json.RawMessage(`[]`)} {
			h, err := dedupe.PayloadHash(p)
			require.NoError(t, err)
			require.Regexp(t, hexSHA256, h)
		}
	})

	t.Run("known vector", func(t *testing.T) {
		sum := sha256.Sum256([]byte(`{"a":2,"b":1}`))
		want := hex.EncodeToString(sum[:])
		got, err := dedupe.PayloadHash(map[string]int{"b": 1, "a": 2})
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}

// ----------------------------------------------------------------- EventKey

func TestEventKey(t *testing.T) {
	payload := map[string]any{"b": 1, "a": 2}
	sum := sha256.Sum256([]byte(`{"a":2,"b":1}`))
	payloadHex := hex.EncodeToString(sum[:])

	tests := []struct {
		name    string
		eventID string
		payload any
		want    string
	}{
		{"explicit event id wins over payload", "evt-42", payload, "event:actor:exp:evt-42"},
		{"explicit event id, unencodable payload ignored", "evt-42", make(chan int), "event:actor:exp:evt-42"},
		{"no event id: payload hash", "", payload, "event:actor:exp:" + payloadHex},
		{"no event id: RawMessage payload, other order", "", json.RawMessage(`{ "b": 1, "a": 2 }`), "event:actor:exp:" + payloadHex},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dedupe.EventKey("actor", "exp", tc.eventID, tc.payload)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("same payload, different map order, same key", func(t *testing.T) {
		m1 := map[string]any{}
		m1["x"] = []any{map[string]any{"q": 1, "p": 2}}
		m1["a"] = "v"
		m2 := map[string]any{}
		m2["a"] = "v"
		m2["x"] = []any{map[string]any{"p": 2, "q": 1}}
		k1, err := dedupe.EventKey("actor", "exp", "", m1)
		require.NoError(t, err)
		k2, err := dedupe.EventKey("actor", "exp", "", m2)
		require.NoError(t, err)
		require.Equal(t, k1, k2)
		require.True(t, strings.HasPrefix(k1, "event:actor:exp:"))
		require.Regexp(t, hexSHA256, strings.TrimPrefix(k1, "event:actor:exp:"))
	})
}

// -------------------------------------------------------------- ScheduleKey

func TestScheduleKey(t *testing.T) {
	plus0530 := time.FixedZone("IST", 5*3600+30*60)
	minus0700 := time.FixedZone("PDT", -7*3600)

	tests := []struct {
		name string
		tick time.Time
		want string
	}{
		{"UTC tick", time.Date(2026, 6, 5, 5, 0, 0, 0, time.UTC), "schedule:a:e:2026-06-05T05:00:00Z"},
		{"+05:30 tick rendered in UTC", time.Date(2026, 6, 5, 10, 30, 0, 0, plus0530), "schedule:a:e:2026-06-05T05:00:00Z"},
		{"-07:00 tick crossing a date", time.Date(2026, 6, 4, 22, 0, 0, 0, minus0700), "schedule:a:e:2026-06-05T05:00:00Z"},
		{"CronWindow zeroes seconds and sub-seconds", dedupe.CronWindow(mustParse(t, "2026-06-05T05:00:37.123Z")), "schedule:a:e:2026-06-05T05:00:00Z"},
		{"CronWindow of a non-UTC tick", dedupe.CronWindow(time.Date(2026, 6, 5, 10, 30, 59, 999999999, plus0530)), "schedule:a:e:2026-06-05T05:00:00Z"},
		{"IntervalWindow then ScheduleKey", dedupe.IntervalWindow(mustParse(t, "2026-06-05T05:14:59.5Z"), 15*time.Minute), "schedule:a:e:2026-06-05T05:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dedupe.ScheduleKey("a", "e", tc.tick)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("monotonic clock reading does not matter", func(t *testing.T) {
		now := time.Now()
		k1, err := dedupe.ScheduleKey("a", "e", dedupe.CronWindow(now))
		require.NoError(t, err)
		k2, err := dedupe.ScheduleKey("a", "e", dedupe.CronWindow(now.Round(0)))
		require.NoError(t, err)
		require.Equal(t, k1, k2)
	})
}

func TestCronWindow(t *testing.T) {
	tests := []struct{ in, want string }{
		{"2026-06-05T05:00:37.123Z", "2026-06-05T05:00:00Z"},
		{"2026-06-05T05:00:00Z", "2026-06-05T05:00:00Z"},
		{"2026-06-05T05:59:59.999999999Z", "2026-06-05T05:59:00Z"},
		{"2026-06-05T10:30:12+05:30", "2026-06-05T05:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got := dedupe.CronWindow(mustParse(t, tc.in))
			require.Equal(t, time.UTC, got.Location())
			require.Equal(t, tc.want, got.Format(time.RFC3339Nano))
		})
	}
}

func TestIntervalWindow(t *testing.T) {
	tests := []struct {
		in    string
		every time.Duration
		want  string
	}{
		{"2026-06-05T10:00:00Z", 15 * time.Minute, "2026-06-05T10:00:00Z"},
		{"2026-06-05T10:07:00Z", 15 * time.Minute, "2026-06-05T10:00:00Z"},
		{"2026-06-05T10:14:59Z", 15 * time.Minute, "2026-06-05T10:00:00Z"},
		{"2026-06-05T10:14:59.999999999Z", 15 * time.Minute, "2026-06-05T10:00:00Z"},
		{"2026-06-05T10:15:00Z", 15 * time.Minute, "2026-06-05T10:15:00Z"},
		{"2026-06-05T15:37:00+05:30", 15 * time.Minute, "2026-06-05T10:00:00Z"}, // 10:07Z
		{"2026-06-05T10:59:59Z", time.Hour, "2026-06-05T10:00:00Z"},
		{"2026-06-05T23:59:59Z", 24 * time.Hour, "2026-06-05T00:00:00Z"},
		{"2026-06-05T10:07:31Z", 30 * time.Second, "2026-06-05T10:07:30Z"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%s", tc.in, tc.every), func(t *testing.T) {
			got := dedupe.IntervalWindow(mustParse(t, tc.in), tc.every)
			require.Equal(t, time.UTC, got.Location())
			require.Equal(t, tc.want, got.Format(time.RFC3339Nano))
		})
	}
}

// ------------------------------------------------------------------- Limits

func TestKeyPartValidation(t *testing.T) {
	tick := time.Date(2026, 6, 5, 5, 0, 0, 0, time.UTC)
	type call func(actor, exp, id string) (string, error)
	event := func(a, e, id string) (string, error) { return dedupe.EventKey(a, e, id, nil) }
	schedule := func(a, e, _ string) (string, error) { return dedupe.ScheduleKey(a, e, tick) }

	tests := []struct {
		name              string
		fn                call
		actor, exp, id    string
		wantErrSubstrings []string
	}{
		{"event: empty actor", event, "", "e", "id", []string{"part 1 is empty"}},
		{"event: empty expectation", event, "a", "", "id", []string{"part 2 is empty"}},
		{"schedule: empty actor", schedule, "", "e", "", []string{"part 1 is empty"}},
		{"schedule: empty expectation", schedule, "a", "", "", []string{"part 2 is empty"}},
		{"event: invalid UTF-8 actor", event, "a\xffb", "e", "id", []string{"part 1", "not valid text"}},
		{"event: invalid UTF-8 expectation", event, "a", "\xc3", "id", []string{"part 2", "not valid text"}},
		{"event: invalid UTF-8 event id", event, "a", "e", "\xed\xa0\x80", []string{"part 3", "not valid text"}}, // surrogate half
		{"event: NUL in actor", event, "a\x00b", "e", "id", []string{"part 1", "not valid text"}},
		{"event: NUL in expectation", event, "a", "\x00", "id", []string{"part 2", "not valid text"}},
		{"event: NUL in event id", event, "a", "e", "id\x00", []string{"part 3", "not valid text"}},
		{"schedule: invalid UTF-8 actor", schedule, "\x80", "e", "", []string{"part 1", "not valid text"}},
		{"schedule: NUL in expectation", schedule, "a", "e\x00", "", []string{"part 2", "not valid text"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, err := tc.fn(tc.actor, tc.exp, tc.id)
			require.ErrorIs(t, err, dedupe.ErrInvalid)
			require.Empty(t, key)
			for _, s := range tc.wantErrSubstrings {
				require.ErrorContains(t, err, s)
			}
		})
	}

	t.Run("empty event id is not an error: the payload hash is used", func(t *testing.T) {
		key, err := event("a", "e", "")
		require.NoError(t, err)
		require.Regexp(t, `^event:a:e:[0-9a-f]{64}$`, key)
	})
}

func TestKeyLength(t *testing.T) {
	// "event:" + actor + ":e:x" — the fixed part, in characters.
	fixed := utf8.RuneCountInString("event:" + ":e:x")
	event := func(actor string) (string, error) { return dedupe.EventKey(actor, "e", "x", nil) }

	t.Run("600 multibyte characters are rejected, not truncated", func(t *testing.T) {
		actor := strings.Repeat("é", 600)
		key, err := event(actor)
		require.ErrorIs(t, err, dedupe.ErrInvalid)
		require.Empty(t, key)
		require.ErrorContains(t, err, strconv.Itoa(600+fixed)+" characters")
		require.ErrorContains(t, err, "limit is 512")
	})

	t.Run("exactly 512 characters is accepted (multibyte)", func(t *testing.T) {
		actor := strings.Repeat("é", dedupe.MaxKeyLen-fixed)
		key, err := event(actor)
		require.NoError(t, err)
		require.Equal(t, dedupe.MaxKeyLen, utf8.RuneCountInString(key))
		require.Greater(t, len(key), dedupe.MaxKeyLen, "limit counts characters, not bytes")
		require.Equal(t, "event:"+actor+":e:x", key)
	})

	t.Run("513 characters is rejected", func(t *testing.T) {
		actor := strings.Repeat("é", dedupe.MaxKeyLen-fixed+1)
		_, err := event(actor)
		require.ErrorIs(t, err, dedupe.ErrInvalid)
		require.ErrorContains(t, err, "513 characters")
	})

	t.Run("exactly 512 ASCII characters via a long event id", func(t *testing.T) {
		id := strings.Repeat("x", dedupe.MaxKeyLen-utf8.RuneCountInString("event:a:e:"))
		key, err := dedupe.EventKey("a", "e", id, nil)
		require.NoError(t, err)
		require.Len(t, key, dedupe.MaxKeyLen)
	})

	t.Run("schedule key over the limit", func(t *testing.T) {
		_, err := dedupe.ScheduleKey(strings.Repeat("é", 600), "e", time.Unix(0, 0))
		require.ErrorIs(t, err, dedupe.ErrInvalid)
		require.ErrorContains(t, err, "schedule key is")
	})

	t.Run("schedule key at exactly the limit", func(t *testing.T) {
		tick := time.Date(2026, 6, 5, 5, 0, 0, 0, time.UTC)
		fixed := utf8.RuneCountInString("schedule:" + ":e:" + tick.Format(time.RFC3339))
		key, err := dedupe.ScheduleKey(strings.Repeat("ß", dedupe.MaxKeyLen-fixed), "e", tick)
		require.NoError(t, err)
		require.Equal(t, dedupe.MaxKeyLen, utf8.RuneCountInString(key))
	})
}

// Defects found while writing these tests, fixed in dedupe.go.
func TestFixedDefects(t *testing.T) {
	t.Run("trailing ] or } after the value is rejected", func(t *testing.T) {
		for _, s := range []string{`{"a":1}]`, `{"a":1}}`, `1]`, `[1]]`, `"s" }`} {
			_, err := dedupe.Canonical(json.RawMessage(s))
			require.ErrorIs(t, err, dedupe.ErrInvalid, "input %q", s)
		}
	})
	t.Run("invalid UTF-8 in a raw payload is rejected, not replaced", func(t *testing.T) {
		_, err := dedupe.Canonical(json.RawMessage("\"\xff\""))
		require.ErrorIs(t, err, dedupe.ErrInvalid)
	})
	t.Run("IntervalWindow is aligned to the Unix epoch", func(t *testing.T) {
		epoch := time.Unix(0, 0).UTC()
		require.Equal(t, epoch.Add(7*time.Minute), dedupe.IntervalWindow(epoch.Add(7*time.Minute+time.Second), 7*time.Minute))
		require.Equal(t, epoch, dedupe.IntervalWindow(epoch.Add(24*time.Hour), 7*24*time.Hour))
		require.Equal(t, epoch.Add(-7*time.Minute), dedupe.IntervalWindow(epoch.Add(-time.Second), 7*time.Minute))
	})
	t.Run("a ':' in an actor or expectation id is rejected", func(t *testing.T) {
		_, err := dedupe.EventKey("a:b", "c", "x", nil)
		require.ErrorIs(t, err, dedupe.ErrInvalid)
		_, err = dedupe.EventKey("a", "b:c", "x", nil)
		require.ErrorIs(t, err, dedupe.ErrInvalid)
		k, err := dedupe.EventKey("a", "b", "order:42", nil)
		require.NoError(t, err, "the last part may contain ':'")
		require.Equal(t, "event:a:b:order:42", k)
	})
}

// -------------------------------------------------------------------- Fuzz

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, `0`, `-0`, `1.50`, `1e308`, `""`,
		`{"b":1,"a":2}`,
		` { "z" : [ 1 , { "y" : null , "x" : "<a&b>" } ] , "a" : 1.0 } `,
		`{"a":{"a":{"a":[[],{}]}}}`,
		`{"a":1,"a":2}`,
		`"\u2028\u0000\ud800"`,
		"\"\xff\"",
		`[12345678901234567890123456789, 1E+2, 0.000]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) || !utf8.Valid(in) {
			return // invalid UTF-8 is rejected on purpose (TestFixedDefects)
		}
		c1, err := dedupe.Canonical(json.RawMessage(in))
		if err != nil {
			// Only text that would not survive is refused (TestCanonicalText):
			// a \u0000 or a surrogate escape must be in the input.
			// Or an object names a key twice.
			if !errors.Is(err, dedupe.ErrInvalid) || !lossyEscape.Match(in) && !namesAKeyTwice(in) {
				t.Fatalf("Canonical(%q): valid JSON rejected: %v", in, err)
			}
			return
		}
		if !json.Valid(c1) {
			t.Fatalf("Canonical(%q) = %q: not valid JSON", in, c1)
		}
		c2, err := dedupe.Canonical(json.RawMessage(c1))
		if err != nil {
			t.Fatalf("Canonical(Canonical(%q)) = error %v", in, err)
		}
		if string(c1) != string(c2) {
			t.Fatalf("not idempotent for %q:\n once:  %q\n twice: %q", in, c1, c2)
		}
		// Same value decoded generically must canonicalise identically
		// (a map in random iteration order, numbers preserved).
		var tree any
		dec := json.NewDecoder(strings.NewReader(string(c1)))
		dec.UseNumber()
		if err := dec.Decode(&tree); err != nil {
			t.Fatalf("decode %q: %v", c1, err)
		}
		if holdsNUL(tree) {
			t.Fatalf("Canonical(%q) = %q: NUL accepted", in, c1)
		}
		c3, err := dedupe.Canonical(tree)
		if err != nil {
			t.Fatalf("Canonical(decoded %q): %v", c1, err)
		}
		if string(c1) != string(c3) {
			t.Fatalf("raw vs decoded differ for %q:\n raw:     %q\n decoded: %q", in, c1, c3)
		}
	})
}

// namesAKeyTwice reports whether an object in the valid JSON in has two
// members with one key: the tokens of each object's keys, counted apart
// from a decoded map (which keeps one of them).
func namesAKeyTwice(in []byte) bool {
	dec := json.NewDecoder(strings.NewReader(string(in)))
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool // the next token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expect {
			if k, ok := tok.(string); ok {
				if stack[n-1].keys[k] {
					return true
				}
				stack[n-1].keys[k] = true
				stack[n-1].expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expect = true // a value ended: a key or '}' is next
		}
	}
}

// lossyEscape matches the \u escapes Canonical may refuse: NUL and UTF-16
// surrogates (it refuses those not in a pair).
var lossyEscape = regexp.MustCompile(`\\u(0000|[dD][89abcdefABCDEF][0-9a-fA-F]{2})`)

func FuzzEventKey(f *testing.F) {
	f.Add("actor", "exp", "evt-1", int64(0))
	f.Add("actor", "exp", "", int64(42))
	f.Add("", "exp", "", int64(0))
	f.Add("a", "", "id", int64(0))
	f.Add("a\x00", "e", "id", int64(0))
	f.Add("a", "e", "\xff", int64(0))
	f.Add(strings.Repeat("é", 502), "e", "x", int64(0))
	f.Add(strings.Repeat("é", 503), "e", "x", int64(0))
	f.Add("a:b", "c", "d:e", int64(-1))
	f.Fuzz(func(t *testing.T, actor, exp, id string, n int64) {
		payload := map[string]any{"n": n, "actor": actor}
		k1, err1 := dedupe.EventKey(actor, exp, id, payload)
		k2, err2 := dedupe.EventKey(actor, exp, id, payload)

		// Expected outcome, computed independently. The payload holds actor,
		// so it is refused when actor is not valid UTF-8 or holds NUL.
		badPayload := !utf8.ValidString(actor) || strings.IndexByte(actor, 0) >= 0
		effectiveID := id
		h, err := dedupe.PayloadHash(payload)
		if (err != nil) != badPayload || (err != nil && !errors.Is(err, dedupe.ErrInvalid)) {
			t.Fatalf("PayloadHash(actor %q) = %v, want refused: %v", actor, err, badPayload)
		}
		if id == "" {
			effectiveID = h
		}
		badPart := id == "" && badPayload
		for i, p := range []string{actor, exp, effectiveID} {
			if p == "" || !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 || (i < 2 && strings.Contains(p, ":")) {
				badPart = true
			}
		}
		want := "event:" + actor + ":" + exp + ":" + effectiveID
		wantErr := badPart || utf8.RuneCountInString(want) > dedupe.MaxKeyLen

		if err1 != nil {
			if !errors.Is(err1, dedupe.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err1)
			}
			if err2 == nil || err1.Error() != err2.Error() {
				t.Fatalf("not deterministic: %v vs %v", err1, err2)
			}
			if !wantErr {
				t.Fatalf("EventKey(%q, %q, %q) rejected unexpectedly: %v", actor, exp, id, err1)
			}
			if k1 != "" {
				t.Fatalf("key %q returned with error", k1)
			}
			return
		}
		if wantErr {
			t.Fatalf("EventKey(%q, %q, %q) = %q, want an error", actor, exp, id, k1)
		}
		if err2 != nil || k1 != k2 {
			t.Fatalf("not deterministic: %q,%v vs %q,%v", k1, err1, k2, err2)
		}
		if !strings.HasPrefix(k1, "event:") {
			t.Fatalf("key %q lacks event: prefix", k1)
		}
		if n := utf8.RuneCountInString(k1); n > dedupe.MaxKeyLen {
			t.Fatalf("key has %d runes", n)
		}
		if !utf8.ValidString(k1) || strings.IndexByte(k1, 0) >= 0 {
			t.Fatalf("key %q is not valid text", k1)
		}
		if k1 != want {
			t.Fatalf("key %q, want %q", k1, want)
		}
	})
}

// FuzzInEnv: scoping is the identity for the unset env, never truncates,
// and is injective: two different (env, key) pairs never share a scoped key,
// so envs can never deduplicate each other.
func FuzzInEnv(f *testing.F) {
	f.Add("", "event:a:e:1", "rc", "event:a:e:1")
	f.Add("rc", "event:a:e:1", "r", "c:event:a:e:1")
	f.Add("a:b", "k", "a", "b:k")
	f.Add("rc", "env:x:event:a:e:1", "rc", "")
	f.Add("", "", "rc", "")
	f.Add("r\x00c", "k", "r", "k")
	f.Add("\xff", "k", "rc", "k")
	f.Fuzz(func(t *testing.T, env1, key1, env2, key2 string) {
		s1, err1 := dedupe.InEnv(env1, key1)
		s2, err2 := dedupe.InEnv(env2, key2)
		if env1 == "" || key1 == "" {
			if err1 != nil || s1 != key1 {
				t.Fatalf("InEnv(%q, %q) = %q, %v: want the key unchanged", env1, key1, s1, err1)
			}
		} else if (strings.ContainsAny(env1, ":\x00") || !utf8.ValidString(env1)) && err1 == nil {
			t.Fatalf("InEnv(%q, %q) = %q: env must be valid text without ':' or NUL", env1, key1, s1)
		}
		if err1 != nil && !errors.Is(err1, dedupe.ErrInvalid) {
			t.Fatalf("error does not wrap ErrInvalid: %v", err1)
		}
		if err1 == nil && utf8.RuneCountInString(s1) > dedupe.MaxKeyLen && s1 != key1 {
			t.Fatalf("scoped key of %d runes", utf8.RuneCountInString(s1))
		}
		// Keys built by this package never start with "env:", so an
		// unscoped key never equals a scoped one; among scoped keys the env
		// (which has no ':') ends at the first ':' after the prefix.
		if err1 != nil || err2 != nil || key1 == "" || key2 == "" ||
			strings.HasPrefix(key1, "env:") || strings.HasPrefix(key2, "env:") {
			return // no key means no deduplication at all
		}
		if s1 == s2 && (env1 != env2 || key1 != key2) {
			t.Fatalf("(%q, %q) and (%q, %q) both scope to %q", env1, key1, env2, key2, s1)
		}
	})
}

// ------------------------------------------------------------------ helpers

// holdsNUL reports whether a decoded JSON value has NUL in a string or key.
func holdsNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case []any:
		for _, e := range x {
			if holdsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.IndexByte(k, 0) >= 0 || holdsNUL(e) {
				return true
			}
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }

func mustParse(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return tm
}

func TestInEnv(t *testing.T) {
	key := "event:a:e:1"
	got, err := dedupe.InEnv("", key)
	require.NoError(t, err)
	require.Equal(t, key, got, "the unset env leaves keys byte-identical")
	got, err = dedupe.InEnv("rc", key)
	require.NoError(t, err)
	require.Equal(t, "env:rc:event:a:e:1", got)
	got, err = dedupe.InEnv("rc", "")
	require.NoError(t, err)
	require.Empty(t, got, "no key, nothing to scope")
	_, err = dedupe.InEnv("a:b", key)
	require.ErrorIs(t, err, dedupe.ErrInvalid)
	_, err = dedupe.InEnv("rc", strings.Repeat("k", dedupe.MaxKeyLen-5))
	require.ErrorIs(t, err, dedupe.ErrInvalid, "scoping never truncates")
}
