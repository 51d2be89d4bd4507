package episodes

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// ClassTriggerExpired is the error class of an available episode that
// expired before any full node took it (PollConfig.TTL).
const ClassTriggerExpired = "trigger_expired"

// Deferred describes an episode created available, for a full node's
// poller to take (New.Owner must be empty: nobody claims it yet): one row,
// written by one statement (CreateDeferredEpisode).
type Deferred struct {
	New
	// Opts is handed to the node that runs it, as JSON.
	Opts json.RawMessage
	// Delay makes the episode due that long after its creation on the
	// database clock (run_after); no poller takes it earlier. Zero: due
	// at once. Millisecond precision; negative is refused.
	Delay time.Duration
}

// DeferredCreated is what CreateDeferredEpisode did.
type DeferredCreated struct {
	// Created is false when a live episode already holds the dedupe key;
	// nothing was written, and ExistingID is that episode (0 if it was
	// archived before it could be read).
	Created    bool
	ExistingID int64
	Episode    Episode
}

// AvailableQuery is a poll (ClaimAvailable): the due available episodes
// a node takes, granted and started under its work claim.
type AvailableQuery struct {
	// Owner is the polling node; Lease is the work-claim lease each grant
	// gets, as a local trigger's does.
	Owner string
	Lease time.Duration
	// Env is matched exactly ("" is the unset env). Stack "" means every
	// stack; otherwise Stack and unstamped rows.
	Env   string
	Stack string
	// Runnable are the (actor, expectation) pairs the poller runs in full
	// mode; episodes of any other pair are left for the nodes that run it
	// (a node of another version never takes work it has no code for).
	// Empty takes nothing.
	Runnable []Runnable
	// Limit is how many episodes the poll may take: the slots the poller
	// reserved for them.
	Limit int
}

// Runnable names one (actor, expectation) pair a node has the code for: what
// a poller asks work for.
type Runnable struct {
	ActorID       string
	ExpectationID string
}

// RunnableJSON is rs as a JSON array of {"actor_id": ..., "expectation_id":
// ...} objects, the form every dialect's statements read.
func RunnableJSON(rs []Runnable) (string, error) {
	type pair struct {
		ActorID       string `json:"actor_id"`
		ExpectationID string `json:"expectation_id"`
	}
	pairs := make([]pair, len(rs))
	for i, r := range rs {
		pairs[i] = pair(r)
	}
	b, err := json.Marshal(pairs)
	return string(b), err
}

// Dispatched is one episode a poll (ClaimAvailable) took: Claim is its
// work claim, granted to the poller, and the same statement started the
// episode under it (Started; Episode is the started row, NextStep the
// first free step number), so the run needs no StartEpisode. Opts is what
// the trigger_only node that deferred it passed on.
//
// Claim.Fence 0: the episode was not the poller's to run (its claim was
// held live elsewhere); it left the available set and its holder, or
// recovery after that lease, has it. Started false with a grant cannot
// happen (the statement locked and re-checked the row before granting);
// a caller that sees it releases the grant.
type Dispatched struct {
	EpisodeID     int64
	ActorID       string
	ExpectationID string
	Opts          json.RawMessage
	Claim         claims.Claim
	Started       bool
	Episode       Episode
	NextStep      int32
}

// ExpireQuery expires the available episodes of one env (and stack scope,
// as in AvailableQuery) due more than TTL ago.
type ExpireQuery struct {
	Env   string
	Stack string
	TTL   time.Duration
	// AllEnvs ignores Env and Stack: database maintenance expires every
	// env's stale available work.
	AllEnvs bool
}

// DeferredBatch is a batch of triggers of one expectation, created
// available in one statement (CreateDeferredEpisodes): New gives what they
// share (actor, expectation, trigger type, max attempts, budget, stack,
// env); each item its dedupe key, trigger ref, payload and trace context.
// Keys must be distinct and not empty.
type DeferredBatch struct {
	New
	Items []BatchItem
	Delay time.Duration
}

// BatchItem is one trigger of a DeferredBatch.
type BatchItem struct {
	DedupeKey string `json:"dedupe_key"`
	// KeyVersion as New's: the version DedupeKey is a key of, zero for a
	// key no version changes (written as KeyVersionOf says).
	KeyVersion  int16           `json:"key_version"`
	TriggerRef  json.RawMessage `json:"trigger_ref"`
	Payload     json.RawMessage `json:"payload"`
	TraceParent string          `json:"trace_parent,omitempty"`
}

// BatchJSON encodes b's items for the statement's items argument (absent
// documents are null).
func (b DeferredBatch) BatchJSON() ([]byte, error) {
	if err := b.checkKeys(); err != nil {
		return nil, err
	}
	items := make([]BatchItem, len(b.Items))
	for i, it := range b.Items {
		it.TriggerRef, it.Payload = nullJSON(it.TriggerRef), nullJSON(it.Payload)
		it.KeyVersion = KeyVersionOf(it.KeyVersion)
		items[i] = it
	}
	return json.Marshal(items)
}

// BatchColumns is a DeferredBatch's items as parallel arrays, one element
// per item in order: what a statement that unnests arrays reads (Postgres's
// CreateDeferredEpisodes). An absent document or trace is "".
type BatchColumns struct {
	DedupeKeys   []string
	KeyVersions  []int16
	TriggerRefs  []string
	Payloads     []string
	TraceParents []string
}

// checkKeys refuses a batch with an item that has no dedupe key.
func (b DeferredBatch) checkKeys() error {
	for i, it := range b.Items {
		if it.DedupeKey == "" {
			return fmt.Errorf("episodes: batch item %d has no dedupe key", i)
		}
	}
	return nil
}

// Columns returns b's items as BatchColumns, with BatchJSON's checks.
func (b DeferredBatch) Columns() (BatchColumns, error) {
	if err := b.checkKeys(); err != nil {
		return BatchColumns{}, err
	}
	n := len(b.Items)
	c := BatchColumns{
		DedupeKeys: make([]string, n), KeyVersions: make([]int16, n),
		TriggerRefs: make([]string, n), Payloads: make([]string, n), TraceParents: make([]string, n),
	}
	for i, it := range b.Items {
		c.DedupeKeys[i], c.KeyVersions[i] = it.DedupeKey, KeyVersionOf(it.KeyVersion)
		c.TriggerRefs[i], c.Payloads[i], c.TraceParents[i] = string(it.TriggerRef), string(it.Payload), it.TraceParent
	}
	return c, nil
}

// Episode is the episode item i creates, as the statement left it.
func (b DeferredBatch) Episode(i int, id int64, createdAt time.Time) Episode {
	n := b.New
	it := b.Items[i]
	n.DedupeKey, n.TriggerRef, n.Payload, n.TraceParent = it.DedupeKey, it.TriggerRef, it.Payload, it.TraceParent
	n.KeyVersion = it.KeyVersion
	return n.Queued(id, createdAt)
}

// DueWait converts NextAvailableDue's answer, milliseconds until the next
// available episode falls due on the database clock (-1: none), to a wait
// and whether there is one.
func DueWait(ms int64) (time.Duration, bool) {
	switch {
	case ms < 0:
		return 0, false
	case ms > int64(math.MaxInt64/time.Millisecond):
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(ms) * time.Millisecond, true
}
