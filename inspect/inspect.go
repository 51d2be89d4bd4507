// Package inspect holds what leasehold's operator reads return: an episode
// with its work claim, trigger request and journal size, the journal's
// steps, and the filters of an episode listing. `leasehold episodes ls` and
// `leasehold episodes show` print them; each dialect adapter reads them with
// the named statements of sql/queries/<dialect>/inspect.sql.
//
// Nothing here coordinates. The reads take no lock and decide nothing, so
// what they return may have changed by the time it is shown; the runs,
// recovery and the pollers decide with their own statements, never with
// these.
package inspect

import (
	"encoding/json"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// EpisodeQuery selects episodes for a listing, newest first, at most Limit.
// Each string filter "" means any; DedupeKey matches exactly, archived
// episodes included (every run of one trigger). StaleOnly keeps the running
// episodes whose last step (else start) is older than StaleAfter on the
// database clock.
type EpisodeQuery struct {
	Status     episodes.Status
	ActorID    string
	ErrorClass string
	DedupeKey  string
	StaleOnly  bool
	StaleAfter time.Duration
	Limit      int
}

// Episode is one episode as `leasehold episodes show` prints it. The claim
// and the request are read in the same statement as the episode row.
type Episode struct {
	episodes.Episode
	// ClaimKey is the key the episode's runs hold a claim on: its dedupe
	// key, or episode:{id}.
	ClaimKey string
	// Claim is the claim row of ClaimKey, nil when there is none (an
	// episode created unclaimed that no node took yet). Under a dedupe key
	// it is the key's latest grant, which after archiving may belong to a
	// later episode of the same trigger.
	Claim *Claim
	// RunAfter is set while the episode is available work (deferred,
	// delayed, retried, recovered, or run again by an operator, and not
	// taken yet): when it falls due, on the database clock. Nil otherwise.
	RunAfter *time.Time
	// JournalSteps is the number of steps in the episode's journal.
	JournalSteps int64
}

// Claim is a work-claim row. Live is decided on the database clock when it
// was read: claimed, and lease_until still ahead.
type Claim struct {
	Key         string
	State       claims.State
	Owner       string
	Fence       int64
	Attempt     int32
	Grant       claims.GrantKind
	WorkType    string
	ClaimedAt   time.Time
	LeaseUntil  time.Time
	HeartbeatAt *time.Time // the last renewal, nil before the first
	Live        bool
}

// Step is one journal entry. Owner is the node whose grant wrote it, known
// only while that grant is the claim's current one (the step's fence is the
// claim's fence): the journal records the fence of each step, not its node,
// and a claim row keeps only its latest grant. "" means not recorded.
type Step struct {
	StepNo    int32
	Fence     int64
	Owner     string
	Data      json.RawMessage
	CreatedAt time.Time
}
