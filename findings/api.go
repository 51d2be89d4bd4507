package findings

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/leasehold/leasehold/claims"
)

// Limits of the findings table, in characters; inputs beyond them are
// rejected, never truncated.
const (
	MaxKeyLen      = 512 // finding_key
	MaxClassLen    = 128 // class
	MaxSeverityLen = 32  // severity
	MaxEnvLen      = 255 // env
	MaxActorLen    = 255 // actor_id
)

// Read limits of ActiveFor.
const (
	DefaultLimit = 100
	MaxLimit     = 10_000
)

// Holder is the run a finding is written on behalf of. *runner.Run
// satisfies it; the token must be the live work claim of the episode.
type Holder interface {
	EpisodeID() int64
	Token() claims.Token
}

// Filter selects active findings for ActiveFor. The zero value reads every
// active finding of the Findings' env, up to DefaultLimit.
type Filter struct {
	// Env overrides the env read by this call: nil reads the env the
	// Findings was created with, new("demo") reads env "demo", new("")
	// reads the unset env. Matched by strict equality.
	Env *string
	// Class, ActorID and Key narrow the result; "" means any.
	Class   string
	ActorID string
	Key     string
	// Limit bounds the result, oldest raise first. 0 means DefaultLimit;
	// at most MaxLimit.
	Limit int
}

// Findings raises, updates, clears and reads findings for one node.
type Findings struct {
	store Store
	env   string
}

// New returns a Findings over store whose reads default to env (the node's
// env; "" is the unset env). Writes never use env: a finding takes the env
// of the episode that raised it.
func New(store Store, env string) (*Findings, error) {
	if store == nil {
		return nil, fmt.Errorf("findings.New: %w: store is nil", ErrInvalid)
	}
	if err := checkOptional("env", env, MaxEnvLen); err != nil {
		return nil, fmt.Errorf("findings.New: %w", err)
	}
	return &Findings{store: store, env: env}, nil
}

// Env returns the env ActiveFor reads by default.
func (f *Findings) Env() string { return f.env }

// Raise raises r.Key in the env of h's episode: it inserts the finding, or,
// when the key is already active there, replaces its class, severity,
// summary and data and counts the raise (Finding.RaiseCount). It returns the
// finding as stored, or ErrLeaseLost when h no longer holds its episode's
// claim (nothing was written).
func (f *Findings) Raise(ctx context.Context, h Holder, r Raise) (Finding, error) {
	t, id, err := holder(h)
	if err == nil {
		err = r.validate()
	}
	if err != nil {
		return Finding{}, fmt.Errorf("raise finding: %w", err)
	}
	r.Data = nullJSON(r.Data)
	fd, err := f.store.RaiseFinding(ctx, t, id, r)
	if err != nil {
		return Finding{}, fmt.Errorf("raise finding %q: %w", r.Key, err)
	}
	return fd, nil
}

// Update replaces the severity, summary and data of the active finding key
// in the env of h's episode ("" and nil clear them) without counting a
// raise. It reports false when key is not active there (nothing is created),
// and ErrLeaseLost when h no longer holds its episode's claim.
func (f *Findings) Update(ctx context.Context, h Holder, key string, u Update) (bool, error) {
	t, id, err := holder(h)
	if err == nil {
		err = u.validate(key)
	}
	if err != nil {
		return false, fmt.Errorf("update finding: %w", err)
	}
	u.Data = nullJSON(u.Data)
	ok, err := f.store.UpdateFinding(ctx, t, id, key, u)
	if err != nil {
		return false, fmt.Errorf("update finding %q: %w", key, err)
	}
	return ok, nil
}

// Clear clears the active finding key in the env of h's episode; the row
// is kept as history and the key can be raised again. It reports false when
// key was not active there, and ErrLeaseLost when h no longer holds its
// episode's claim.
func (f *Findings) Clear(ctx context.Context, h Holder, key string) (bool, error) {
	t, id, err := holder(h)
	if err == nil {
		err = checkRequired("key", key, MaxKeyLen)
	}
	if err != nil {
		return false, fmt.Errorf("clear finding: %w", err)
	}
	ok, err := f.store.ClearFinding(ctx, t, id, key)
	if err != nil {
		return false, fmt.Errorf("clear finding %q: %w", key, err)
	}
	return ok, nil
}

// ActiveFor returns the active findings that q selects, oldest raise first,
// in the Findings' env unless q.Env overrides it.
func (f *Findings) ActiveFor(ctx context.Context, q Filter) ([]Finding, error) {
	sq, err := f.query(q)
	if err != nil {
		return nil, fmt.Errorf("active findings: %w", err)
	}
	out, err := f.store.ActiveFindings(ctx, sq)
	if err != nil {
		return nil, fmt.Errorf("active findings of env %q: %w", sq.Env, err)
	}
	return out, nil
}

