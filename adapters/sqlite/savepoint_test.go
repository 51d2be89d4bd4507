package sqlite_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/workflows"
)

// Bound to a caller's transaction, InTx runs in a SAVEPOINT of it
// (Savepoints reports so, and the workflow engine relies on it to park an
// instance there): a failed InTx leaves the caller's transaction going
// without its writes, a successful one commits with the caller's.
func TestInTxInTheCallersTransactionIsASavepoint(t *testing.T) {
	t.Parallel()
	db := sqlitetest.DB(t)
	ctx := t.Context()
	s := sqlite.New(db)
	require.False(t, s.Savepoints(), "on the pool InTx begins its own transaction")

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	in := s.WithTx(tx)
	require.True(t, in.Savepoints())

	boom := errors.New("boom")
	err = in.InTx(ctx, func(w workflows.Tx) error {
		_, created, err := w.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "report", Subject: "rolled-back"})
		require.NoError(t, err)
		require.True(t, created)
		return boom
	})
	require.ErrorIs(t, err, boom)
	err = in.InTx(ctx, func(w workflows.Tx) error {
		_, created, err := w.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "report", Subject: "kept"})
		require.True(t, created)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	_, err = s.GetRunningWorkflowInstance(ctx, "report", "rolled-back", "")
	require.ErrorIs(t, err, workflows.ErrNoInstance, "the failed InTx's write was rolled back to its savepoint")
	got, err := s.GetRunningWorkflowInstance(ctx, "report", "kept", "")
	require.NoError(t, err)
	require.Equal(t, "kept", got.Subject)
}
