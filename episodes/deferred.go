package episodes

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// Trigger request statuses (sql/queries/<dialect>/trigger_requests.sql).
const (
	RequestPending   = "pending"   // waiting for a full node's poller
	RequestClaimed   = "claimed"   // a poller holds it until its claim lapses
	RequestCompleted = "completed" // handed over to the episode's work claim
	RequestExpired   = "expired"   // not picked up within the TTL; episode canceled
)

// ClassTriggerExpired is the error class of an episode whose trigger request
// expired before any full node picked it up.
const ClassTriggerExpired = "trigger_expired"

// Deferred describes an episode a trigger_only node creates for a full node
// to run: the episode (New.Owner must be empty: nobody claims it yet) and its
// trigger request, written by one statement.
type Deferred struct {
	New
	// SourceNode is the identity of the trigger_only node.
	SourceNode string
	// Opts is handed to the running node with the request, as JSON.
	Opts json.RawMessage
	// Delay makes the request due that long after its creation on the
	// database clock (run_after); no poller claims it earlier. Zero: due
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
	RequestID  int64
}

// RequestQuery claims trigger requests for a poller.
type RequestQuery struct {
	// Owner is the polling node; Lease bounds its claim on each request
	// (between claiming and handing over), after which another poller may
	// take the request.
	Owner string
	Lease time.Duration
	// Env is matched exactly ("" is the unset env). Stack "" means every
	// stack; otherwise Stack and unstamped rows.
	Env   string
	Stack string
	// Runnable are the (actor, expectation) pairs the poller runs in full
	// mode; requests for any other pair are left for the nodes that run
	// it (a node of another version never claims work it has no code
	// for). Empty claims nothing.
	Runnable []Runnable
	Limit    int
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

// TriggerRequest is a request a poller claimed.
type TriggerRequest struct {
	ID            int64
	EpisodeID     int64
	ActorID       string
	ExpectationID string
	SourceNode    string
	// Owner and Fence identify the poller's claim on the request; the hand
	// over is conditioned on them.
	Owner string
	Fence int64
	Opts  json.RawMessage
}

// Dispatched is what DispatchTriggerRequest did with a claimed request: it
// is completed, and Claim is the episode's work claim granted to the
// poller. Claim.Fence is 0 when the episode is not the poller's to run (it
// already ran, or its claim is held live elsewhere).
//
// With a grant, the same statement started the episode under it (Started,
// and Episode is the started row, NextStep the first free step number), so
// the run needs no StartEpisode. Started false with a grant means the
// episode changed between the statement's read and its write (a cancel):
// the caller releases the grant.
type Dispatched struct {
	RequestID int64
	EpisodeID int64
	Claim     claims.Claim
	Started   bool
	Episode   Episode
	NextStep  int32
}

// ExpireQuery expires open requests of one env (and stack scope, as in
// RequestQuery) older than TTL.
type ExpireQuery struct {
	Env   string
	Stack string
	TTL   time.Duration
	// AllEnvs ignores Env and Stack: database maintenance expires every
	// env's stale requests.
	AllEnvs bool
}

// Expired is one request ExpireTriggerRequests expired; EpisodeCanceled
// reports whether its episode was still queued and unclaimed, and so was
// canceled with ClassTriggerExpired.
type Expired struct {
	RequestID       int64
	EpisodeID       int64
	EpisodeCanceled bool
}

// RequestListQuery selects trigger requests for an operator or a test;
// Status "" means any. Newest first, at most Limit.
type RequestListQuery struct {
	Env    string
	Status string
	Limit  int
}

// RequestInfo is a trigger request row as listed.
type RequestInfo struct {
	ID            int64
	EpisodeID     int64
	ActorID       string
	ExpectationID string
	SourceNode    string
	SourceStack   string
	SourceEnv     string
	Status        string
	ClaimedBy     string
	Fence         int64
	Opts          json.RawMessage
	CreatedAt     time.Time
	ClaimedAt     *time.Time
	ClaimUntil    *time.Time
	FinishedAt    *time.Time
}

// DeferredBatch is a batch of triggers of one expectation, created
// available in one statement (CreateDeferredEpisodes): New gives what they
// share (actor, expectation, trigger type, max attempts, budget, stack,
// env); each item its dedupe key, trigger ref, payload and trace context.
// Keys must be distinct and not empty.
type DeferredBatch struct {
	New
	Items      []BatchItem
	SourceNode string
	Delay      time.Duration
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

// HandOverItems encodes reqs for DispatchTriggerRequests' items argument:
// a JSON array of {"id", "fence"}, each request's own claim. Every request
// must be claimed by owner, the poller sending the batch.
func HandOverItems(owner string, reqs []TriggerRequest) ([]byte, error) {
	type item struct {
		ID    int64 `json:"id"`
		Fence int64 `json:"fence"`
	}
	items := make([]item, len(reqs))
	for i, r := range reqs {
		if r.Owner != owner {
			return nil, fmt.Errorf("episodes: request %d is claimed by %s, not by the sending node %s", r.ID, r.Owner, owner)
		}
		items[i] = item{ID: r.ID, Fence: r.Fence}
	}
	return json.Marshal(items)
}

// DueWait converts NextTriggerRequestDue's answer, milliseconds until the
// next request becomes claimable on the database clock (-1: none), to a
// wait and whether there is one.
func DueWait(ms int64) (time.Duration, bool) {
	switch {
	case ms < 0:
		return 0, false
	case ms > int64(math.MaxInt64/time.Millisecond):
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(ms) * time.Millisecond, true
}
