// Package postgres is leasehold's Postgres adapter: it implements the stores
// the core packages declare (claims.Store, ...) on pgx/v5 with the statements
// that sqlc compiled from sql/queries/postgres into package db; read the .sql
// files to audit what it does. The only SQL beside them is not coordination
// and sits next to the code that sends it: migrate.sql (the migrator's
// privilege check) and schema.sql (the schema version CheckSchema reads).
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/episodes"
)

// Store runs leasehold's statements on a pgx connection, pool or transaction.
type Store struct {
	conn db.DBTX
	q    *db.Queries
}

// New returns a Store over conn, typically a *pgxpool.Pool. Each statement
// runs in autocommit unless conn is a pgx.Tx.
func New(conn db.DBTX) *Store {
	return &Store{conn: conn, q: db.New()}
}

var _ claims.Store = (*Store)(nil)

// Acquire runs AcquireClaim; no row back means a live lease holds the key.
func (s *Store) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	sent := time.Now()
	row, err := s.q.AcquireClaim(ctx, s.conn, db.AcquireClaimParams{
		BoundMs:   s.lockBound(ctx),
		DedupeKey: p.Key,
		OwnerNode: p.Owner,
		LeaseMs:   p.Lease.Milliseconds(),
		WorkType:  p.WorkType,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return claims.Claim{}, claims.ErrBusy
	}
	if err != nil {
		return claims.Claim{}, dbError("AcquireClaim", err)
	}
	c := toClaim(db.ListExpiredClaimsRow(row))
	c.SetLocalStart(sent)
	return c, nil
}

// Renew runs RenewClaim.
func (s *Store) Renew(ctx context.Context, t claims.Token, lease time.Duration) (time.Time, error) {
	until, err := s.q.RenewClaim(ctx, s.conn, db.RenewClaimParams{
		LeaseMs:   lease.Milliseconds(),
		DedupeKey: t.Key,
		OwnerNode: t.Owner,
		Fence:     t.Fence,
	})
	if err != nil {
		return time.Time{}, fenced("RenewClaim", err)
	}
	return until, nil
}

// RenewMany runs RenewClaims: one statement for every lease of owner.
func (s *Store) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	if len(held) == 0 {
		return nil, nil
	}
	keys := make([]string, len(held))
	fences := make([]int64, len(held))
	for i, h := range held {
		keys[i], fences[i] = h.Key, h.Fence
	}
	rows, err := s.q.RenewClaims(ctx, unnamedStatement{s.conn}, db.RenewClaimsParams{
		LeaseMs:    lease.Milliseconds(),
		OwnerNode:  owner,
		DedupeKeys: keys,
		Fences:     fences,
	})
	if err != nil {
		return nil, dbError("RenewClaims", err)
	}
	out := make([]claims.Renewed, len(rows))
	for i, r := range rows {
		out[i] = claims.Renewed{Key: r.DedupeKey, Fence: r.Fence, LeaseUntil: r.LeaseUntil}
	}
	return out, nil
}

