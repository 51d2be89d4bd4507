// Package memory is an in-memory claims.Store with the same semantics as the
// Postgres adapter: it is not an always-grant fake. A live lease is busy even
// for its own owner, an expired one is stolen with fence+1 and attempt+1, a
// finished one is re-claimed, and every renew, complete, fail and release is
// fenced on (key, owner, fence, claimed) exactly as the statements in
// sql/queries/postgres/claims.sql are. It is meant for unit tests of code that
// takes a claims.Store, where running Postgres would be too slow or too heavy.
//
// # Clock
//
// The Store plays the database, so it has its own clock, standing in for
// now(): it starts at the wall time of New and from then on moves only when a
// test calls Advance, or is sidestepped by Expire, which backdates one row the
// way the Postgres tests do. The wall clock never decides anything after
// construction, so tests never sleep and a slow test machine cannot make a
// lease expire behind a test's back. Like now() inside one statement, the
// clock does not move during a call.
//
// # Equivalence
//
// The conformance package (github.com/leasehold/leasehold/conformance) runs
// the same scenarios against this Store and the Postgres adapter; that suite,
// not this comment, is what shows the two agree.
package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/claims"
)

// expiredBy is how far behind the clock Expire puts a lease deadline. Any
// positive amount makes the lease stealable; a whole second keeps it clearly
// apart from deadlines that are merely due now.
const expiredBy = time.Second

// Column widths of leasehold_work_claims that an insert would hit; the
// fenced updates only compare, so they have no limit.
const (
	maxKey      = 512
	maxOwner    = 255
	maxWorkType = 128
)

// Row is one leasehold_work_claims row as the Store holds it.
type Row struct {
	Key             string
	State           claims.State
	Owner           string
	LeaseUntil      time.Time
	ClaimedAt       time.Time
	LastHeartbeatAt time.Time
	FinishedAt      *time.Time // nil while claimed, and after release
	Attempt         int32
	Fence           int64
	Grant           claims.GrantKind
	WorkType        string
	ErrorDetail     json.RawMessage // nil unless the last grant failed with a detail
}

// clone deep-copies r so that callers of Row can neither see later writes nor
// make their own.
func (r *Row) clone() Row {
	c := *r
	if r.FinishedAt != nil {
		t := *r.FinishedAt
		c.FinishedAt = &t
	}
	if r.ErrorDetail != nil {
		c.ErrorDetail = slices.Clone(r.ErrorDetail)
	}
	return c
}

func (r *Row) claim() claims.Claim {
	return claims.Claim{
		Token:      claims.Token{Key: r.Key, Owner: r.Owner, Fence: r.Fence},
		State:      r.State,
		Attempt:    r.Attempt,
		LeaseUntil: r.LeaseUntil,
		ClaimedAt:  r.ClaimedAt,
		Grant:      r.Grant,
		WorkType:   r.WorkType,
	}
}

// Store is an in-memory claims.Store. The zero value is not usable; call New.
type Store struct {
	// One mutex around everything makes each method a single atomic step,
	// which is what the one-statement-per-transition design relies on.
	mu   sync.Mutex
	now  time.Time
	rows map[string]*Row
}

var _ claims.Store = (*Store)(nil)

// New returns an empty Store whose clock starts at the current wall time.
func New() *Store {
	// Postgres keeps microseconds. Truncate also drops the monotonic reading,
	// so the clock is plain data that only Advance moves.
	start := time.Now().UTC().Truncate(time.Microsecond)
	return &Store{now: start, rows: make(map[string]*Row)}
}

// Now returns the Store's clock, the time its statements would call now().
func (s *Store) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Advance moves the Store's clock forward by d. It panics on a negative d:
// a database clock that runs backwards is not a scenario the statements
// promise anything about, so a test asking for one has a bug.
func (s *Store) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("memory: Advance(%v): the clock only moves forward", d))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

// Expire backdates key's lease so that it counts as expired at the current
// clock, without moving the clock for any other key. claimed_at moves back by
// the same amount, so the row still looks like a lease that ran its full
// length. A lease already past that point, or an unknown key, is left alone.
func (s *Store) Expire(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[key]
	if !ok {
		return
	}
	target := s.now.Add(-expiredBy)
	if shift := r.LeaseUntil.Sub(target); shift > 0 {
		r.LeaseUntil = target
		r.ClaimedAt = r.ClaimedAt.Add(-shift)
	}
}

// Row returns a copy of key's row, and false when the key was never claimed.
func (s *Store) Row(key string) (Row, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[key]
	if !ok {
		return Row{}, false
	}
	return r.clone(), true
}

// Len returns the number of rows; rows are never deleted, as in Postgres.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows)
}

