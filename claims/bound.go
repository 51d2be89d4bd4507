package claims

import (
	"context"
	"time"
)

// TxBound is how long the database lets a transaction or a takeover
// statement made on behalf of a lease of this length wait for a lock, and a
// transaction sit idle, before it ends it: max(lease/10, 1s). A holder
// frozen inside a transaction (SIGSTOP, a long GC pause, a hung VM) keeps
// its row locks; without a server-side bound a steal or a recovery claim
// would wait for it for ever, because the server sees a healthy idle
// connection. With it, the frozen transaction is rolled back after TxBound
// and takeover happens within lease + sweep interval + TxBound. The floor
// keeps a short lease from killing healthy transactions on a loaded node.
func TxBound(lease time.Duration) time.Duration { return max(lease/10, time.Second) }

type txBoundKey struct{}

// WithTxBound returns ctx carrying the server-side bound (see TxBound) for
// the transactions and takeover statements an adapter runs under it. The
// runner and recovery put TxBound(lease) on every write's context.
func WithTxBound(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, txBoundKey{}, d)
}

// TxBoundFrom returns the bound put on ctx by WithTxBound, else
// TxBound(DefaultLease). Adapters call it; a non-positive bound is never
// returned.
func TxBoundFrom(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(txBoundKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return TxBound(DefaultLease)
}
