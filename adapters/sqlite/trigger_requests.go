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

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
)

// CreateDeferredEpisode runs CreateDeferredEpisode and
// CreateDeferredEpisodeRequest in one transaction (a savepoint of the
// caller's, for FireTx): the unclaimed episode and its trigger request land
// together. A duplicate writes nothing and reads the live episode's id.
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
		})
		if errors.Is(err, sql.ErrNoRows) {
			out.ExistingID, err = s.liveEpisode(ctx, n.DedupeKey)
			return err
		}
		if err != nil {
			return dbError("CreateDeferredEpisode", err)
		}
		reqID, err := s.q.CreateDeferredEpisodeRequest(ctx, s.conn, sqlitedb.CreateDeferredEpisodeRequestParams{
			SourceNode: d.SourceNode, Opts: jsonArg(d.Opts), DelayMs: d.Delay.Milliseconds(), EpisodeID: row.ID,
		})
		if err != nil {
			return dbError("CreateDeferredEpisodeRequest", err)
		}
		out = episodes.DeferredCreated{Created: true, Episode: n.Queued(row.ID, fromMs(row.CreatedAt)), RequestID: reqID}
		return nil
	})
	if err != nil {
		return episodes.DeferredCreated{}, err
	}
	return out, nil
}

// CreateDeferredEpisodes runs CreateDeferredEpisodes and
// CreateDeferredEpisodesRequests in one transaction (a savepoint of the
// caller's, for FireBatchTx): b's items created available, each
// deduplicated on its own key. One result per item, in b.Items' order; a
// duplicate names its live episode (FindLiveEpisode, same transaction).
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
			Items: string(items),
		})
		if err != nil {
			return dbError("CreateDeferredEpisodes", err)
		}
		created := make(map[string]sqlitedb.CreateDeferredEpisodesRow, len(rows))
		ids := make([]int64, len(rows))
		for i, r := range rows {
			created[deref(r.DedupeKey)], ids[i] = r, r.ID
		}
		requests := map[int64]int64{}
		if len(ids) > 0 {
			idsJSON, err := json.Marshal(ids)
			if err != nil {
				return fmt.Errorf("sqlite: CreateDeferredEpisodesRequests: %w", err)
			}
			reqs, err := s.q.CreateDeferredEpisodesRequests(ctx, s.conn, sqlitedb.CreateDeferredEpisodesRequestsParams{
				SourceNode: b.SourceNode, DelayMs: b.Delay.Milliseconds(), EpisodeIds: string(idsJSON),
			})
			if err != nil {
				return dbError("CreateDeferredEpisodesRequests", err)
			}
			for _, r := range reqs {
				requests[r.EpisodeID] = r.ID
			}
			if len(requests) != len(ids) {
				return fmt.Errorf("sqlite: CreateDeferredEpisodesRequests: %d requests for %d episodes: %w", len(requests), len(ids), errNoMatch)
			}
		}
		out = make([]episodes.DeferredCreated, len(b.Items))
		for i, it := range b.Items {
			if r, ok := created[it.DedupeKey]; ok {
				out[i] = episodes.DeferredCreated{Created: true, Episode: b.Episode(i, r.ID, fromMs(r.CreatedAt)), RequestID: requests[r.ID]}
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

// ClaimTriggerRequests runs ClaimTriggerRequests: one statement, under the
// database write lock (where Postgres takes FOR UPDATE SKIP LOCKED).
func (s *Store) ClaimTriggerRequests(ctx context.Context, q episodes.RequestQuery) ([]episodes.TriggerRequest, error) {
	ctx = withLane(ctx, laneOther) // new work for this node: in arrival order with the writes of the work it runs (see the package's Lock section)
	if len(q.Runnable) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ClaimTriggerRequests: %w", err)
	}
	rows, err := s.q.ClaimTriggerRequests(ctx, s.conn, sqlitedb.ClaimTriggerRequestsParams{
		OwnerNode: q.Owner, LeaseMs: q.Lease.Milliseconds(), SourceEnv: q.Env, SourceStack: q.Stack,
		Runnable: runnable, MaxRows: rowLimit(q.Limit),
	})
	if err != nil {
		return nil, dbError("ClaimTriggerRequests", err)
	}
	out := make([]episodes.TriggerRequest, len(rows))
	for i, r := range rows {
		out[i] = episodes.TriggerRequest{
			ID: r.ID, EpisodeID: r.EpisodeID, ActorID: r.ActorID, ExpectationID: r.ExpectationID,
			SourceNode: r.SourceNode, Owner: q.Owner, Fence: r.Fence, Opts: jsonRaw(r.Opts),
		}
	}
	return out, nil
}

// DispatchTriggerRequest runs DispatchTriggerRequest,
// DispatchTriggerRequestGrant and DispatchTriggerRequestStart in one
// transaction: completes the request, grants its episode's work claim to
// the request's owner and starts the episode under that grant.
// claims.ErrLeaseLost when the request claim lapsed and another poller
// holds it.
func (s *Store) DispatchTriggerRequest(ctx context.Context, r episodes.TriggerRequest, lease time.Duration) (episodes.Dispatched, error) {
	ctx = withLane(ctx, laneOther) // new work for this node: in arrival order with the writes of the work it runs (see the package's Lock section)
	var out episodes.Dispatched
	err := s.inTx(ctx, func(s *Store) error {
		req, err := s.q.DispatchTriggerRequest(ctx, s.conn, sqlitedb.DispatchTriggerRequestParams{ID: r.ID, OwnerNode: r.Owner, Fence: r.Fence})
		if errors.Is(err, sql.ErrNoRows) {
			return claims.ErrLeaseLost
		}
		if err != nil {
			return dbError("DispatchTriggerRequest", err)
		}
		out, err = s.handOver(ctx, r.Owner, req.ID, req.EpisodeID, lease)
		return err
	})
	if err != nil {
		return episodes.Dispatched{}, err
	}
	return out, nil
}

// DispatchTriggerRequests runs DispatchTriggerRequests, then
// DispatchTriggerRequestGrant and DispatchTriggerRequestStart for each
// request it completed, in one transaction per dispatchHold: the requests
// of one poller (owner) handed over, each fenced on its own request claim,
// dispatchPerStatement to a statement, and each completed request granted and
// started in the transaction that completed it. It returns one Dispatched
// per request that was still the poller's, in request id order; a request
// missing from the result lapsed (claims.ErrLeaseLost for it alone). On an
// error, the hand-overs committed before it are returned with it: their
// runs are the poller's to start, and only the others may be tried again.
func (s *Store) DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error) {
	ctx = withLane(ctx, laneOther) // new work for this node: in arrival order with the writes of the work it runs (see the package's Lock section)
	var out []episodes.Dispatched
	for todo := reqs; len(todo) > 0; {
		var (
			got   []episodes.Dispatched
			taken int
		)
		err := s.inTx(ctx, func(tx *Store) error {
			got, taken = got[:0], 0
			for taken < len(todo) {
				if taken > 0 && time.Since(tx.lockedAt) >= dispatchHold {
					break
				}
				chunk := todo[taken:min(taken+dispatchPerStatement, len(todo))]
				ds, err := tx.dispatchChunk(ctx, owner, chunk, lease)
				if err != nil {
					return err
				}
				got = append(got, ds...)
				taken += len(chunk)
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		out = append(out, got...)
		todo = todo[taken:]
	}
	slices.SortFunc(out, func(a, b episodes.Dispatched) int { return cmp.Compare(a.RequestID, b.RequestID) })
	return out, nil
}

// dispatchPerStatement bounds the requests one DispatchTriggerRequests
// statement carries here, and dispatchHold how long one transaction takes chunks
// before it commits and lets the lease writes waiting behind it in (one
// chunk at least). Under -race on a loaded host a hand-over holds the
// lock 30-60 ms, and a batch of eight in one transaction held it 0.26 s at
// the median and 1.2 s at worst, which renewals of every process on the
// file waited out.
const (
	dispatchPerStatement = 2
	dispatchHold         = requeueHold
)

// dispatchChunk runs DispatchTriggerRequests for reqs and hands over each
// request it completed, in the Store's transaction.
func (s *Store) dispatchChunk(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error) {
	js, err := episodes.HandOverItems(owner, reqs)
	if err != nil {
		return nil, fmt.Errorf("sqlite: DispatchTriggerRequests: %w", err)
	}
	done, err := s.q.DispatchTriggerRequests(ctx, s.conn, sqlitedb.DispatchTriggerRequestsParams{Items: string(js), OwnerNode: owner})
	if err != nil {
		return nil, dbError("DispatchTriggerRequests", err)
	}
	slices.SortFunc(done, func(a, b sqlitedb.DispatchTriggerRequestsRow) int { return cmp.Compare(a.ID, b.ID) })
	out := make([]episodes.Dispatched, 0, len(done))
	for _, req := range done {
		d, err := s.handOver(ctx, owner, req.ID, req.EpisodeID, lease)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// handOver runs DispatchTriggerRequestGrant and, with a grant,
// DispatchTriggerRequestStart for a request just completed in the Store's
// transaction. The grant's local clock starts just before its own
// statement is sent, which evaluates the database's clock after that: in a
// batch, the time the transaction spent granting the requests before it
// is not taken from this one's lease (under -race on a loaded host a batch
// of eight held the lock 0.26-1.2 s).
func (s *Store) handOver(ctx context.Context, owner string, requestID, episodeID int64, lease time.Duration) (episodes.Dispatched, error) {
	d := episodes.Dispatched{RequestID: requestID, EpisodeID: episodeID}
	sent := time.Now()
	g, err := s.q.DispatchTriggerRequestGrant(ctx, s.conn, sqlitedb.DispatchTriggerRequestGrantParams{
		OwnerNode: owner, LeaseMs: lease.Milliseconds(), EpisodeID: episodeID,
	})
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil // not ours to run: it already ran or is held live elsewhere
	}
	if err != nil {
		return d, dbError("DispatchTriggerRequestGrant", err)
	}
	d.Claim = episodes.GrantedClaim(s.grantStart(sent), g.DedupeKey, owner, g.Fence, int32(g.Attempt), fromMs(g.LeaseUntil), fromMs(g.ClaimedAt), g.GrantKind)
	e, err := s.q.DispatchTriggerRequestStart(ctx, s.conn, sqlitedb.DispatchTriggerRequestStartParams{
		OwnerNode: owner, EpisodeID: episodeID, ClaimKey: g.DedupeKey, Fence: g.Fence,
	})
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil // granted, not started: the caller releases the grant
	}
	if err != nil {
		return d, dbError("DispatchTriggerRequestStart", err)
	}
	d.Started, d.NextStep = true, int32(e.Column2) // Column2: the next free step number
	d.Episode = episodes.Episode{
		ID: e.ID, ActorID: e.ActorID, ExpectationID: e.ExpectationID, TriggerType: episodes.TriggerType(e.TriggerType),
		TriggerRef: jsonRaw(e.TriggerRef), DedupeKey: deref(e.DedupeKey), Status: episodes.StatusRunning,
		Attempts: int32(e.Attempts), MaxAttempts: int32(e.MaxAttempts), SourceStack: e.SourceStack, SourceEnv: e.SourceEnv,
		OwnerNode: owner, Payload: jsonRaw(e.Payload), Result: jsonRaw(e.Result), ErrorClass: deref(e.ErrorClass),
		ErrorDetail: jsonRaw(e.ErrorDetail), CreatedAt: fromMs(e.CreatedAt), StartedAt: fromMsPtr(e.StartedAt),
		LastStepAt: fromMsPtr(e.LastStepAt), TraceParent: deref(e.TraceParent),
	}
	return d, nil
}

// ExpireTriggerRequests runs ExpireTriggerRequests and
// ExpireTriggerRequestsCancel in one transaction.
func (s *Store) ExpireTriggerRequests(ctx context.Context, q episodes.ExpireQuery) ([]episodes.Expired, error) {
	var out []episodes.Expired
	err := s.inTx(ctx, func(s *Store) error {
		rows, err := s.q.ExpireTriggerRequests(ctx, s.conn, sqlitedb.ExpireTriggerRequestsParams{
			AllEnvs: boolInt(q.AllEnvs), SourceEnv: q.Env, SourceStack: q.Stack, TtlMs: q.TTL.Milliseconds(),
		})
		if err != nil {
			return dbError("ExpireTriggerRequests", err)
		}
		out = make([]episodes.Expired, len(rows))
		if len(rows) == 0 {
			return nil
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.EpisodeID
		}
		idsJSON, err := json.Marshal(ids)
		if err != nil {
			return fmt.Errorf("sqlite: ExpireTriggerRequestsCancel: %w", err)
		}
		canceledIDs, err := s.q.ExpireTriggerRequestsCancel(ctx, s.conn, string(idsJSON))
		if err != nil {
			return dbError("ExpireTriggerRequestsCancel", err)
		}
		canceled := make(map[int64]bool, len(canceledIDs))
		for _, id := range canceledIDs {
			canceled[id] = true
		}
		for i, r := range rows {
			out[i] = episodes.Expired{RequestID: r.ID, EpisodeID: r.EpisodeID, EpisodeCanceled: canceled[r.EpisodeID]}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListTriggerRequests runs ListTriggerRequests, an operator read.
func (s *Store) ListTriggerRequests(ctx context.Context, q episodes.RequestListQuery) ([]episodes.RequestInfo, error) {
	rows, err := s.q.ListTriggerRequests(ctx, s.conn, sqlitedb.ListTriggerRequestsParams{
		SourceEnv: q.Env, Status: q.Status, MaxRows: rowLimit(q.Limit),
	})
	if err != nil {
		return nil, dbError("ListTriggerRequests", err)
	}
	out := make([]episodes.RequestInfo, len(rows))
	for i, r := range rows {
		out[i] = episodes.RequestInfo{
			ID: r.ID, EpisodeID: r.EpisodeID, ActorID: r.ActorID, ExpectationID: r.ExpectationID,
			SourceNode: r.SourceNode, SourceStack: r.SourceStack, SourceEnv: r.SourceEnv, Status: r.Status,
			ClaimedBy: r.ClaimedBy, Fence: r.Fence, Opts: jsonRaw(r.Opts), CreatedAt: fromMs(r.CreatedAt),
			ClaimedAt: fromMsPtr(r.ClaimedAt), ClaimUntil: fromMsPtr(r.ClaimUntil), FinishedAt: fromMsPtr(r.FinishedAt),
		}
	}
	return out, nil
}

// ReleaseTriggerRequests runs ReleaseTriggerRequests: owner's claims on
// reqs given back, each fenced on its own request claim. It returns the ids
// released; a request missing from them was not this poller's any more
// (its claim lapsed, or it was handed over).
func (s *Store) ReleaseTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest) ([]int64, error) {
	ctx = withLane(ctx, laneTakeover) // work given back, on its way to another node: see the package's Lock section
	if len(reqs) == 0 {
		return nil, nil
	}
	js, err := episodes.HandOverItems(owner, reqs)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ReleaseTriggerRequests: %w", err)
	}
	ids, err := s.q.ReleaseTriggerRequests(ctx, s.conn, sqlitedb.ReleaseTriggerRequestsParams{Items: string(js), OwnerNode: owner})
	if err != nil {
		return nil, dbError("ReleaseTriggerRequests", err)
	}
	return ids, nil
}

// NextTriggerRequestDue runs NextTriggerRequestDue for q's scope (Env,
// Stack, Runnable): how long until its next request becomes claimable on
// the database clock; false when none is waiting.
func (s *Store) NextTriggerRequestDue(ctx context.Context, q episodes.RequestQuery) (time.Duration, bool, error) {
	if len(q.Runnable) == 0 {
		return 0, false, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: NextTriggerRequestDue: %w", err)
	}
	ms, err := s.q.NextTriggerRequestDue(ctx, s.conn, sqlitedb.NextTriggerRequestDueParams{
		SourceEnv: q.Env, SourceStack: q.Stack, Runnable: runnable,
	})
	if err != nil {
		return 0, false, dbError("NextTriggerRequestDue", err)
	}
	wait, ok := episodes.DueWait(ms)
	return wait, ok, nil
}
