package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
)

// Maintain runs one maintenance pass in one transaction on one pooled
// connection: TryMaintenanceLock (sp_getapplock, transaction-owned, no
// wait), then the statements of maintenance.sql in the Postgres order, then
// COMMIT. When another run holds the lock it rolls back at once and returns
// Result{} (Ran false) and no error. A Plan that fails Plan.Validate is
// rejected before anything is sent.
//
// Nothing commits unless everything did: an error in any batch rolls the
// whole run back (XACT_ABORT), the lock included. A deadlock victim's or a
// lock timeout's run is sent again whole, in a new transaction, like the
// single batches elsewhere (at most maxAttempts runs); after the last, the
// error is claims.ErrRetryable, since the run certainly did not take effect.
// The transaction is READ COMMITTED, the level READPAST (ArchiveEpisodes)
// requires. Each batch of the run is sent behind BoundTransaction with
// claims.TxBoundFrom(ctx), so a run that waits that long for a lock fails
// with 1222 and is sent again whole.
func (s *Store) Maintain(ctx context.Context, p maintenance.Plan) (maintenance.Result, error) {
	if err := p.Validate(); err != nil {
		return maintenance.Result{}, fmt.Errorf("sqlserver: Maintain: %w", err)
	}
	if s.tx != nil {
		return maintenance.Result{}, errors.New("sqlserver: Maintain: already inside a transaction")
	}
	if s.db == nil {
		return maintenance.Result{}, errors.New("sqlserver: Maintain: the Store has no database (New was given a nil *sql.DB)")
	}
	for n := 1; ; n++ {
		res, err := s.maintainOnce(ctx, p)
		if err == nil || !retryInCall(err) || n == maxAttempts {
			return res, err
		}
		t := time.NewTimer(s.backoff(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
	}
}

// maintainOnce runs one attempt in a transaction of its own.
func (s *Store) maintainOnce(ctx context.Context, p maintenance.Plan) (maintenance.Result, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return maintenance.Result{}, dbError("Maintain: begin", err)
	}
	// After Commit this is a no-op (sql.ErrTxDone); after an error that
	// XACT_ABORT already rolled back, go-mssqldb sends nothing.
	defer func() { _ = tx.Rollback() }()

	res, err := s.inTx(tx, claims.TxBoundFrom(ctx)).maintain(ctx, p)
	if err != nil || !res.Ran {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return maintenance.Result{}, dbError("Maintain: commit", err)
	}
	return res, nil
}

// maintain sends the run's batches; s is bound to the run's transaction.
func (s *Store) maintain(ctx context.Context, p maintenance.Plan) (maintenance.Result, error) {
	var acquired sql.NullBool
	if err := s.queryRow(ctx, "TryMaintenanceLock").Scan(&acquired); err != nil {
		return maintenance.Result{}, err
	}
	if !acquired.Bool {
		return maintenance.Result{}, nil
	}

	res := maintenance.Result{Ran: true}
	batch := int32(p.Batch) // at most maintenance.MaxBatch (Plan.Validate)
	var err error
	if res.Archived, err = s.execRows(ctx, "ArchiveEpisodes",
		sql.Named("retention_ms", p.Retention.Milliseconds()),
		sql.Named("max_rows", batch),
	); err != nil {
		return maintenance.Result{}, err
	}
	if res.StepsPurged, err = s.execRows(ctx, "PurgeArchivedSteps",
		sql.Named("max_rows", batch),
	); err != nil {
		return maintenance.Result{}, err
	}
	if res.JournalsMarked, err = s.execRows(ctx, "MarkJournalsPurged",
		sql.Named("max_rows", batch),
	); err != nil {
		return maintenance.Result{}, err
	}
	if p.RequestTTL > 0 { // opt-in: without a TTL deferred work never expires
		expired, err := s.ExpireAvailable(ctx, episodes.ExpireQuery{AllEnvs: true, TTL: p.RequestTTL})
		if err != nil {
			return maintenance.Result{}, err
		}
		res.EpisodesExpired = int64(len(expired))
	}
	if res.ClaimsDeleted, err = s.execRows(ctx, "DeleteSpentClaims",
		sql.Named("horizon_ms", p.ClaimHorizon.Milliseconds()),
		sql.Named("max_rows", batch),
	); err != nil {
		return maintenance.Result{}, err
	}
	if res.NodesDeleted, err = s.execRows(ctx, "DeleteStaleNodes",
		sql.Named("stale_after_ms", p.NodeStaleAfter.Milliseconds()),
	); err != nil {
		return maintenance.Result{}, err
	}
	if err := s.waitingFindings(ctx, p, &res); err != nil {
		return maintenance.Result{}, err
	}
	return res, nil
}

// waitingFindings raises the waiting-for-node finding of each pair whose
// work no live node can run and that has waited longer than
// p.WaitingForNodeAfter (the statement decides, on the database clock), and
// clears those whose pair no longer waits; s is bound to the run's
// transaction.
func (s *Store) waitingFindings(ctx context.Context, p maintenance.Plan, res *maintenance.Result) error {
	ws, err := s.ListWaitingForNode(ctx, membership.WaitingQuery{
		SilentAfter: membership.DefaultSilentAfter, OverdueAfter: p.WaitingForNodeAfter,
	})
	if err != nil {
		return err
	}
	raise, waiting, err := maintenance.WaitingFindings(ws)
	if err != nil {
		return err
	}
	for _, f := range raise {
		n, err := s.execRows(ctx, "RaiseWaitingForNodeFinding",
			sql.Named("finding_key", f.Key),
			sql.Named("env", f.Env),
			sql.Named("class", maintenance.ClassWaitingForNode),
			sql.Named("severity", maintenance.SeverityWaitingForNode),
			sql.Named("summary", f.Summary),
			sql.Named("data", f.Data),
			sql.Named("actor_id", f.ActorID),
			sql.Named("episode_id", f.EpisodeID),
		)
		if err != nil {
			return err
		}
		res.WaitingRaised += n
	}
	res.WaitingCleared, err = s.execRows(ctx, "ClearWaitingForNodeFindings",
		sql.Named("class", maintenance.ClassWaitingForNode),
		sql.Named("waiting", waiting),
	)
	return err
}
