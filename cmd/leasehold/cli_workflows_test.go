package main

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/workflows"
)

func TestCLIWorkflows(t *testing.T) {
	store, url, _ := cliSchema(t)
	ctx := context.Background()
	var ids []int64
	for i, subject := range []string{"c-1", "c-2"} {
		version := []string{"", "0123456789abcdef"}[i] // c-1 was started before versions
		id, created, err := store.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "report", Subject: subject, Env: "rc",
			DefinitionVersion: version})
		require.NoError(t, err)
		require.True(t, created)
		require.NoError(t, store.InsertWorkflowStep(ctx, id, "a", 1))
		ids = append(ids, id)
	}
	ok, err := store.ParkWorkflowInstance(ctx, ids[0], "step \"b\" renamed")
	require.NoError(t, err)
	require.True(t, ok)

	code, out, errOut := runCLI(t, workflowsCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^ID\s+WORKFLOW\s+VERSION\s+SUBJECT\s+STATUS\s+STACK\s+ENV\s+CREATED AT\s+FINISHED AT\s+PARKED$`, lines[0])
	require.Regexp(t, `^`+strconv.FormatInt(ids[1], 10)+`\s+report\s+01234567\s+c-2\s+running\s+-\s+rc\s+\S+\s+-\s+-$`, lines[1])
	require.True(t, strings.HasSuffix(lines[2], `step "b" renamed`), "the parked reason: %s", lines[2])
	require.Regexp(t, `^`+strconv.FormatInt(ids[0], 10)+`\s+report\s+-\s+c-1\s`, lines[2], "no version: -")
	require.Contains(t, errOut, "2 instance(s)")

	code, out, errOut = runCLI(t, workflowsCmd, "ls", "-parked", "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var got []instanceJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)
	require.Equal(t, ids[0], got[0].ID)
	require.Equal(t, `step "b" renamed`, got[0].Parked)
	require.Empty(t, got[0].Version)
	code, out, errOut = runCLI(t, workflowsCmd, "ls", "-subject", "c-2", "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"definition_version":"0123456789abcdef"`)

	code, out, errOut = runCLI(t, workflowsCmd, "cancel", "-id", strconv.FormatInt(ids[0], 10), "-reason", "deploy rolled back", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "canceled")
	inst, err := store.GetWorkflowInstance(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, workflows.InstanceCanceled, inst.Status)
	require.JSONEq(t, `{"reason":"canceled","message":"deploy rolled back"}`, string(inst.ErrorDetail))
	code, out, errOut = runCLI(t, workflowsCmd, "cancel", "-id", strconv.FormatInt(ids[0], 10), "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "already ended: canceled")

	code, out, errOut = runCLI(t, workflowsCmd, "ls", "-status", "canceled", "-env", "", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "the header only: -env \"\" is the unset env")

	code, _, errOut = runCLI(t, workflowsCmd, "cancel", "-id", "987654321", "-url", url)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no workflow instance 987654321")
	code, _, _ = runCLI(t, workflowsCmd, "cancel", "-url", url)
	require.Equal(t, 2, code, "-id is required")
	code, _, _ = runCLI(t, workflowsCmd, "ls", "-status", "nope", "-url", url)
	require.Equal(t, 2, code)
	code, _, _ = runCLI(t, workflowsCmd, "rm", "-url", url)
	require.Equal(t, 2, code)
}

// TestCLIWorkflowsMigrate: an instance parked by a rename (started before
// versions, its steps a and b) is moved to a recorded version whose step b
// is called c: c takes b's state, the parked reason is cleared, and the
// ready step starts. Bad mappings change nothing.
func TestCLIWorkflowsMigrate(t *testing.T) {
	store, url, _ := cliSchema(t)
	ctx := context.Background()
	v2, err := workflows.RecordDefinition(ctx, store, workflows.Definition{ID: "report", Steps: []workflows.Step{
		{ID: "a", Actor: "reports", Expectation: "extract"},
		{ID: "c", Actor: "reports", Expectation: "publish", After: []string{"a"}},
	}}, "operator")
	require.NoError(t, err)
	id, created, err := store.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "report", Subject: "s-1", Env: "rc"})
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, store.InsertWorkflowStep(ctx, id, "a", 1))
	require.NoError(t, store.InsertWorkflowStep(ctx, id, "b", 1))
	ok, err := store.ParkWorkflowInstance(ctx, id, `step "b" renamed`)
	require.NoError(t, err)
	require.True(t, ok)
	sid := strconv.FormatInt(id, 10)

	for _, bad := range [][]string{
		{"-map", "a=a"},      // b left out
		{"-map", "a=a,b=zz"}, // no step zz in the version
		{"-map", "a=a,b=c", "-to", "ffffffffffffffff"}, // not recorded
		{"-map", "a=a,a=c"},                            // a twice
		{"-map", "a"},                                  // not old=new
	} {
		args := append([]string{"migrate", "-id", sid, "-url", url}, bad...)
		if !slices.Contains(bad, "-to") {
			args = append(args, "-to", v2)
		}
		code, _, errOut := runCLI(t, workflowsCmd, args...)
		require.Equal(t, 2, code, "%v: %s", bad, errOut)
	}
	inst, err := store.GetWorkflowInstance(ctx, id)
	require.NoError(t, err)
	require.Equal(t, `step "b" renamed`, inst.ParkedReason, "a refused migration changed nothing")
	require.Empty(t, inst.DefinitionVersion)

	code, out, errOut := runCLI(t, workflowsCmd, "migrate", "-id", sid, "-to", v2, "-map", "a=a,b=c", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "follows version "+v2)
	inst, err = store.GetWorkflowInstance(ctx, id)
	require.NoError(t, err)
	require.Equal(t, v2, inst.DefinitionVersion)
	require.Empty(t, inst.ParkedReason)
	steps, err := store.ListWorkflowSteps(ctx, id)
	require.NoError(t, err)
	byID := map[string]workflows.StepState{}
	for _, s := range steps {
		byID[s.StepID] = s
	}
	require.Len(t, byID, 2)
	require.Equal(t, workflows.StepRunning, byID["a"].Status, "the ready first step started")
	require.Equal(t, workflows.StepPending, byID["c"].Status, "c took b's state")
}
