package conformance

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/workflows"
)

// runWorkflowVersions runs the scenarios of versioned workflow definitions
// (issue 31): an instance follows the definition it was started with,
// whatever the engine that advances it registered; an instance without a
// version (started before migration 00013) is advanced, or parked, as
// before. The engines' nodes are never started: the test ends each step's
// episode itself and Reconcile advances it, the path every advance takes.
func runWorkflowVersions(t *testing.T, newBackend func(t *testing.T) WorkflowsBackend) {
	v1 := workflows.Definition{ID: "report", Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"extract"}},
	}}
	// A rolling deploy renamed publish (same actor and expectation) ...
	renamed := workflows.Definition{ID: "report", Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "deliver", Actor: "wf", Expectation: "publish", After: []string{"extract"}},
	}}
	// ... or added a step.
	added := workflows.Definition{ID: "report", Steps: []workflows.Step{
		{ID: "extract", Actor: "wf", Expectation: "extract"},
		{ID: "publish", Actor: "wf", Expectation: "publish", After: []string{"extract"}},
		{ID: "audit", Actor: "wf", Expectation: "audit", After: []string{"publish"}},
	}}

	for name, v2 := range map[string]workflows.Definition{"StepRenamed": renamed, "StepAdded": added} {
		t.Run("OldInstancesFollowTheirVersion/"+name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			a := versionedEngine(t, b, "node-a", v1)
			next := versionedEngine(t, b, "node-b", v2)
			ver1, err := v1.Version()
			require.NoError(t, err)
			ver2, err := v2.Version()
			require.NoError(t, err)
			require.NotEqual(t, ver1, ver2)

			inst, created, err := a.Start(ctx(t), "report", "c-1", nil, workflows.StartOptions{})
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, ver1, inst.DefinitionVersion, "the instance is pinned to the version it started with")
			raw, found, err := b.Store.GetWorkflowDefinition(ctx(t), "report", ver1)
			require.NoError(t, err)
			require.True(t, found, "Start recorded its definition with the instance")
			require.JSONEq(t, `{"steps":[
				{"id":"extract","actor":"wf","expectation":"extract","after":[],"max_attempts":1,"on_error":"abort"},
				{"id":"publish","actor":"wf","expectation":"publish","after":["extract"],"max_attempts":1,"on_error":"abort"}]}`, string(raw))
			// The new engine's node records its own at Start; twice is once.
			for range 2 {
				require.NoError(t, next.RecordDefinitions(ctx(t)))
			}
			_, found, err = b.Store.GetWorkflowDefinition(ctx(t), "report", ver2)
			require.NoError(t, err)
			require.True(t, found)

			// Only the engine that registered v2 advances the instance,
			// step by step, to its end: by v1's graph, never parked.
			for range 2 {
				endRunningStep(t, b, inst.ID)
				rep, err := next.Reconcile(ctx(t), workflows.ReconcileOptions{})
				require.NoError(t, err)
				require.Equal(t, workflows.ReconcileReport{Found: 1, Advanced: 1}, rep)
			}
			got, err := b.Store.GetWorkflowInstance(ctx(t), inst.ID)
			require.NoError(t, err)
			require.Equal(t, workflows.InstanceDone, got.Status)
			require.Empty(t, got.ParkedReason)
			require.Equal(t, ver1, got.DefinitionVersion)
			steps, err := b.Store.ListWorkflowSteps(ctx(t), inst.ID)
			require.NoError(t, err)
			require.Equal(t, []string{"extract:done", "publish:done"}, stepSummary(steps), "v1's steps, each run once")

			// A new instance on the new engine follows v2.
			inst2, _, err := next.Start(ctx(t), "report", "c-2", nil, workflows.StartOptions{})
			require.NoError(t, err)
			require.Equal(t, ver2, inst2.DefinitionVersion)
		})
	}

	t.Run("DefinitionRowsAreWrittenOnce", func(t *testing.T) {
		t.Parallel()
		s := newBackend(t).Store
		first := workflows.StoredDefinition{WorkflowID: "w", Version: "0123456789abcdef", Definition: []byte(`{"steps":[]}`), RecordedBy: "node-a"}
		require.NoError(t, s.PutWorkflowDefinition(ctx(t), first))
		again := first
		again.Definition, again.RecordedBy = []byte(`{"steps":[{"id":"x"}]}`), "node-b"
		require.NoError(t, s.InTx(ctx(t), func(tx workflows.Tx) error { return tx.PutWorkflowDefinition(ctx(t), again) }),
			"recording a recorded version is no error")
		raw, found, err := s.GetWorkflowDefinition(ctx(t), "w", "0123456789abcdef")
		require.NoError(t, err)
		require.True(t, found)
		require.JSONEq(t, `{"steps":[]}`, string(raw), "a version's row is never changed")
		_, found, err = s.GetWorkflowDefinition(ctx(t), "other", "0123456789abcdef")
		require.NoError(t, err)
		require.False(t, found, "keyed by workflow and version")
		// The version is matched whole: one that sorts before or after a
		// recorded one is another version.
		require.NoError(t, s.PutWorkflowDefinition(ctx(t), workflows.StoredDefinition{WorkflowID: "v", Version: "fedcba9876543210",
			Definition: []byte(`{"steps":[{"id":"late"}]}`), RecordedBy: "node-a"}))
		require.NoError(t, s.PutWorkflowDefinition(ctx(t), workflows.StoredDefinition{WorkflowID: "v", Version: "0123456789abcdef",
			Definition: []byte(`{"steps":[{"id":"early"}]}`), RecordedBy: "node-a"}))
		raw, found, err = s.GetWorkflowDefinition(ctx(t), "v", "0123456789abcdef")
		require.NoError(t, err)
		require.True(t, found)
		require.JSONEq(t, `{"steps":[{"id":"early"}]}`, string(raw))
		for _, other := range []string{"0000000000000000", "7777777777777777", "ffffffffffffffff"} {
			_, found, err = s.GetWorkflowDefinition(ctx(t), "v", other)
			require.NoError(t, err)
			require.False(t, found, "version %s was never recorded", other)
		}

		id, _, err := s.CreateWorkflowInstance(ctx(t), workflows.NewInstance{WorkflowID: "w", Subject: "s", DefinitionVersion: "0123456789abcdef"})
		require.NoError(t, err)
		legacy, _, err := s.CreateWorkflowInstance(ctx(t), workflows.NewInstance{WorkflowID: "w", Subject: "legacy"})
		require.NoError(t, err)
		got, err := s.GetWorkflowInstance(ctx(t), id)
		require.NoError(t, err)
		require.Equal(t, "0123456789abcdef", got.DefinitionVersion)
		got, err = s.GetWorkflowInstance(ctx(t), legacy)
		require.NoError(t, err)
		require.Empty(t, got.DefinitionVersion)
		list, err := s.ListWorkflowInstances(ctx(t), workflows.ListQuery{WorkflowID: "w", Subject: "s", Limit: 1})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "0123456789abcdef", list[0].DefinitionVersion)
	})

	t.Run("InstancesWithoutAVersionParkAsBefore", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		old := versionedEngine(t, b, "node-a", v1)
		next := versionedEngine(t, b, "node-b", renamed)
		legacy := legacyInstance(t, b, "c-legacy", "", v1)
		unknown := legacyInstance(t, b, "c-unknown", "ffffffffffffffff", v1)

		rep, err := next.Reconcile(ctx(t), workflows.ReconcileOptions{})
		require.NoError(t, err)
		require.Equal(t, 2, rep.Stuck)
		for _, st := range rep.StuckSteps {
			require.True(t, st.Parked)
		}
		for _, id := range []int64{legacy, unknown} {
			got, err := b.Store.GetWorkflowInstance(ctx(t), id)
			require.NoError(t, err)
			require.Equal(t, workflows.InstanceRunning, got.Status)
			require.Contains(t, got.ParkedReason, `"deliver"`, "parked as before versions")
		}
		got, err := b.Store.GetWorkflowInstance(ctx(t), unknown)
		require.NoError(t, err)
		require.Contains(t, got.ParkedReason, "ffffffffffffffff is not recorded")

		// The engine whose definition matches their steps advances both.
		rep, err = old.Reconcile(ctx(t), workflows.ReconcileOptions{})
		require.NoError(t, err)
		require.Equal(t, workflows.ReconcileReport{Found: 2, Advanced: 2}, rep)
		for _, id := range []int64{legacy, unknown} {
			got, err := b.Store.GetWorkflowInstance(ctx(t), id)
			require.NoError(t, err)
			require.Empty(t, got.ParkedReason, "cleared")
			steps, err := b.Store.ListWorkflowSteps(ctx(t), id)
			require.NoError(t, err)
			require.Equal(t, []string{"extract:done", "publish:running"}, stepSummary(steps))
		}
	})

	t.Run("MigrateMovesAnInstanceToAnotherVersion", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		next := versionedEngine(t, b, "node-b", renamed)
		ver2, err := renamed.Version()
		require.NoError(t, err)
		moved := legacyInstance(t, b, "c-moved", "", v1)
		replaced := legacyInstance(t, b, "c-replaced", "", v1)
		rep, err := next.Reconcile(ctx(t), workflows.ReconcileOptions{})
		require.NoError(t, err)
		require.Equal(t, 2, rep.Stuck, "parked: they started before versions")

		for _, bad := range []struct {
			version string
			mapping map[string]string
		}{
			{ver2, map[string]string{"extract": "extract"}},                                     // publish left out
			{ver2, map[string]string{"extract": "", "publish": "deliver"}},                      // removes a running step
			{ver2, map[string]string{"extract": "deliver", "publish": "deliver"}},               // two steps to one
			{ver2, map[string]string{"extract": "extract", "publish": "ship"}},                  // not a step of ver2
			{ver2, map[string]string{"extract": "extract", "publish": "deliver", "nope": ""}},   // not a step of the instance
			{"ffffffffffffffff", map[string]string{"extract": "extract", "publish": "deliver"}}, // not recorded
			{"", map[string]string{"extract": "extract", "publish": "deliver"}},
		} {
			_, err := next.Migrate(ctx(t), moved, bad.version, bad.mapping)
			require.ErrorIs(t, err, workflows.ErrInvalid, "%v", bad)
		}
		_, err = next.Migrate(ctx(t), 987654321, ver2, nil)
		require.ErrorIs(t, err, workflows.ErrNoInstance)

		got, err := next.Migrate(ctx(t), moved, ver2, map[string]string{"extract": "extract", "publish": "deliver"})
		require.NoError(t, err)
		require.Equal(t, ver2, got.DefinitionVersion)
		require.Empty(t, got.ParkedReason)
		got, err = next.Migrate(ctx(t), replaced, ver2, map[string]string{"extract": "extract", "publish": ""})
		require.NoError(t, err)
		require.Equal(t, ver2, got.DefinitionVersion)
		for _, id := range []int64{moved, replaced} {
			stored, err := b.Store.GetWorkflowInstance(ctx(t), id)
			require.NoError(t, err)
			require.Equal(t, ver2, stored.DefinitionVersion)
			require.Empty(t, stored.ParkedReason, "a migrated instance is no longer parked")
			steps, err := b.Store.ListWorkflowSteps(ctx(t), id)
			require.NoError(t, err)
			require.Equal(t, []string{"deliver:pending", "extract:running"}, stepSummary(steps), "the steps of the new version")
		}

		// The new version's engine takes both to their end.
		rep, err = next.Reconcile(ctx(t), workflows.ReconcileOptions{})
		require.NoError(t, err)
		require.Equal(t, workflows.ReconcileReport{Found: 2, Advanced: 2}, rep)
		for _, id := range []int64{moved, replaced} {
			endRunningStep(t, b, id)
		}
		rep, err = next.Reconcile(ctx(t), workflows.ReconcileOptions{})
		require.NoError(t, err)
		require.Equal(t, workflows.ReconcileReport{Found: 2, Advanced: 2}, rep)
		for _, id := range []int64{moved, replaced} {
			stored, err := b.Store.GetWorkflowInstance(ctx(t), id)
			require.NoError(t, err)
			require.Equal(t, workflows.InstanceDone, stored.Status)
		}
		_, err = next.Migrate(ctx(t), moved, ver2, map[string]string{"extract": "extract", "deliver": "deliver"})
		require.ErrorIs(t, err, workflows.ErrInvalid, "an ended instance stays as it ended")
	})
}

