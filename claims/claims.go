package claims

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrBusy: the key has a live lease (anyone's, the caller's own included).
	ErrBusy = errors.New("claims: busy: key holds a live lease")
	// ErrLocked: a takeover gave way to a row another transaction holds
	// (on Postgres, recovery's requeue locks NOWAIT: another sweeper's
	// requeue, the holder's finish): nothing was applied, and a later try
	// may succeed. Returned together with ErrBusy.
	ErrLocked = errors.New("claims: locked: another transaction holds the row")
	// ErrNotOwner: the (key, owner, fence) grant no longer holds the claim; the
	// row was not changed.
	ErrNotOwner = errors.New("claims: not owner: grant no longer holds the claim")
	// ErrLeaseLost: work running under a lease must stop, because the lease was
	// taken over, finished elsewhere, or could not be renewed in time.
	ErrLeaseLost = errors.New("claims: lease lost")
	// ErrLeaseExpired accompanies ErrLeaseLost when the node itself stopped
	// the work: no renewal succeeded before the lease's local deadline (the
	// database, or this host, was too slow). Nobody may have taken the
	// grant over yet, so the node gives it back, fenced, once the work has
	// stopped (see recovery: a grant given back is not an attempt).
	ErrLeaseExpired = errors.New("claims: lease past its local deadline")
	// ErrInvalid: an argument or configuration was rejected before any write.
	ErrInvalid = errors.New("claims: invalid argument")
	// ErrRetryable marks a database error after which the statement certainly
	// did not take effect (the connection failed before sending it, or the
	// database rolled it back for a deadlock or a serialization failure), so
	// sending it again is safe. Adapters wrap such errors with it.
	ErrRetryable = errors.New("claims: transient database error, safe to retry")
)

// Limits of the work-claims table; inputs beyond them are rejected, never
// truncated.
const (
	MaxKeyLen      = 512 // characters, leasehold_work_claims.dedupe_key
	MaxOwnerLen    = 255 // characters, owner_node
	MaxWorkTypeLen = 128 // characters, work_type
)

// State of a claim row.
type State string

const (
	StateClaimed  State = "claimed"
	StateDone     State = "done"
	StateFailed   State = "failed"
	StateReleased State = "released"
)

// GrantKind says how the current grant was made.
type GrantKind string

const (
	GrantFresh   GrantKind = "fresh"   // first claim of the key
	GrantSteal   GrantKind = "steal"   // an expired claimed lease was taken over
	GrantReclaim GrantKind = "reclaim" // after done, failed or released
)

// Token identifies one grant of a claim. Every write on behalf of a lease
// carries it and is conditioned on all three fields.
type Token struct {
	Key   string
	Owner string
	Fence int64
}

func (t Token) String() string { return fmt.Sprintf("%q owner=%q fence=%d", t.Key, t.Owner, t.Fence) }

// Claim is a granted lease as the database recorded it. LeaseUntil and
// ClaimedAt are database times, for display and diagnostics: no node compares
// them with its own clock.
type Claim struct {
	Token
	State      State
	Attempt    int32
	LeaseUntil time.Time
	ClaimedAt  time.Time
	Grant      GrantKind
	WorkType   string

	// Passthrough is set on claims handed out by a Gate with no Store: nothing
	// was written and nothing needs to be renewed.
	Passthrough bool

	// acquiredAt is the local monotonic time just before the granting statement
	// was sent; the lease cannot have started before it, so acquiredAt + lease
	// is a safe local deadline until the first renewal.
	acquiredAt time.Time
}

// SetLocalStart records the local monotonic time just before the statement
// that granted c was sent; the lease cannot have started on the database
// before it. Every adapter method that grants a claim (Acquire, an episode's
// creation, recovery, dispatch) stamps the claim it returns, because only
// the adapter knows when it sent the statement. A Heartbeat derives c's
// first local deadline from it and refuses to hold a claim without one.
func (c *Claim) SetLocalStart(t time.Time) { c.acquiredAt = t }

// LocalStart is the local time SetLocalStart recorded; zero if none.
func (c Claim) LocalStart() time.Time { return c.acquiredAt }

