package sqlserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// Acquire runs AcquireClaim; no row back means a live lease holds the key,
// and so does a duplicate-key error (a concurrent first acquire won).
func (s *Store) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	sent := time.Now()
	c, err := scanClaim(s.queryRow(ctx, "AcquireClaim",
		sql.Named("dedupe_key", p.Key),
		sql.Named("owner_node", p.Owner),
		sql.Named("lease_ms", p.Lease.Milliseconds()),
		sql.Named("work_type", p.WorkType),
	))
	if errors.Is(err, sql.ErrNoRows) || isDuplicate(err) {
		return claims.Claim{}, claims.ErrBusy
	}
	if err != nil {
		return claims.Claim{}, err
	}
	c.SetLocalStart(sent)
	return c, nil
}

// Renew runs RenewClaim.
func (s *Store) Renew(ctx context.Context, t claims.Token, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := s.queryRow(ctx, "RenewClaim",
		sql.Named("lease_ms", lease.Milliseconds()),
		sql.Named("dedupe_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
	).Scan(&until)
	if err != nil {
		return time.Time{}, fenced(err)
	}
	return until, nil
}

// RenewMany runs RenewClaims: one batch for every lease of owner. The
// (key, fence) pairs travel as one JSON array in @held, which the batch
// reads with OPENJSON.
func (s *Store) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	if len(held) == 0 {
		return nil, nil
	}
	doc, err := heldJSON(held)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, "RenewClaims",
		sql.Named("held", doc),
		sql.Named("owner_node", owner),
		sql.Named("lease_ms", lease.Milliseconds()),
	)
	if err != nil {
		return nil, err
	}
	out := make([]claims.Renewed, 0, len(rows.rows))
	for rows.Next() {
		var r claims.Renewed
		if err := rows.Scan(&r.Key, &r.Fence, &r.LeaseUntil); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// heldPair is one element of RenewClaims' @held array.
type heldPair struct {
	DedupeKey string `json:"dedupe_key"`
	Fence     int64  `json:"fence"`
}

// heldJSON encodes held as RenewClaims' @held:
// [{"dedupe_key":"k","fence":1},...]. A pair listed twice is sent once, so
// the batch's join cannot match a claim row twice.
func heldJSON(held []claims.Held) (string, error) {
	pairs := make([]heldPair, 0, len(held))
	seen := make(map[claims.Held]bool, len(held))
	for _, h := range held {
		if seen[h] {
			continue
		}
		seen[h] = true
		pairs = append(pairs, heldPair{DedupeKey: h.Key, Fence: h.Fence})
	}
	b, err := json.Marshal(pairs)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Complete runs CompleteClaim.
func (s *Store) Complete(ctx context.Context, t claims.Token) error {
	var fence int64
	return fenced(s.queryRow(ctx, "CompleteClaim",
		sql.Named("dedupe_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
	).Scan(&fence))
}

// Fail runs FailClaim.
func (s *Store) Fail(ctx context.Context, t claims.Token, detail json.RawMessage) error {
	var fence int64
	return fenced(s.queryRow(ctx, "FailClaim",
		sql.Named("error_detail", jsonArg(detail)),
		sql.Named("dedupe_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
	).Scan(&fence))
}

// Release runs ReleaseClaim.
func (s *Store) Release(ctx context.Context, t claims.Token) error {
	var fence int64
	return fenced(s.queryRow(ctx, "ReleaseClaim",
		sql.Named("dedupe_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
	).Scan(&fence))
}

// ReleaseMany runs ReleaseClaims: every listed grant of owner released in
// one batch, the pairs sent as RenewMany sends them (one JSON array in
// @held, a pair listed twice sent once). It returns the pairs released.
func (s *Store) ReleaseMany(ctx context.Context, owner string, held []claims.Held) ([]claims.Held, error) {
	if len(held) == 0 {
		return nil, nil
	}
	doc, err := heldJSON(held)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, "ReleaseClaims",
		sql.Named("held", doc),
		sql.Named("owner_node", owner),
	)
	if err != nil {
		return nil, err
	}
	out := make([]claims.Held, 0, len(rows.rows))
	for rows.Next() {
		var h claims.Held
		if err := rows.Scan(&h.Key, &h.Fence); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// ListExpired runs ListExpiredClaims.
func (s *Store) ListExpired(ctx context.Context, limit int) ([]claims.Claim, error) {
	rows, err := s.query(ctx, "ListExpiredClaims",
		sql.Named("max_rows", maxRows(limit)),
	)
	if err != nil {
		return nil, err
	}
	return scanClaims(rows)
}

// scanClaim reads a claim row; AcquireClaim and ListExpiredClaims return
// the same columns.
func scanClaim(sc scanner) (claims.Claim, error) {
	var (
		c            claims.Claim
		state, grant string
	)
	err := sc.Scan(&c.Key, &state, &c.Owner, &c.LeaseUntil, &c.ClaimedAt, &c.Attempt, &c.Fence, &grant, &c.WorkType)
	if err != nil {
		return claims.Claim{}, err
	}
	c.State, c.Grant = claims.State(state), claims.GrantKind(grant)
	return c, nil
}

// scanClaims reads every claim row of rows (ListExpiredClaims, ListClaims).
func scanClaims(rows *resultSet) ([]claims.Claim, error) {
	out := make([]claims.Claim, 0, len(rows.rows))
	for rows.Next() {
		c, err := scanClaim(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// fenced maps "no row matched the fenced WHERE" to ErrNotOwner.
func fenced(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return claims.ErrNotOwner
	}
	return err
}

// maxRows clamps a Go limit into @max_rows (int); a negative limit lists
// nothing.
func maxRows(limit int) int32 {
	return int32(min(max(limit, 0), math.MaxInt32))
}

// jsonArg sends a JSON document as nvarchar(max); nil (or empty, which is
// not JSON) is NULL.
func jsonArg(m json.RawMessage) sql.NullString {
	return sql.NullString{String: string(m), Valid: len(m) > 0}
}

// rawJSON turns an nvarchar(max) JSON column into a json.RawMessage; NULL is
// nil.
func rawJSON(ns sql.NullString) json.RawMessage {
	if !ns.Valid {
		return nil
	}
	return json.RawMessage(ns.String)
}

// nullString sends "" as NULL.
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// ListClaims runs ListClaims, an operator read.
func (s *Store) ListClaims(ctx context.Context, q claims.ListQuery) ([]claims.Claim, error) {
	rows, err := s.query(ctx, "ListClaims",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("owner_node", q.Owner),
		sql.Named("expired_only", q.ExpiredOnly),
	)
	if err != nil {
		return nil, err
	}
	return scanClaims(rows)
}
