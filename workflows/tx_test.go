package workflows_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
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