// query applies q's defaults and validates it.
func (f *Findings) query(q Filter) (Query, error) {
	sq := Query{Env: f.env, Class: q.Class, ActorID: q.ActorID, Key: q.Key, Limit: q.Limit}
	if q.Env != nil {
		sq.Env = *q.Env
	}
	if sq.Limit == 0 {
		sq.Limit = DefaultLimit
	}
	if sq.Limit < 0 || sq.Limit > MaxLimit {
		return Query{}, fmt.Errorf("%w: limit %d is outside 1..%d", ErrInvalid, q.Limit, MaxLimit)
	}
	return sq, first(
		checkOptional("env", sq.Env, MaxEnvLen),
		checkOptional("class", sq.Class, MaxClassLen),
		checkOptional("actor id", sq.ActorID, MaxActorLen),
		checkOptional("key", sq.Key, MaxKeyLen),
	)
}

func holder(h Holder) (claims.Token, int64, error) {
	if h == nil {
		return claims.Token{}, 0, fmt.Errorf("%w: no holder: findings are written on behalf of a run", ErrInvalid)
	}
	t, id := h.Token(), h.EpisodeID()
	switch {
	case id <= 0:
		return t, id, fmt.Errorf("%w: episode id %d must be positive", ErrInvalid, id)
	case t.Fence <= 0:
		return t, id, fmt.Errorf("%w: episode %d: the holder has no work claim (fence %d)", ErrInvalid, id, t.Fence)
	case t.Key == "" || t.Owner == "":
		return t, id, fmt.Errorf("%w: episode %d: the holder's claim token has no key or owner", ErrInvalid, id)
	}
	return t, id, nil
}

func (r Raise) validate() error {
	return first(
		checkRequired("key", r.Key, MaxKeyLen),
		checkOptional("class", r.Class, MaxClassLen),
		checkOptional("severity", r.Severity, MaxSeverityLen),
		checkOptional("summary", r.Summary, 0),
		checkJSON(r.Data),
	)
}

func (u Update) validate(key string) error {
	return first(
		checkRequired("key", key, MaxKeyLen),
		checkOptional("severity", u.Severity, MaxSeverityLen),
		checkOptional("summary", u.Summary, 0),
		checkJSON(u.Data),
	)
}

// first returns the first failed check, so the message names one problem.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkRequired(what, s string, limit int) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	}
	return checkOptional(what, s, limit)
}

// checkOptional rejects s when it is not UTF-8, holds a NUL (neither dialect
// stores one in text) or is longer than limit characters (0: no limit).
func checkOptional(what, s string, limit int) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL character", ErrInvalid, what)
	}
	if n := utf8.RuneCountInString(s); limit > 0 && n > limit {
		return fmt.Errorf("%w: %s is %d characters, the limit is %d", ErrInvalid, what, n, limit)
	}
	return nil
}

// checkJSON rejects data that is not a JSON document, and the documents
// encoding/json accepts but Postgres jsonb does not (invalid UTF-8, the
// escape \u0000, an unpaired surrogate escape), so they fail here with
// ErrInvalid instead of in the database. Empty data is stored as NULL.
func checkJSON(data json.RawMessage) error {
	if len(data) == 0 {
		return nil
	}
	if !json.Valid(data) || !utf8.Valid(data) {
		return fmt.Errorf("%w: data is not valid JSON", ErrInvalid)
	}
	// In valid JSON a backslash only starts an escape inside a string.
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		if data[i+1] != 'u' {
			i++
			continue
		}
		r := hex4(data[i+2 : i+6])
		i += 5
		switch {
		case r == 0:
			return fmt.Errorf("%w: data contains \\u0000, which jsonb cannot store", ErrInvalid)
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("%w: data contains an unpaired surrogate \\u%04x", ErrInvalid, r)
		case r >= 0xD800 && r <= 0xDBFF:
			next := i + 1
			if next+6 > len(data) || data[next] != '\\' || data[next+1] != 'u' {
				return fmt.Errorf("%w: data contains an unpaired surrogate \\u%04x", ErrInvalid, r)
			}
			if lo := hex4(data[next+2 : next+6]); lo < 0xDC00 || lo > 0xDFFF {
				return fmt.Errorf("%w: data contains an unpaired surrogate \\u%04x", ErrInvalid, r)
			}
			i += 6
		}
	}
	return nil
}

// hex4 decodes the four hex digits of a \u escape that json.Valid accepted.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// nullJSON maps empty data to nil, stored as NULL.
func nullJSON(data json.RawMessage) json.RawMessage {
	if len(data) == 0 {
		return nil
	}
	return data
}
