// Package dedupe builds the deterministic keys that make N nodes receiving
// the same trigger create one episode. Every node computes the same key from
// the same trigger with no coordination: a schedule key from the planned tick
// in UTC, an event key from a caller-given event id or from the SHA-256 of the
// payload's canonical JSON (so map order, struct order and whitespace never
// change it). A key longer than the column is an error, never truncated.
//
// The canonical form has versions (KeyVersion): 1 keeps numbers as
// written, 2 is RFC 8785's. Which one a cluster hashes under is not a
// node's choice but the database's (migration 00014's
// leasehold_key_version, read by the runner): the statement that decides
// is the insert trigger that refuses a key of a version the database no
// longer uses, so that after a switch no node, old or new, writes a key of
// the old version. No clock is involved.
package dedupe

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxKeyLen is the dedupe_key column limit, in characters.
const MaxKeyLen = 512

// ErrInvalid: a key could not be built from the inputs.
var ErrInvalid = errors.New("dedupe: invalid input")

// ScheduleKey is schedule:{actor}:{expectation}:{window}, window being the
// planned tick in UTC with seconds (and anything finer) zeroed for cron
// schedules, as RFC 3339. Interval schedules pass the tick aligned with
// IntervalWindow.
func ScheduleKey(actorID, expectationID string, tick time.Time) (string, error) {
	return build("schedule", actorID, expectationID, tick.UTC().Format(time.RFC3339))
}

// CronWindow zeroes the seconds of a cron tick: a cron schedule has minute
// resolution, so nodes whose timers fire a few seconds apart agree.
func CronWindow(tick time.Time) time.Time { return tick.UTC().Truncate(time.Minute) }

// IntervalWindow aligns t to the start of its interval, counted from the Unix
// epoch in UTC, so every node maps any instant inside one interval to the
// same window. every must be positive.
func IntervalWindow(t time.Time, every time.Duration) time.Time {
	ns := t.UnixNano()
	off := ns % int64(every)
	if off < 0 {
		off += int64(every)
	}
	return time.Unix(0, ns-off).UTC()
}

// EventKey is event:{actor}:{expectation}:{hash}. hash is the caller's event
// id when given (the producer knows best what "the same event" means), else
// the hex SHA-256 of the payload's canonical JSON in KeyV1's form
// (EventKeyAt and EventKeysOf give the others).
func EventKey(actorID, expectationID, eventID string, payload any) (string, error) {
	if eventID == "" {
		h, err := PayloadHash(payload)
		if err != nil {
			return "", err
		}
		eventID = h
	}
	return build("event", actorID, expectationID, eventID)
}

// PayloadHash is the hex SHA-256 of payload's canonical JSON (KeyV1).
func PayloadHash(payload any) (string, error) {
	b, err := Canonical(payload)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Canonical encodes v as canonical JSON: object keys sorted, no insignificant
// whitespace, no HTML escaping, numbers as written. A json.RawMessage is
// taken as JSON and re-encoded canonically; a plain []byte is encoded the way
// encoding/json always encodes it, as a base64 string.
//
// Text must arrive unchanged, or two different payloads would hash alike; so
// ErrInvalid refuses, wherever it is in the payload (a Go string, a map key,
// a struct field, a TextMarshaler's text, a string of raw JSON):
//   - invalid UTF-8, which encoding/json would replace with U+FFFD;
//   - a \u escape of a lone UTF-16 surrogate, which decodes to U+FFFD too;
//   - NUL (U+0000, or \u0000 in raw JSON): Postgres jsonb cannot store it
//     (SQLSTATE 22P05), and it is refused on every dialect so that all of
//     them accept the same payloads.
//
// And an object that names one key twice ({"a":1,"a":2}): decoders differ
// on which value wins (encoding/json keeps the last, silently), so two
// producers could mean different payloads by one text, or one payload by
// two texts.
func Canonical(v any) ([]byte, error) {
	tree, err := parse(v)
	if err != nil {
		return nil, err
	}
	return encodeV1(tree)
}

// parse reads v (a json.RawMessage as JSON, anything else through
// encoding/json) into the tree both versions encode, with Canonical's
// refusals.
func parse(v any) (any, error) {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: payload is not JSON-encodable: %v", ErrInvalid, err)
		}
		// encoding/json writes each invalid byte of a Go string as the
		// escape \ufffd; a MarshalJSON may have written that escape too,
		// so only then is the value walked to tell which.
		if bytes.Contains(b, []byte(`\ufffd`)) {
			if at, bad := invalidText(v); bad {
				return nil, fmt.Errorf("%w: payload text at %s is not valid UTF-8", ErrInvalid, at)
			}
		}
		raw = b
	}
	if !utf8.Valid(raw) {
		// Decoding would replace the bad bytes with U+FFFD, so payloads that
		// differ only there would hash alike.
		return nil, fmt.Errorf("%w: payload is not valid UTF-8", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tree, err := decodeValue(dec, "$")
	if errors.Is(err, ErrInvalid) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: payload is not valid JSON: %v", ErrInvalid, err)
	}
	// More() reports false before a stray ']' or '}', so ask for the next
	// token: only the end of input is acceptable.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: payload has data after the JSON value", ErrInvalid)
	}
	if err := checkEscapes(raw); err != nil {
		return nil, err
	}
	return tree, nil
}

// encodeV1 writes tree in KeyV1's form.
func encodeV1(tree any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys sorted; decoding into any turned every
	// object into a map, whatever its order in the input.
	if err := enc.Encode(tree); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// build joins the parts with ':'. Every part but the last must be free of
// ':', so that two different part lists can never make the same key.
func build(kind string, parts ...string) (string, error) {
	for i, p := range parts {
		if p == "" {
			return "", fmt.Errorf("%w: %s key part %d is empty", ErrInvalid, kind, i+1)
		}
		if i < len(parts)-1 && strings.Contains(p, ":") {
			return "", fmt.Errorf("%w: %s key part %d (%q) contains ':'", ErrInvalid, kind, i+1, p)
		}
		if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
			return "", fmt.Errorf("%w: %s key part %d is not valid text (invalid UTF-8 or NUL)", ErrInvalid, kind, i+1)
		}
	}
	key := kind + ":" + strings.Join(parts, ":")
	if n := utf8.RuneCountInString(key); n > MaxKeyLen {
		return "", fmt.Errorf("%w: %s key is %d characters, the limit is %d", ErrInvalid, kind, n, MaxKeyLen)
	}
	return key, nil
}

// InEnv scopes key to env, so that nodes of different envs sharing one
// database never deduplicate (nor claim) each other's work: env:{env}:{key}.
// The unset env "" returns key unchanged, byte-identical to single-env
// operation. An empty key (no dedupe) stays empty. env must be valid UTF-8
// without ':' or NUL.
func InEnv(env, key string) (string, error) {
	if env == "" || key == "" {
		return key, nil
	}
	if strings.ContainsAny(env, ":\x00") || !utf8.ValidString(env) {
		return "", fmt.Errorf("%w: env %q must be valid text without ':' or NUL", ErrInvalid, env)
	}
	scoped := "env:" + env + ":" + key
	if n := utf8.RuneCountInString(scoped); n > MaxKeyLen {
		return "", fmt.Errorf("%w: key %q in env %q is %d characters, over %d", ErrInvalid, key, env, n, MaxKeyLen)
	}
	return scoped, nil
}