// versionedEngine is a workflow engine registering d on an unstarted node
// named id of b's store.
func versionedEngine(t *testing.T, b WorkflowsBackend, id string, d workflows.Definition) *workflows.Engine {
	t.Helper()
	rs, ok := b.Store.(runner.Store)
	require.True(t, ok, "the workflow store %T is a runner.Store", b.Store)
	node, err := runner.NewNode(runner.Config{Store: rs, Identity: id})
	require.NoError(t, err)
	e, err := workflows.New(b.Store, node, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, e.Register(d))
	return e
}

// endRunningStep ends, done, the episode of the instance's one running
// step.
func endRunningStep(t *testing.T, b WorkflowsBackend, instanceID int64) {
	t.Helper()
	steps, err := b.Store.ListWorkflowSteps(ctx(t), instanceID)
	require.NoError(t, err)
	var running []workflows.StepState
	for _, s := range steps {
		if s.Status == workflows.StepRunning {
			running = append(running, s)
		}
	}
	require.Len(t, running, 1, "steps %v", stepSummary(steps))
	b.SetEpisodeStatus(t, running[0].EpisodeID, episodes.StatusDone)
}

// legacyInstance writes, as a node of an older version would, a running
// instance of d with the given definition version ("" before migration
// 00013), its first step's episode already done.
func legacyInstance(t *testing.T, b WorkflowsBackend, subject, version string, d workflows.Definition) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.Store.InTx(ctx(t), func(tx workflows.Tx) (err error) {
		id, _, err = tx.CreateWorkflowInstance(ctx(t), workflows.NewInstance{WorkflowID: d.ID, Subject: subject, DefinitionVersion: version})
		for _, s := range d.Steps {
			if err == nil {
				err = tx.InsertWorkflowStep(ctx(t), id, s.ID, 1)
			}
		}
		return err
	}))
	n := newEpisode("workflow:" + subject + ":extract:1")
	n.TriggerType, n.ActorID, n.ExpectationID = episodes.TriggerWorkflow, "wf", "extract"
	ep, err := b.Store.CreateDeferredEpisode(context.Background(), episodes.Deferred{New: n})
	require.NoError(t, err)
	ok, err := b.Store.StartWorkflowStep(ctx(t), id, "extract", workflows.StepPending, 0, ep.Episode.ID)
	require.NoError(t, err)
	require.True(t, ok)
	b.SetEpisodeStatus(t, ep.Episode.ID, episodes.StatusDone)
	return id
}

func stepSummary(steps []workflows.StepState) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.StepID + ":" + s.Status
	}
	slices.Sort(out)
	return out
}
