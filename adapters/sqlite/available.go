package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
)

// CreateDeferredEpisode runs CreateDeferredEpisode: the episode, created
// available, in one statement, inside a transaction (a savepoint of the
// caller's, for FireTx) so that a duplicate reads the live episode's id
// (FindLiveEpisode) under the same write lock.
func (s *Store) CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error) {
	ctx = withLane(ctx, laneOther) // new work: see the package's Lock section
	n := d.New
	var out episodes.DeferredCreated
	err := s.inTx(ctx, func(s *Store) error {
		out = episodes.DeferredCreated{}
		row, err := s.q.CreateDeferredEpisode(ctx, s.conn, sqlitedb.CreateDeferredEpisodeParams{
			ActorID:       n.ActorID,
			ExpectationID: n.ExpectationID,
			TriggerType:   string(n.TriggerType),
			TriggerRef:    jsonArg(n.TriggerRef),
			DedupeKey:     nullable(n.DedupeKey),
			MaxAttempts:   int64(n.MaxAttempts),
			Budget:        jsonArg(n.Budget),
			SourceStack:   n.SourceStack,
			SourceEnv:     n.SourceEnv,
			Payload:       jsonArg(n.Payload),
			TraceParent:   nullable(n.TraceParent),
			KeyVersion:    int64(episodes.KeyVersionOf(n.KeyVersion)),
			DelayMs:       d.Delay.Milliseconds(),
			Opts:          jsonArg(d.Opts),
		})
		if errors.Is(err, sql.ErrNoRows) {
			out.ExistingID, err = s.liveEpisode(ctx, n.DedupeKey)
			return err
		}
		if err != nil {
			return dbError("CreateDeferredEpisode", err)
		}
		out = episodes.DeferredCreated{Created: true, Episode: n.Queued(row.ID, fromMs(row.CreatedAt))}
		return nil
	})
	if err != nil {
		return episodes.DeferredCreated{}, err
	}
	return out, nil
}