// Acquire mirrors AcquireClaim: insert a fresh key, or take over a row that is
// free or whose claimed lease is due (lease_until <= now), else ErrBusy.
func (s *Store) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	if err := ctx.Err(); err != nil {
		return claims.Claim{}, fmt.Errorf("memory: acquire: %w", err)
	}
	// Postgres rejects these on the insert half of the upsert, before it
	// looks for a conflict, so they fail whatever the row's state.
	if p.Key == "" {
		return claims.Claim{}, fmt.Errorf("memory: acquire: %w: key is empty", claims.ErrInvalid)
	}
	if err := checkText("key", p.Key, maxKey); err != nil {
		return claims.Claim{}, fmt.Errorf("memory: acquire: %w", err)
	}
	if err := checkText("owner", p.Owner, maxOwner); err != nil {
		return claims.Claim{}, fmt.Errorf("memory: acquire: %w", err)
	}
	if err := checkText("work type", p.WorkType, maxWorkType); err != nil {
		return claims.Claim{}, fmt.Errorf("memory: acquire: %w", err)
	}

	// The local lease clock starts before the "statement": the lock wait
	// counts against the lease, as a slow answer would on a real database.
	sent := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now
	r, ok := s.rows[p.Key]
	switch {
	case !ok:
		r = &Row{Key: p.Key, Attempt: 1, Fence: 1, Grant: claims.GrantFresh}
		s.rows[p.Key] = r
	case r.State == claims.StateClaimed && r.LeaseUntil.After(now):
		return claims.Claim{}, claims.ErrBusy
	default:
		// Both CASEs read the old state, so decide them before it is
		// overwritten below.
		if r.State == claims.StateDone {
			r.Attempt = 1
		} else {
			r.Attempt++
		}
		if r.State == claims.StateClaimed {
			r.Grant = claims.GrantSteal
		} else {
			r.Grant = claims.GrantReclaim
		}
		r.Fence++
	}
	r.State = claims.StateClaimed
	r.Owner = p.Owner
	r.LeaseUntil = now.Add(leaseOf(p.Lease))
	r.ClaimedAt = now
	r.LastHeartbeatAt = now
	r.FinishedAt = nil
	r.ErrorDetail = nil
	r.WorkType = p.WorkType
	c := r.claim()
	c.SetLocalStart(sent)
	return c, nil
}

