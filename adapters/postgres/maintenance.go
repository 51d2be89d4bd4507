package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
)

var _ maintenance.Store = (*Store)(nil)

// beginner is what Maintain needs of the Store's connection: *pgxpool.Pool
// and *pgx.Conn begin a transaction, a pgx.Tx a savepoint (the run then
// commits with the caller's transaction, which holds the lock until then).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Maintain runs one maintenance pass (sql/queries/postgres/maintenance.sql)
// in one transaction: TryMaintenanceLock first, and when another session
// holds it, a rollback and Result{} with Ran false. The lock is released by
// the commit or rollback that ends the transaction.
func (s *Store) Maintain(ctx context.Context, p maintenance.Plan) (maintenance.Result, error) {
	if err := p.Validate(); err != nil {
		return maintenance.Result{}, fmt.Errorf("postgres: Maintain: %w", err)
	}
	b, ok := s.conn.(beginner)
	if !ok {
		return maintenance.Result{}, fmt.Errorf("postgres: Maintain needs a connection that begins transactions "+
			"(*pgxpool.Pool, *pgx.Conn or pgx.Tx), not %T", s.conn)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return maintenance.Result{}, dbError("Maintain: begin", err)
	}
	defer func() {
		// A no-op after Commit. Detached from ctx so that a cancelled run
		// still ends its transaction cleanly and returns the connection.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	if _, nested := s.conn.(pgx.Tx); !nested {
		if err := s.boundTransaction(ctx, tx); err != nil {
			return maintenance.Result{}, err
		}
	}
	acquired, err := s.q.TryMaintenanceLock(ctx, tx)
	if err != nil {
		return maintenance.Result{}, dbError("TryMaintenanceLock", err)
	}
	if !acquired {
		return maintenance.Result{}, nil
	}
	res, err := s.maintain(ctx, tx, p)
	if err != nil {
		return maintenance.Result{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return maintenance.Result{}, dbError("Maintain: commit", err)
	}
	return res, nil
}

// maintain runs the statements of one pass on tx, which holds the lock.
func (s *Store) maintain(ctx context.Context, tx pgx.Tx, p maintenance.Plan) (maintenance.Result, error) {
	res := maintenance.Result{Ran: true}
	batch := int32(p.Batch) // at most maintenance.MaxBatch (Plan.Validate)
	var err error
	res.Archived, err = s.q.ArchiveEpisodes(ctx, tx, db.ArchiveEpisodesParams{
		RetentionMs: p.Retention.Milliseconds(), MaxRows: batch,
	})
	if err != nil {
		return res, dbError("ArchiveEpisodes", err)
	}
	if res.StepsPurged, err = s.q.PurgeArchivedSteps(ctx, tx, batch); err != nil {
		return res, dbError("PurgeArchivedSteps", err)
	}
	if res.JournalsMarked, err = s.q.MarkJournalsPurged(ctx, tx, batch); err != nil {
		return res, dbError("MarkJournalsPurged", err)
	}
	if p.RequestTTL > 0 { // opt-in: without a TTL deferred work never expires
		expired, err := s.q.ExpireAvailable(ctx, tx, db.ExpireAvailableParams{
			AllEnvs: true, TtlMs: p.RequestTTL.Milliseconds(),
		})
		if err != nil {
			return res, dbError("ExpireAvailable", err)
		}
		res.EpisodesExpired = int64(len(expired))
	}
	res.ClaimsDeleted, err = s.q.DeleteSpentClaims(ctx, tx, db.DeleteSpentClaimsParams{
		HorizonMs: p.ClaimHorizon.Milliseconds(), MaxRows: batch,
	})
	if err != nil {
		return res, dbError("DeleteSpentClaims", err)
	}
	if res.NodesDeleted, err = s.q.DeleteStaleNodes(ctx, tx, p.NodeStaleAfter.Milliseconds()); err != nil {
		return res, dbError("DeleteStaleNodes", err)
	}
	if err := s.waitingFindings(ctx, tx, p, &res); err != nil {
		return res, err
	}
	return res, nil
}

// waitingFindings raises the waiting-for-node finding of each pair whose
// work no live node can run and that has waited longer than
// p.WaitingForNodeAfter (the statement decides, on the database clock), and
// clears those whose pair no longer waits, on tx.
func (s *Store) waitingFindings(ctx context.Context, tx pgx.Tx, p maintenance.Plan, res *maintenance.Result) error {
	ws, err := s.listWaitingForNode(ctx, tx, membership.WaitingQuery{
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
		n, err := s.q.RaiseWaitingForNodeFinding(ctx, tx, db.RaiseWaitingForNodeFindingParams{
			FindingKey: f.Key, Env: f.Env, Class: maintenance.ClassWaitingForNode,
			Severity: maintenance.SeverityWaitingForNode, Summary: f.Summary, Data: f.Data,
			ActorID: f.ActorID, EpisodeID: f.EpisodeID,
		})
		if err != nil {
			return dbError("RaiseWaitingForNodeFinding", err)
		}
		res.WaitingRaised += n
	}
	res.WaitingCleared, err = s.q.ClearWaitingForNodeFindings(ctx, tx, db.ClearWaitingForNodeFindingsParams{
		Class: maintenance.ClassWaitingForNode, Waiting: waiting,
	})
	if err != nil {
		return dbError("ClearWaitingForNodeFindings", err)
	}
	return nil
}