// CreateDeferredEpisodes runs CreateDeferredEpisodes in one transaction (a
// savepoint of the caller's, for FireBatchTx): b's items created available
// in one statement, each deduplicated on its own key. One result per item,
// in b.Items' order; a duplicate names its live episode (FindLiveEpisode,
// same transaction).
func (s *Store) CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error) {
	ctx = withLane(ctx, laneOther) // new work: see the package's Lock section
	if len(b.Items) == 0 {
		return nil, nil
	}
	items, err := b.BatchJSON()
	if err != nil {
		return nil, err
	}
	var out []episodes.DeferredCreated
	err = s.inTx(ctx, func(s *Store) error {
		rows, err := s.q.CreateDeferredEpisodes(ctx, s.conn, sqlitedb.CreateDeferredEpisodesParams{
			ActorID: b.ActorID, ExpectationID: b.ExpectationID, TriggerType: string(b.TriggerType),
			MaxAttempts: int64(b.MaxAttempts), Budget: jsonArg(b.Budget), SourceStack: b.SourceStack, SourceEnv: b.SourceEnv,
			DelayMs: b.Delay.Milliseconds(), Items: string(items),
		})
		if err != nil {
			return dbError("CreateDeferredEpisodes", err)
		}
		created := make(map[string]sqlitedb.CreateDeferredEpisodesRow, len(rows))
		for _, r := range rows {
			created[deref(r.DedupeKey)] = r
		}
		out = make([]episodes.DeferredCreated, len(b.Items))
		for i, it := range b.Items {
			if r, ok := created[it.DedupeKey]; ok {
				out[i] = episodes.DeferredCreated{Created: true, Episode: b.Episode(i, r.ID, fromMs(r.CreatedAt))}
				continue
			}
			id, err := s.liveEpisode(ctx, it.DedupeKey)
			if err != nil {
				return err
			}
			out[i] = episodes.DeferredCreated{ExistingID: id}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimAvailable is a poll: ClaimAvailable (the pick: up to q.Limit due
// available episodes of q's scope leave the available set),
// ClaimAvailableGrant (each one's work claim granted to q.Owner) and
// ClaimAvailableStart (the granted ones started), in one transaction,
// under the database write lock (where Postgres runs one statement with
// FOR UPDATE SKIP LOCKED). Every picked episode comes back, in id order;
// one granted to q.Owner was started under that grant, whose claim is
// stamped with the instant before the grant statement was sent (where its
// local lease clock starts; the transaction already held the write lock
// then, so the wait for it is not taken from the lease). Fence 0: the
// episode's claim was held live elsewhere.
func (s *Store) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	ctx = withLane(ctx, laneOther) // new work for this node: in arrival order with the writes of the work it runs (see the package's Lock section)
	if len(q.Runnable) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ClaimAvailable: %w", err)
	}
	var out []episodes.Dispatched
	err = s.inTx(ctx, func(s *Store) error {
		out = nil
		picked, err := s.q.ClaimAvailable(ctx, s.conn, sqlitedb.ClaimAvailableParams{
			SourceEnv: q.Env, SourceStack: q.Stack, Runnable: runnable, MaxRows: rowLimit(q.Limit),
		})
		if err != nil {
			return dbError("ClaimAvailable", err)
		}
		if len(picked) == 0 {
			return nil
		}
		out, err = s.grantAvailable(ctx, q, picked)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// grantAvailable runs ClaimAvailableGrant and ClaimAvailableStart for the
// episodes ClaimAvailable picked, in the Store's transaction, and returns
// one Dispatched per picked episode, in id order.
func (s *Store) grantAvailable(ctx context.Context, q episodes.AvailableQuery, picked []sqlitedb.ClaimAvailableRow) ([]episodes.Dispatched, error) {
	slices.SortFunc(picked, func(a, b sqlitedb.ClaimAvailableRow) int { return cmp.Compare(a.ID, b.ID) })
	ids := make([]int64, len(picked))
	byKey := make(map[string]int, len(picked)) // claim key -> index in picked
	for i, p := range picked {
		ids[i] = p.ID
		byKey[p.Column2] = i // Column2: the claim key
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ClaimAvailableGrant: %w", err)
	}
	sent := time.Now()
	grants, err := s.q.ClaimAvailableGrant(ctx, s.conn, sqlitedb.ClaimAvailableGrantParams{
		OwnerNode: q.Owner, LeaseMs: q.Lease.Milliseconds(), EpisodeIds: string(idsJSON),
	})
	if err != nil {
		return nil, dbError("ClaimAvailableGrant", err)
	}
	start := s.grantStart(sent)
	out := make([]episodes.Dispatched, len(picked))
	for i, p := range picked {
		out[i] = episodes.Dispatched{EpisodeID: p.ID, ActorID: p.ActorID, ExpectationID: p.ExpectationID, Opts: jsonRaw(p.Opts)}
	}
	if len(grants) == 0 {
		return out, nil
	}
	type startItem struct {
		ID       int64  `json:"id"`
		ClaimKey string `json:"claim_key"`
		Fence    int64  `json:"fence"`
	}
	items := make([]startItem, 0, len(grants))
	for _, g := range grants {
		i, ok := byKey[g.DedupeKey]
		if !ok { // the grant statement grants only picked episodes' keys
			return nil, fmt.Errorf("sqlite: ClaimAvailableGrant: granted %q, which no picked episode holds: %w", g.DedupeKey, errNoMatch)
		}
		out[i].Claim = episodes.GrantedClaim(start, g.DedupeKey, q.Owner, g.Fence, int32(g.Attempt), fromMs(g.LeaseUntil), fromMs(g.ClaimedAt), g.GrantKind)
		items = append(items, startItem{ID: picked[i].ID, ClaimKey: g.DedupeKey, Fence: g.Fence})
	}
	itemsJSON, err := json.Marshal(items)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ClaimAvailableStart: %w", err)
	}
	started, err := s.q.ClaimAvailableStart(ctx, s.conn, sqlitedb.ClaimAvailableStartParams{OwnerNode: q.Owner, Items: string(itemsJSON)})
	if err != nil {
		return nil, dbError("ClaimAvailableStart", err)
	}
	byID := make(map[int64]int, len(picked))
	for i, p := range picked {
		byID[p.ID] = i
	}
	for _, e := range started {
		i, ok := byID[e.ID]
		if !ok {
			continue // cannot happen: the statement starts picked episodes only
		}
		out[i].Started, out[i].NextStep = true, int32(e.Column2) // Column2: the next free step number
		out[i].Episode = episodes.Episode{
			ID: e.ID, ActorID: e.ActorID, ExpectationID: e.ExpectationID, TriggerType: episodes.TriggerType(e.TriggerType),
			TriggerRef: jsonRaw(e.TriggerRef), DedupeKey: deref(e.DedupeKey), Status: episodes.StatusRunning,
			Attempts: int32(e.Attempts), MaxAttempts: int32(e.MaxAttempts), SourceStack: e.SourceStack, SourceEnv: e.SourceEnv,
			OwnerNode: q.Owner, Payload: jsonRaw(e.Payload), Result: jsonRaw(e.Result), ErrorClass: deref(e.ErrorClass),
			ErrorDetail: jsonRaw(e.ErrorDetail), CreatedAt: fromMs(e.CreatedAt), StartedAt: fromMsPtr(e.StartedAt),
			LastStepAt: fromMsPtr(e.LastStepAt), TraceParent: deref(e.TraceParent),
		}
	}
	return out, nil
}

// ExpireAvailable runs ExpireAvailable, one statement: the available
// episodes of q's scope due more than q.TTL ago end canceled (class
// trigger_expired); their ids come back.
func (s *Store) ExpireAvailable(ctx context.Context, q episodes.ExpireQuery) ([]int64, error) {
	ids, err := s.q.ExpireAvailable(ctx, s.conn, sqlitedb.ExpireAvailableParams{
		AllEnvs: boolInt(q.AllEnvs), SourceEnv: q.Env, SourceStack: q.Stack, TtlMs: q.TTL.Milliseconds(),
	})
	if err != nil {
		return nil, dbError("ExpireAvailable", err)
	}
	return ids, nil
}

// NextAvailableDue runs NextAvailableDue for q's scope (Env, Stack,
// Runnable): how long until its next available episode falls due on the
// database clock; false when none is waiting.
func (s *Store) NextAvailableDue(ctx context.Context, q episodes.AvailableQuery) (time.Duration, bool, error) {
	if len(q.Runnable) == 0 {
		return 0, false, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: NextAvailableDue: %w", err)
	}
	ms, err := s.q.NextAvailableDue(ctx, s.conn, sqlitedb.NextAvailableDueParams{
		SourceEnv: q.Env, SourceStack: q.Stack, Runnable: runnable,
	})
	if err != nil {
		return 0, false, dbError("NextAvailableDue", err)
	}
	wait, ok := episodes.DueWait(ms)
	return wait, ok, nil
}
