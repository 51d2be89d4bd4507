package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/telemetry"
)

// TxStore is a dialect adapter bound to the caller's own transaction:
// postgres.New(tx) with the caller's pgx.Tx, or sqlite's or sqlserver's
// Store.WithTx(tx) with the caller's *sql.Tx. What FireTx, Run.Hold,
// Run.CompleteTx and Run.FailTx write through it commits or rolls back
// with the caller's own writes, never on its own. A fenced write through it
// that matches no row (HoldClaim, FinishEpisode: the grant is gone) leaves
// the transaction unable to commit, on every dialect: Postgres aborts it
// (LH001), SQLite fails its COMMIT (a row of leasehold_doomed_transactions,
// migration 00011), SQL Server rolls it back (THROW under XACT_ABORT).
type TxStore interface {
	CreateDeferredEpisode(ctx context.Context, d episodes.Deferred) (episodes.DeferredCreated, error)
	CreateDeferredEpisodes(ctx context.Context, b episodes.DeferredBatch) ([]episodes.DeferredCreated, error)
	FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
	// HoldClaim locks t's claim row until the transaction ends and fails
	// with claims.ErrLeaseLost unless t is the current grant (leasehold_hold,
	// migration 00009).
	HoldClaim(ctx context.Context, t claims.Token) (leaseUntil time.Time, err error)
}

// FireTx is Fire inside the caller's transaction tx: each episode Fire would
// create (the same dedupe key, env folding and trigger ref) is created
// available (CreateDeferredEpisode) in tx, so it exists exactly when the
// caller's own rows commit. Rolled back: no episode, no request, nothing
// for any node to find. Committed: whichever full node has a free slot for
// the actor runs it (woken by NOTIFY on Postgres, which is delivered at
// commit; the poll interval elsewhere). A duplicate reports the live
// episode it duplicates (Outcome.Duplicate, Outcome.EpisodeID), also one
// created earlier in the same transaction. FireOptions.Delay applies.
//
// tx must be bound to the transaction the caller commits; this node's own
// store is used only to read the database's dedupe key version. When the
// database moved to a newer one meanwhile, the create fails ErrKeyVersion
// and creates nothing: roll tx back (on Postgres it can no longer commit)
// and run it again. On SQL Server any error inside a transaction, a
// duplicate key included, dooms it (XACT_ABORT); CreateDeferredEpisode's
// guard keeps a duplicate from raising one.
func (n *Node) FireTx(ctx context.Context, tx TxStore, actorID, event string, payload any, opts FireOptions) ([]Outcome, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: fire %s/%s: FireTx needs a store bound to the caller's transaction", ErrInvalid, actorID, event)
	}
	n.intake.RLock()
	defer n.intake.RUnlock()
	as, fired, err := n.eventEpisodes(ctx, tx, actorID, event, payload, opts)
	if err != nil {
		return nil, err
	}
	if mode := n.ActorMode(actorID); mode == ModeDisabled {
		return nil, fmt.Errorf("%w: actor %q on node %s", ErrDisabled, as.actor.ID, n.id)
	}
	out := make([]Outcome, 0, len(fired))
	for _, f := range fired {
		if f.existing != 0 {
			out = append(out, n.duplicateOfV1(ctx, f))
			continue
		}
		ne := f.ne
		ne.TraceParent = n.inject(ctx)
		res, err := tx.CreateDeferredEpisode(ctx, episodes.Deferred{New: ne, Delay: opts.Delay})
		if err != nil {
			// A refused key (ErrKeyVersion) dooms the caller's transaction
			// on Postgres: the caller runs it again, hashed anew.
			n.forgetKeyVersion(err)
			return out, fmt.Errorf("create episode %s/%s in the caller's transaction: %w", ne.ActorID, ne.ExpectationID, err)
		}
		if !res.Created {
			n.emit(ctx, n.aboutNew(ne, res.ExistingID, telemetry.Event{Name: EventDuplicate}))
			out = append(out, Outcome{ExpectationID: ne.ExpectationID, EpisodeID: res.ExistingID, Duplicate: true})
			continue
		}
		out = append(out, Outcome{ExpectationID: ne.ExpectationID, EpisodeID: res.Episode.ID, Deferred: true})
	}
	return out, nil
}

