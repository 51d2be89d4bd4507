package maintenance

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// ErrInvalid: a Config or Plan was rejected; the message says which field
// and why.
var ErrInvalid = errors.New("maintenance: invalid")

// Defaults applied by NewRunner (and Validate) to zero Config fields.
const (
	DefaultRetention      = 7 * 24 * time.Hour
	DefaultClaimHorizon   = 30 * 24 * time.Hour
	DefaultNodeStaleAfter = 24 * time.Hour
	DefaultBatch          = 1000
	DefaultInterval       = 10 * time.Minute
	DefaultLease          = claims.DefaultLease
	// DefaultWaitingForNodeAfter is WaitingForNodeAfter's default.
	DefaultWaitingForNodeAfter = time.Hour
)

// Limits enforced by Validate.
const (
	// MinClaimHorizon is the shortest ClaimHorizon accepted, whatever the
	// lease: a day is far beyond any pause (GC, VM suspend, partition) a
	// zombie could wake up from and still hold its old token.
	MinClaimHorizon = 24 * time.Hour
	// ClaimHorizonLeases is how many leases ClaimHorizon must span at least.
	ClaimHorizonLeases = 100
	// MaxBatch bounds Batch: one run's transaction stays short.
	MaxBatch = 100_000
)

// Config configures a Runner. A zero field takes its default; a negative one
// is rejected.
type Config struct {
	// Retention: terminal episodes (done, failed, partially_failed,
	// canceled) that finished longer ago are archived and their journals
	// deleted. Archiving frees the episode's dedupe key, so Retention is also
	// the dedupe window: the same trigger arriving again later runs again.
	// Longer keeps history (and duplicate suppression) longer, at the cost
	// of table size. Default 7 days.
	Retention time.Duration
	// ClaimHorizon: finished claim rows (done, failed, released) whose lease
	// ended longer ago are deleted, restarting their key's fence at 1. It
	// must be at least MinClaimHorizon and at least ClaimHorizonLeases x
	// Lease, so no holder of an old grant can still be writing. Shorter
	// keeps the claims table smaller; there is no other gain. Default 30
	// days.
	ClaimHorizon time.Duration
	// RequestTTL is opt-in. Zero (the default): deferred work never
	// expires; an open trigger request waits for a full node however long
	// the outage lasts. Set: open trigger requests (every env) created
	// longer ago that no poller holds live are expired, and their
	// still-unclaimed episodes canceled (status canceled, error class
	// trigger_expired): that work never runs unless triggered again. Only
	// for work that is worthless late (a stale health check), never for
	// payments.
	RequestTTL time.Duration
	// NodeStaleAfter: membership rows not heartbeated for this long are
	// deleted (their nodes died without draining). At least Lease, since
	// live nodes heartbeat every Lease/3. Advisory rows only. Default 24
	// hours.
	NodeStaleAfter time.Duration
	// Batch bounds the rows ArchiveEpisodes, PurgeArchivedSteps,
	// MarkJournalsPurged and DeleteSpentClaims each touch in one run; what
	// is left waits for the next run. Larger catches up faster after an
	// outage; smaller keeps each run's transaction short. 1..MaxBatch,
	// default 1000.
	Batch int
	// Interval between runs on this node. Every node runs maintenance and
	// at most one works at a time, so the database sees about one run per
	// Interval per node. Default 10 minutes.
	Interval time.Duration
	// Lease is the longest work-claim lease any node of this database
	// grants (runner.NodeConfig.Lease); it bounds ClaimHorizon from below.
	// Default claims.DefaultLease (2 minutes).
	Lease time.Duration
	// WaitingForNodeAfter: queued work that no live node can run (see
	// package membership: no node of its env that is live, full, not
	// draining and stack-compatible registered its actor and expectation)
	// and that has been due for longer than this, on the database clock,
	// raises a finding per (env, actor, expectation), key
	// leasehold/waiting-for-node/<env>/<actor>/<expectation>, class
	// waiting_for_node; the finding clears on the first run that finds
	// none of that pair's work waiting (it ran, was canceled, or a node
	// that runs it is live). Such work waits without spending attempts, so
	// nothing else reports it. Shorter reports a deploy that dropped an
	// expectation sooner, at the cost of findings during rolling deploys
	// that leave a pair without a node for a while. Default 1 hour.
	WaitingForNodeAfter time.Duration
}