// Renew mirrors RenewClaim. It deliberately does not check expiry: until
// someone re-acquires, the fence is unchanged and nobody else was admitted.
func (s *Store) Renew(ctx context.Context, t claims.Token, lease time.Duration) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("memory: renew: %w", err)
	}
	if err := checkToken(t); err != nil {
		return time.Time{}, fmt.Errorf("memory: renew: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.held(t.Key, t.Owner, t.Fence)
	if r == nil {
		return time.Time{}, claims.ErrNotOwner
	}
	r.LeaseUntil = s.now.Add(leaseOf(lease))
	r.LastHeartbeatAt = s.now
	return r.LeaseUntil, nil
}

// RenewMany mirrors RenewClaims: every (key, fence) still claimed by owner is
// renewed and returned, the rest are silently absent.
func (s *Store) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: renew many: %w", err)
	}
	if len(held) == 0 {
		return nil, nil
	}
	if err := checkText("owner", owner, 0); err != nil {
		return nil, fmt.Errorf("memory: renew many: %w", err)
	}
	for _, h := range held {
		if err := checkText("key", h.Key, 0); err != nil {
			return nil, fmt.Errorf("memory: renew many: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	until := s.now.Add(leaseOf(lease))
	// UPDATE ... FROM changes and returns a row once however many input pairs
	// join to it, so a repeated pair must not come back twice.
	out := make([]claims.Renewed, 0, len(held))
	seen := make(map[string]bool, len(held))
	for _, h := range held {
		r := s.held(h.Key, owner, h.Fence)
		if r == nil || seen[h.Key] {
			continue
		}
		seen[h.Key] = true
		r.LeaseUntil = until
		r.LastHeartbeatAt = s.now
		out = append(out, claims.Renewed{Key: r.Key, Fence: r.Fence, LeaseUntil: until})
	}
	return out, nil
}

// Complete mirrors CompleteClaim.
func (s *Store) Complete(ctx context.Context, t claims.Token) error {
	return s.finish(ctx, "complete", t, func(r *Row, now time.Time) {
		r.State = claims.StateDone
		r.FinishedAt = &now
		r.LeaseUntil = now
	})
}

// Fail mirrors FailClaim. A nil detail is stored as SQL NULL; anything else
// must be valid JSON, because the jsonb column would reject it.
func (s *Store) Fail(ctx context.Context, t claims.Token, detail json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: fail: %w", err)
	}
	if detail != nil && !json.Valid(detail) {
		return fmt.Errorf("memory: fail: %w: error detail is not valid JSON", claims.ErrInvalid)
	}
	// Copied so that a caller reusing its buffer cannot rewrite the row.
	detail = slices.Clone(detail)
	return s.finish(ctx, "fail", t, func(r *Row, now time.Time) {
		r.State = claims.StateFailed
		r.FinishedAt = &now
		r.LeaseUntil = now
		r.ErrorDetail = detail
	})
}

// Release mirrors ReleaseClaim. finished_at stays as it was, because the work
// did not finish.
func (s *Store) Release(ctx context.Context, t claims.Token) error {
	return s.finish(ctx, "release", t, func(r *Row, now time.Time) {
		r.State = claims.StateReleased
		r.LeaseUntil = now
	})
}

// ReleaseMany mirrors ReleaseClaims: Release of every pair still held, in
// one critical section.
func (s *Store) ReleaseMany(ctx context.Context, owner string, held []claims.Held) ([]claims.Held, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: release many: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []claims.Held
	for _, h := range held {
		if r := s.held(h.Key, owner, h.Fence); r != nil {
			r.State, r.LeaseUntil = claims.StateReleased, s.now
			out = append(out, h)
		}
	}
	return out, nil
}

// finish runs one of the fenced end-of-lease updates.
func (s *Store) finish(ctx context.Context, op string, t claims.Token, set func(r *Row, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %s: %w", op, err)
	}
	if err := checkToken(t); err != nil {
		return fmt.Errorf("memory: %s: %w", op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.held(t.Key, t.Owner, t.Fence)
	if r == nil {
		return claims.ErrNotOwner
	}
	set(r, s.now)
	return nil
}

// ListExpired mirrors ListExpiredClaims. Unlike Acquire it uses a strict
// lease_until < now, so a lease due exactly now is stealable but not listed.
func (s *Store) ListExpired(ctx context.Context, limit int) ([]claims.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list expired: %w", err)
	}
	if limit < 0 {
		return nil, fmt.Errorf("memory: list expired: %w: limit %d is negative", claims.ErrInvalid, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var expired []*Row
	for r := range maps.Values(s.rows) {
		if r.State == claims.StateClaimed && r.LeaseUntil.Before(s.now) {
			expired = append(expired, r)
		}
	}
	// Postgres leaves ties in any order; breaking them by key keeps tests
	// from depending on map iteration.
	slices.SortFunc(expired, func(a, b *Row) int {
		return cmp.Or(a.LeaseUntil.Compare(b.LeaseUntil), strings.Compare(a.Key, b.Key))
	})
	expired = expired[:min(limit, len(expired))]
	out := make([]claims.Claim, len(expired))
	for i, r := range expired {
		out[i] = r.claim()
	}
	return out, nil
}

// ListClaims mirrors ListClaims, the operator read: the rows of q.Owner
// (every owner when empty), only the claimed leases whose deadline has
// passed (lease_until <= now) when q.ExpiredOnly, soonest deadline first.
func (s *Store) ListClaims(ctx context.Context, q claims.ListQuery) ([]claims.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list claims: %w", err)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("memory: list claims: %w: limit %d is negative", claims.ErrInvalid, q.Limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var listed []*Row
	for r := range maps.Values(s.rows) {
		if (q.Owner == "" || r.Owner == q.Owner) &&
			(!q.ExpiredOnly || (r.State == claims.StateClaimed && !r.LeaseUntil.After(s.now))) {
			listed = append(listed, r)
		}
	}
	slices.SortFunc(listed, func(a, b *Row) int {
		return cmp.Or(a.LeaseUntil.Compare(b.LeaseUntil), strings.Compare(a.Key, b.Key))
	})
	listed = listed[:min(q.Limit, len(listed))]
	out := make([]claims.Claim, len(listed))
	for i, r := range listed {
		out[i] = r.claim()
	}
	return out, nil
}

// held returns the row the grant (key, owner, fence) still holds, or nil: the
// WHERE clause every fenced statement shares. The caller holds s.mu.
func (s *Store) held(key, owner string, fence int64) *Row {
	r, ok := s.rows[key]
	if !ok || r.Owner != owner || r.Fence != fence || r.State != claims.StateClaimed {
		return nil
	}
	return r
}

// leaseOf truncates lease to whole milliseconds, as the adapter does when it
// sends lease_ms.
func leaseOf(lease time.Duration) time.Duration {
	return time.Duration(lease.Milliseconds()) * time.Millisecond
}

// checkToken rejects what Postgres would refuse to receive as a text
// parameter; a token that is merely wrong is ErrNotOwner, not an error.
func checkToken(t claims.Token) error {
	if err := checkText("key", t.Key, 0); err != nil {
		return err
	}
	return checkText("owner", t.Owner, 0)
}

// checkText reports the errors Postgres raises for s: text that is not UTF-8
// or contains NUL cannot be sent at all, and text longer than a varchar(width)
// column (width > 0) cannot be stored.
func checkText(what, s string, width int) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", claims.ErrInvalid, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", claims.ErrInvalid, what)
	}
	if n := utf8.RuneCountInString(s); width > 0 && n > width {
		return fmt.Errorf("%w: %s is %d characters, the limit is %d", claims.ErrInvalid, what, n, width)
	}
	return nil
}
