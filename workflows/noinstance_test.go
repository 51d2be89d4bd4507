package workflows_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/workflows"
)

// A missing instance is workflows.ErrNoInstance from the Engine and from
// every adapter (the adapters' own names are aliases of it).
func TestMissingInstanceIsErrNoInstance(t *testing.T) {
	t.Parallel()
	c := start(t, 1, &steps{runs: map[string]int{}}, pipeline("w-missing", nil))
	ctx := context.Background()
	_, _, err := c.engines[0].Instance(ctx, 987654321)
	require.ErrorIs(t, err, workflows.ErrNoInstance)
	//lint:ignore SA1019 the deprecated alias is what this line checks
	require.ErrorIs(t, err, postgres.ErrNoInstance, "the deprecated alias still matches")

	store := postgres.New(c.Pool)
	_, err = store.GetRunningWorkflowInstance(ctx, "w-missing", "nobody", "")
	require.ErrorIs(t, err, workflows.ErrNoInstance)
	require.ErrorIs(t, store.InTx(ctx, func(tx workflows.Tx) error {
		_, err := tx.LockWorkflowInstance(ctx, 987654321)
		return err
	}), workflows.ErrNoInstance)
}
