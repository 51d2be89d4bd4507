package episodes

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/dedupe"
)

// KeyVersioner is what a dialect adapter offers for the cluster's dedupe
// key version (migration 00014): the version the database uses, which
// every node hashes event payloads under, and the one-way move to version
// 2. Postgres and SQLite have both; SQL Server reads version 1 and refuses
// the switch (queries.DialectOnly: SwitchKeyVersion).
type KeyVersioner interface {
	// KeyVersion is the version the database uses and when it moved there
	// (nil: it started there).
	KeyVersion(ctx context.Context) (dedupe.KeyVersion, *time.Time, error)
	// SwitchKeyVersion moves the database to version 2 unless a live node
	// cannot compute it; it returns the version after the call and, when
	// that is still 1, the live nodes that kept it there.
	SwitchKeyVersion(ctx context.Context, q KeySwitch) (dedupe.KeyVersion, []KeyLaggard, error)
}

// KeySwitch parameterizes SwitchKeyVersion.
type KeySwitch struct {
	// LiveWithin: a node whose heartbeat is older (on the database clock)
	// no longer counts as live, and does not keep the switch from
	// happening. membership.DefaultSilentAfter when zero. A node that was
	// silent longer and comes back with an older binary cannot write a
	// version 1 key afterwards: the insert trigger refuses it.
	LiveWithin time.Duration
	// LockWait bounds the wait for the lock the switch takes on the
	// episodes table (Postgres: every insert in flight commits first, and
	// new ones wait behind the switch): past it the switch fails
	// (claims.ErrRetryable) and changes nothing. DefaultKeySwitchLockWait
	// when zero.
	LockWait time.Duration
}

// DefaultKeySwitchLockWait is KeySwitch.LockWait's default.
const DefaultKeySwitchLockWait = 5 * time.Second

// defaultLiveWithin is membership.DefaultSilentAfter (membership imports
// this package).
const defaultLiveWithin = 15 * time.Second

// WithDefaults fills the zero fields.
func (q KeySwitch) WithDefaults() KeySwitch {
	if q.LiveWithin <= 0 {
		q.LiveWithin = defaultLiveWithin
	}
	if q.LockWait <= 0 {
		q.LockWait = DefaultKeySwitchLockWait
	}
	return q
}

// KeyLaggard is a live node that cannot compute the version a switch asks
// for.
type KeyLaggard struct {
	NodeID, Stack, Env string
	KeyVersion         dedupe.KeyVersion // the newest it computes
	HeartbeatAge       time.Duration     // on the database clock
}

// NewKeyLaggard is a KeyLaggard from ListKeyVersionLaggards' columns.
func NewKeyLaggard(nodeID, stack, env string, keyVersion, heartbeatAgeMs int64) KeyLaggard {
	return KeyLaggard{NodeID: nodeID, Stack: stack, Env: env, KeyVersion: dedupe.KeyVersion(keyVersion),
		HeartbeatAge: time.Duration(heartbeatAgeMs) * time.Millisecond}
}
