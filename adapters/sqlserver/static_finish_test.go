package sqlserver_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
)

// TestStaticFinishEpisodeDoomsTheCallersTransaction: inside a caller's
// transaction (Run.CompleteTx and Run.FailTx through Store.WithTx, or
// InTx) a FinishEpisode that matched no row must leave nothing of that
// transaction committable, so the batch ends
//
//	IF EXISTS (SELECT 1 FROM @finished) ... ELSE IF @nested = 1 THROW 51001, ...
//
// (XACT_ABORT rolls the whole transaction back on the THROW), with 51001
// the number the adapter maps to claims.ErrLeaseLost (HoldLostError). It
// takes no savepoint and rolls back to none: rolling back to one would
// undo only the finish and leave the caller's own writes to commit.
// Whether the THROW runs against a server is for the SQL Server
// conformance suite (TestConformanceWorkflowsInTx, FinishEpisodeNests).
func TestStaticFinishEpisodeDoomsTheCallersTransaction(t *testing.T) {
	t.Parallel()

	q, ok := sqlServerQueries(t)["FinishEpisode"]
	require.True(t, ok, "no FinishEpisode batch")
	tree := mustParse(t, q.SQL)
	nested := nestingVariables(tree)
	require.NotEmpty(t, nested, "FinishEpisode must record whether it runs in a caller's transaction (a variable from @@TRANCOUNT)")
	walk(tree, func(n node) {
		switch getString(n, "$type") {
		case "SaveTransactionStatement":
			t.Errorf("SAVE TRANSACTION: a finish that matched nothing must doom the caller's transaction, not roll back to a savepoint")
		case "RollbackTransactionStatement":
			require.Empty(t, getString(n, "Name", "Value"), "ROLLBACK TRANSACTION to a savepoint: the caller's transaction would stay committable")
		}
	})

	var throws []any
	for _, stmt := range topStatements(tree) {
		if getString(stmt, "$type") != "IfStatement" || getString(stmt, "Predicate", "$type") != "ExistsPredicate" ||
			!readsVariable(get(stmt, "Predicate"), map[string]bool{"@finished": true}) {
			continue
		}
		walk(get(stmt, "ElseStatement"), func(n node) {
			if getString(n, "$type") == "IfStatement" && getString(n, "ThenStatement", "$type") == "ThrowStatement" {
				pred := get(n, "Predicate")
				require.True(t, readsVariable(pred, nested), "the THROW must run only in a caller's transaction")
				require.Equal(t, "Equals", getString(pred, "ComparisonType"))
				require.Equal(t, "1", getString(pred, "SecondExpression", "Value"), "IF @nested = 1 THROW: nested, not on its own")
				throws = append(throws, get(n, "ThenStatement"))
			}
		})
	}
	require.Len(t, throws, 1, "FinishEpisode has no IF EXISTS (SELECT 1 FROM @finished) ... ELSE IF @nested = 1 THROW: "+
		"a fenced finish that matched nothing would leave the caller's transaction committable")
	require.Equal(t, strconv.Itoa(sqlserver.HoldLostError), getString(throws[0], "ErrorNumber", "Value"))
	require.True(t, strings.Contains(getString(throws[0], "Message", "Value"), "lease lost"), "the message says what happened")
}
