package postgres_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/workflows"
)

func TestConformanceWorkflows(t *testing.T) {
	t.Parallel()
	conformance.RunWorkflows(t, func(t *testing.T) conformance.WorkflowsBackend {
		pool := pgtest.Schema(t)
		return conformance.WorkflowsBackend{
			Store: postgres.New(pool),
			SetEpisodeStatus: func(t testing.TB, id int64, status episodes.Status) {
				pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET status = $2 WHERE id = $1`, id, string(status))
			},
		}
	})
}

// LockWorkflowInstance holds the instance row until the advancing
// transaction ends, so two episodes of one instance ending at once (a
// fan-in) advance one after the other and the second sees the first's step
// end. Without the lock both advance at once, each sees the other's step
// still running, and neither starts the join: the instance stalls.
func TestLockWorkflowInstanceOrdersAFanIn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Schema(t)
	s := postgres.New(pool)
	ctx := t.Context()
	id, created, err := s.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
	require.NoError(t, err)
	require.True(t, created)
	eps := map[string]int64{}
	for _, step := range []string{"a", "b", "join"} {
		require.NoError(t, s.InsertWorkflowStep(ctx, id, step, 1))
	}
	for _, step := range []string{"a", "b"} {
		o, err := s.CreateEpisode(ctx, episodes.New{ActorID: "a", ExpectationID: "e", TriggerType: episodes.TriggerWorkflow,
			DedupeKey: fmt.Sprintf("workflow:%d:%s:1", id, step), MaxAttempts: 1})
		require.NoError(t, err)
		eps[step] = o.Episode.ID
		ok, err := s.StartWorkflowStep(ctx, id, step, workflows.StepPending, 0, o.Episode.ID)
		require.NoError(t, err)
		require.True(t, ok)
	}

	var seen map[string]string
	waited, err := interleave(t, pool, func(tx pgx.Tx) {
		first := postgres.New(tx)
		_, err := first.LockWorkflowInstance(ctx, id)
		require.NoError(t, err)
		ok, err := first.EndWorkflowStep(ctx, id, "a", eps["a"], workflows.StepDone)
		require.NoError(t, err)
		require.True(t, ok)
	}, func() error {
		return s.InTx(ctx, func(tx workflows.Tx) error {
			if _, err := tx.LockWorkflowInstance(ctx, id); err != nil {
				return err
			}
			if _, err := tx.EndWorkflowStep(ctx, id, "b", eps["b"], workflows.StepDone); err != nil {
				return err
			}
			steps, err := tx.ListWorkflowSteps(ctx, id)
			if err != nil {
				return err
			}
			seen = map[string]string{}
			for _, st := range steps {
				seen[st.StepID] = st.Status
			}
			return nil
		})
	})
	require.True(t, waited, "the second advance did not wait for the first's instance lock")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": workflows.StepDone, "b": workflows.StepDone, "join": workflows.StepPending}, seen,
		"the second advance sees both ends, so it starts the join")
}
