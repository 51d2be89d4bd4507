package sqlite

import "context"

// Exported for the tests of package sqlite_test.
var (
	IsUniqueViolation = isUniqueViolation
	IsRetryable       = isRetryable
)

// LockSuffix names the migration lock file beside a database.
const LockSuffix = lockSuffix

// RunInTx is the Store's inTx.
var RunInTx = (*Store).inTx

// GateQueued returns how many lease writes, takeovers and other writes
// wait in the write gate of the database file at path.
func GateQueued(path string) (lease, takeover, other int) {
	g := gateFor(path)
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting[laneLease]), len(g.waiting[laneTakeover]), len(g.waiting[laneOther])
}

// GateQueuedHeld returns how many writes of held work (made on behalf of a
// lease, claims.OnBehalf) wait in the write gate of the file at path.
func GateQueuedHeld(path string) int {
	g := gateFor(path)
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting[laneHeld])
}

// WithTakeoverLane marks ctx's writes as takeovers.
func WithTakeoverLane(ctx context.Context) context.Context { return withLane(ctx, laneTakeover) }

// TrySlice is how long SQLite itself waits for the write lock in one try.
const TrySlice = trySlice

// LeaseLaneByte is the byte of the turn file a process with a lease write
// waiting holds shared; TurnSuffix names the turn file beside a database.
var (
	LeaseLaneByte = laneByte[laneLease]
	TurnSuffix    = turnSuffix
)

// FlagStale is how long a write waits, once, for another process's lane
// byte while nobody takes the turn.
const FlagStale = flagStale

// StandBack is standBack.
const StandBack = standBack
