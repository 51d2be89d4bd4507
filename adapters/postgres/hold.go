package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
)

// HoldLostCode is the SQLSTATE leasehold_hold raises when the grant it is
// given is no longer the current one (migration 00009).
const HoldLostCode = "LH001"

// HoldClaim runs HoldClaim in the Store's transaction (New(tx) with the
// caller's pgx.Tx): the claim row of t stays locked FOR SHARE until that
// transaction ends, so the caller's writes after it commit only while t is
// the current grant. claims.ErrLeaseLost when it is not (the transaction
// is then aborted: roll it back); an error without sending anything when
// the Store is not bound to a transaction, where the lock would guard
// nothing. It returns the grant's lease_until (database time).
//
// It first runs BoundTransaction in the caller's transaction, with
// claims.TxBoundFrom(ctx) (Run.Hold passes claims.TxBound of the node's
// lease): a transaction that holds a claim row's lock is ended by the
// server once it sits idle that long (the holder froze), and its lock
// waits fail after it, so a takeover never waits for it for longer; the
// settings are LOCAL and end with the caller's transaction.
func (s *Store) HoldClaim(ctx context.Context, t claims.Token) (time.Time, error) {
	tx, inTx := s.conn.(pgx.Tx)
	if !inTx {
		return time.Time{}, fmt.Errorf("%w: postgres: HoldClaim needs the caller's transaction (postgres.New(tx)), not %T", claims.ErrInvalid, s.conn)
	}
	if err := s.boundTransaction(ctx, tx); err != nil {
		return time.Time{}, err
	}
	until, err := s.q.HoldClaim(ctx, s.conn, db.HoldClaimParams{ClaimKey: t.Key, OwnerNode: t.Owner, Fence: t.Fence})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == HoldLostCode {
		return time.Time{}, fmt.Errorf("postgres: HoldClaim: %s: %w", t, claims.ErrLeaseLost)
	}
	if err != nil {
		return time.Time{}, dbError("HoldClaim", err)
	}
	return until, nil
}

// Savepoints reports whether InTx nests a transaction inside the Store's
// own: true when the Store is bound to a pgx.Tx (a savepoint), so work in
// a caller's transaction can be rolled back in part.
func (s *Store) Savepoints() bool {
	_, inTx := s.conn.(pgx.Tx)
	return inTx
}
