package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/workflows"
)

// WorkflowStore is the workflow surface of an adapter
// (sql/queries/<dialect>/workflows.sql) plus what the scenarios use to make
// episodes.
type WorkflowStore interface {
	workflows.Store
	workflows.Tx
	CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error)
}

// WorkflowsBackend is what the workflow scenarios need from one isolated
// backend.
type WorkflowsBackend struct {
	Store WorkflowStore
	// SetEpisodeStatus ends an episode behind every API's back.
	SetEpisodeStatus func(t testing.TB, id int64, status episodes.Status)
}

// RunWorkflows runs the workflow statement scenarios: one running instance
// per key, transactions that roll back, step rows changed only by
// conditional updates, the reconciliation listing, and versioned
// definitions (an instance follows the definition it started with).
func RunWorkflows(t *testing.T, newBackend func(t *testing.T) WorkflowsBackend) {
	t.Run("OneRunningInstancePerKey", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		s := b.Store
		n := workflows.NewInstance{WorkflowID: "report", Subject: "c-42", Payload: []byte(`{"a":1}`)}
		id, created, err := s.CreateWorkflowInstance(ctx(t), n)
		require.NoError(t, err)
		require.True(t, created)
		_, created, err = s.CreateWorkflowInstance(ctx(t), n)
		require.NoError(t, err)
		require.False(t, created, "a running instance holds the key")
		rc := n
		rc.Env = "rc"
		_, created, err = s.CreateWorkflowInstance(ctx(t), rc)
		require.NoError(t, err)
		require.True(t, created, "another env is another key")
		got, err := s.GetRunningWorkflowInstance(ctx(t), "report", "c-42", "")
		require.NoError(t, err)
		require.Equal(t, id, got.ID)
		require.Equal(t, workflows.InstanceRunning, got.Status)
		require.JSONEq(t, `{"a":1}`, string(got.Payload))

		ok, err := s.FinishWorkflowInstance(ctx(t), id, workflows.InstanceDone, nil)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.FinishWorkflowInstance(ctx(t), id, workflows.InstanceFailed, nil)
		require.NoError(t, err)
		require.False(t, ok, "an ended instance stays ended")
		ok, err = s.SetWorkflowDefinitionVersion(ctx(t), id, "v2")
		require.NoError(t, err)
		require.False(t, ok, "an ended instance keeps the definition it ran")
		_, err = s.GetRunningWorkflowInstance(ctx(t), "report", "c-42", "")
		require.ErrorIs(t, err, workflows.ErrNoInstance, "an ended instance is not the running one")
		again, created, err := s.CreateWorkflowInstance(ctx(t), n)
		require.NoError(t, err)
		require.True(t, created, "an ended instance frees the key")
		got, err = s.GetRunningWorkflowInstance(ctx(t), "report", "c-42", "")
		require.NoError(t, err)
		require.Equal(t, again, got.ID, "the running instance, not the ended one")

		// Listed by status: exactly the instances in it.
		listed := func(status string) []int64 {
			t.Helper()
			list, err := s.ListWorkflowInstances(ctx(t), workflows.ListQuery{WorkflowID: "report", Status: status, Limit: 100})
			require.NoError(t, err)
			ids := make([]int64, len(list))
			for i, in := range list {
				ids[i] = in.ID
			}
			return ids
		}
		require.ElementsMatch(t, []int64{id}, listed(workflows.InstanceDone))
		require.Len(t, listed(workflows.InstanceRunning), 2, "the new instance and rc's")
		require.NotContains(t, listed(workflows.InstanceRunning), id)
		require.Len(t, listed(""), 3, "no status: every instance")
	})

	t.Run("TransactionsRollBack", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		boom := errors.New("boom")
		err := b.Store.InTx(ctx(t), func(tx workflows.Tx) error {
			id, created, err := tx.CreateWorkflowInstance(ctx(t), workflows.NewInstance{WorkflowID: "w", Subject: "s"})
			require.NoError(t, err)
			require.True(t, created)
			require.NoError(t, tx.InsertWorkflowStep(ctx(t), id, "a", 1))
			d, err := tx.CreateDeferredEpisode(ctx(t), episodes.Deferred{New: newEpisode("workflow:x:a:1")})
			require.NoError(t, err)
			require.True(t, d.Created)
			return boom
		})
		require.ErrorIs(t, err, boom)
		_, err = b.Store.GetRunningWorkflowInstance(ctx(t), "w", "s", "")
		require.Error(t, err, "the instance rolled back")
		res, err := b.Store.CreateEpisode(ctx(t), newEpisode("workflow:x:a:1"))
		require.NoError(t, err)
		require.True(t, res.Created, "the episode rolled back with it")
	})

	t.Run("StepsChangeOnlyByConditionalUpdates", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		s := b.Store
		var id int64
		require.NoError(t, s.InTx(ctx(t), func(tx workflows.Tx) (err error) {
			id, _, err = tx.CreateWorkflowInstance(ctx(t), workflows.NewInstance{WorkflowID: "w", Subject: "s"})
			if err == nil {
				err = tx.InsertWorkflowStep(ctx(t), id, "a", 2)
			}
			if err == nil {
				err = tx.InsertWorkflowStep(ctx(t), id, "b", 1)
			}
			if err == nil {
				err = tx.InsertWorkflowStep(ctx(t), id, "c", 1)
			}
			if err == nil {
				_, err = tx.LockWorkflowInstance(ctx(t), id)
			}
			return err
		}))
		ep1 := mustCreate(t, b, "workflow:1:a:1")
		ep2 := mustCreate(t, b, "workflow:1:a:2")

		ok, err := s.StartWorkflowStep(ctx(t), id, "a", workflows.StepPending, 0, ep1)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.StartWorkflowStep(ctx(t), id, "a", workflows.StepPending, 0, ep2)
		require.NoError(t, err)
		require.False(t, ok, "a second start of the same attempt matches nothing")
		step, found, err := s.GetWorkflowStepByEpisode(ctx(t), ep1)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, workflows.StepState{InstanceID: id, StepID: "a", Status: workflows.StepRunning, EpisodeID: ep1,
			Attempts: 1, MaxAttempts: 2, UpdatedAt: step.UpdatedAt}, step)

		ok, err = s.StartWorkflowStep(ctx(t), id, "a", workflows.StepRunning, ep1, ep2)
		require.NoError(t, err)
		require.True(t, ok, "a retry replaces the failed attempt")
		ok, err = s.DeleteWorkflowStep(ctx(t), id, "a", workflows.StepRunning, ep2)
		require.NoError(t, err)
		require.False(t, ok, "a running step is never removed, whatever state its caller saw: its episode's end would advance nothing")
		ok, err = s.DeleteWorkflowStep(ctx(t), id, "b", workflows.StepDone, 0)
		require.NoError(t, err)
		require.False(t, ok, "a step is removed only in the state its caller saw (b is pending)")
		ok, err = s.EndWorkflowStep(ctx(t), id, "a", ep1, workflows.StepDone)
		require.NoError(t, err)
		require.False(t, ok, "the old attempt's end is stale")
		ok, err = s.EndWorkflowStep(ctx(t), id, "a", ep2, workflows.StepDone)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.EndWorkflowStep(ctx(t), id, "a", ep2, workflows.StepFailed)
		require.NoError(t, err)
		require.False(t, ok, "a duplicate end advances nothing")

		ok, err = s.StartWorkflowStep(ctx(t), id, "a", workflows.StepRunning, ep2, ep1)
		require.NoError(t, err)
		require.False(t, ok, "a done step is never started again, whatever state its caller saw")
		ep3 := mustCreate(t, b, "workflow:1:c:1")
		ok, err = s.StartWorkflowStep(ctx(t), id, "c", workflows.StepPending, 0, ep3)
		require.NoError(t, err)
		require.True(t, ok)

		n, err := s.SkipPendingWorkflowSteps(ctx(t), id)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "only the pending step: never a running one")
		steps, err := s.ListWorkflowSteps(ctx(t), id)
		require.NoError(t, err)
		require.Len(t, steps, 3)
		require.Equal(t, workflows.StepDone, steps[0].Status)
		require.EqualValues(t, 2, steps[0].Attempts)
		require.Equal(t, workflows.StepSkipped, steps[1].Status)
		require.Equal(t, workflows.StepRunning, steps[2].Status)
		// A skipped step is neither started nor moved as if it were pending.
		ok, err = s.StartWorkflowStep(ctx(t), id, "b", workflows.StepPending, 0, ep1)
		require.NoError(t, err)
		require.False(t, ok, "a skipped step was started")
		ok, err = s.MoveWorkflowStep(ctx(t), id, "b", "b2", 1, workflows.StepPending, 0)
		require.NoError(t, err)
		require.False(t, ok, "a skipped step was moved")
		_, found, err = s.GetWorkflowStepByEpisode(ctx(t), 999_999)
		require.NoError(t, err)
		require.False(t, found)
	})

	t.Run("StalledStepsAreListedByEnv", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		s := b.Store
		ended := map[string]episodes.Status{
			"done": episodes.StatusDone, "failed": episodes.StatusFailed,
			"partial": episodes.StatusPartiallyFailed, "canceled": episodes.StatusCanceled, "live": episodes.StatusRunning,
		}
		var ids []int64
		for _, env := range []string{"", "rc"} {
			id, _, err := s.CreateWorkflowInstance(ctx(t), workflows.NewInstance{WorkflowID: "w", Subject: "s", Env: env})
			require.NoError(t, err)
			ids = append(ids, id)
			for step, status := range ended {
				require.NoError(t, s.InsertWorkflowStep(ctx(t), id, step, 1))
				ep := mustCreate(t, b, "workflow:"+env+":"+step)
				ok, err := s.StartWorkflowStep(ctx(t), id, step, workflows.StepPending, 0, ep)
				require.NoError(t, err)
				require.True(t, ok)
				b.SetEpisodeStatus(t, ep, status)
			}
		}
		stalled, err := s.ListStalledWorkflowSteps(ctx(t), workflows.StalledQuery{Limit: 100})
		require.NoError(t, err)
		got := map[string]episodes.Status{}
		for _, st := range stalled {
			require.Equal(t, ids[0], st.InstanceID, "strict env")
			got[st.StepID] = st.EpisodeStatus
		}
		want := map[string]episodes.Status{}
		for step, status := range ended {
			if status != episodes.StatusRunning {
				want[step] = status
			}
		}
		require.Equal(t, want, got, "every terminal status, partially failed included; never a live episode")

		_, err = s.FinishWorkflowInstance(ctx(t), ids[1], workflows.InstanceFailed, []byte(`{"why":"test"}`))
		require.NoError(t, err)
		stalled, err = s.ListStalledWorkflowSteps(ctx(t), workflows.StalledQuery{Env: "rc", Limit: 100})
		require.NoError(t, err)
		require.Empty(t, stalled, "ended instances are not reconciled")
		inst, err := s.GetWorkflowInstance(ctx(t), ids[1])
		require.NoError(t, err)
		require.Equal(t, workflows.InstanceFailed, inst.Status)
		require.JSONEq(t, `{"why":"test"}`, string(inst.ErrorDetail))
		require.NotNil(t, inst.FinishedAt)
	})

	t.Run("ParkedInstancesAreListedLastAndCleared", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		s := b.Store
		var ids []int64
		for i, subject := range []string{"parked", "healthy"} {
			id, created, err := s.CreateWorkflowInstance(ctx(t), workflows.NewInstance{WorkflowID: "w", Subject: subject, Env: "rc"})
			require.NoError(t, err)
			require.True(t, created)
			require.NoError(t, s.InsertWorkflowStep(ctx(t), id, "a", 1))
			ep := mustCreate(t, b, fmt.Sprintf("workflow:%d:a:1", i))
			ok, err := s.StartWorkflowStep(ctx(t), id, "a", workflows.StepPending, 0, ep)
			require.NoError(t, err)
			require.True(t, ok)
			b.SetEpisodeStatus(t, ep, episodes.StatusDone)
			ids = append(ids, id)
		}
		err := s.InTx(ctx(t), func(tx workflows.Tx) error {
			if _, err := tx.LockWorkflowInstance(ctx(t), ids[0]); err != nil {
				return err
			}
			ok, err := tx.ParkWorkflowInstance(ctx(t), ids[0], "step b renamed")
			require.True(t, ok)
			return err
		})
		require.NoError(t, err)
		stalled, err := s.ListStalledWorkflowSteps(ctx(t), workflows.StalledQuery{Env: "rc", Limit: 1})
		require.NoError(t, err)
		require.Len(t, stalled, 1)
		require.Equal(t, ids[1], stalled[0].InstanceID, "a parked instance never crowds the limit")

		rc := "rc"
		list, err := s.ListWorkflowInstances(ctx(t), workflows.ListQuery{ParkedOnly: true, Env: &rc, Limit: 10})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "step b renamed", list[0].ParkedReason)
		list, err = s.ListWorkflowInstances(ctx(t), workflows.ListQuery{WorkflowID: "w", Status: workflows.InstanceRunning, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, []int64{ids[1], ids[0]}, []int64{list[0].ID, list[1].ID}, "newest first")
		list, err = s.ListWorkflowInstances(ctx(t), workflows.ListQuery{Subject: "healthy", Env: new(string), Limit: 10})
		require.NoError(t, err)
		require.Empty(t, list, "the unset env is its own world")

		ok, err := s.ParkWorkflowInstance(ctx(t), ids[0], "")
		require.NoError(t, err)
		require.True(t, ok)
		inst, err := s.GetWorkflowInstance(ctx(t), ids[0])
		require.NoError(t, err)
		require.Empty(t, inst.ParkedReason, "cleared")
		ok, err = s.FinishWorkflowInstance(ctx(t), ids[0], workflows.InstanceCanceled, nil)
		require.NoError(t, err)
		require.True(t, ok, "canceled is an instance status")
		ok, err = s.ParkWorkflowInstance(ctx(t), ids[0], "late")
		require.NoError(t, err)
		require.False(t, ok, "only a running instance is parked")

		_, found, err := s.GetAgentMaxAttempts(ctx(t), "nobody", "nothing")
		require.NoError(t, err)
		require.False(t, found)
	})

	runWorkflowVersions(t, newBackend)
}

func mustCreate(t *testing.T, b WorkflowsBackend, key string) int64 {
	t.Helper()
	n := newEpisode(key)
	n.TriggerType = episodes.TriggerWorkflow
	res, err := b.Store.CreateDeferredEpisode(context.Background(), episodes.Deferred{New: n})
	require.NoError(t, err)
	require.True(t, res.Created)
	return res.Episode.ID
}