// Complete runs CompleteClaim.
func (s *Store) Complete(ctx context.Context, t claims.Token) error {
	_, err := s.q.CompleteClaim(ctx, s.conn, db.CompleteClaimParams{DedupeKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	return fenced("CompleteClaim", err)
}

// Fail runs FailClaim.
func (s *Store) Fail(ctx context.Context, t claims.Token, detail json.RawMessage) error {
	_, err := s.q.FailClaim(ctx, s.conn, db.FailClaimParams{ErrorDetail: detail, DedupeKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	return fenced("FailClaim", err)
}

// Release runs ReleaseClaim.
func (s *Store) Release(ctx context.Context, t claims.Token) error {
	_, err := s.q.ReleaseClaim(ctx, s.conn, db.ReleaseClaimParams{DedupeKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	return fenced("ReleaseClaim", err)
}

// ListExpired runs ListExpiredClaims.
func (s *Store) ListExpired(ctx context.Context, limit int) ([]claims.Claim, error) {
	rows, err := s.q.ListExpiredClaims(ctx, s.conn, int32(min(limit, 1<<31-1)))
	if err != nil {
		return nil, dbError("ListExpiredClaims", err)
	}
	out := make([]claims.Claim, len(rows))
	for i, r := range rows {
		out[i] = toClaim(r)
	}
	return out, nil
}

// unnamedStatement runs its queries as unnamed prepared statements, which
// Postgres plans with the actual parameter values every time. RenewClaims
// needs that: with a cached generic plan the planner guesses 10 elements per
// array and may pick a nested loop that compares every held lease with every
// claimed row (measured here: 10,000 leases took 28 s per renewal from the
// sixth call on, against 0.15 s with a custom plan).
type unnamedStatement struct{ db.DBTX }

func (u unnamedStatement) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return u.DBTX.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

// toClaim converts a claim row; AcquireClaim and ListExpiredClaims return
// the same columns, so their row types convert into each other.
func toClaim(r db.ListExpiredClaimsRow) claims.Claim {
	return claims.Claim{
		Token:      claims.Token{Key: r.DedupeKey, Owner: r.OwnerNode, Fence: r.Fence},
		State:      claims.State(r.State),
		Attempt:    r.Attempt,
		LeaseUntil: r.LeaseUntil,
		ClaimedAt:  r.ClaimedAt,
		Grant:      claims.GrantKind(r.GrantKind),
		WorkType:   r.WorkType,
	}
}

// fenced maps "no row matched the fenced WHERE" to ErrNotOwner.
func fenced(query string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return claims.ErrNotOwner
	default:
		return dbError(query, err)
	}
}

// dbError names the failed statement and marks the errors after which it
// certainly did not take effect as claims.ErrRetryable.
func dbError(query string, err error) error {
	var (
		pgErr      *pgconn.PgError
		connectErr *pgconn.ConnectError
	)
	// A failed connect sent nothing; pgconn does not mark it SafeToRetry
	// because it cannot know the caller's intent, but for one statement on
	// a fresh connection it is: a server restart must not fail live work.
	if errors.As(err, &pgErr) && pgErr.Code == KeyVersionCode {
		return fmt.Errorf("postgres: %s: %w: %w", query, episodes.ErrKeyVersion, err)
	}
	retry := pgconn.SafeToRetry(err) || errors.As(err, &connectErr) ||
		(errors.As(err, &pgErr) && retryableCode[pgErr.Code])
	if retry {
		return fmt.Errorf("postgres: %s: %w: %w", query, claims.ErrRetryable, err)
	}
	return fmt.Errorf("postgres: %s: %w", query, err)
}

// retryableCode lists the SQLSTATEs after which the server certainly did
// not apply the statement: serialization failure, deadlock and lock
// timeout (55P03, from a takeover's own bound and BoundTransaction: the statement
// was rolled back), an idle transaction the server ended (25P03, from
// BoundTransaction: it rolled back), and the server terminating or refusing the
// session (admin_shutdown, crash_shutdown, cannot_connect_now: a restart),
// which it reports for a statement it then did not run.
var retryableCode = map[string]bool{
	"40001": true, "40P01": true, "55P03": true, "57P01": true, "57P02": true, "57P03": true,
	"25P03": true, // idle_in_transaction_session_timeout: the server ended the session and rolled the transaction back
}

// ListClaims runs ListClaims, an operator read.
func (s *Store) ListClaims(ctx context.Context, q claims.ListQuery) ([]claims.Claim, error) {
	rows, err := s.q.ListClaims(ctx, s.conn, db.ListClaimsParams{
		OwnerNode: q.Owner, ExpiredOnly: q.ExpiredOnly, MaxRows: int32(min(q.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, dbError("ListClaims", err)
	}
	out := make([]claims.Claim, len(rows))
	for i, r := range rows {
		out[i] = toClaim(db.ListExpiredClaimsRow(r))
	}
	return out, nil
}

// ReleaseMany runs ReleaseClaims: every listed grant of owner released in
// one statement, planned with the real arrays like RenewClaims.
func (s *Store) ReleaseMany(ctx context.Context, owner string, held []claims.Held) ([]claims.Held, error) {
	if len(held) == 0 {
		return nil, nil
	}
	keys := make([]string, len(held))
	fences := make([]int64, len(held))
	for i, h := range held {
		keys[i], fences[i] = h.Key, h.Fence
	}
	rows, err := s.q.ReleaseClaims(ctx, unnamedStatement{s.conn}, db.ReleaseClaimsParams{
		OwnerNode: owner, DedupeKeys: keys, Fences: fences,
	})
	if err != nil {
		return nil, dbError("ReleaseClaims", err)
	}
	out := make([]claims.Held, len(rows))
	for i, r := range rows {
		out[i] = claims.Held{Key: r.DedupeKey, Fence: r.Fence}
	}
	return out, nil
}
