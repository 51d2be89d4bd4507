package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/episodes"
)

// RetiredRequestsError is the error number migration 00016's trigger on
// leasehold_trigger_requests THROWs at any INSERT: since schema 16 available
// work is an episode row, and only a binary older than its database still
// writes a trigger request (Postgres raises SQLSTATE LH003).
const RetiredRequestsError = 51003

// CreateDeferredEpisode runs CreateDeferredEpisode: the episode, created
// available, in one INSERT (in the caller's transaction under InTx).
// Created is false when a live episode already holds the dedupe key,
// whether the batch says so with an empty result or, outside a
// transaction, the filtered unique index with a duplicate-key error;
// nothing was written then. Inside InTx a duplicate-key error is returned:
// it has rolled the transaction back.
func (s *Store) CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error) {
	n := d.New
	var (
		created   bool
		id        int64
		createdAt time.Time
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
		sql.Named("opts", jsonArg(d.Opts)),
		sql.Named("delay_ms", d.Delay.Milliseconds()),
	).Scan(&created, &id, &createdAt)
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
	return episodes.DeferredCreated{Created: true, Episode: n.Queued(id, createdAt)}, nil
}

// CreateDeferredEpisodes runs CreateDeferredEpisodes: b's items created
// available in one INSERT (in the caller's transaction under InTx), each
// deduplicated on its own key. One result per item, in b.Items' order; a
// duplicate's live episode is read with FindLiveEpisode.
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
		sql.Named("delay_ms", b.Delay.Milliseconds()),
	)
	if err != nil {
		return nil, err
	}
	type row struct {
		created   bool
		id        int64
		createdAt time.Time
	}
	byKey := map[string]row{}
	for rows.Next() {
		var (
			r   row
			key string
		)
		if err := rows.Scan(&r.created, &r.id, &r.createdAt, &key); err != nil {
			return nil, err
		}
		byKey[key] = r
	}
	out := make([]episodes.DeferredCreated, len(b.Items))
	for i, it := range b.Items {
		r := byKey[it.DedupeKey]
		if r.created {
			out[i] = episodes.DeferredCreated{Created: true, Episode: b.Episode(i, r.id, r.createdAt)}
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

// ClaimAvailable runs ClaimAvailable, a poll in one batch: up to q.Limit due
// available episodes of q's scope picked (UPDLOCK, READPAST: SQL Server's
// SKIP LOCKED), their work claims granted to q.Owner and the granted ones
// started. Every picked episode comes back; the claim of one granted is
// stamped with the instant before the batch was first sent (where its local
// lease clock starts), and one whose claim was held live elsewhere has the
// zero claim. The (actor, expectation) pairs travel as one JSON array in
// @runnable. No pairs or no room takes nothing and sends nothing.
func (s *Store) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	if len(q.Runnable) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return nil, fmt.Errorf("sqlserver: ClaimAvailable: %w", err)
	}
	sent := time.Now()
	rows, err := s.query(ctx, "ClaimAvailable",
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
	out := make([]episodes.Dispatched, 0, len(rows.rows))
	for rows.Next() {
		d, err := dispatched(rows, sent, q.Owner)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// dispatched reads one of ClaimAvailable's rows. sent is the instant before
// the batch was first sent, where the grant's local lease clock starts.
func dispatched(r scanner, sent time.Time, owner string) (episodes.Dispatched, error) {
	var (
		d                                            episodes.Dispatched
		fence                                        int64
		claimKey, grantKind                          string
		attempt                                      int32
		leaseUntil, claimedAt                        time.Time
		opts                                         sql.NullString
		actor, expectation, triggerType, dedupeKey   sql.NullString
		triggerRef, payload, res, errorClass, detail sql.NullString
		stack, env, traceParent                      sql.NullString
		attempts, maxAttempts                        sql.NullInt32
		created, startedAt, lastStep                 sql.NullTime
	)
	if err := r.Scan(&d.EpisodeID, &d.ActorID, &d.ExpectationID, &opts,
		&claimKey, &fence, &attempt, &leaseUntil, &claimedAt, &grantKind,
		&d.Started, &d.NextStep, &actor, &expectation, &triggerType, &triggerRef,
		&dedupeKey, &attempts, &maxAttempts, &stack, &env, &payload, &res, &errorClass,
		&detail, &created, &startedAt, &lastStep, &traceParent); err != nil {
		return episodes.Dispatched{}, err
	}
	d.Opts = rawJSON(opts)
	d.Claim = episodes.GrantedClaim(sent, claimKey, owner, fence, attempt, leaseUntil, claimedAt, grantKind)
	if d.Started {
		d.Episode = episodes.Episode{
			ID: d.EpisodeID, ActorID: actor.String, ExpectationID: expectation.String,
			TriggerType: episodes.TriggerType(triggerType.String), TriggerRef: rawJSON(triggerRef),
			DedupeKey: dedupeKey.String, Status: episodes.StatusRunning,
			Attempts: attempts.Int32, MaxAttempts: maxAttempts.Int32,
			SourceStack: stack.String, SourceEnv: env.String, OwnerNode: owner,
			Payload: rawJSON(payload), Result: rawJSON(res), ErrorClass: errorClass.String, ErrorDetail: rawJSON(detail),
			CreatedAt: created.Time, StartedAt: timePtr(startedAt), LastStepAt: timePtr(lastStep),
			TraceParent: traceParent.String,
		}
	}
	return d, nil
}

// ExpireAvailable runs ExpireAvailable and returns the episodes it
// canceled; q.AllEnvs (Maintain) expires every env's.
func (s *Store) ExpireAvailable(ctx context.Context, q episodes.ExpireQuery) ([]int64, error) {
	rows, err := s.query(ctx, "ExpireAvailable",
		sql.Named("source_env", q.Env),
		sql.Named("source_stack", q.Stack),
		sql.Named("ttl_ms", q.TTL.Milliseconds()),
		sql.Named("all_envs", q.AllEnvs),
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

// NextAvailableDue runs NextAvailableDue for q's scope (Env, Stack,
// Runnable as one JSON array): how long until its next available episode
// falls due on the database clock; false when none is waiting.
func (s *Store) NextAvailableDue(ctx context.Context, q episodes.AvailableQuery) (time.Duration, bool, error) {
	if len(q.Runnable) == 0 {
		return 0, false, nil
	}
	runnable, err := episodes.RunnableJSON(q.Runnable)
	if err != nil {
		return 0, false, fmt.Errorf("sqlserver: NextAvailableDue: %w", err)
	}
	var ms int64
	err = s.queryRow(ctx, "NextAvailableDue",
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
