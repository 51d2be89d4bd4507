package sqlserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/workflows"
)

// One sentinel for "no such instance", whichever the dialect; the adapter's
// own name is an alias of it.
func TestUnitNoInstanceIsTheWorkflowsSentinel(t *testing.T) {
	f := newFake(t)
	f.answer = func(name string, _ map[string]any) fakeResult { return fakeResult{cols: resultColumns[name]} }
	s, ctx := f.store, context.Background()
	_, err := s.GetWorkflowInstance(ctx, 1)
	require.ErrorIs(t, err, workflows.ErrNoInstance)
	_, err = s.GetRunningWorkflowInstance(ctx, "w", "s", "")
	require.ErrorIs(t, err, workflows.ErrNoInstance)
	_, err = s.LockWorkflowInstance(ctx, 1)
	require.ErrorIs(t, err, workflows.ErrNoInstance)
	require.ErrorIs(t, err, ErrNoInstance, "the deprecated alias still matches")
}
