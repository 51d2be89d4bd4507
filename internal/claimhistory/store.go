package claimhistory

import (
	"context"
	"encoding/json"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// Store records every claim-changing call of a claims.Store in Rec, then
// returns what the store returned. It embeds the store, so a method added
// to claims.Store later passes through, unrecorded until it is added here.
// ListExpired is a read with no coordination role and is not recorded.
type Store struct {
	claims.Store
	Rec *Recorder
}

// Acquire records AcquireClaim: Granted, Busy, or what the error proves.
func (s Store) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	call := s.Rec.Call(Op{Kind: KindAcquire, Source: "AcquireClaim", Key: p.Key, Owner: p.Owner, Lease: p.Lease})
	c, err := s.Store.Acquire(ctx, p)
	call.ReturnGrant(c, err)
	return c, err
}

// Renew records RenewClaim with the lease_until it returned.
func (s Store) Renew(ctx context.Context, t claims.Token, lease time.Duration) (time.Time, error) {
	call := s.Rec.Call(Op{Kind: KindRenew, Source: "RenewClaim", Key: t.Key, Owner: t.Owner, Fence: t.Fence, Lease: lease})
	until, err := s.Store.Renew(ctx, t, lease)
	call.Return(Response{Outcome: Classify(err), LeaseUntil: until, Err: err})
	return until, err
}

// RenewMany records RenewClaims as one operation per lease: OK with its
// lease_until for each returned, NotOwner for each missing.
func (s Store) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	calls := s.Rec.CallBatch(Op{Kind: KindRenewBatch, Source: "RenewClaims", Owner: owner, Lease: lease}, held)
	renewed, err := s.Store.RenewMany(ctx, owner, held, lease)
	until := make(map[claims.Held]time.Time, len(renewed))
	for _, r := range renewed {
		until[claims.Held{Key: r.Key, Fence: r.Fence}] = r.LeaseUntil
	}
	for i, c := range calls {
		if err != nil {
			c.ReturnErr(err)
			continue
		}
		if u, ok := until[held[i]]; ok {
			c.Return(Response{Outcome: OK, LeaseUntil: u})
		} else {
			c.Return(Response{Outcome: NotOwner})
		}
	}
	return renewed, err
}

// Complete records CompleteClaim.
func (s Store) Complete(ctx context.Context, t claims.Token) error {
	call := s.Rec.Call(Op{Kind: KindComplete, Source: "CompleteClaim", Key: t.Key, Owner: t.Owner, Fence: t.Fence})
	err := s.Store.Complete(ctx, t)
	call.ReturnErr(err)
	return err
}

// Fail records FailClaim.
func (s Store) Fail(ctx context.Context, t claims.Token, detail json.RawMessage) error {
	call := s.Rec.Call(Op{Kind: KindFail, Source: "FailClaim", Key: t.Key, Owner: t.Owner, Fence: t.Fence})
	err := s.Store.Fail(ctx, t, detail)
	call.ReturnErr(err)
	return err
}

// Release records ReleaseClaim.
func (s Store) Release(ctx context.Context, t claims.Token) error {
	call := s.Rec.Call(Op{Kind: KindRelease, Source: "ReleaseClaim", Key: t.Key, Owner: t.Owner, Fence: t.Fence})
	err := s.Store.Release(ctx, t)
	call.ReturnErr(err)
	return err
}

// ReleaseMany records ReleaseClaims as one release per lease: OK for each
// returned, NotOwner for each missing.
func (s Store) ReleaseMany(ctx context.Context, owner string, held []claims.Held) ([]claims.Held, error) {
	calls := s.Rec.CallBatch(Op{Kind: KindRelease, Source: "ReleaseClaims", Owner: owner}, held)
	released, err := s.Store.ReleaseMany(ctx, owner, held)
	got := make(map[claims.Held]bool, len(released))
	for _, h := range released {
		got[h] = true
	}
	for i, c := range calls {
		switch {
		case err != nil:
			c.ReturnErr(err)
		case got[held[i]]:
			c.Return(Response{Outcome: OK})
		default:
			c.Return(Response{Outcome: NotOwner})
		}
	}
	return released, err
}
