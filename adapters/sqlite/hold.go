package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
)

// HoldClaim runs HoldClaim in the Store's transaction (WithTx with the
// caller's *sql.Tx): a no-op write of t's claim row, fenced on t, so the
// caller's transaction holds SQLite's database write lock from then (from
// its BEGIN IMMEDIATE, when begun on a *sql.DB from Open) until it ends, and
// no takeover can commit before it: the caller's writes after it commit only
// while t is the current grant. claims.ErrLeaseLost when it is not: it then
// runs DoomTransaction, so the transaction's COMMIT fails and rolls it back
// (roll it back yourself); an error without sending anything when the Store
// is not bound to a transaction, where the lock would guard nothing. It
// returns the grant's lease_until (database time). Like Postgres's
// leasehold_hold, it does not read the clock.
//
// There is no server-side bound on the transaction (Postgres's
// BoundTransaction): a process that freezes holding it blocks every writer
// of the file, each of which fails claims.ErrRetryable after busy_timeout
// (BusyTimeout) and retries, until the frozen process ends or resumes.
func (s *Store) HoldClaim(ctx context.Context, t claims.Token) (time.Time, error) {
	if _, inTx := s.conn.(*sql.Tx); !inTx {
		return time.Time{}, fmt.Errorf("%w: sqlite: HoldClaim needs the caller's transaction (Store.WithTx), not %T", claims.ErrInvalid, s.conn)
	}
	until, err := s.q.HoldClaim(ctx, s.conn, sqlitedb.HoldClaimParams{ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, s.doomTransaction(ctx, "HoldClaim", t)
	}
	if err != nil {
		return time.Time{}, dbError("HoldClaim", err)
	}
	return fromMs(until), nil
}

// doomTransaction runs DoomTransaction in the Store's transaction after the
// fenced write query, for t, matched no row, and returns
// claims.ErrLeaseLost, joined with why the transaction could not be doomed
// if it could not. It is sent even when ctx is done (a run's context is
// cancelled once its lease is known lost): a transaction left committable
// is exactly what it must not leave behind.
func (s *Store) doomTransaction(ctx context.Context, query string, t claims.Token) error {
	lost := fmt.Errorf("sqlite: %s: %s: %w (the transaction cannot commit)", query, t, claims.ErrLeaseLost)
	if err := s.q.DoomTransaction(context.WithoutCancel(ctx), s.conn, t.Key); err != nil {
		return errors.Join(lost, dbError("DoomTransaction", err))
	}
	return lost
}
