package claims

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/telemetry"
)

// Telemetry event names emitted by the Gate and the Heartbeat.
const (
	EventAcquired    = "claims.acquired"     // fresh grant, or re-claim after done/failed/released
	EventSteal       = "claims.steal"        // an expired lease was taken over
	EventBusy        = "claims.busy"         // acquire found a live lease
	EventRenewed     = "claims.renewed"      // Count leases renewed by one statement
	EventRenewFailed = "claims.renew_failed" // the renew statement failed (database error)
	EventCompleted   = "claims.completed"
	EventFailed      = "claims.failed"
	EventReleased    = "claims.released"
	EventLeaseLost   = "claims.lease_lost" // a grant was found gone, or its local deadline passed
)

// DefaultLease is the lease a Gate grants when GateConfig.Lease is zero: the
// window a crashed node's work stays unclaimable, and 3x the heartbeat period.
const DefaultLease = 2 * time.Minute

// GateConfig configures a Gate.
type GateConfig struct {
	// Owner is this node's identity, written as owner_node. Required; must be
	// unique per running process, or two processes share leases.
	Owner string
	// Lease is the duration of every grant and renewal. Longer leases survive
	// longer database hiccups; shorter ones hand a dead node's work over
	// sooner. Default DefaultLease; minimum 1ms.
	Lease time.Duration
	// Observer receives claims.* events. Default: discard.
	Observer telemetry.Observer
}

// Gate is the entry point to work claims: it validates input, calls the
// Store, and emits telemetry. A Gate built with a nil Store is a passthrough:
// every call succeeds at once without touching anything, so code paths can
// gate unconditionally and deployments without claims pay nothing.
type Gate struct {
	store    Store
	owner    string
	lease    time.Duration
	observer telemetry.Observer
}

// NewGate returns a Gate over store, or a passthrough Gate when store is nil.
func NewGate(store Store, cfg GateConfig) (*Gate, error) {
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Observer == nil {
		cfg.Observer = telemetry.Nop{}
	}
	if err := ValidateOwner(cfg.Owner); err != nil {
		return nil, fmt.Errorf("claims.NewGate: %w", err)
	}
	if err := validateLease(cfg.Lease); err != nil {
		return nil, fmt.Errorf("claims.NewGate: %w", err)
	}
	return &Gate{store: store, owner: cfg.Owner, lease: cfg.Lease, observer: cfg.Observer}, nil
}

// Enabled reports whether the Gate has a Store (false: passthrough).
func (g *Gate) Enabled() bool { return g.store != nil }

// Owner returns the node identity the Gate claims as.
func (g *Gate) Owner() string { return g.owner }

// Lease returns the duration of every grant.
func (g *Gate) Lease() time.Duration { return g.lease }

// Acquire claims key for this node. It returns ErrBusy when any live lease
// holds the key, this node's own included.
func (g *Gate) Acquire(ctx context.Context, key, workType string) (Claim, error) {
	if g.store == nil {
		return Claim{Token: Token{Key: key, Owner: g.owner}, State: StateClaimed, Passthrough: true}, nil
	}
	p := AcquireParams{Key: key, Owner: g.owner, Lease: g.lease, WorkType: workType}
	if err := p.Validate(); err != nil {
		return Claim{}, fmt.Errorf("acquire %q: %w", key, err)
	}
	start := time.Now()
	c, err := g.store.Acquire(ctx, p)
	took := time.Since(start)
	switch {
	case errors.Is(err, ErrBusy):
		g.emit(ctx, telemetry.Event{Name: EventBusy, Key: key, Owner: g.owner, Duration: took})
		return Claim{}, fmt.Errorf("acquire %q: %w", key, err)
	case err != nil:
		return Claim{}, fmt.Errorf("acquire %q: %w", key, err)
	}
	name := EventAcquired // the adapter stamped c's local start before sending
	if c.Grant == GrantSteal {
		name = EventSteal
	}
	g.emit(ctx, telemetry.Event{Name: name, Key: key, Owner: g.owner, Fence: c.Fence, Attempt: c.Attempt, Duration: took})
	return c, nil
}

// Renew extends c's lease by the Gate's lease and returns the updated claim.
// Nodes normally renew through a Heartbeat instead, one statement for all.
func (g *Gate) Renew(ctx context.Context, c Claim) (Claim, error) {
	if g.store == nil || c.Passthrough {
		return c, nil
	}
	if err := validateToken(c.Token); err != nil {
		return c, fmt.Errorf("renew %s: %w", c.Token, err)
	}
	start := time.Now()
	until, err := g.store.Renew(ctx, c.Token, g.lease)
	if err != nil {
		g.lost(ctx, c.Token, err)
		return c, fmt.Errorf("renew %s: %w", c.Token, err)
	}
	c.LeaseUntil = until
	c.acquiredAt = start
	g.emit(ctx, telemetry.Event{Name: EventRenewed, Key: c.Key, Owner: c.Owner, Fence: c.Fence, Count: 1, Duration: time.Since(start)})
	return c, nil
}

