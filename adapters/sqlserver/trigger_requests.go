package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// CreateDeferredEpisode runs CreateDeferredEpisode: the unclaimed episode and
// its trigger request in one transaction (or in the caller's, under InTx).
// Created is false when a live episode already holds the dedupe key, whether
// the batch says so with an empty result or, outside a transaction, the
// filtered unique index with a duplicate-key error; nothing was written
// then. Inside InTx a duplicate-key error is returned: it has rolled the
// transaction back.
func (s *Store) CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error) {
	n := d.New
	var (
		created       bool
		id, requestID int64
		createdAt     time.Time
	)
	err := s.queryRow(ctx, "CreateDeferredEpisode",
		sql.Named("actor_id", n.ActorID),
		sql.Named("expectation_id", n.ExpectationID),
		sql.Named("trigger_type", string(n.TriggerType)),
		sql.Named("trigger_ref", jsonArg(n.TriggerRef)),
		sql.Named("dedupe_key", nullString(n.DedupeKey)),
		sql.Named("max_attempts", n.MaxAttempts),
		sql.Named("budget", jsonArg(n.Budget)),
		sql.Named("source_stack", n.SourceStack),
		sql.Named("source_env", n.SourceEnv),
		sql.Named("payload", jsonArg(n.Payload)),
		sql.Named("trace_parent", nullString(n.TraceParent)),
		sql.Named("key_version", episodes.KeyVersionOf(n.KeyVersion)),
		sql.Named("source_node", d.SourceNode),
		sql.Named("opts", jsonArg(d.Opts)),
		sql.Named("delay_ms", d.Delay.Milliseconds()),
	).Scan(&created, &id, &createdAt, &requestID)
	if errors.Is(err, sql.ErrNoRows) || s.lostRace(err) {
		id, err := s.liveEpisode(ctx, n.DedupeKey, 0)
		return episodes.DeferredCreated{ExistingID: id}, err
	}
	if err != nil {
		return episodes.DeferredCreated{}, err
	}
	if !created {
		id, err := s.liveEpisode(ctx, n.DedupeKey, id)
		return episodes.DeferredCreated{ExistingID: id}, err
	}
	return episodes.DeferredCreated{
		Created:   true,
		Episode:   n.Queued(id, createdAt),
		RequestID: requestID,
	}, nil
}

// ClaimTriggerRequests runs ClaimTriggerRequests (UPDLOCK, READPAST: SQL
// Server's SKIP LOCKED). The (actor, expectation) pairs travel as one JSON
// array in @runnable. No pairs or no room claims nothing and sends nothing.
func (s *Store) ClaimTriggerRequests(ctx context.Context, q episodes.RequestQuery) ([]episodes.TriggerRequest, error) {
	if len(q.Runnable) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return nil, fmt.Errorf("sqlserver: ClaimTriggerRequests: %w", err)
	}
	rows, err := s.query(ctx, "ClaimTriggerRequests",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("source_env", q.Env),
		sql.Named("source_stack", q.Stack),
		sql.Named("runnable", runnable),
		sql.Named("owner_node", q.Owner),
		sql.Named("lease_ms", q.Lease.Milliseconds()),
	)
	if err != nil {
		return nil, err
	}
	out := make([]episodes.TriggerRequest, 0, len(rows.rows))
	for rows.Next() {
		var (
			r    episodes.TriggerRequest
			opts sql.NullString
		)
		if err := rows.Scan(&r.ID, &r.EpisodeID, &r.ActorID, &r.ExpectationID, &r.SourceNode, &r.Fence, &opts); err != nil {
			return nil, err
		}
		r.Owner, r.Opts = q.Owner, rawJSON(opts)
		out = append(out, r)
	}
	return out, nil
}