// DefaultConfig returns the Config every zero field falls back to.
func DefaultConfig() Config {
	return Config{
		Retention:      DefaultRetention,
		ClaimHorizon:   DefaultClaimHorizon,
		NodeStaleAfter: DefaultNodeStaleAfter,
		Batch:          DefaultBatch,
		Interval:       DefaultInterval,
		Lease:          DefaultLease,

		WaitingForNodeAfter: DefaultWaitingForNodeAfter,
	}
}

// withDefaults replaces every zero field with its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	orDefault := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	orDefault(&c.Retention, d.Retention)
	orDefault(&c.ClaimHorizon, d.ClaimHorizon)
	orDefault(&c.NodeStaleAfter, d.NodeStaleAfter)
	orDefault(&c.Interval, d.Interval)
	orDefault(&c.Lease, d.Lease)
	orDefault(&c.WaitingForNodeAfter, d.WaitingForNodeAfter)
	if c.Batch == 0 {
		c.Batch = d.Batch
	}
	return c
}

// Validate reports whether NewRunner would accept c (zero fields taking
// their defaults); errors wrap ErrInvalid.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"Retention", c.Retention}, {"ClaimHorizon", c.ClaimHorizon}, {"RequestTTL", c.RequestTTL},
		{"NodeStaleAfter", c.NodeStaleAfter}, {"Interval", c.Interval}, {"Lease", c.Lease},
		{"WaitingForNodeAfter", c.WaitingForNodeAfter},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalid, f.name, f.v)
		}
	}
	if c.Batch < 1 || c.Batch > MaxBatch {
		return fmt.Errorf("%w: Batch %d is outside 1..%d", ErrInvalid, c.Batch, MaxBatch)
	}
	if c.ClaimHorizon < MinClaimHorizon {
		return fmt.Errorf("%w: ClaimHorizon %v is under %v: deleting a claim row restarts its fence, "+
			"so the horizon must be far beyond any lease", ErrInvalid, c.ClaimHorizon, MinClaimHorizon)
	}
	if c.ClaimHorizon/ClaimHorizonLeases < c.Lease {
		return fmt.Errorf("%w: ClaimHorizon %v is under %d x Lease %v: deleting a claim row restarts its fence, "+
			"so the horizon must be far beyond any lease", ErrInvalid, c.ClaimHorizon, ClaimHorizonLeases, c.Lease)
	}
	if c.NodeStaleAfter < c.Lease {
		return fmt.Errorf("%w: NodeStaleAfter %v is under Lease %v: live nodes' rows would be deleted "+
			"between heartbeats", ErrInvalid, c.NodeStaleAfter, c.Lease)
	}
	return nil
}

// Plan returns the Plan each run of c executes (zero fields taking their
// defaults).
func (c Config) Plan() Plan {
	c = c.withDefaults()
	return Plan{
		Retention:      c.Retention,
		ClaimHorizon:   c.ClaimHorizon,
		RequestTTL:     c.RequestTTL,
		NodeStaleAfter: c.NodeStaleAfter,
		Batch:          c.Batch,

		WaitingForNodeAfter: c.WaitingForNodeAfter,
	}
}

// Validate checks what every Store needs to run p: durations not negative
// (zero means "everything older than now") and Batch within 1..MaxBatch.
// It does not apply Config's safety limits: a Store runs the Plan it is
// given, and the Runner is what enforces ClaimHorizon's rule.
func (p Plan) Validate() error {
	if p.Retention < 0 || p.ClaimHorizon < 0 || p.RequestTTL < 0 || p.NodeStaleAfter < 0 || p.WaitingForNodeAfter < 0 {
		return fmt.Errorf("%w: plan durations must not be negative: %+v", ErrInvalid, p)
	}
	if p.Batch < 1 || p.Batch > MaxBatch {
		return fmt.Errorf("%w: plan Batch %d is outside 1..%d", ErrInvalid, p.Batch, MaxBatch)
	}
	return nil
}
