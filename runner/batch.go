package runner

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/telemetry"
)

// BatchEvent is one event of FireBatch: its payload and, optionally, the
// id that identifies it for deduplication (FireOptions.EventID's role).
type BatchEvent struct {
	Payload any
	EventID string
}

// BatchCreator is what FireBatch needs from a store: this node's adapter,
// or one bound to the caller's transaction (TxStore).
type BatchCreator interface {
	CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error)
}

// FireBatch delivers many events of one name to actorID at once: for each
// expectation the event triggers, one statement (CreateDeferredEpisodes)
// creates the episodes of every event, available to whichever full nodes
// have free slots (this one included), each deduplicated on its own key
// exactly as Fire would (the same dedupe key, env folding and trigger
// ref), so a batch costs one statement per expectation instead of one per
// event, whatever its size. opts applies to every event (Env, Delay; its
// EventID is ignored: each BatchEvent has its own). It returns one Outcome
// per event per expectation, event by event: a duplicate names the live
// episode it duplicates, and an event repeated within the batch is a
// duplicate of its first occurrence.
func (n *Node) FireBatch(ctx context.Context, actorID, event string, events []BatchEvent, opts FireOptions) ([]Outcome, error) {
	return n.fireBatch(ctx, n.store, false, actorID, event, events, opts)
}

// FireBatchTx is FireBatch inside the caller's transaction tx (see
// FireTx): rolled back, none of the episodes exists.
func (n *Node) FireBatchTx(ctx context.Context, tx TxStore, actorID, event string, events []BatchEvent, opts FireOptions) ([]Outcome, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: fire %s/%s: FireBatchTx needs a store bound to the caller's transaction", ErrInvalid, actorID, event)
	}
	return n.fireBatch(ctx, tx, true, actorID, event, events, opts)
}

func (n *Node) fireBatch(ctx context.Context, store BatchCreator, callerTx bool, actorID, event string, events []BatchEvent, opts FireOptions) ([]Outcome, error) {
	n.intake.RLock()
	defer n.intake.RUnlock()
	as, env, exps, err := n.eventTarget(actorID, event, opts)
	if err != nil {
		return nil, err
	}
	if mode := n.ActorMode(actorID); mode == ModeDisabled {
		return nil, fmt.Errorf("%w: actor %q on node %s", ErrDisabled, actorID, n.id)
	}
	payloads := make([]json.RawMessage, len(events))
	for i, ev := range events {
		if payloads[i], err = canonicalPayload(fmt.Sprintf("fire %s/%s (event %d of the batch)", actorID, event, i), ev.Payload); err != nil {
			return nil, err
		}
	}
	// Every key of every expectation, before anything is written.
	keys := make([][]dedupe.EventKeys, len(exps))
	refs := make([]json.RawMessage, len(events))
	for k, e := range exps {
		keys[k] = make([]dedupe.EventKeys, len(events))
		for i, ev := range events {
			if keys[k][i], refs[i], err = eventKeys(as, e, env, event, ev.EventID, payloads[i]); err != nil {
				return nil, fmt.Errorf("event %d of the batch: %w", i, err)
			}
		}
	}
	trace := n.inject(ctx)
	out := make([]Outcome, len(events)*len(exps))
	for k, e := range exps {
		outcomes, err := n.fireBatchOf(ctx, store, as, e, env, keys[k], refs, payloads, trace, opts)
		if err != nil && !callerTx && n.forgetKeyVersion(err) {
			// The database moved to a newer key version and refused the
			// batch (nothing of it was written): hash it again.
			outcomes, err = n.fireBatchOf(ctx, store, as, e, env, keys[k], refs, payloads, trace, opts)
		}
		if err != nil {
			n.forgetKeyVersion(err)
			return nil, fmt.Errorf("create %d episodes of %s/%s: %w", len(events), actorID, e.ID, err)
		}
		for i, o := range outcomes {
			out[i*len(exps)+k] = o
		}
	}
	return out, nil
}

// fireBatchOf creates the episodes of expectation e for a batch of events
// (keys, refs and payloads by event) in one CreateDeferredEpisodes, keyed
// under the database's key version, and returns each event's outcome.
func (n *Node) fireBatchOf(ctx context.Context, store BatchCreator, as *actorState, e *Expectation, env string,
	keys []dedupe.EventKeys, refs, payloads []json.RawMessage, trace string, opts FireOptions) ([]Outcome, error) {
	b := episodes.DeferredBatch{New: n.newEpisode(as, e, env, "", nil, nil), Delay: opts.Delay}
	first := map[string]int{} // key -> its item
	itemOf := make([]int, len(keys))
	existing := make([]int64, len(keys))
	for i := range keys {
		key, version, live, err := n.keyFor(ctx, store, keys[i])
		if err != nil {
			return nil, fmt.Errorf("event %d of the batch: %w", i, err)
		}
		if live != 0 {
			existing[i] = live // fired before the database moved to version 2
			continue
		}
		if j, seen := first[key]; seen {
			itemOf[i] = -1 - j // a repeat of item j
			continue
		}
		first[key], itemOf[i] = len(b.Items), len(b.Items)
		b.Items = append(b.Items, episodes.BatchItem{DedupeKey: key, KeyVersion: version, TriggerRef: refs[i], Payload: payloads[i], TraceParent: trace})
	}
	var res []episodes.DeferredCreated
	if len(b.Items) > 0 {
		var err error
		if res, err = store.CreateDeferredEpisodes(ctx, b); err != nil {
			return nil, err
		}
	}
	out := make([]Outcome, len(keys))
	for i := range keys {
		o := Outcome{ExpectationID: e.ID}
		ne := b.New
		if existing[i] != 0 {
			ne.DedupeKey = keys[i].V1
			out[i] = n.duplicateOfV1(ctx, keyedEpisode{ne: ne, existing: existing[i]})
			continue
		}
		item := itemOf[i]
		repeat := item < 0
		if repeat {
			item = -1 - item
		}
		r, it := res[item], b.Items[item]
		ne.DedupeKey = it.DedupeKey
		switch {
		case r.Created && !repeat:
			o.EpisodeID, o.Deferred = r.Episode.ID, true
			n.emit(ctx, n.aboutNew(ne, r.Episode.ID, telemetry.Event{Name: EventDeferred, Attempt: 1}))
		case r.Created:
			o.EpisodeID, o.Duplicate = r.Episode.ID, true
		default:
			o.EpisodeID, o.Duplicate = r.ExistingID, true
			n.emit(ctx, n.aboutNew(ne, r.ExistingID, telemetry.Event{Name: EventDuplicate}))
		}
		out[i] = o
	}
	return out, nil
}