// DispatchTriggerRequest runs DispatchTriggerRequest: completes the request
// and grants its episode's work claim to the request's owner.
// claims.ErrLeaseLost when the request claim lapsed and another poller holds
// it (no row back); Claim is the zero claim when the episode is not this
// node's to run.
func (s *Store) DispatchTriggerRequest(ctx context.Context, r episodes.TriggerRequest, lease time.Duration) (episodes.Dispatched, error) {
	var (
		requestID, episodeID, fence                  int64
		claimKey, grantKind                          string
		attempt, nextStep                            int32
		leaseUntil, claimedAt                        time.Time
		started                                      bool
		actor, expectation, triggerType, dedupeKey   sql.NullString
		triggerRef, payload, res, errorClass, detail sql.NullString
		stack, env, traceParent                      sql.NullString
		attempts, maxAttempts                        sql.NullInt32
		created, startedAt, lastStep                 sql.NullTime
	)
	sent := time.Now()
	err := s.queryRow(ctx, "DispatchTriggerRequest",
		sql.Named("id", r.ID),
		sql.Named("owner_node", r.Owner),
		sql.Named("fence", r.Fence),
		sql.Named("lease_ms", lease.Milliseconds()),
	).Scan(&requestID, &episodeID, &claimKey, &fence, &attempt, &leaseUntil, &claimedAt, &grantKind,
		&started, &nextStep, &actor, &expectation, &triggerType, &triggerRef,
		&dedupeKey, &attempts, &maxAttempts, &stack, &env, &payload, &res, &errorClass,
		&detail, &created, &startedAt, &lastStep, &traceParent)
	if errors.Is(err, sql.ErrNoRows) {
		return episodes.Dispatched{}, claims.ErrLeaseLost
	}
	if err != nil {
		return episodes.Dispatched{}, err
	}
	d := episodes.Dispatched{
		RequestID: requestID,
		EpisodeID: episodeID,
		Claim:     episodes.GrantedClaim(sent, claimKey, r.Owner, fence, attempt, leaseUntil, claimedAt, grantKind),
		Started:   started,
		NextStep:  nextStep,
	}
	if started {
		d.Episode = episodes.Episode{
			ID: episodeID, ActorID: actor.String, ExpectationID: expectation.String,
			TriggerType: episodes.TriggerType(triggerType.String), TriggerRef: rawJSON(triggerRef),
			DedupeKey: dedupeKey.String, Status: episodes.StatusRunning,
			Attempts: attempts.Int32, MaxAttempts: maxAttempts.Int32,
			SourceStack: stack.String, SourceEnv: env.String, OwnerNode: r.Owner,
			Payload: rawJSON(payload), Result: rawJSON(res), ErrorClass: errorClass.String, ErrorDetail: rawJSON(detail),
			CreatedAt: created.Time, StartedAt: timePtr(startedAt), LastStepAt: timePtr(lastStep),
			TraceParent: traceParent.String,
		}
	}
	return d, nil
}

// ExpireTriggerRequests runs ExpireTriggerRequests; q.AllEnvs (Maintain)
// expires every env's requests.
func (s *Store) ExpireTriggerRequests(ctx context.Context, q episodes.ExpireQuery) ([]episodes.Expired, error) {
	rows, err := s.query(ctx, "ExpireTriggerRequests",
		sql.Named("source_env", q.Env),
		sql.Named("source_stack", q.Stack),
		sql.Named("ttl_ms", q.TTL.Milliseconds()),
		sql.Named("all_envs", q.AllEnvs),
	)
	if err != nil {
		return nil, err
	}
	out := make([]episodes.Expired, 0, len(rows.rows))
	for rows.Next() {
		var (
			e        episodes.Expired
			canceled sql.NullBool
		)
		if err := rows.Scan(&e.RequestID, &e.EpisodeID, &canceled); err != nil {
			return nil, err
		}
		e.EpisodeCanceled = canceled.Bool
		out = append(out, e)
	}
	return out, nil
}

// ListTriggerRequests runs ListTriggerRequests, an operator read.
func (s *Store) ListTriggerRequests(ctx context.Context, q episodes.RequestListQuery) ([]episodes.RequestInfo, error) {
	rows, err := s.query(ctx, "ListTriggerRequests",
		sql.Named("max_rows", maxRows(q.Limit)),
		sql.Named("source_env", q.Env),
		sql.Named("status", q.Status),
	)
	if err != nil {
		return nil, err
	}
	out := make([]episodes.RequestInfo, 0, len(rows.rows))
	for rows.Next() {
		var (
			r                               episodes.RequestInfo
			opts                            sql.NullString
			claimedAt, claimUntil, finished sql.NullTime
		)
		if err := rows.Scan(
			&r.ID, &r.EpisodeID, &r.ActorID, &r.ExpectationID, &r.SourceNode,
			&r.SourceStack, &r.SourceEnv, &r.Status, &r.ClaimedBy,
			&r.Fence, &opts, &r.CreatedAt, &claimedAt, &claimUntil, &finished,
		); err != nil {
			return nil, err
		}
		r.Opts = rawJSON(opts)
		r.ClaimedAt, r.ClaimUntil, r.FinishedAt = timePtr(claimedAt), timePtr(claimUntil), timePtr(finished)
		out = append(out, r)
	}
	return out, nil
}

