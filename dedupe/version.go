package dedupe

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// KeyVersion names the canonical form an event key without an event id
// hashes. Every other key (a schedule key, an event key from a caller's
// event id) is the same in every version.
//
// Two nodes dedupe one trigger only when they use the same version, so the
// version is the cluster's, not a node's: the database records it, and a
// node uses the one it reads there (runner: see "Deploying a new version"
// in the README). A payload whose forms agree in both versions (the common
// case: integers written without a fraction or exponent, no U+2028 or
// U+2029, no control characters other than \n, \r and \t, keys that sort
// alike in UTF-8 and UTF-16) has the same key in both.
type KeyVersion int

const (
	// KeyV1 hashes Canonical: object keys sorted by their UTF-8 bytes,
	// strings as encoding/json writes them without HTML escaping, numbers
	// as written. 1, 1.0 and 1e0 are three keys.
	KeyV1 KeyVersion = 1
	// KeyV2 hashes CanonicalJCS, the JSON Canonicalization Scheme (RFC
	// 8785): object keys sorted by their UTF-16 code units, strings with
	// only the escapes JSON requires, numbers as ECMAScript writes them. 1,
	// 1.0, 1e0 and 10e-1 are one key, as are 1e21 and
	// 1000000000000000000000.
	KeyV2 KeyVersion = 2
)

// LatestKeyVersion is the newest version this build computes.
const LatestKeyVersion = KeyV2

// Valid reports whether v is a version this build computes.
func (v KeyVersion) Valid() bool { return v == KeyV1 || v == KeyV2 }

func (v KeyVersion) String() string { return "v" + strconv.Itoa(int(v)) }

// EventKeys is one event's key in each version.
type EventKeys struct {
	V1, V2 string
}

// Sensitive reports whether the versions disagree on the key, that is,
// whether the trigger's key depends on the cluster's version.
func (k EventKeys) Sensitive() bool { return k.V1 != k.V2 }

// At returns the key of version v (V1 for an unknown version: callers
// check Valid first).
func (k EventKeys) At(v KeyVersion) string {
	if v == KeyV2 {
		return k.V2
	}
	return k.V1
}

// EventKeysOf is EventKey in both versions, parsing the payload once. With
// an event id both keys are the same.
func EventKeysOf(actorID, expectationID, eventID string, payload any) (EventKeys, error) {
	if eventID != "" {
		k, err := build("event", actorID, expectationID, eventID)
		return EventKeys{k, k}, err
	}
	tree, err := parse(payload)
	if err != nil {
		return EventKeys{}, err
	}
	v1, err := encodeV1(tree)
	if err != nil {
		return EventKeys{}, err
	}
	k1, err := payloadKey(actorID, expectationID, v1)
	if err != nil {
		return EventKeys{}, err
	}
	v2 := appendJCS(nil, tree)
	if bytes.Equal(v1, v2) { // most payloads: one hash, one key
		return EventKeys{k1, k1}, nil
	}
	k2, err := payloadKey(actorID, expectationID, v2)
	return EventKeys{k1, k2}, err
}

// payloadKey is the event key of a payload's canonical text.
func payloadKey(actorID, expectationID string, canonical []byte) (string, error) {
	sum := sha256.Sum256(canonical)
	return build("event", actorID, expectationID, hex.EncodeToString(sum[:]))
}

// EventKeyAt is EventKey in version v.
func EventKeyAt(v KeyVersion, actorID, expectationID, eventID string, payload any) (string, error) {
	if !v.Valid() {
		return "", fmt.Errorf("%w: unknown key version %d", ErrInvalid, int(v))
	}
	keys, err := EventKeysOf(actorID, expectationID, eventID, payload)
	return keys.At(v), err
}

// CanonicalJCS encodes v as RFC 8785 canonical JSON, with Canonical's
// refusals (invalid UTF-8, NUL, a lone surrogate, a key named twice).
//
// One deliberate difference: RFC 8785 reads every number as an IEEE 754
// double, so 9007199254740993 and 9007199254740992 (or 0.1 and
// 0.10000000000000000001) would be one number and two different events one
// key, and one of them would never run. CanonicalJCS keeps a number's exact
// decimal value and writes it as ECMAScript writes numbers; for every
// number that is the shortest form of a double (what any double-based
// producer writes) that is RFC 8785's form, byte for byte.
func CanonicalJCS(v any) ([]byte, error) {
	tree, err := parse(v)
	if err != nil {
		return nil, err
	}
	return appendJCS(nil, tree), nil
}

// appendJCS appends tree (as decodeValue builds it) in RFC 8785's form.
func appendJCS(b []byte, tree any) []byte {
	switch x := tree.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case string:
		return appendJCSString(b, x)
	case json.Number:
		return appendJCSNumber(b, string(x))
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJCS(b, e)
		}
		return append(b, ']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJCSString(b, k)
			b = append(b, ':')
			b = appendJCS(b, x[k])
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("dedupe: unexpected %T in a decoded payload", tree))
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// sorts object keys (UTF-8 byte order differs for a character above
// U+FFFF against one from U+E000 to U+FFFF).
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// appendJCSString writes s quoted with only the escapes JSON requires:
// '"', '\\', and the control characters below U+0020, of which \b, \t, \n,
// \f and \r take their short forms and the rest \u00xx in lower case.
func appendJCSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c) // UTF-8 passes through, U+2028 and U+2029 too
		}
	}
	return append(b, '"')
}

// appendJCSNumber writes the JSON number text num (valid: the decoder read
// it) by its exact value in ECMAScript's Number::toString form: its
// significant digits d1..dk and the exponent n with value 0.d1..dk × 10^n
// decide between plain digits, a decimal point, a "0.000" prefix, or
// d1.d2..dk e±(n-1). Zero, and negative zero, is "0".
func appendJCSNumber(b []byte, num string) []byte {
	neg := strings.HasPrefix(num, "-")
	num = strings.TrimPrefix(num, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(num), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	// n counts the digits before the decimal point, less the leading
	// zeros trimmed (negative for 0.00ddd), plus the written exponent.
	lead := len(intPart+frac) - len(digits)
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		return append(b, '0')
	}
	n := new(big.Int).SetInt64(int64(len(intPart) - lead))
	if exp != "" {
		e, _ := new(big.Int).SetString(strings.TrimPrefix(exp, "+"), 10)
		n.Add(n, e)
	}
	if neg {
		b = append(b, '-')
	}
	k := int64(len(digits))
	if n.IsInt64() {
		switch nn := n.Int64(); {
		case k <= nn && nn <= 21:
			b = append(b, digits...)
			return append(b, strings.Repeat("0", int(nn-k))...)
		case 0 < nn && nn <= 21:
			b = append(b, digits[:nn]...)
			b = append(b, '.')
			return append(b, digits[nn:]...)
		case -6 < nn && nn <= 0:
			b = append(b, "0."...)
			b = append(b, strings.Repeat("0", int(-nn))...)
			return append(b, digits...)
		}
	}
	b = append(b, digits[0])
	if k > 1 {
		b = append(b, '.')
		b = append(b, digits[1:]...)
	}
	e := n.Sub(n, big.NewInt(1))
	b = append(b, 'e')
	if e.Sign() >= 0 {
		b = append(b, '+')
	}
	return e.Append(b, 10)
}
