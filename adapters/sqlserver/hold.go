package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/leasehold/leasehold/claims"
)

// Errors leasehold_hold THROWs (migration 00009), and HoldClaim with it.
const (
	HoldLostError  = 51001 // the grant is not the current one
	HoldNoTxnError = 51002 // called outside a transaction
)

// WithTx returns a copy of s whose batches all run in the caller's
// transaction tx: what FireTx, Run.Hold and Run.CompleteTx write lands, or
// not, with the caller's own writes. Each batch is sent behind
// BoundTransaction with claims.TxBound(claims.DefaultLease), which bounds
// its lock waits (error 1222 rolls the whole transaction back, as
// XACT_ABORT does with any error inside it).
func (s *Store) WithTx(tx *sql.Tx) *Store { return s.inTx(tx, claims.TxBound(claims.DefaultLease)) }

// HoldClaim runs HoldClaim in the Store's transaction (WithTx): the claim
// row of t stays update-locked until that transaction ends, so the
// caller's writes after it commit only while t is the current grant.
// claims.ErrLeaseLost when it is not (the transaction is rolled back); an
// error without sending anything when the Store is not bound to a
// transaction. It returns the grant's lease_until (database time).
func (s *Store) HoldClaim(ctx context.Context, t claims.Token) (time.Time, error) {
	if s.tx == nil {
		return time.Time{}, fmt.Errorf("%w: sqlserver: HoldClaim needs the caller's transaction (Store.WithTx)", claims.ErrInvalid)
	}
	var until time.Time
	err := s.queryRow(ctx, "HoldClaim",
		sql.Named("claim_key", t.Key),
		sql.Named("owner_node", t.Owner),
		sql.Named("fence", t.Fence),
	).Scan(&until)
	var msErr mssql.Error
	if errors.As(err, &msErr) && msErr.Number == HoldLostError {
		return time.Time{}, fmt.Errorf("sqlserver: HoldClaim: %s: %w", t, claims.ErrLeaseLost)
	}
	return until, err
}
