package claims

import "context"

type onBehalfKey struct{}

// OnBehalfOf returns ctx marking the writes made under it as made on
// behalf of the lease t holds: a run's journal steps, its finish, a
// caller's transaction that holds or completes it. Heartbeat.Hold puts it
// on a run's context and WithLease on each such write's. It changes no
// statement and no condition (every write still carries t and is fenced
// on it); an adapter that orders its own writes may use it to serve the
// work a node already holds before work it is only taking on (SQLite's
// write gate does, see adapters/sqlite).
func OnBehalfOf(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, onBehalfKey{}, t)
}

// OnBehalf returns the lease ctx's writes are made on behalf of, and false
// when ctx carries none (see OnBehalfOf).
func OnBehalf(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(onBehalfKey{}).(Token)
	return t, ok
}
