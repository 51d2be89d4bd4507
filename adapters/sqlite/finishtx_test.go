package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/runner"
)

// A zombie that ignores CompleteTx's (or FailTx's) claims.ErrLeaseLost and
// commits anyway lands nothing: the fenced finish that matched no row left
// a row of leasehold_doomed_transactions in the caller's transaction, whose
// foreign key fails the COMMIT, so the caller's rows (written before and
// after the finish) are gone, the zombie did not finish the episode, and
// the thief's grant is untouched.
func TestFinishTxOnAStolenLeaseDoomsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	for name, finish := range map[string]func(ctx context.Context, r *runner.Run, tx runner.TxStore) error{
		"CompleteTx": func(ctx context.Context, r *runner.Run, tx runner.TxStore) error {
			return r.CompleteTx(ctx, tx, "by the zombie")
		},
		"FailTx": func(ctx context.Context, r *runner.Run, tx runner.TxStore) error {
			return r.FailTx(ctx, tx, "", errors.New("by the zombie"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := sqlitetest.DB(t)
			sqlitetest.Exec(t, db, `CREATE TABLE charges (episode_id INTEGER NOT NULL, at TEXT NOT NULL)`)
			store := sqlite.New(db)
			started := make(chan claims.Token, 1)
			stolen := make(chan struct{})
			type outcome struct{ finish, after, commit error }
			ended := make(chan outcome, 1)
			zombie := nodetest.Strategy{StepFunc: func(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
				started <- r.Token()
				select {
				case <-stolen:
				case <-ctx.Done():
					return runner.StepResult{}, ctx.Err()
				}
				// A zombie does not look at its run's context (the
				// heartbeat may cancel it at any time): neither does
				// this one, so only the finish decides the commit.
				ctx = context.WithoutCancel(ctx)
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return runner.StepResult{}, err
				}
				defer func() { _ = tx.Rollback() }()
				if _, err := tx.ExecContext(ctx, `INSERT INTO charges (episode_id, at) VALUES (?, 'before')`, r.EpisodeID()); err != nil {
					return runner.StepResult{}, err
				}
				var o outcome
				o.finish = finish(ctx, r, store.WithTx(tx))
				_, o.after = tx.ExecContext(ctx, `INSERT INTO charges (episode_id, at) VALUES (?, 'after')`, r.EpisodeID())
				o.commit = tx.Commit()
				ended <- o
				return runner.StepResult{Done: true}, nil
			}}
			node, sig := startNode(t, db, "node-a", runner.ModeFull,
				runner.Actor{ID: "pay", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{}, Strategy: zombie}}})
			ctx := context.Background()
			out, err := node.RunManual(ctx, "pay", "charge", nil)
			require.NoError(t, err)

			tok := <-started
			sqlitetest.ExpireClaim(t, db, tok.Key)
			thief, err := store.Acquire(ctx, claims.AcquireParams{Key: tok.Key, Owner: "thief", Lease: time.Minute, WorkType: "episode"})
			require.NoError(t, err)
			require.Equal(t, tok.Fence+1, thief.Fence)
			close(stolen)

			o := <-ended
			require.ErrorIs(t, o.finish, claims.ErrLeaseLost)
			require.NoError(t, o.after, "SQLite goes on after a failed statement: the COMMIT decides")
			require.Error(t, o.commit, "a commit after ignoring ErrLeaseLost fails")
			nodetest.WaitEnded(t, 1, sig)
			require.Equal(t, 1, sig.Count(runner.EventLeaseLost))
			var charges, doomed int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM charges`).Scan(&charges))
			require.Zero(t, charges, "none of the zombie's transaction landed")
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_doomed_transactions`).Scan(&doomed))
			require.Zero(t, doomed)
			ep, err := store.GetEpisode(ctx, out.EpisodeID)
			require.NoError(t, err)
			require.Equal(t, episodes.StatusRunning, ep.Status, "not finished by the zombie")
			cl, err := store.ListClaims(ctx, claims.ListQuery{Owner: "thief", Limit: 10})
			require.NoError(t, err)
			require.Len(t, cl, 1)
			require.Equal(t, thief.Token, cl[0].Token)
			require.Equal(t, claims.StateClaimed, cl[0].State, "the live grant is untouched")
		})
	}
}

// A doomed transaction's failed COMMIT leaves its connection outside any
// transaction (modernc.org/sqlite rolls it back): on a pool of one
// connection, so the same connection serves every step, the next
// transaction begins, sees nothing of the doomed one and commits, and
// statements outside a transaction commit at once (a connection left
// inside the doomed transaction would swallow them). A current grant's
// finish in a caller's transaction commits with the caller's row.
func TestDoomedCommitLeavesThePoolClean(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	db.SetMaxOpenConns(1)
	sqlitetest.Exec(t, db, `CREATE TABLE charges (n INTEGER NOT NULL)`)
	ctx := t.Context()
	store := sqlite.New(db)
	ep, err := store.CreateEpisode(ctx, episodes.New{ActorID: "pay", ExpectationID: "charge", TriggerType: episodes.TriggerManual,
		DedupeKey: "manual:pay:1", Owner: "a", Lease: time.Minute})
	require.NoError(t, err)
	stale := ep.Claim.Token
	stale.Fence++
	charges := func() (n int) {
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM charges`).Scan(&n))
		return n
	}

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.Exec(`INSERT INTO charges VALUES (1)`)
	require.NoError(t, err)
	for range 2 { // a second doom in the same transaction is no error of its own
		require.ErrorIs(t, store.WithTx(tx).FinishEpisode(ctx, ep.Episode.ID, stale, episodes.Finish{Status: episodes.StatusDone}), claims.ErrLeaseLost)
	}
	err = tx.Commit()
	require.Error(t, err)
	require.ErrorContains(t, err, "FOREIGN KEY constraint failed")
	require.Zero(t, charges())

	var doomed int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_doomed_transactions`).Scan(&doomed))
	require.Zero(t, doomed)
	sqlitetest.Exec(t, db, `INSERT INTO charges VALUES (2)`)
	other := sqlitetest.Another(t, db)
	var seen int
	require.NoError(t, other.QueryRow(`SELECT count(*) FROM charges`).Scan(&seen))
	require.Equal(t, 1, seen, "committed at once: the connection is in no transaction")

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.Exec(`INSERT INTO charges VALUES (3)`)
	require.NoError(t, err)
	require.NoError(t, store.WithTx(tx).FinishEpisode(ctx, ep.Episode.ID, ep.Claim.Token, episodes.Finish{Status: episodes.StatusDone}))
	require.NoError(t, tx.Commit())
	require.Equal(t, 2, charges())
	got, err := store.GetEpisode(ctx, ep.Episode.ID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, got.Status)

	// Outside a transaction a finish that matches nothing dooms nothing.
	require.ErrorIs(t, store.FinishEpisode(ctx, ep.Episode.ID, ep.Claim.Token, episodes.Finish{Status: episodes.StatusDone}), claims.ErrLeaseLost)
	sqlitetest.Exec(t, db, `INSERT INTO charges VALUES (4)`)
	require.Equal(t, 3, charges())
}