// ListQuery selects claims for an operator listing (leasehold claims ls);
// it has no coordination role. Owner "" means every owner; ExpiredOnly keeps
// the claimed leases past their deadline on the database clock. Soonest
// deadline first, at most Limit.
type ListQuery struct {
	Owner       string
	ExpiredOnly bool
	Limit       int
}

// AcquireParams asks for a lease.
type AcquireParams struct {
	Key      string
	Owner    string
	Lease    time.Duration
	WorkType string
}

// Held is one lease a node holds, as sent to RenewMany.
type Held struct {
	Key   string
	Fence int64
}

// Renewed is one lease RenewMany extended.
type Renewed struct {
	Key        string
	Fence      int64
	LeaseUntil time.Time
	// Start, when an adapter sets it, is a later instant than the one
	// before RenewMany was called at which the renewal still cannot have
	// started on the database (SQLite: when the statement held the write
	// lock, after its wait behind other writers); the next local deadline
	// is counted from it. Zero: from the call.
	Start time.Time
}

// Store is the seam a dialect adapter implements. Each method is one reviewed
// statement executed on the database clock; implementations do no
// read-then-write and pass no node time into a decision.
//
// Implementations may assume validated arguments (the Gate validates) but must
// not panic on bad ones. Conformance is checked by
// github.com/leasehold/leasehold/conformance.
type Store interface {
	// Acquire grants the lease or returns ErrBusy. See AcquireClaim.
	Acquire(ctx context.Context, p AcquireParams) (Claim, error)
	// Renew extends one lease; ErrNotOwner when the grant is gone.
	Renew(ctx context.Context, t Token, lease time.Duration) (time.Time, error)
	// RenewMany extends every listed lease of owner in one statement and
	// returns exactly those still held.
	RenewMany(ctx context.Context, owner string, held []Held, lease time.Duration) ([]Renewed, error)
	// Complete marks the work done; ErrNotOwner when the grant is gone.
	Complete(ctx context.Context, t Token) error
	// Fail marks the work failed with a JSON detail (may be nil); ErrNotOwner
	// when the grant is gone.
	Fail(ctx context.Context, t Token, detail json.RawMessage) error
	// Release ends the lease without finishing the work, so any node can
	// acquire at once; ErrNotOwner when the grant is gone.
	Release(ctx context.Context, t Token) error
	// ReleaseMany fence-and-releases every listed grant of owner in one
	// statement (a draining node's hand-over) and returns exactly those it
	// released; a missing pair had been lost already.
	ReleaseMany(ctx context.Context, owner string, held []Held) ([]Held, error)
	// ListExpired lists at most limit claimed leases past their deadline,
	// oldest first (the seed's reclaim_expired; read-only).
	ListExpired(ctx context.Context, limit int) ([]Claim, error)
}

// ValidateKey reports whether key can be stored as a dedupe key.
func ValidateKey(key string) error {
	return validateText("key", key, MaxKeyLen)
}

// ValidateOwner reports whether owner can be stored as an owner node.
func ValidateOwner(owner string) error {
	return validateText("owner", owner, MaxOwnerLen)
}

func validateText(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, what)
	}
	if n := utf8.RuneCountInString(s); n > max {
		return fmt.Errorf("%w: %s is %d characters, the limit is %d", ErrInvalid, what, n, max)
	}
	return nil
}

func validateLease(lease time.Duration) error {
	if lease < time.Millisecond {
		return fmt.Errorf("%w: lease %v must be at least 1ms", ErrInvalid, lease)
	}
	return nil
}

func validateToken(t Token) error {
	if err := ValidateKey(t.Key); err != nil {
		return err
	}
	if err := ValidateOwner(t.Owner); err != nil {
		return err
	}
	if t.Fence <= 0 {
		return fmt.Errorf("%w: fence %d must be positive", ErrInvalid, t.Fence)
	}
	return nil
}

// Validate reports whether p can be sent to a Store.
func (p AcquireParams) Validate() error {
	if err := ValidateKey(p.Key); err != nil {
		return err
	}
	if err := ValidateOwner(p.Owner); err != nil {
		return err
	}
	if err := validateLease(p.Lease); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(p.WorkType); n > MaxWorkTypeLen {
		return fmt.Errorf("%w: work type is %d characters, the limit is %d", ErrInvalid, n, MaxWorkTypeLen)
	}
	return nil
}