// Hold checks, in the caller's transaction tx, that this run's grant is
// still the current one, and keeps it so until tx ends (leasehold_hold:
// the claim row is locked, so a takeover waits for tx): the caller's own
// writes after Hold commit only under this grant. claims.ErrLeaseLost when
// the grant was stolen, released or finished: tx can no longer commit
// (Postgres aborts it, SQLite fails its COMMIT, SQL Server rolls it back;
// see TxStore), so nothing written in it lands even if it is committed;
// roll it back, and the run should stop.
// Call it before the writes it guards; it does not read the clock (neither
// do the runner's fenced writes: a lease that ran out but was not taken
// over is still this run's).
//
// Hold also bounds the rest of tx on the server where the dialect can
// (Postgres: idle_in_transaction_session_timeout and lock_timeout of
// claims.TxBound(lease), LOCAL): a transaction that holds the claim row's
// lock and whose process froze is ended, so a takeover waits no longer.
func (r *Run) Hold(ctx context.Context, tx TxStore) error {
	if tx == nil {
		return fmt.Errorf("%w: Run.Hold needs a store bound to the caller's transaction", ErrInvalid)
	}
	if r.node != nil {
		ctx = claims.WithTxBound(ctx, claims.TxBound(r.node.gate.Lease()))
	}
	_, err := tx.HoldClaim(ctx, r.token)
	return err
}

// CompleteTx ends the run done inside the caller's transaction tx: the
// episode's terminal status and its claim's final state (FinishEpisode,
// fenced on the run's grant) commit with the caller's own writes, and a
// workflow step's end advances its workflow in tx too. Then commit tx and
// return from the strategy (any result): the runner writes no second
// terminal status and emits episode.completed once it has read the commit.
// A rollback leaves the run as it was: the runner finishes it by what the
// strategy returns.
//
// claims.ErrLeaseLost when the fenced finish matched no row (the grant was
// taken over, released or finished already): nothing was finished, and tx
// can no longer commit (Postgres aborts it, SQLite fails its COMMIT, SQL
// Server rolls it back; see TxStore), so a caller that ignores the error
// and commits gets the commit's error and lands none of tx's writes, those
// before the finish included. Roll tx back, and stop the run. Only a
// ROLLBACK TO a savepoint taken before CompleteTx (on Postgres or SQLite)
// undoes that, with the finish; do not take one around it.
func (r *Run) CompleteTx(ctx context.Context, tx TxStore, result any) error {
	return r.finishTx(ctx, tx, episodes.Finish{Status: episodes.StatusDone, Result: mustJSON(result)})
}

// FailTx is CompleteTx ending the run failed, with error class class
// (episodes.ClassError when empty) and cause as its detail; it never
// retries. Like CompleteTx, claims.ErrLeaseLost leaves tx unable to
// commit.
func (r *Run) FailTx(ctx context.Context, tx TxStore, class string, cause error) error {
	if class == "" {
		class = episodes.ClassError
	}
	reason := "failed"
	if cause != nil {
		reason = cause.Error()
	}
	return r.finishTx(ctx, tx, failure(class, reason))
}

func (r *Run) finishTx(ctx context.Context, tx TxStore, f episodes.Finish) error {
	if tx == nil {
		return fmt.Errorf("%w: finishing a run in the caller's transaction needs a store bound to it", ErrInvalid)
	}
	if r.node == nil {
		return fmt.Errorf("%w: this Run was not started by a runner", ErrInvalid)
	}
	if err := r.node.finisher.FinishEpisode(ctx, tx, r.Episode, r.token, f); err != nil {
		return err
	}
	r.finishedInTx = &f
	return nil
}

// finishedInTx reports whether the run was finished in the caller's
// transaction and that transaction committed: the episode's row shows the
// terminal status the finish wrote. A rolled-back finish (the episode is
// still the run's) is forgotten, and false is returned. Read after the
// strategy returned, once per finish in a transaction.
func (n *Node) finishedInTx(j *job) (episodes.Finish, bool) {
	f := j.run.finishedInTx
	if f == nil {
		return episodes.Finish{}, false
	}
	j.run.finishedInTx = nil
	var ep episodes.Episode
	err := n.retrying(j, func(ctx context.Context) (err error) {
		ep, err = n.store.GetEpisode(ctx, j.ep.ID)
		return err
	})
	switch {
	case err == nil && ep.Status == f.Status:
		n.afterTx(j, true)
		return *f, true
	case err == nil:
		n.afterTx(j, false)
		return episodes.Finish{}, false
	case errors.Is(err, episodes.ErrNotFound):
		return *f, true // archived and purged already: it ended
	default:
		// Unknown: the run stops without another write; its fenced
		// finish, committed or not, decides (recovery finds it otherwise).
		n.log.Warn("leasehold: could not read whether a finish in the caller's transaction committed",
			"episode", j.ep.ID, "error", err)
		return *f, true
	}
}

// afterTx tells a finisher that also acts after the caller's commit
// (workflows publishes its events) whether the finish committed.
func (n *Node) afterTx(j *job, committed bool) {
	if a, ok := n.finisher.(TxFinisher); ok {
		a.AfterTx(j.ep.ID, committed)
	}
}

// TxFinisher is a Finisher that acts once a finish made in the caller's
// transaction is known to have committed or rolled back.
type TxFinisher interface {
	Finisher
	AfterTx(episodeID int64, committed bool)
}