// CreateDeferredEpisodes runs CreateDeferredEpisodes: b's items created
// available in one transaction (or the caller's), each deduplicated on its
// own key. One result per item, in b.Items' order; a duplicate's live
// episode is read with FindLiveEpisode.
func (s *Store) CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error) {
	if len(b.Items) == 0 {
		return nil, nil
	}
	items, err := b.BatchJSON()
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, "CreateDeferredEpisodes",
		sql.Named("items", string(items)),
		sql.Named("actor_id", b.ActorID),
		sql.Named("expectation_id", b.ExpectationID),
		sql.Named("trigger_type", string(b.TriggerType)),
		sql.Named("max_attempts", b.MaxAttempts),
		sql.Named("budget", jsonArg(b.Budget)),
		sql.Named("source_stack", b.SourceStack),
		sql.Named("source_env", b.SourceEnv),
		sql.Named("source_node", b.SourceNode),
		sql.Named("delay_ms", b.Delay.Milliseconds()),
	)
	if err != nil {
		return nil, err
	}
	type row struct {
		created       bool
		id, requestID int64
		createdAt     time.Time
	}
	byKey := map[string]row{}
	for rows.Next() {
		var (
			r   row
			key string
		)
		if err := rows.Scan(&r.created, &r.id, &r.createdAt, &key, &r.requestID); err != nil {
			return nil, err
		}
		byKey[key] = r
	}
	out := make([]episodes.DeferredCreated, len(b.Items))
	for i, it := range b.Items {
		r := byKey[it.DedupeKey]
		if r.created {
			out[i] = episodes.DeferredCreated{Created: true, Episode: b.Episode(i, r.id, r.createdAt), RequestID: r.requestID}
			continue
		}
		id, err := s.liveEpisode(ctx, it.DedupeKey, 0)
		if err != nil {
			return nil, err
		}
		out[i] = episodes.DeferredCreated{ExistingID: id}
	}
	return out, nil
}

// ReleaseTriggerRequests runs ReleaseTriggerRequests: owner's claims on
// reqs given back, each fenced on its own request claim (@items, a JSON
// array of {"id", "fence"}). It returns the ids released; a request
// missing from them was not this poller's any more.
func (s *Store) ReleaseTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest) ([]int64, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	js, err := episodes.HandOverItems(owner, reqs)
	if err != nil {
		return nil, fmt.Errorf("sqlserver: ReleaseTriggerRequests: %w", err)
	}
	rows, err := s.query(ctx, "ReleaseTriggerRequests",
		sql.Named("items", string(js)),
		sql.Named("owner_node", owner),
	)
	if err != nil {
		return nil, err
	}
	out := make([]int64, 0, len(rows.rows))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// NextTriggerRequestDue runs NextTriggerRequestDue for q's scope (Env,
// Stack, Runnable as one JSON array): how long until its next request
// becomes claimable on the database clock; false when none is waiting.
func (s *Store) NextTriggerRequestDue(ctx context.Context, q episodes.RequestQuery) (time.Duration, bool, error) {
	if len(q.Runnable) == 0 {
		return 0, false, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return 0, false, fmt.Errorf("sqlserver: NextTriggerRequestDue: %w", err)
	}
	var ms int64
	err = s.queryRow(ctx, "NextTriggerRequestDue",
		sql.Named("source_env", q.Env),
		sql.Named("source_stack", q.Stack),
		sql.Named("runnable", runnable),
	).Scan(&ms)
	if err != nil {
		return 0, false, err
	}
	wait, ok := episodes.DueWait(ms)
	return wait, ok, nil
}
