package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/workflows"
)

// Steps whose runs finish themselves in their own transaction (their
// effect row, Run.CompleteTx, COMMIT) still advance their workflow once
// each, in that same transaction: the fan-out and fan-in complete, every
// step ran once, and every effect committed with its step's end.
func TestStepsFinishedInTheirOwnTransactionAdvanceOnce(t *testing.T) {
	t.Parallel()
	var pool *pgxpool.Pool
	s := &steps{runs: map[string]int{}}
	s.onRun = func(r *runner.Run) {
		ctx := context.Background()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		store := postgres.New(tx)
		require.NoError(t, r.Hold(ctx, store))
		_, err = tx.Exec(ctx, `INSERT INTO effects (episode_id) VALUES ($1)`, r.EpisodeID())
		require.NoError(t, err)
		require.NoError(t, r.CompleteTx(ctx, store, map[string]string{"step": r.Episode.ExpectationID}))
		require.NoError(t, tx.Commit(ctx))
	}
	c := start(t, 2, s, pipeline("report", nil))
	pool = c.Pool
	pgtest.Exec(t, pool, `CREATE TABLE effects (episode_id bigint PRIMARY KEY)`)

	inst, created, err := c.engines[0].Start(context.Background(), "report", "q3", nil, workflows.StartOptions{})
	require.NoError(t, err)
	require.True(t, created)
	ev := c.waitEnded(t)
	require.Equal(t, workflows.WorkflowCompleted, ev.Kind)
	require.Equal(t, inst.ID, ev.InstanceID)
	for _, id := range []string{"extract", "enrich", "score", "publish"} {
		require.Equal(t, 1, s.count(id), "step %s ran once", id)
	}
	got, states := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.InstanceDone, got.Status)
	for id, st := range states {
		require.Equal(t, workflows.StepDone, st.Status, "step %s", id)
	}
	var effects int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&effects))
	require.Equal(t, 4, effects)
	require.Equal(t, 4, c.Count(t, "trigger_type = 'workflow' AND status = 'done'"))
	for _, sig := range c.Sigs {
		require.Zero(t, sig.Count(runner.EventLeaseLost), "no false lease_lost")
	}
}

// A step's run fenced out (its lease taken over) that ignores CompleteTx's
// claims.ErrLeaseLost and commits anyway lands nothing: the fenced finish
// that matched no row aborted the caller's transaction, so the commit
// fails, the effect is gone, the step is still running and the workflow
// did not advance, and the thief's grant is untouched.
func TestStepFinishedInTxOnAStolenLeaseDoomsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	var pool *pgxpool.Pool
	started := make(chan claims.Token, 1)
	stolen := make(chan struct{})
	type outcome struct{ finish, commit error }
	ended := make(chan outcome, 1)
	s := &steps{runs: map[string]int{}}
	s.onRun = func(r *runner.Run) {
		if r.Episode.ExpectationID != "extract" {
			return
		}
		started <- r.Token()
		select {
		case <-stolen:
		case <-t.Context().Done():
			return
		}
		ctx := context.Background() // a zombie: its run's context decides nothing
		tx, err := pool.Begin(ctx)
		if err != nil {
			ended <- outcome{commit: err}
			return
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var o outcome
		if _, err := tx.Exec(ctx, `INSERT INTO effects (episode_id) VALUES ($1)`, r.EpisodeID()); err != nil {
			ended <- outcome{commit: err}
			return
		}
		o.finish = r.CompleteTx(ctx, postgres.New(tx), map[string]string{"by": "the zombie"})
		o.commit = tx.Commit(ctx)
		ended <- o
	}
	c := start(t, 1, s, pipeline("report", nil))
	pool = c.Pool
	pgtest.Exec(t, pool, `CREATE TABLE effects (episode_id bigint PRIMARY KEY)`)
	ctx := context.Background()
	inst, created, err := c.engines[0].Start(ctx, "report", "q3", nil, workflows.StartOptions{})
	require.NoError(t, err)
	require.True(t, created)

	tok := <-started
	pgtest.ExpireClaim(t, pool, tok.Key)
	thief, err := postgres.New(pool).Acquire(ctx, claims.AcquireParams{Key: tok.Key, Owner: "thief", Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	close(stolen)

	o := <-ended
	require.ErrorIs(t, o.finish, claims.ErrLeaseLost)
	require.Error(t, o.commit, "a commit after ignoring ErrLeaseLost fails")
	nodetest.WaitEnded(t, 1, c.Sigs...)
	require.Equal(t, 1, c.Sigs[0].Count(runner.EventLeaseLost))
	var effects int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&effects))
	require.Zero(t, effects, "none of the zombie's transaction landed")
	_, states := stepStates(t, c.engines[0], inst.ID)
	require.Equal(t, workflows.StepRunning, states["extract"].Status, "the step did not end")
	require.Zero(t, c.Count(t, "expectation_id <> 'extract'"), "the workflow did not advance")
	require.Equal(t, 1, c.Count(t, "expectation_id = 'extract' AND status = 'running'"))
	cl, err := postgres.New(pool).ListClaims(ctx, claims.ListQuery{Owner: "thief", Limit: 10})
	require.NoError(t, err)
	require.Len(t, cl, 1)
	require.Equal(t, thief.Token, cl[0].Token)
	require.Equal(t, claims.StateClaimed, cl[0].State, "the live grant is untouched")
}
