package claims_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/claims/memory"
)

// One lease per key: the first node's acquire is granted, the second's is
// busy; once the first completes, its stale token can change nothing, and a
// later acquire is a fresh grant with the next fence.
func ExampleGate_Acquire() {
	ctx := context.Background()
	store := memory.New() // postgres.New(pool) or sqlserver.New(db) in production
	a, _ := claims.NewGate(store, claims.GateConfig{Owner: "node-a", Lease: time.Minute})
	b, _ := claims.NewGate(store, claims.GateConfig{Owner: "node-b", Lease: time.Minute})

	first, err := a.Acquire(ctx, "invoice:2026-12", "billing")
	fmt.Println("node-a:", err, "fence", first.Fence)
	_, err = b.Acquire(ctx, "invoice:2026-12", "billing")
	fmt.Println("node-b busy:", errors.Is(err, claims.ErrBusy))

	fmt.Println("node-a completes:", a.Complete(ctx, first))
	fmt.Println("again, with the spent token:", errors.Is(a.Complete(ctx, first), claims.ErrNotOwner))
	next, err := b.Acquire(ctx, "invoice:2026-12", "billing")
	fmt.Println("node-b:", err, "fence", next.Fence, next.Grant)
	// Output:
	// node-a: <nil> fence 1
	// node-b busy: true
	// node-a completes: <nil>
	// again, with the spent token: true
	// node-b: <nil> fence 2 reclaim
}