// Complete marks c's work done. ErrNotOwner means the grant was lost and the
// row is untouched: the caller must treat its work as not delivered.
func (g *Gate) Complete(ctx context.Context, c Claim) error {
	return g.finish(ctx, c, EventCompleted, "complete", g.storeComplete)
}

// Fail marks c's work failed; detail is stored as JSON (nil for none).
func (g *Gate) Fail(ctx context.Context, c Claim, detail any) error {
	var raw json.RawMessage
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return fmt.Errorf("fail %s: encode detail: %w: %v", c.Token, ErrInvalid, err)
		}
		raw = b
	}
	return g.finish(ctx, c, EventFailed, "fail", func(ctx context.Context, t Token) error {
		return g.store.Fail(ctx, t, raw)
	})
}

// Release ends c's lease without finishing its work, so another node can
// acquire the key at once. Used for graceful handover on shutdown.
func (g *Gate) Release(ctx context.Context, c Claim) error {
	return g.finish(ctx, c, EventReleased, "release", g.storeRelease)
}

// ReleaseMany fence-and-releases every claim in cs that this gate's owner
// still holds, in one statement, and returns the ones released; a claim
// missing from the result had been lost already. Passthrough claims are
// skipped.
func (g *Gate) ReleaseMany(ctx context.Context, cs []Claim) ([]Claim, error) {
	if g.store == nil {
		return nil, nil
	}
	held := make([]Held, 0, len(cs))
	byKey := make(map[Held]Claim, len(cs))
	for _, c := range cs {
		if c.Passthrough {
			continue
		}
		if err := validateToken(c.Token); err != nil {
			return nil, fmt.Errorf("release %s: %w", c.Token, err)
		}
		if c.Owner != g.owner {
			return nil, fmt.Errorf("release %s: %w: owned by %q, not this gate's %q", c.Token, ErrInvalid, c.Owner, g.owner)
		}
		h := Held{Key: c.Key, Fence: c.Fence}
		held, byKey[h] = append(held, h), c
	}
	if len(held) == 0 {
		return nil, nil
	}
	released, err := g.store.ReleaseMany(ctx, g.owner, held)
	if err != nil {
		return nil, fmt.Errorf("release %d claims: %w", len(held), err)
	}
	out := make([]Claim, 0, len(released))
	for _, h := range released {
		c := byKey[h]
		g.emit(ctx, telemetry.Event{Name: EventReleased, Key: c.Key, Owner: g.owner, Fence: c.Fence, Count: len(released)})
		out = append(out, c)
	}
	return out, nil
}

// ListExpired lists at most limit claimed leases whose deadline has passed on
// the database clock (the seed's reclaim_expired). Passthrough: none.
func (g *Gate) ListExpired(ctx context.Context, limit int) ([]Claim, error) {
	if g.store == nil {
		return nil, nil
	}
	if limit <= 0 {
		return nil, fmt.Errorf("list expired: %w: limit %d must be positive", ErrInvalid, limit)
	}
	return g.store.ListExpired(ctx, limit)
}

func (g *Gate) storeComplete(ctx context.Context, t Token) error { return g.store.Complete(ctx, t) }
func (g *Gate) storeRelease(ctx context.Context, t Token) error  { return g.store.Release(ctx, t) }

func (g *Gate) finish(ctx context.Context, c Claim, event, verb string, do func(context.Context, Token) error) error {
	if g.store == nil || c.Passthrough {
		return nil
	}
	if err := validateToken(c.Token); err != nil {
		return fmt.Errorf("%s %s: %w", verb, c.Token, err)
	}
	start := time.Now()
	if err := do(ctx, c.Token); err != nil {
		g.lost(ctx, c.Token, err)
		return fmt.Errorf("%s %s: %w", verb, c.Token, err)
	}
	g.emit(ctx, telemetry.Event{Name: event, Key: c.Key, Owner: c.Owner, Fence: c.Fence, Attempt: c.Attempt, Duration: time.Since(start)})
	return nil
}

// lost reports a grant found gone; database errors are the caller's to report.
func (g *Gate) lost(ctx context.Context, t Token, err error) {
	if errors.Is(err, ErrNotOwner) {
		g.emit(ctx, telemetry.Event{Name: EventLeaseLost, Key: t.Key, Owner: t.Owner, Fence: t.Fence, Err: err})
	}
}

func (g *Gate) emit(ctx context.Context, e telemetry.Event) { g.observer.Observe(ctx, e) }
