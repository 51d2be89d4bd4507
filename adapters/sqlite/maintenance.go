package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
)

var _ maintenance.Store = (*Store)(nil)

// Maintain runs one maintenance pass (sql/queries/sqlite/maintenance.sql)
// in one BEGIN IMMEDIATE transaction: TryMaintenanceLock, then the
// statements in the Postgres order, then COMMIT; on error nothing is
// committed.
//
// The lock is the database write lock the transaction holds from BEGIN to
// its end, which excludes every other run and every other writer of the
// file. Where Postgres answers "held elsewhere" at once, a second run here
// waits in BEGIN for up to BusyTimeout, like any writer, and then runs on
// what the first left. When the write lock stayed busy all that time (a
// run or a writer held it throughout), nothing ran: Maintain reports that
// as a held lock, Result{} (Ran false) and no error, and the next run
// tries again.
//
// First, outside any transaction, MaintenanceDue reads whether the run
// would change anything; when not, Maintain returns Result{Ran: true} (all
// counts zero) without taking the write lock, since on SQLite a run holding
// it stops every writer of the file, which Postgres's run does not. A run
// at the instant of that read would have found the same nothing.
//
// On a Store bound to a caller's transaction (WithTx, which holds the
// write lock since its BEGIN IMMEDIATE) the run goes in a SAVEPOINT of it,
// rolled back to on error; the lock is held until the caller's transaction
// ends, as a Postgres run in a caller's transaction keeps its advisory
// lock until then.
func (s *Store) Maintain(ctx context.Context, p maintenance.Plan) (maintenance.Result, error) {
	if err := p.Validate(); err != nil {
		return maintenance.Result{}, fmt.Errorf("sqlite: Maintain: %w", err)
	}
	if _, nested := s.conn.(*sql.Tx); nested {
		var res maintenance.Result
		err := s.inTx(ctx, func(tx *Store) (err error) {
			res, err = tx.maintain(ctx, p)
			return err
		})
		if err != nil {
			return maintenance.Result{}, err
		}
		return res, nil
	}
	b, ok := s.conn.(beginner)
	if !ok {
		return maintenance.Result{}, fmt.Errorf("sqlite: Maintain needs a connection that begins transactions "+
			"(*sql.DB or *sql.Conn) or a *sql.Tx, not %T", s.conn)
	}
	due, err := s.q.MaintenanceDue(ctx, s.conn, sqlitedb.MaintenanceDueParams{
		RetentionMs: p.Retention.Milliseconds(), RequestTtlMs: p.RequestTTL.Milliseconds(),
		HorizonMs: p.ClaimHorizon.Milliseconds(), StaleAfterMs: p.NodeStaleAfter.Milliseconds(),
		WaitingAfterMs: p.WaitingForNodeAfter.Milliseconds(), WaitingClass: maintenance.ClassWaitingForNode,
	})
	if err != nil {
		return maintenance.Result{}, dbError("MaintenanceDue", err)
	}
	if due == 0 {
		return maintenance.Result{Ran: true}, nil // nothing to do: no write lock taken
	}
	tx, err := b.BeginTx(ctx, nil)
	if isRetryable(err) {
		return maintenance.Result{}, nil // the write lock stayed busy for BusyTimeout: held elsewhere
	}
	if err != nil {
		return maintenance.Result{}, dbError("Maintain: BEGIN IMMEDIATE", err)
	}
	defer func() { _ = tx.Rollback() }() // sql.ErrTxDone after Commit
	res, err := s.WithTx(tx).maintain(ctx, p)
	if err != nil || !res.Ran {
		return maintenance.Result{}, err
	}
	if err := tx.Commit(); err != nil {
		return maintenance.Result{}, dbError("Maintain: COMMIT", err)
	}
	return res, nil
}

// maintain runs the statements of one pass; s is bound to the run's
// transaction.
func (s *Store) maintain(ctx context.Context, p maintenance.Plan) (maintenance.Result, error) {
	acquired, err := s.q.TryMaintenanceLock(ctx, s.conn)
	if err != nil {
		return maintenance.Result{}, dbError("TryMaintenanceLock", err)
	}
	if acquired != 1 {
		return maintenance.Result{}, nil
	}
	res := maintenance.Result{Ran: true}
	batch := int64(p.Batch) // at most maintenance.MaxBatch (Plan.Validate)
	res.Archived, err = s.q.ArchiveEpisodes(ctx, s.conn, sqlitedb.ArchiveEpisodesParams{
		RetentionMs: p.Retention.Milliseconds(), MaxRows: batch,
	})
	if err != nil {
		return maintenance.Result{}, dbError("ArchiveEpisodes", err)
	}
	if res.StepsPurged, err = s.q.PurgeArchivedSteps(ctx, s.conn, batch); err != nil {
		return maintenance.Result{}, dbError("PurgeArchivedSteps", err)
	}
	if res.JournalsMarked, err = s.q.MarkJournalsPurged(ctx, s.conn, batch); err != nil {
		return maintenance.Result{}, dbError("MarkJournalsPurged", err)
	}
	if p.RequestTTL > 0 { // opt-in: without a TTL deferred work never expires
		// On this Store, bound to the run's transaction.
		expired, err := s.ExpireAvailable(ctx, episodes.ExpireQuery{AllEnvs: true, TTL: p.RequestTTL})
		if err != nil {
			return maintenance.Result{}, err
		}
		res.EpisodesExpired = int64(len(expired))
	}
	res.ClaimsDeleted, err = s.q.DeleteSpentClaims(ctx, s.conn, sqlitedb.DeleteSpentClaimsParams{
		HorizonMs: p.ClaimHorizon.Milliseconds(), MaxRows: batch,
	})
	if err != nil {
		return maintenance.Result{}, dbError("DeleteSpentClaims", err)
	}
	if res.NodesDeleted, err = s.q.DeleteStaleNodes(ctx, s.conn, p.NodeStaleAfter.Milliseconds()); err != nil {
		return maintenance.Result{}, dbError("DeleteStaleNodes", err)
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
		n, err := s.q.RaiseWaitingForNodeFinding(ctx, s.conn, sqlitedb.RaiseWaitingForNodeFindingParams{
			FindingKey: f.Key, Env: f.Env, Class: maintenance.ClassWaitingForNode,
			Severity: maintenance.SeverityWaitingForNode, Summary: f.Summary, Data: f.Data,
			ActorID: f.ActorID, EpisodeID: f.EpisodeID,
		})
		if err != nil {
			return dbError("RaiseWaitingForNodeFinding", err)
		}
		res.WaitingRaised += n
	}
	res.WaitingCleared, err = s.q.ClearWaitingForNodeFindings(ctx, s.conn, sqlitedb.ClearWaitingForNodeFindingsParams{
		Class: maintenance.ClassWaitingForNode, Waiting: waiting,
	})
	if err != nil {
		return dbError("ClearWaitingForNodeFindings", err)
	}
	return nil
}
