package dedupe_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/dedupe"
)

func jcs(t *testing.T, in string) string {
	t.Helper()
	b, err := dedupe.CanonicalJCS(json.RawMessage(in))
	require.NoError(t, err, in)
	return string(b)
}

// RFC 8785's own example (section 3.2.4), with its first number written
// as the double it is: the RFC reads 333333333.33333329 as that double,
// which CanonicalJCS deliberately does not (see the next test).
func TestCanonicalJCSWritesRFC8785sExample(t *testing.T) {
	in := `{
	  "numbers": [333333333.3333333, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
	  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
	  "literals": [null, true, false]
	}`
	require.Equal(t, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`, jcs(t, in))
}

// Numbers a double cannot hold exactly keep their exact value: two
// different ids must never become one key (one of their events would
// never run).
func TestCanonicalJCSKeepsNumbersBeyondADoublesPrecision(t *testing.T) {
	require.Equal(t, `[9007199254740993,9007199254740992]`, jcs(t, `[9007199254740993, 9007199254740992]`))
	require.Equal(t, `[333333333.33333329]`, jcs(t, `[333333333.33333329]`))
	require.Equal(t, `[0.10000000000000000001,0.1]`, jcs(t, `[0.10000000000000000001, 0.1]`))
	require.Equal(t, `1e+400`, jcs(t, `1e400`), "beyond a double's range: exact, in exponent form")
	require.Equal(t, `-1.5e-99999999999999999999`, jcs(t, `-15e-100000000000000000000`), "an exponent past int64")
	k1, err := dedupe.EventKeyAt(dedupe.KeyV2, "a", "e", "", json.RawMessage(`{"id":9007199254740993}`))
	require.NoError(t, err)
	k2, err := dedupe.EventKeyAt(dedupe.KeyV2, "a", "e", "", json.RawMessage(`{"id":9007199254740992}`))
	require.NoError(t, err)
	require.NotEqual(t, k1, k2)
}

// RFC 8785 appendix B: doubles (as IEEE 754 bits) and their canonical
// text. Each is written three ways (shortest exponent form, plain
// decimal, with a trailing zero), and every way gives the RFC's text.
func TestCanonicalJCSNumbersAsRFC8785AppendixB(t *testing.T) {
	for _, c := range []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	} {
		f := math.Float64frombits(c.bits)
		for _, text := range writings(f) {
			require.Equal(t, c.want, jcs(t, text), "%#016x written %s", c.bits, text)
		}
	}
}

// writings is f's shortest digits written three ways JSON allows.
func writings(f float64) []string {
	e := strconv.FormatFloat(f, 'e', -1, 64) // 1.5e+06
	plain := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(plain, ".") {
		plain += ".0"
	} else {
		plain += "0"
	}
	return []string{e, strings.ToUpper(strings.Replace(e, "e+", "e", 1)), plain}
}

// Every double, however written, reads back as itself from its canonical
// text, and all its writings fold to that text.
func TestCanonicalJCSFoldsEveryWritingOfADouble(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		var got []string
		for _, text := range writings(f) {
			got = append(got, jcs(t, text))
		}
		require.Equal(t, got[0], got[1], "%v", f)
		require.Equal(t, got[0], got[2], "%v", f)
		back, err := strconv.ParseFloat(got[0], 64)
		require.NoError(t, err)
		require.Equal(t, math.Abs(f), math.Abs(back), "%s is not %v", got[0], f) // -0 writes 0
		if f != 0 {
			require.Equal(t, f, back)
		}
	}
}

// Strings carry only the escapes JSON requires; keys sort by UTF-16 code
// units, where UTF-8 sorts a character above U+FFFF after U+E000..U+FFFF.
func TestCanonicalJCSStringsAndKeyOrder(t *testing.T) {
	require.Equal(t, `"\b\t\n\f\r\u0001\u001f\"\\/<>&`+"\u2028\u2029\u007f"+`"`,
		jcs(t, `"\b\t\n\f\r\u0001\u001F\"\\\/<>&\u2028\u2029\u007f"`))
	require.Equal(t, "{\"\U0001F600\":1,\"\ufb01\":2}", jcs(t, "{\"\ufb01\":2,\"\U0001F600\":1}"))
	v1, err := dedupe.Canonical(json.RawMessage("{\"\ufb01\":2,\"\U0001F600\":1}"))
	require.NoError(t, err)
	require.Equal(t, "{\"\ufb01\":2,\"\U0001F600\":1}", string(v1), "KeyV1 sorts by UTF-8 bytes")
}

// The refusals are Canonical's, in both versions.
func TestCanonicalJCSRefusesWhatCanonicalRefuses(t *testing.T) {
	for _, in := range []string{`{"a":1,"a":2}`, `"\u0000"`, `"\ud800"`, "\"\xff\"", `[1,]`, `1 2`} {
		_, err := dedupe.CanonicalJCS(json.RawMessage(in))
		require.ErrorIs(t, err, dedupe.ErrInvalid, in)
		_, err = dedupe.EventKeysOf("a", "e", "", json.RawMessage(in))
		require.ErrorIs(t, err, dedupe.ErrInvalid, in)
	}
	_, err := dedupe.EventKeyAt(3, "a", "e", "", json.RawMessage(`{}`))
	require.ErrorIs(t, err, dedupe.ErrInvalid)
}

// What a change of producer writes differently is one key in KeyV2 and
// several in KeyV1; what every producer writes alike is one key in both.
func TestEventKeysFoldAcrossProducersInV2Only(t *testing.T) {
	writings := []string{
		`{"amount":1,"note":"a` + "\u2028" + `b","big":1e21}`,
		`{"big":1000000000000000000000,"note":"a\u2028b","amount":1.0}`,
		`{"amount":1E0,"big":10e20,"note":"a` + "\u2028" + `b"}`,
	}
	var v1s, v2s []string
	for _, w := range writings {
		k, err := dedupe.EventKeysOf("billing", "refund", "", json.RawMessage(w))
		require.NoError(t, err)
		require.True(t, k.Sensitive())
		v1s, v2s = append(v1s, k.V1), append(v2s, k.V2)
		k2, err := dedupe.EventKeyAt(dedupe.KeyV2, "billing", "refund", "", json.RawMessage(w))
		require.NoError(t, err)
		require.Equal(t, k.V2, k2)
		k1, err := dedupe.EventKey("billing", "refund", "", json.RawMessage(w))
		require.NoError(t, err)
		require.Equal(t, k.V1, k1, "KeyV1 is EventKey")
	}
	require.Equal(t, v2s[0], v2s[1])
	require.Equal(t, v2s[0], v2s[2])
	require.NotEqual(t, v1s[0], v1s[1])
	require.NotEqual(t, v1s[1], v1s[2])

	plain, err := dedupe.EventKeysOf("billing", "refund", "", map[string]any{"order": 1234, "status": "paid", "tags": []string{"x"}})
	require.NoError(t, err)
	require.False(t, plain.Sensitive(), "integers, plain strings and ASCII keys hash alike in both versions")
	byID, err := dedupe.EventKeysOf("billing", "refund", "evt_1", json.RawMessage(`{"a":1.0}`))
	require.NoError(t, err)
	require.Equal(t, dedupe.EventKeys{V1: "event:billing:refund:evt_1", V2: "event:billing:refund:evt_1"}, byID)
}
