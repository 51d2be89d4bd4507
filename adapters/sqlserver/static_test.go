// Static checks of the SQL Server dialect: the T-SQL batches in
// sql/queries/sqlserver, the migration in sql/schema/sqlserver, and the
// adapter's calls of the batches.
//
// This repository's CI has no SQL Server, so nothing here runs a statement.
// The tests prove that the T-SQL parses (github.com/sqlc-dev/teesql, a Go
// parser of SqlScriptDOM's grammar), that it declares the Postgres statements
// with the same kinds and result columns, that the lock hints the guarantees
// depend on are present and spelled right, that time comes from the database
// clock only, and that the adapter passes every batch exactly its
// @parameters. They prove nothing about locking behaviour; the conformance
// suite does that, where MSSQL_URL names a server.
package sqlserver_test

import (
	"context"
	"encoding/json"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sqlc-dev/teesql/parser"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/sql/schema"
	"github.com/leasehold/leasehold/workflows"
)

const (
	claimsTable    = "leasehold_work_claims"
	agentsTable    = "leasehold_agent_definitions"
	findingsTable  = "leasehold_findings"
	nodesTable     = "leasehold_nodes"
	episodesTable  = "leasehold_episodes"
	instancesTable = "leasehold_workflow_instances"

	definitionsTable = "leasehold_workflow_definitions"
)

// postgresOnly are the Postgres statements that have no SQL Server
// counterpart on purpose, with the reason: the entries of the shared list
// queries.DialectOnly that Postgres declares and SQL Server does not.
// Nothing else may be missing.
var postgresOnly = func() map[string]string {
	out := map[string]string{}
	for name, o := range queries.MissingFrom(queries.DialectSQLServer) {
		if o.In(queries.DialectPostgres) {
			out[name] = o.Why + ": " + o.Fallback
		}
	}
	return out
}()

// TestStaticParse: every named batch, and every statement of every Up and
// Down section of the migrations, parses as T-SQL made of the statement
// types these files are meant to hold.
func TestStaticParse(t *testing.T) {
	t.Parallel()

	for _, q := range byName(sqlServerQueries(t)) {
		t.Run("query/"+q.Name, func(t *testing.T) {
			tree, err := parseTSQL(q.SQL)
			require.NoError(t, err)
			requireStatementTypes(t, tree, batchStatements)
		})
	}
	sections := migrationStatements(t)
	require.NotEmpty(t, sections)
	for name, stmts := range sections {
		t.Run("migration/"+name, func(t *testing.T) {
			require.NotEmpty(t, stmts, "empty section")
			for i, sql := range stmts {
				tree, err := parseTSQL(sql)
				require.NoError(t, err, "statement %d:\n%s", i+1, sql)
				if sql == noopMigration {
					continue
				}
				requireStatementTypes(t, tree, migrationStatementTypes)
			}
		})
	}
}

// The statement types the files may contain. The parser is lenient: it reads
// an unknown "CREATE X ..." as an empty CREATE PROCEDURE and a stray word
// (a Postgres "LIMIT 1") as an EXECUTE, so a statement of any other type
// means the text is not the T-SQL it was meant to be. Extend the lists when
// a new statement kind is needed on purpose. EXECUTE is allowed only of the
// procedures in executedProcedures, which a stray word never names.
var (
	batchStatements = map[string]bool{
		"SelectStatement": true, "InsertStatement": true, "UpdateStatement": true, "DeleteStatement": true,
		"PredicateSetStatement": true, "DeclareVariableStatement": true,
		"DeclareTableVariableStatement": true, "IfStatement": true,
		"BeginEndBlockStatement": true, "TryCatchStatement": true, "ThrowStatement": true,
		"BeginTransactionStatement": true, "CommitTransactionStatement": true,
		"RollbackTransactionStatement": true, "SaveTransactionStatement": true,
		"SetVariableStatement": true, "ExecuteStatement": true,
		// SET LOCK_TIMEOUT, in bounds.sql only (TestStaticBounds).
		"SetCommandStatement": true,
	}
	migrationStatementTypes = map[string]bool{
		"CreateTableStatement": true, "CreateIndexStatement": true, "DropTableStatement": true,
		"AlterTableAddTableElementStatement": true, "AlterTableDropTableElementStatement": true,
		"DropIndexStatement": true,
		// Migration 00014's one row of leasehold_key_version.
		"InsertStatement": true,
		// Migration 00009's leasehold_hold, whose body is held to the batch
		// statement types (procedureBody).
		"CreateProcedureStatement": true, "DropProcedureStatement": true,
		// Migration 00016: the open trigger requests become available
		// episodes (UPDATE), and the trigger that refuses new ones, whose
		// body is held to the batch statement types like a procedure's.
		"UpdateStatement": true, "CreateTriggerStatement": true, "DropTriggerStatement": true,
	}
	// noopMigration is the whole of a migration section that changes
	// nothing on SQL Server and keeps the version numbers in step with the
	// other dialects (00011: Postgres's leasehold_lease_lost, SQLite's
	// leasehold_doomed_transactions).
	noopMigration = "SELECT 1;"
	// executedProcedures: TryMaintenanceLock's sp_getapplock.
	executedProcedures = map[string]bool{"sp_getapplock": true}
)

// requireStatementTypes fails unless the tree has statements and all of
// them, nested ones included, are of an allowed type.
func requireStatementTypes(t *testing.T, tree node, allowed map[string]bool) {
	t.Helper()
	top := topStatements(tree)
	require.NotEmpty(t, top, "no statement parsed")
	var check func(stmt any)
	check = func(stmt any) {
		typ := getString(stmt, "$type")
		require.True(t, allowed[typ], "parsed as %s, a statement type these files do not use: a typo the parser guessed around?", typ)
		if typ == "CreateProcedureStatement" || typ == "CreateTriggerStatement" {
			// A procedure's or trigger's body is a batch: held to the batch types.
			for _, child := range childStatements(stmt) {
				requireStatementTypes(t, node{"$type": "TSqlScript", "Batches": []any{node{"Statements": []any{child}}}}, batchStatements)
			}
			return
		}
		if typ == "ExecuteStatement" {
			proc := getString(stmt, "ExecuteSpecification", "ExecutableEntity", "ProcedureReference",
				"ProcedureReference", "Name", "BaseIdentifier", "Value")
			require.True(t, executedProcedures[strings.ToLower(proc)],
				"EXECUTE of %q, not a procedure these files call: a stray word the parser read as a procedure call?", proc)
		}
		for _, child := range childStatements(stmt) {
			check(child)
		}
	}
	for _, stmt := range top {
		check(stmt)
	}
}

// TestStaticSameQueriesAsPostgres: both dialects declare the same query
// names with the same kinds, apart from those queries.DialectOnly lists in
// one of them only (Postgres's, and SQL Server's BoundLockWait).
func TestStaticSameQueriesAsPostgres(t *testing.T) {
	t.Parallel()

	pg, ms := kinds(postgresQueries(t)), kinds(sqlServerQueries(t))
	for name, why := range postgresOnly {
		require.Contains(t, pg, name, "postgresOnly lists %s, which sql/queries/postgres no longer declares", name)
		require.NotContains(t, ms, name, "%s is listed as Postgres-only (%s), yet sql/queries/sqlserver declares it", name, why)
		delete(pg, name)
	}
	for name, o := range queries.MissingFrom(queries.DialectPostgres) {
		if o.In(queries.DialectSQLServer) {
			require.NotContains(t, pg, name, "%s is listed as missing from Postgres, yet sql/queries/postgres declares it", name)
			require.Contains(t, ms, name, "%s is listed as a SQL Server statement, which sql/queries/sqlserver does not declare", name)
			delete(ms, name)
		}
	}
	require.Equal(t, pg, ms)
}

// TestStaticSchemaMatchesPostgres: the SQL Server migrations create the
// tables of the Postgres ones, with the same columns in the same order
// (columns added by a later ALTER TABLE ... ADD at the end, in migration
// order), and the indexes of the same names (constraint indexes aside).
// Only CREATE TABLE, ALTER TABLE ... ADD column and CREATE INDEX are
// compared.
func TestStaticSchemaMatchesPostgres(t *testing.T) {
	t.Parallel()

	wantTables, wantIndexes := map[string][]string{}, []string{}
	pgFiles, err := fs.Glob(schema.Postgres(), "*.sql") // sorted: migration order
	require.NoError(t, err)
	for _, file := range pgFiles {
		text, err := fs.ReadFile(schema.Postgres(), file)
		require.NoError(t, err)
		tables, indexes := postgresSchema(string(text), wantTables)
		maps.Copy(wantTables, tables)
		wantIndexes = append(wantIndexes, indexes...)
	}
	require.NotEmpty(t, wantTables)

	tables, indexes := map[string][]string{}, []string{}
	sections := migrationStatements(t)
	for _, name := range slices.Sorted(maps.Keys(sections)) { // file order: CREATE before ALTER
		if !strings.HasSuffix(name, " Up") {
			continue
		}
		for _, sql := range sections[name] {
			for _, stmt := range topStatements(mustParse(t, sql)) {
				switch getString(stmt, "$type") {
				case "CreateTableStatement":
					var cols []string
					for _, c := range getList(stmt, "Definition", "ColumnDefinitions") {
						cols = append(cols, getString(c, "ColumnIdentifier", "Value"))
					}
					tables[getString(stmt, "SchemaObjectName", "BaseIdentifier", "Value")] = cols
				case "AlterTableAddTableElementStatement":
					table := getString(stmt, "SchemaObjectName", "BaseIdentifier", "Value")
					for _, c := range getList(stmt, "Definition", "ColumnDefinitions") {
						tables[table] = append(tables[table], getString(c, "ColumnIdentifier", "Value"))
					}
				case "CreateIndexStatement":
					indexes = append(indexes, getString(stmt, "Name", "Value"))
				}
			}
		}
	}
	require.Equal(t, wantTables, tables)
	require.ElementsMatch(t, wantIndexes, indexes)
}

// TestStaticResultSets: the adapter contract on results. A :one or :many
// batch sends exactly one result set, from its last statement (nothing runs
// after the result, so no lock is held while the client reads it), with the
// columns of the Postgres statement of the same name, in the same order. An
// :exec batch sends none. An :execrows batch, whose Postgres statement
// returns only the driver's row count, sends that count as one result set
// from its last statement, one column rows_affected.
func TestStaticResultSets(t *testing.T) {
	t.Parallel()

	pg := postgresQueries(t)
	for _, q := range byName(sqlServerQueries(t)) {
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			sets, last := resultSets(tree)
			if q.Kind == ":exec" {
				require.Empty(t, sets, "an :exec batch must not send a result set")
				return
			}
			require.Len(t, sets, 1, "want exactly one result set")
			require.True(t, last, "the result set must come from the batch's last statement")
			if q.Kind == ":execrows" {
				require.Equal(t, []string{"rows_affected"}, sets[0], "an :execrows batch returns its count as rows_affected")
				return
			}
			want := postgresColumns(t, pg[q.Name].SQL)
			require.Equal(t, want, sets[0], "result columns differ from the Postgres statement's")
		})
	}
}

// knownHints are the table hints the batches may use. The parser accepts a
// misspelled hint in a list and silently drops it from the tree, so hints are
// also read from the source text of each table reference and compared.
var knownHints = map[string]bool{
	"UPDLOCK": true, "HOLDLOCK": true, "SERIALIZABLE": true, "READPAST": true,
	"ROWLOCK": true, "READCOMMITTEDLOCK": true,
}

// TestStaticLockHints checks hints on the parse tree: every hint written
// anywhere is a known one (never NOLOCK), and the statements whose
// guarantees rest on a lock carry it.
func TestStaticLockHints(t *testing.T) {
	t.Parallel()

	qs := sqlServerQueries(t)

	for name, sql := range allBatches(t) {
		t.Run("known/"+name, func(t *testing.T) {
			for _, ref := range tableRefs(mustParse(t, sql), sql) {
				for _, h := range ref.written {
					require.NotEqual(t, "NOLOCK", h, "%s: NOLOCK is forbidden (dirty reads)", ref.table)
					require.NotEqual(t, "READUNCOMMITTED", h, "%s: READUNCOMMITTED is forbidden (dirty reads)", ref.table)
					require.True(t, knownHints[h], "%s: unknown table hint %q (misspelled?)", ref.table, h)
				}
				require.ElementsMatch(t, ref.written, ref.hints,
					"%s: the parser kept %v of the hints written %v", ref.table, ref.hints, ref.written)
				if slices.Contains(ref.hints, "READPAST") {
					require.Contains(t, ref.hints, "READCOMMITTEDLOCK",
						"%s: READPAST needs READCOMMITTEDLOCK under READ_COMMITTED_SNAPSHOT", ref.table)
				}
			}
		})
	}

	upsert := [][]string{{"UPDLOCK"}, {"HOLDLOCK", "SERIALIZABLE"}}
	fenced := [][]string{{"UPDLOCK"}}
	// SKIP LOCKED: lock what is picked, skip what others hold, row locks
	// only. READCOMMITTEDLOCK is required wherever READPAST is (above).
	skipLocked := [][]string{{"UPDLOCK"}, {"READPAST"}, {"ROWLOCK"}}
	// The row lock FOR UPDATE takes, held to the end of the transaction.
	forUpdate := [][]string{{"UPDLOCK"}, {"HOLDLOCK", "SERIALIZABLE"}, {"ROWLOCK"}}
	const (
		everyRef     = iota // every reference to table (at least one)
		updateTarget        // the UPDATE targets on table (at least one)
		insertGuard         // every reference but the INSERT targets: the existence check guarding an insert
		someRef             // at least one reference to table: the read that takes the lock the statement decides under
		txRead              // every read of table inside the batch's transaction (not a write's target): what its writes decide on
	)
	rules := []struct {
		query string
		table string
		refs  int // everyRef, updateTarget, insertGuard, someRef or txRead
		// need: for each inner list, one of its hints must be present.
		need [][]string
	}{
		{"AcquireClaim", claimsTable, updateTarget, upsert},
		{"ClaimForRecovery", claimsTable, updateTarget, upsert},
		{"ClaimForRecovery", claimsTable, txRead, upsert},
		// Recovery's restart decides, inside its transaction, on the claim
		// row (fenced out under a key-range lock, or re-read absent under
		// one) and on the episode row (given back: its status read under
		// the lock the UPDATE then takes, which re-checks it is not
		// available).
		{"RequeueOrphan", claimsTable, updateTarget, upsert},
		{"RequeueOrphan", claimsTable, txRead, upsert},
		{"RequeueOrphan", episodesTable, txRead, upsert},
		{"PutAgentDefinition", agentsTable, updateTarget, upsert},
		{"RenewClaim", claimsTable, everyRef, fenced},
		{"RenewClaims", claimsTable, everyRef, fenced},
		{"CompleteClaim", claimsTable, everyRef, fenced},
		{"FailClaim", claimsTable, everyRef, fenced},
		{"ReleaseClaim", claimsTable, everyRef, fenced},
		{"ReleaseClaims", claimsTable, everyRef, fenced},
		{"StartEpisode", claimsTable, everyRef, fenced},
		{"AppendStep", claimsTable, everyRef, fenced},
		{"FinishEpisode", claimsTable, everyRef, fenced},
		{"FinishEpisodes", claimsTable, everyRef, fenced},
		// Cancel decides "held live" on the claim row read under a key-range
		// lock held to the end (then fences it or asks its holder).
		{"CancelEpisode", claimsTable, everyRef, fenced},
		{"CancelEpisode", claimsTable, someRef, upsert},
		{"RetryEpisode", claimsTable, everyRef, fenced},
		// Available work: a poll picks a disjoint set (SKIP LOCKED), holds
		// it to COMMIT, and grants the claims like AcquireClaim (the UPDATE
		// and the fresh INSERT's guard under a key-range lock); expiry
		// checks for a live claim under a key-range lock; the deferred
		// episode's insert is guarded by a check of its dedupe key under a
		// key-range lock, so a duplicate is an empty result and never an
		// error (which would doom a caller's transaction).
		{"ClaimAvailable", episodesTable, someRef, skipLocked},
		{"ClaimAvailable", claimsTable, updateTarget, upsert},
		{"ClaimAvailable", claimsTable, txRead, upsert},
		{"ExpireAvailable", claimsTable, everyRef, upsert},
		{"CreateDeferredEpisode", episodesTable, insertGuard, upsert},
		{"CreateDeferredEpisodes", episodesTable, insertGuard, upsert},
		// Findings: fenced on the work claim; the raise is an upsert of the
		// one active row per (env, key).
		{"RaiseFinding", claimsTable, everyRef, fenced},
		{"RaiseFinding", findingsTable, updateTarget, upsert},
		{"RaiseWaitingForNodeFinding", findingsTable, updateTarget, upsert},
		{"UpdateFinding", claimsTable, everyRef, fenced},
		{"UpdateFinding", findingsTable, updateTarget, fenced},
		{"ClearFinding", claimsTable, everyRef, fenced},
		{"ClearFinding", findingsTable, updateTarget, fenced},
		// Membership: upserts of one row per node.
		{"RegisterNode", nodesTable, updateTarget, upsert},
		{"HeartbeatNode", nodesTable, updateTarget, upsert},
		// Maintenance: archiving skips rows other sessions hold.
		{"ArchiveEpisodes", episodesTable, everyRef, skipLocked},
		// Workflows: the advancing transaction holds the instance row
		// (FOR UPDATE on Postgres); a start checks the running key under a
		// key-range lock before inserting, like CreateDeferredEpisode.
		{"LockWorkflowInstance", instancesTable, everyRef, forUpdate},
		{"CreateWorkflowInstance", instancesTable, insertGuard, upsert},
		// A definition version is inserted once: the insert is guarded by
		// a check of its key under a key-range lock, so two nodes
		// recording it at once both succeed (ON CONFLICT DO NOTHING).
		{"PutWorkflowDefinition", definitionsTable, insertGuard, upsert},
	}
	for _, r := range rules {
		t.Run("required/"+r.query+"/"+r.table, func(t *testing.T) {
			q, ok := qs[r.query]
			require.True(t, ok, "no query %s", r.query)
			tree := mustParse(t, q.SQL)
			refs := tableRefs(tree, q.SQL)
			what := "a reference to"
			switch r.refs {
			case updateTarget:
				refs, what = updateTargets(tree, q.SQL), "an UPDATE of"
			case insertGuard:
				refs, what = insertGuards(tree, q.SQL), "an insert-guarding read of"
			case txRead:
				refs, what = txReads(tree, q.SQL), "a read inside the transaction of"
			}
			var n int
			if r.refs == someRef {
				held := false
				for _, ref := range refs {
					held = held || strings.EqualFold(ref.table, r.table) && !slices.ContainsFunc(r.need, func(anyOf []string) bool {
						return !slices.ContainsFunc(anyOf, func(h string) bool { return slices.Contains(ref.hints, h) })
					})
				}
				require.True(t, held, "no reference to %s carries one of each of %v", r.table, r.need)
				return
			}
			for _, ref := range refs {
				if !strings.EqualFold(ref.table, r.table) {
					continue
				}
				n++
				for _, anyOf := range r.need {
					require.True(t, slices.ContainsFunc(anyOf, func(h string) bool { return slices.Contains(ref.hints, h) }),
						"%s %s carries %v, needs one of %v", what, r.table, ref.hints, anyOf)
				}
			}
			require.NotZero(t, n, "found no %s %s", what, r.table)
		})
	}
}

// TestStaticDatabaseClock: SYSUTCDATETIME() is the only clock (invariant 1).
// GETDATE() and CURRENT_TIMESTAMP are server-local time, GETUTCDATE() is
// datetime (3.33 ms), and NOW() is a Postgres leftover.
func TestStaticDatabaseClock(t *testing.T) {
	t.Parallel()

	other := map[string]bool{
		"GETDATE": true, "GETUTCDATE": true, "SYSDATETIME": true, "SYSDATETIMEOFFSET": true,
		"CURRENT_TIMESTAMP": true, "NOW": true,
	}
	for name, sql := range allBatches(t) {
		t.Run(name, func(t *testing.T) {
			for _, w := range codeWords(sql) {
				require.False(t, other[strings.ToUpper(w)], "uses %s; use SYSUTCDATETIME()", w)
			}
		})
	}
}

// TestStaticMaintenanceNests: the batches Maintain sends inside its one
// transaction (every call in maintenance.go, and ExpireAvailable, which it
// runs through Store.ExpireAvailable) never end that
// transaction early: no ROLLBACK (it would end the outer transaction and
// release the maintenance lock, and the later batches would run in
// autocommit), no savepoint, and every BEGIN TRANSACTION matched by a
// COMMIT TRANSACTION, which inside the outer transaction only lowers
// @@TRANCOUNT. Errors are left to XACT_ABORT, which rolls back the run.
func TestStaticMaintenanceNests(t *testing.T) {
	t.Parallel()

	qs := sqlServerQueries(t)
	names := map[string]bool{"ExpireAvailable": true}
	for _, c := range adapterCalls(t, ".") {
		if strings.HasPrefix(c.pos, "maintenance.go:") {
			names[c.name] = true
		}
	}
	require.Contains(t, names, "TryMaintenanceLock", "maintenance.go does not call TryMaintenanceLock")
	for _, name := range slices.Sorted(maps.Keys(names)) {
		t.Run(name, func(t *testing.T) {
			q, ok := qs[name]
			require.True(t, ok, "no query %s", name)
			counts := map[string]int{}
			walk(mustParse(t, q.SQL), func(n node) { counts[getString(n, "$type")]++ })
			require.Zero(t, counts["RollbackTransactionStatement"], "ROLLBACK would end Maintain's transaction")
			require.Zero(t, counts["SaveTransactionStatement"], "no savepoints: errors roll back the whole run")
			require.Equal(t, counts["BeginTransactionStatement"], counts["CommitTransactionStatement"],
				"every BEGIN TRANSACTION needs its COMMIT TRANSACTION")
			require.Zero(t, counts["TryCatchStatement"], "a CATCH could swallow an error that XACT_ABORT has already rolled back")
		})
	}
}

// TestStaticNestsInCallersTransaction: the batches a workflows.Tx sends
// (for each Tx method, the statement of the same name) run inside the
// transaction Store.InTx began and must never end it early: a bare ROLLBACK
// would end the caller's transaction and leave its later batches in
// autocommit. A batch that controls transactions therefore first records
// whether it is nested (a variable DECLAREd from @@TRANCOUNT), and then
//   - begins, commits or rolls back (bare ROLLBACK) only under an IF on
//     that variable, and takes or rolls back to a savepoint likewise, only
//     to a savepoint it took itself;
//   - starts every CATCH with IF <that variable> ... THROW: under XACT_ABORT
//     ON a caught error has doomed the caller's transaction, so the only
//     answer left is the error.
//
// The workflow statements themselves control no transaction and catch
// nothing. Whether the conditions test the right value is for review and
// the conformance suite; this test catches a batch that does not look.
func TestStaticNestsInCallersTransaction(t *testing.T) {
	t.Parallel()

	qs := sqlServerQueries(t)
	txType := reflect.TypeFor[workflows.Tx]()
	require.NotZero(t, txType.NumMethod())
	for i := range txType.NumMethod() {
		name := txType.Method(i).Name
		t.Run(name, func(t *testing.T) {
			q, ok := qs[name]
			require.True(t, ok, "workflows.Tx.%s has no statement of the same name", name)
			tree := mustParse(t, q.SQL)
			nested := nestingVariables(tree)
			var control []string
			savepoints, rollbackTo := map[string]bool{}, []string{}
			var check func(stmt any, guarded bool)
			check = func(stmt any, guarded bool) {
				typ := getString(stmt, "$type")
				switch typ {
				case "BeginTransactionStatement", "CommitTransactionStatement",
					"RollbackTransactionStatement", "SaveTransactionStatement":
					control = append(control, typ)
					require.True(t, guarded, "%s not under an IF on a variable set from @@TRANCOUNT (%v): "+
						"inside the caller's transaction it must not run", typ, slices.Sorted(maps.Keys(nested)))
					savepoint := strings.ToLower(getString(stmt, "Name", "Value"))
					switch {
					case typ == "SaveTransactionStatement":
						savepoints[savepoint] = true
					case typ == "RollbackTransactionStatement" && savepoint != "":
						rollbackTo = append(rollbackTo, savepoint)
					}
				case "TryCatchStatement":
					control = append(control, typ)
					catch := getList(stmt, "CatchStatements", "Statements")
					require.NotEmpty(t, catch, "empty CATCH")
					first := catch[0]
					require.True(t, getString(first, "$type") == "IfStatement" &&
						readsVariable(get(first, "Predicate"), nested) &&
						getString(first, "ThenStatement", "$type") == "ThrowStatement",
						"a CATCH must start with IF <nested> THROW: the caller's transaction is doomed")
				case "IfStatement":
					inner := guarded || readsVariable(get(stmt, "Predicate"), nested)
					for _, k := range []string{"ThenStatement", "ElseStatement"} {
						if child, ok := get(stmt, k).(node); ok {
							check(child, inner)
						}
					}
					return
				}
				for _, child := range childStatements(stmt) {
					check(child, guarded)
				}
			}
			for _, stmt := range topStatements(tree) {
				check(stmt, false)
			}
			for _, sp := range rollbackTo {
				require.True(t, savepoints[sp], "ROLLBACK TRANSACTION %s: no SAVE TRANSACTION %s in the batch", sp, sp)
			}
			if strings.HasSuffix(q.File, "workflows.sql") {
				require.Empty(t, control, "the workflow statements control no transaction and catch nothing")
			}
		})
	}
}

// nestingVariables returns the variables a batch DECLAREs from
// @@TRANCOUNT, lower case: its record of running inside a caller's
// transaction.
func nestingVariables(tree node) map[string]bool {
	out := map[string]bool{}
	walk(tree, func(n node) {
		if getString(n, "$type") != "DeclareVariableElement" {
			return
		}
		walk(get(n, "Value"), func(v node) {
			if getString(v, "$type") == "GlobalVariableExpression" && strings.EqualFold(getString(v, "Name"), "@@TRANCOUNT") {
				out[strings.ToLower(getString(n, "VariableName", "Value"))] = true
			}
		})
	})
	return out
}

// readsVariable reports whether expr reads one of vars.
func readsVariable(expr any, vars map[string]bool) bool {
	found := false
	walk(expr, func(n node) {
		if getString(n, "$type") == "VariableReference" && vars[strings.ToLower(getString(n, "Name"))] {
			found = true
		}
	})
	return found
}

// TestStaticAdapterCalls: every call s.query / s.queryRow / s.execRows /
// s.exec in
// the adapter's non-test files names an existing batch with a string literal
// and passes exactly the batch's @parameters as sql.Named("x", ...)
// arguments, and every batch is called at least once.
func TestStaticAdapterCalls(t *testing.T) {
	t.Parallel()

	qs := sqlServerQueries(t)
	calls := adapterCalls(t, ".")
	require.NotEmpty(t, calls,
		"adapters/sqlserver has no non-test Go file calling query/queryRow/exec: the adapter is not written yet, "+
			"so no statement can be checked against its call sites")

	called := map[string]bool{}
	// The bounds are never sent alone: the adapter puts each on top of the
	// batch it bounds (Store.batch), referring to it by a string constant.
	for _, name := range boundNames {
		require.True(t, adapterMentions(t, ".", name), "the adapter never refers to %s", name)
		called[name] = true
	}
	for _, c := range calls {
		called[c.name] = true
		t.Run(c.pos, func(t *testing.T) {
			require.Empty(t, c.problems, "%s(%q)", c.method, c.name)
			q, ok := qs[c.name]
			require.True(t, ok, "%s calls %q, which is not a statement in sql/queries/sqlserver", c.method, c.name)
			require.Equal(t, batchParams(t, q.SQL), slices.Sorted(slices.Values(c.named)),
				"%s: sql.Named arguments differ from the batch's @parameters", c.name)
		})
	}
	for _, q := range byName(qs) {
		require.True(t, called[q.Name], "statement %s is never called by the adapter", q.Name)
	}
}

// boundNames are the statements of bounds.sql, which the adapter sends on
// top of other batches rather than on their own.
var boundNames = []string{"BoundLockWait", "BoundTransaction"}

// boundVariable is the int the bounds copy @bound_ms into: SET LOCK_TIMEOUT
// takes a literal or a variable, not an expression.
const boundVariable = "@leasehold_lock_timeout_ms"

// TestStaticBounds: each bound of bounds.sql is exactly "DECLARE
// @leasehold_lock_timeout_ms int = CAST(@bound_ms AS int); SET LOCK_TIMEOUT
// @leasehold_lock_timeout_ms;" (its one parameter the Postgres one,
// bound_ms); no other batch sets LOCK_TIMEOUT or declares the variable; and
// every batch parses with its bound on top, as the adapter sends it
// (BoundLockWait on the takeovers, BoundTransaction on every batch sent in
// InTx's or Maintain's transaction), keeping its result set and adding only
// @bound_ms. Which batches the adapter bounds is TestUnitBounds' and
// TestUnitParamsMatchPostgres' to check.
func TestStaticBounds(t *testing.T) {
	t.Parallel()

	qs := sqlServerQueries(t)
	for _, name := range boundNames {
		t.Run(name, func(t *testing.T) {
			q, ok := qs[name]
			require.True(t, ok, "no statement %s", name)
			require.Equal(t, ":exec", q.Kind)
			require.Equal(t, []string{"bound_ms"}, batchParams(t, q.SQL))
			top := topStatements(mustParse(t, q.SQL))
			require.Len(t, top, 2, "DECLARE, then SET LOCK_TIMEOUT")
			decl := getList(top[0], "Declarations")
			require.Len(t, decl, 1)
			require.True(t, strings.EqualFold(boundVariable, getString(decl[0], "VariableName", "Value")))
			require.Equal(t, "Int", getString(decl[0], "DataType", "SqlDataTypeOption"), "SET LOCK_TIMEOUT takes an int")
			require.Equal(t, "CastCall", getString(decl[0], "Value", "$type"))
			require.Equal(t, "@bound_ms", getString(decl[0], "Value", "Parameter", "Name"))
			cmds := getList(top[1], "Commands")
			require.Len(t, cmds, 1)
			require.Equal(t, "LockTimeout", getString(cmds[0], "CommandType"))
			require.True(t, strings.EqualFold(boundVariable, getString(cmds[0], "Parameter", "Name")),
				"SET LOCK_TIMEOUT from %s", boundVariable)
		})
	}

	bound := map[string]string{
		"AcquireClaim": "BoundLockWait", "ClaimForRecovery": "BoundLockWait", "RequeueOrphan": "BoundLockWait",
		"ClaimAvailable": "BoundLockWait",
	}
	txType := reflect.TypeFor[workflows.Tx]()
	for i := range txType.NumMethod() {
		bound[txType.Method(i).Name] = "BoundTransaction"
	}
	bound["ExpireAvailable"] = "BoundTransaction" // Maintain's
	for _, c := range adapterCalls(t, ".") {
		if strings.HasPrefix(c.pos, "maintenance.go:") {
			bound[c.name] = "BoundTransaction"
		}
	}
	for _, q := range byName(qs) {
		if slices.Contains(boundNames, q.Name) {
			continue
		}
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			walk(tree, func(n node) {
				require.NotEqual(t, "SetCommandStatement", getString(n, "$type"),
					"only the bounds of bounds.sql set LOCK_TIMEOUT (or any SET other than ON/OFF options)")
				if getString(n, "$type") == "DeclareVariableElement" {
					require.False(t, strings.EqualFold(boundVariable, getString(n, "VariableName", "Value")),
						"%s is the bounds' variable", boundVariable)
				}
			})
			b, ok := bound[q.Name]
			if !ok {
				return
			}
			sent := qs[b].SQL + "\n" + q.SQL
			top := topStatements(mustParse(t, sent))
			require.Equal(t, "SetCommandStatement", getString(top[1], "$type"), "%s first, then the batch", b)
			requireStatementTypes(t, mustParse(t, sent), batchStatements)
			alone, _ := resultSets(tree)
			withBound, last := resultSets(mustParse(t, sent))
			require.Equal(t, alone, withBound, "the bound sends no result set")
			if len(alone) > 0 {
				require.True(t, last)
			}
			want := append(batchParams(t, q.SQL), "bound_ms")
			require.ElementsMatch(t, want, batchParams(t, sent))
		})
	}
}

// TestStaticStartEpisodeLiveLease: StartEpisode's claim check requires the
// grant to be live on the database clock (lease_until > SYSUTCDATETIME()),
// as Postgres's lease CTE does, so a run never starts on a grant that is
// already stealable.
func TestStaticStartEpisodeLiveLease(t *testing.T) {
	t.Parallel()

	q := sqlServerQueries(t)["StartEpisode"]
	var checks int
	walk(mustParse(t, q.SQL), func(n node) {
		if getString(n, "$type") != "ExistsPredicate" || !readsTable(n, claimsTable) {
			return
		}
		checks++
		live := slices.ContainsFunc(conjuncts(get(n, "Subquery", "QueryExpression", "WhereClause", "SearchCondition")), func(c any) bool {
			switch getString(c, "ComparisonType") {
			case "GreaterThan":
				return isColumn(get(c, "FirstExpression"), "lease_until") && isClock(get(c, "SecondExpression"))
			case "LessThan":
				return isClock(get(c, "FirstExpression")) && isColumn(get(c, "SecondExpression"), "lease_until")
			}
			return false
		})
		require.True(t, live, "StartEpisode's claim check lacks lease_until > SYSUTCDATETIME()")
	})
	require.Equal(t, 1, checks, "StartEpisode checks its claim in one EXISTS")
}

// TestStaticRecoveryOrphanRules: recovery treats a non-terminal episode
// whose claim is done or failed as orphaned (item 7 of issue 14), never an
// available episode (run_after set: the pollers'), in both branches of
// ListOrphanedEpisodes and in ClaimForRecovery and RequeueOrphan; and those
// two keep the re-check that stops them from reopening work finished (or
// made available) meanwhile: the claim UPDATE first, then the episode
// UPDATE on status running or queued, not archived and not available, and
// a ROLLBACK.
func TestStaticRecoveryOrphanRules(t *testing.T) {
	t.Parallel()

	qs := sqlServerQueries(t)
	t.Run("ListOrphanedEpisodes", func(t *testing.T) {
		var finished, excluded int
		walk(mustParse(t, qs["ListOrphanedEpisodes"].SQL), func(n node) {
			if getString(n, "$type") == "InPredicate" && get(n, "NotDefined") != true && isColumn(get(n, "Expression"), "state") &&
				slices.Contains(stringValues(getList(n, "Values")), "done") && slices.Contains(stringValues(getList(n, "Values")), "failed") {
				finished++
			}
			if getString(n, "$type") == "QuerySpecification" &&
				slices.ContainsFunc(conjuncts(get(n, "WhereClause", "SearchCondition")), isNotAvailable) {
				excluded++
			}
		})
		require.Equal(t, 2, finished, "the done/failed rule in both branches (running, queued)")
		require.Equal(t, 2, excluded, "both branches exclude, at top level, available episodes (run_after IS NULL)")
	})

	for _, name := range []string{"ClaimForRecovery", "RequeueOrphan"} {
		t.Run(name, func(t *testing.T) { recoveryTakeoverRules(t, name, qs[name].SQL) })
	}
}

// recoveryTakeoverRules: the rules ClaimForRecovery and RequeueOrphan share
// (see TestStaticRecoveryOrphanRules), and RequeueOrphan's own: its
// episode UPDATE compares attempts with the count the sweeper listed (a
// second sweeper that waited on the claim row finds a released claim and
// must see the first requeue on the episode row).
func recoveryTakeoverRules(t *testing.T, name, sql string) {
	tree := mustParse(t, sql)
	// The first, lock-free read finds the orphan's key, never an available
	// episode's, and nothing is taken over unless it found one.
	var reads int
	walk(tree, func(n node) {
		if getString(n, "$type") != "QuerySpecification" {
			return
		}
		for _, e := range getList(n, "SelectElements") {
			if getString(e, "$type") == "SelectSetVariable" && strings.EqualFold(getString(e, "Variable", "Name"), "@orphan_key") {
				reads++
				require.True(t, slices.ContainsFunc(conjuncts(get(n, "WhereClause", "SearchCondition")), isNotAvailable),
					"the read that sets @orphan_key must leave out available episodes (run_after IS NULL at top level)")
			}
		}
	})
	require.Equal(t, 1, reads, "%s must read its orphan's claim key into @orphan_key, once", name)
	var guarded bool
	walk(tree, func(n node) {
		if getString(n, "$type") == "IfStatement" && readsVariable(get(n, "Predicate"), map[string]bool{"@orphan_key": true}) &&
			readsTable(get(n, "ThenStatement"), claimsTable) {
			guarded = true
		}
	})
	require.True(t, guarded, "nothing is taken over unless the first read found an orphan that is not available")

	var updates []string // target tables in text order
	var n int
	walk(tree, func(spec node) {
		if getString(spec, "$type") != "UpdateSpecification" {
			return
		}
		table := getString(spec, "Target", "SchemaObject", "BaseIdentifier", "Value")
		updates = append(updates, table)
		walk(get(spec, "WhereClause"), func(in node) {
			if getString(in, "$type") == "InPredicate" && isColumn(get(in, "Expression"), "state") &&
				slices.Contains(stringValues(getList(in, "Values")), "done") {
				n++
				require.Equal(t, claimsTable, table)
			}
		})
		if table == episodesTable {
			where := get(spec, "WhereClause", "SearchCondition")
			require.True(t, slices.ContainsFunc(conjuncts(where), func(c any) bool {
				return getString(c, "$type") == "InPredicate" && isColumn(get(c, "Expression"), "status") &&
					slices.Equal(stringValues(getList(c, "Values")), []string{"running", "queued"})
			}), "the episode UPDATE re-checks status IN (running, queued)")
			require.True(t, slices.ContainsFunc(conjuncts(where), func(c any) bool {
				return getString(c, "$type") == "BooleanIsNullExpression" && isColumn(get(c, "Expression"), "archived_at") &&
					get(c, "IsNot") != true
			}), "the episode UPDATE re-checks archived_at IS NULL")
			require.True(t, slices.ContainsFunc(conjuncts(where), isNotAvailable),
				"the episode UPDATE re-checks run_after IS NULL on the locked row: available work is the pollers'")
			if name == "RequeueOrphan" {
				require.True(t, slices.ContainsFunc(conjuncts(where), func(c any) bool {
					return getString(c, "ComparisonType") == "Equals" && isColumn(get(c, "FirstExpression"), "attempts") &&
						strings.EqualFold(getString(c, "SecondExpression", "Name"), "@attempts")
				}), "RequeueOrphan's episode UPDATE compares attempts = @attempts on the locked row")
			}
		}
	})
	require.Equal(t, 1, n, "the claim UPDATE takes over done/failed claims")
	require.Equal(t, []string{claimsTable, episodesTable}, updates[:2], "lock order: claim row, then episode row")
	var rollbacks int
	walk(tree, func(n node) {
		if getString(n, "$type") == "RollbackTransactionStatement" {
			rollbacks++
		}
	})
	require.Equal(t, 1, rollbacks, "a takeover whose episode no longer qualifies is rolled back")
}

// TestStaticCommitsOnlyWhenTheLastWriteMatched: the batches whose writes
// land together only when their last one matched (a journaled step, a
// retry's requeue, a recovery's takeover or requeue) commit under IF
// EXISTS (SELECT FROM <the table variable that last write OUTPUTs INTO>),
// once, and roll back in its ELSE: an unconditional COMMIT would let a
// released claim or a fenced-out grant land alone.
func TestStaticCommitsOnlyWhenTheLastWriteMatched(t *testing.T) {
	t.Parallel()

	qs := sqlServerQueries(t)
	for _, name := range []string{"AppendStep", "RetryEpisode", "ClaimForRecovery", "RequeueOrphan"} {
		t.Run(name, func(t *testing.T) {
			q, ok := qs[name]
			require.True(t, ok, "no query %s", name)
			tree := mustParse(t, q.SQL)
			stmts, info := dependencies(tree, q.SQL)
			require.NotEmpty(t, info.writes)
			last := stmts[info.writes[len(info.writes)-1]].n
			var into string
			for _, spec := range []string{"UpdateSpecification", "InsertSpecification"} {
				if v := getString(last, spec, "OutputIntoClause", "IntoTable", "Variable", "Name"); v != "" {
					into = strings.ToLower(v)
				}
			}
			require.NotEmpty(t, into, "the last write OUTPUTs INTO a table variable")
			var commits, guarded int
			walk(tree, func(n node) {
				switch getString(n, "$type") {
				case "CommitTransactionStatement":
					commits++
				case "IfStatement":
					if getString(n, "ThenStatement", "$type") != "CommitTransactionStatement" ||
						getString(n, "ElseStatement", "$type") != "RollbackTransactionStatement" ||
						getString(n, "Predicate", "$type") != "ExistsPredicate" {
						return
					}
					from := getList(n, "Predicate", "Subquery", "QueryExpression", "FromClause", "TableReferences")
					if len(from) == 1 && strings.EqualFold(getString(from[0], "Variable", "Name"), into) {
						guarded++
					}
				}
			})
			require.Equal(t, 1, commits, "one COMMIT")
			require.Equal(t, 1, guarded, "IF EXISTS (SELECT 1 FROM %s) COMMIT ELSE ROLLBACK", into)
		})
	}
}

// isNotAvailable: run_after IS NULL, an episode that is not available work
// (migration 00016).
func isNotAvailable(c any) bool {
	return getString(c, "$type") == "BooleanIsNullExpression" && isColumn(get(c, "Expression"), "run_after") &&
		get(c, "IsNot") != true
}

// readsTable reports whether n's FROM clauses (at any depth) name table.
func readsTable(n any, table string) bool {
	found := false
	walk(n, func(x node) {
		if getString(x, "$type") == "NamedTableReference" &&
			strings.EqualFold(getString(x, "SchemaObject", "BaseIdentifier", "Value"), table) {
			found = true
		}
	})
	return found
}

// conjuncts flattens a search condition's ANDs and parentheses.
func conjuncts(expr any) []any {
	switch getString(expr, "$type") {
	case "BooleanParenthesisExpression":
		return conjuncts(get(expr, "Expression"))
	case "BooleanBinaryExpression":
		if getString(expr, "BinaryExpressionType") == "And" {
			return append(conjuncts(get(expr, "FirstExpression")), conjuncts(get(expr, "SecondExpression"))...)
		}
	}
	if expr == nil {
		return nil
	}
	return []any{expr}
}

// isColumn: a column reference whose last part is col.
func isColumn(expr any, col string) bool {
	ids := getList(expr, "MultiPartIdentifier", "Identifiers")
	return getString(expr, "$type") == "ColumnReferenceExpression" && len(ids) > 0 &&
		strings.EqualFold(getString(ids[len(ids)-1], "Value"), col)
}

// isClock: SYSUTCDATETIME().
func isClock(expr any) bool {
	return getString(expr, "$type") == "FunctionCall" && strings.EqualFold(getString(expr, "FunctionName", "Value"), "SYSUTCDATETIME")
}

func stringValues(list []any) []string {
	out := make([]string, 0, len(list))
	for _, v := range list {
		out = append(out, getString(v, "Value"))
	}
	return out
}

// adapterMentions reports whether a non-test Go file in dir has the string
// literal s.
func adapterMentions(t *testing.T, dir, s string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	found := false
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(token.NewFileSet(), file, nil, goparser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok {
				if v, ok := stringLit(lit); ok && v == s {
					found = true
				}
			}
			return !found
		})
	}
	return found
}

// --- loading ---

// The SQL Server files as the static checks read them: from disk, so that
// make mutate can run one test binary against mutated copies;
// TestStaticEmbeddedMatchesFiles proves the embedded copies the adapter
// ships are the same.
var (
	sqlServerQueryDir  = filepath.Join("..", "..", "sql", "queries", "sqlserver")
	sqlServerSchemaDir = filepath.Join("..", "..", "sql", "schema", "sqlserver")
)

func sqlServerQueries(t *testing.T) map[string]queries.Query {
	t.Helper()
	qs, err := queries.Parse(os.DirFS(sqlServerQueryDir), "*.sql")
	require.NoError(t, err)
	return qs
}

func postgresQueries(t *testing.T) map[string]queries.Query {
	t.Helper()
	qs, err := queries.Parse(os.DirFS(filepath.Join("..", "..", "sql", "queries", "postgres")), "*.sql")
	require.NoError(t, err)
	return qs
}

// byName returns the queries sorted by name.
func byName(qs map[string]queries.Query) []queries.Query {
	out := slices.Collect(maps.Values(qs))
	slices.SortFunc(out, func(a, b queries.Query) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// allBatches returns every batch the server would receive, by name: the
// named queries, and each migration statement as "file Up#n".
func allBatches(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, q := range sqlServerQueries(t) {
		out["query/"+name] = q.SQL
	}
	for section, stmts := range migrationStatements(t) {
		for i, sql := range stmts {
			out["migration/"+section+"#"+strconv.Itoa(i+1)] = sql
		}
	}
	return out
}

func kinds(qs map[string]queries.Query) map[string]string {
	out := make(map[string]string, len(qs))
	for name, q := range qs {
		out[name] = q.Kind
	}
	return out
}

// migrationStatements splits every SQL Server migration the way goose does,
// keyed "file Up" and "file Down": a statement ends at a line whose code
// ends with ";", or at "-- +goose StatementEnd" inside a StatementBegin
// block. Annotation lines are dropped. Each statement is one batch on the
// server, so each must parse on its own.
func migrationStatements(t *testing.T) map[string][]string {
	t.Helper()
	dir := os.DirFS(sqlServerSchemaDir)
	files, err := fs.Glob(dir, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string][]string{}
	for _, file := range files {
		text, err := fs.ReadFile(dir, file)
		require.NoError(t, err)
		var (
			section string
			inBlock bool
			buf     []string
		)
		flush := func() {
			if stmt := strings.TrimSpace(strings.Join(buf, "\n")); stmt != "" {
				out[file+" "+section] = append(out[file+" "+section], stmt)
			}
			buf = nil
		}
		for _, line := range strings.Split(string(text), "\n") {
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), "-- +goose "); ok {
				switch strings.TrimSpace(a) {
				case "Up", "Down":
					require.False(t, inBlock, "%s: section starts inside a StatementBegin block", file)
					require.Empty(t, codeWords(strings.Join(buf, "\n")), "%s: statement without ';' before %q", file, line)
					buf, section = nil, strings.TrimSpace(a)
				case "StatementBegin":
					inBlock = true
				case "StatementEnd":
					inBlock = false
					flush()
				}
				continue
			}
			if section == "" {
				continue
			}
			buf = append(buf, line)
			if !inBlock && endsWithSemicolon(line) {
				flush()
			}
		}
		require.Empty(t, codeWords(strings.Join(buf, "\n")), "%s: last statement has no ';'", file)
		require.Contains(t, out, file+" Up")
		require.Contains(t, out, file+" Down")
	}
	return out
}

// endsWithSemicolon is goose's rule: the last word before any "--" ends
// with ";".
func endsWithSemicolon(line string) bool {
	prev := ""
	for _, w := range strings.Fields(line) {
		if strings.HasPrefix(w, "--") {
			break
		}
		prev = w
	}
	return strings.HasSuffix(prev, ";")
}

// --- the parse tree ---

type node = map[string]any

// parseTSQL parses sql and returns the JSON form of the tree
// (parser.MarshalScript, SqlScriptDOM's shape) decoded into maps. Each
// text is parsed once per test binary: most static checks read every
// statement, and parsing dominated their time (a mutation run starts the
// binary once per mutant). The trees are shared, so no check may write
// into one.
func parseTSQL(sql string) (node, error) {
	parsed.Lock()
	defer parsed.Unlock()
	if p, ok := parsed.m[sql]; ok {
		return p.tree, p.err
	}
	tree, err := parseTSQLUncached(sql)
	parsed.m[sql] = parseResult{tree, err}
	return tree, err
}

type parseResult struct {
	tree node
	err  error
}

// parsed caches parseTSQL's results by text.
var parsed = struct {
	sync.Mutex
	m map[string]parseResult
}{m: map[string]parseResult{}}

func parseTSQLUncached(sql string) (node, error) {
	script, err := parser.Parse(context.Background(), strings.NewReader(sql))
	if err != nil {
		return nil, err
	}
	raw, err := parser.MarshalScript(script)
	if err != nil {
		return nil, err
	}
	var tree node
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil, err
	}
	return tree, nil
}

func mustParse(t *testing.T, sql string) node {
	t.Helper()
	tree, err := parseTSQL(sql)
	require.NoError(t, err)
	return tree
}

// walk calls visit for every object in the tree, parents first.
func walk(v any, visit func(node)) {
	switch v := v.(type) {
	case node:
		visit(v)
		for _, child := range v {
			walk(child, visit)
		}
	case []any:
		for _, child := range v {
			walk(child, visit)
		}
	}
}

// get follows keys through nested objects; nil when one is missing.
func get(v any, keys ...string) any {
	for _, k := range keys {
		n, ok := v.(node)
		if !ok {
			return nil
		}
		v = n[k]
	}
	return v
}

func getString(v any, keys ...string) string {
	s, _ := get(v, keys...).(string)
	return s
}

func getList(v any, keys ...string) []any {
	l, _ := get(v, keys...).([]any)
	return l
}

// topStatements returns the statements of the script's batches.
func topStatements(tree node) []any {
	var out []any
	for _, b := range getList(tree, "Batches") {
		out = append(out, getList(b, "Statements")...)
	}
	return out
}

// childStatements returns the statements nested in a control-flow
// statement: IF branches, BEGIN...END, TRY and CATCH blocks. Subqueries are
// expressions, not statements, and are not returned.
func childStatements(stmt any) []any {
	var out []any
	for _, k := range []string{"ThenStatement", "ElseStatement", "Statement"} {
		if s, ok := get(stmt, k).(node); ok {
			out = append(out, s)
		}
	}
	for _, k := range []string{"StatementList", "TryStatements", "CatchStatements"} {
		out = append(out, getList(stmt, k, "Statements")...)
	}
	return out
}

// resultSets returns the columns of every result set a batch sends: each
// SELECT that assigns no variable, and each INSERT/UPDATE/DELETE with an
// OUTPUT clause that has no INTO. last reports whether the last one comes
// from the batch's last top-level statement.
func resultSets(tree node) (sets [][]string, last bool) {
	var visit func(stmt any, top bool)
	top := topStatements(tree)
	visit = func(stmt any, isLast bool) {
		if cols, ok := resultColumns(stmt); ok {
			sets = append(sets, cols)
			last = isLast
		}
		for _, child := range childStatements(stmt) {
			visit(child, false)
		}
	}
	for i, stmt := range top {
		visit(stmt, i == len(top)-1)
	}
	return sets, last
}

// resultColumns returns the column names of the result set stmt sends, if
// it sends one.
func resultColumns(stmt any) ([]string, bool) {
	var elems []any
	switch getString(stmt, "$type") {
	case "SelectStatement":
		if get(stmt, "Into") != nil {
			return nil, false
		}
		q := get(stmt, "QueryExpression")
		for getString(q, "$type") == "BinaryQueryExpression" { // UNION: the first branch names the columns
			q = get(q, "FirstQueryExpression")
		}
		elems = getList(q, "SelectElements")
		for _, e := range elems {
			if getString(e, "$type") == "SelectSetVariable" {
				return nil, false
			}
		}
	case "InsertStatement", "UpdateStatement", "DeleteStatement":
		spec := strings.TrimSuffix(getString(stmt, "$type"), "Statement") + "Specification"
		out := get(stmt, spec, "OutputClause")
		if out == nil {
			return nil, false
		}
		elems = getList(out, "SelectColumns")
	default:
		return nil, false
	}
	cols := []string{}
	for _, e := range elems {
		cols = append(cols, columnName(e))
	}
	return cols, true
}

// columnName is the name a select element gives its column: its alias, or
// the last part of a column reference ("?" for an unnamed expression).
func columnName(elem any) string {
	if alias := getString(elem, "ColumnName", "Value"); alias != "" {
		return alias
	}
	ids := getList(elem, "Expression", "MultiPartIdentifier", "Identifiers")
	if len(ids) > 0 {
		if name := getString(ids[len(ids)-1], "Value"); name != "" {
			return name
		}
	}
	return "?"
}

// tableRef is one reference to a table, as the parser saw it and as written.
type tableRef struct {
	start   int      // offset of the reference in the parsed text, in runes
	table   string   // base table name, e.g. leasehold_work_claims
	alias   string   // "" when none
	hints   []string // hint kinds in the tree, upper case: UPDLOCK, ...
	written []string // hint names in the source text, upper case
}

// tableRefs returns every table reference (NamedTableReference) in the tree,
// wherever it appears: UPDATE and INSERT targets, FROM clauses, subqueries.
// sql is the text that was parsed; node offsets count characters (runes).
func tableRefs(tree any, sql string) []tableRef {
	src := []rune(sql)
	var out []tableRef
	walk(tree, func(n node) {
		if getString(n, "$type") != "NamedTableReference" {
			return
		}
		ref := tableRef{
			table: getString(n, "SchemaObject", "BaseIdentifier", "Value"),
			alias: getString(n, "Alias", "Value"),
		}
		for _, h := range getList(n, "TableHints") {
			ref.hints = append(ref.hints, strings.ToUpper(getString(h, "HintKind")))
		}
		start, _ := get(n, "StartOffset").(float64)
		length, _ := get(n, "FragmentLength").(float64)
		ref.start = int(start)
		if end := int(start) + int(length); int(start) >= 0 && end <= len(src) {
			ref.written = writtenHints(string(src[int(start):end]))
		}
		out = append(out, ref)
	})
	return out
}

// writtenHints returns the names in the parenthesised hint list of a table
// reference's text ("t AS c WITH (UPDLOCK, ROWLOCK)" gives UPDLOCK,
// ROWLOCK), upper case, as written.
func writtenHints(text string) []string {
	open, closing := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
	if open < 0 || closing < open {
		return nil
	}
	var out []string
	depth, from := 0, open+1
	for i := open + 1; i <= closing; i++ {
		switch {
		case text[i] == '(':
			depth++
		case text[i] == ')' && depth > 0:
			depth--
		case (text[i] == ',' && depth == 0) || i == closing:
			if h := strings.ToUpper(strings.TrimSpace(text[from:i])); h != "" {
				out = append(out, h)
			}
			from = i + 1
		}
	}
	return out
}

// updateTargets returns the target of every UPDATE, resolved through its
// FROM clause when the target is an alias ("UPDATE c ... FROM t AS c WITH
// (...)"): then the table is t and the hints are those written on either.
func updateTargets(tree any, sql string) []tableRef {
	var out []tableRef
	walk(tree, func(n node) {
		if getString(n, "$type") != "UpdateSpecification" {
			return
		}
		targets := tableRefs(get(n, "Target"), sql)
		if len(targets) == 0 {
			return // a table variable
		}
		target := targets[0]
		for _, from := range tableRefs(get(n, "FromClause"), sql) {
			if from.alias != "" && strings.EqualFold(from.alias, target.table) {
				target.table = from.table
				target.hints = append(target.hints, from.hints...)
				target.written = append(target.written, from.written...)
				break
			}
		}
		out = append(out, target)
	})
	return out
}

// insertGuards returns every table reference except the INSERT targets:
// in an "INSERT INTO t ... WHERE NOT EXISTS (SELECT ... FROM t WITH (...))"
// the reads that decide whether the row goes in.
func insertGuards(tree any, sql string) []tableRef {
	targets := map[int]bool{}
	walk(tree, func(n node) {
		if getString(n, "$type") == "InsertSpecification" {
			for _, ref := range tableRefs(get(n, "Target"), sql) {
				targets[ref.start] = true
			}
		}
	})
	var out []tableRef
	for _, ref := range tableRefs(tree, sql) {
		if !targets[ref.start] {
			out = append(out, ref)
		}
	}
	return out
}

// txReads returns the references after the batch's first BEGIN
// TRANSACTION that are not the target of an UPDATE, INSERT or DELETE (an
// UPDATE's alias resolved through its FROM): the reads that the
// transaction's writes are decided on.
func txReads(tree any, sql string) []tableRef {
	begin := -1.0
	targets := map[int]bool{}
	walk(tree, func(n node) {
		switch getString(n, "$type") {
		case "BeginTransactionStatement":
			if off, _ := get(n, "StartOffset").(float64); begin < 0 || off < begin {
				begin = off
			}
		case "UpdateSpecification", "InsertSpecification", "DeleteSpecification":
			for _, target := range tableRefs(get(n, "Target"), sql) {
				targets[target.start] = true
				for _, from := range tableRefs(get(n, "FromClause"), sql) {
					if from.alias != "" && strings.EqualFold(from.alias, target.table) {
						targets[from.start] = true
					}
				}
			}
		}
	})
	if begin < 0 {
		return nil
	}
	var out []tableRef
	for _, ref := range tableRefs(tree, sql) {
		if ref.start > int(begin) && !targets[ref.start] {
			out = append(out, ref)
		}
	}
	return out
}

// --- text ---

// codeWords returns the words of T-SQL text outside comments, string
// literals and quoted identifiers: keywords, names, numbers, @variables and
// @@functions.
func codeWords(sql string) []string {
	var out []string
	isWord := func(c byte) bool {
		return c == '_' || c == '@' || c == '#' || c == '$' ||
			'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c >= 0x80
	}
	// skipTo returns the index after the closing delim, treating a doubled
	// delim as an escaped one ('it''s', [a]]b]).
	skipTo := func(i int, delim byte) int {
		for i < len(sql) {
			if sql[i] == delim {
				if i+1 < len(sql) && sql[i+1] == delim {
					i += 2
					continue
				}
				return i + 1
			}
			i++
		}
		return i
	}
	for i := 0; i < len(sql); {
		switch c := sql[i]; {
		case strings.HasPrefix(sql[i:], "--"):
			if nl := strings.IndexByte(sql[i:], '\n'); nl >= 0 {
				i += nl + 1
			} else {
				i = len(sql)
			}
		case strings.HasPrefix(sql[i:], "/*"): // block comments nest in T-SQL
			depth := 0
			for i < len(sql) {
				if strings.HasPrefix(sql[i:], "/*") {
					depth, i = depth+1, i+2
				} else if strings.HasPrefix(sql[i:], "*/") {
					depth, i = depth-1, i+2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		case c == '\'':
			i = skipTo(i+1, '\'')
		case c == '"':
			i = skipTo(i+1, '"')
		case c == '[':
			i = skipTo(i+1, ']')
		case isWord(c):
			j := i
			for j < len(sql) && isWord(sql[j]) {
				j++
			}
			out = append(out, sql[i:j])
			i = j
		default:
			i++
		}
	}
	return out
}

// batchParams returns the parameters of a batch, sorted: the @names it uses
// that it does not DECLARE itself, without the "@". @@names are system
// functions; names in comments and string literals do not count, and
// neither do the parameter names of an EXECUTE (@Resource = ...).
func batchParams(t *testing.T, sql string) []string {
	t.Helper()
	declared := map[string]bool{}
	walk(mustParse(t, sql), func(n node) {
		switch getString(n, "$type") {
		case "DeclareVariableElement", "DeclareTableVariableBody":
			declared[getString(n, "VariableName", "Value")] = true
		case "ExecuteParameter":
			if name := getString(n, "Variable", "Name"); name != "" {
				declared[name] = true
			}
		}
	})
	set := map[string]bool{}
	for _, w := range codeWords(sql) {
		if strings.HasPrefix(w, "@") && !strings.HasPrefix(w, "@@") && !declared[w] {
			set[strings.TrimPrefix(w, "@")] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

var (
	pgCommentRE = regexp.MustCompile(`--[^\n]*`)
	pgAliasRE   = regexp.MustCompile(`(?i)\bAS\s+([a-z_][a-z0-9_]*)\s*$`)
)

// postgresColumns returns the result columns of a Postgres statement, read
// from its text: the names in its last top-level RETURNING list, else in its
// first top-level SELECT list (up to its FROM, or to the end of a SELECT
// without one). It is enough for sql/queries/postgres (column references and
// "AS" aliases), not a SQL parser; it fails the test when it finds neither
// list.
func postgresColumns(t *testing.T, sql string) []string {
	t.Helper()
	text := pgCommentRE.ReplaceAllString(sql, "")
	upper := strings.ToUpper(text)
	// Keyword positions at parenthesis depth 0, and the list boundaries.
	var returning, selectAt, fromAfterSelect, end = -1, -1, -1, len(text)
	depth, inString := 0, false
	wordAt := func(i int, w string) bool {
		if !strings.HasPrefix(upper[i:], w) {
			return false
		}
		before := i == 0 || !isIdent(upper[i-1])
		after := i+len(w) == len(upper) || !isIdent(upper[i+len(w)])
		return before && after
	}
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '\'':
			inString = !inString
		case inString:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0 && c == ';' && i < end:
			end = i
		case depth == 0 && wordAt(i, "RETURNING"):
			returning = i + len("RETURNING")
		case depth == 0 && selectAt < 0 && wordAt(i, "SELECT"):
			selectAt = i + len("SELECT")
		case depth == 0 && selectAt >= 0 && fromAfterSelect < 0 && wordAt(i, "FROM"):
			fromAfterSelect = i
		}
	}
	var list string
	switch {
	case returning >= 0:
		list = text[returning:end]
	case selectAt >= 0 && fromAfterSelect > selectAt:
		list = text[selectAt:fromAfterSelect]
	case selectAt >= 0: // a SELECT without FROM: its list runs to the end
		list = text[selectAt:end]
	default:
		require.FailNow(t, "no RETURNING or SELECT list in the Postgres statement", sql)
	}
	var cols []string
	for _, item := range splitTopLevel(list) {
		item = strings.TrimSpace(item)
		if m := pgAliasRE.FindStringSubmatch(item); m != nil {
			cols = append(cols, m[1])
			continue
		}
		cols = append(cols, item[strings.LastIndexByte(item, '.')+1:])
	}
	return cols
}

func isIdent(c byte) bool {
	return c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}

// splitTopLevel splits a list at the commas outside parentheses.
func splitTopLevel(list string) []string {
	var out []string
	depth, from := 0, 0
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, list[from:i])
				from = i + 1
			}
		}
	}
	return append(out, list[from:])
}

var (
	pgTableRE     = regexp.MustCompile(`(?ms)^CREATE TABLE (\w+) \((.*?)^\)`)
	pgColumnRE    = regexp.MustCompile(`(?m)^ {4}(\w+)\s`)
	pgIndexRE     = regexp.MustCompile(`(?m)^CREATE (?:UNIQUE )?INDEX (\w+)`)
	pgAlterRE     = regexp.MustCompile(`(?ms)^ALTER TABLE (\w+)\s(.*?);`)
	pgAddColumnRE = regexp.MustCompile(`\bADD COLUMN (\w+)`)
)

// postgresSchema reads the tables (columns in order) and index names of a
// Postgres migration from its text, as sql/schema/postgres lays it out: one
// column or "CONSTRAINT ..." per line indented by four spaces, continuation
// lines indented deeper; each "ADD COLUMN c" of an "ALTER TABLE t ...;"
// appends c to t, which base holds when an earlier migration created it.
func postgresSchema(text string, base map[string][]string) (tables map[string][]string, indexes []string) {
	// The Up section only: a Down may create again what its Up dropped.
	if up, _, found := strings.Cut(text, "-- +goose Down"); found {
		text = up
	}
	text = pgCommentRE.ReplaceAllString(text, "")
	tables = map[string][]string{}
	for _, m := range pgTableRE.FindAllStringSubmatch(text, -1) {
		var cols []string
		for _, c := range pgColumnRE.FindAllStringSubmatch(m[2], -1) {
			if !strings.EqualFold(c[1], "CONSTRAINT") {
				cols = append(cols, c[1])
			}
		}
		tables[m[1]] = cols
	}
	for _, m := range pgAlterRE.FindAllStringSubmatch(text, -1) {
		for _, c := range pgAddColumnRE.FindAllStringSubmatch(m[2], -1) {
			if _, ok := tables[m[1]]; !ok {
				tables[m[1]] = slices.Clone(base[m[1]])
			}
			tables[m[1]] = append(tables[m[1]], c[1])
		}
	}
	for _, m := range pgIndexRE.FindAllStringSubmatch(text, -1) {
		indexes = append(indexes, m[1])
	}
	return tables, indexes
}

// --- the adapter's Go code ---

// adapterCall is one call of query, queryRow, execRows or exec in the
// adapter.
type adapterCall struct {
	pos      string   // file:line
	method   string   // query, queryRow, execRows or exec
	name     string   // the statement named by the string literal
	named    []string // the names of the sql.Named("name", ...) arguments
	problems []string // arguments the check cannot read
}

// adapterCalls parses the non-test Go files in dir and returns every call
// x.query(ctx, "Name", args...), x.queryRow(...), x.execRows(...) and
// x.exec(...), whatever x.
func adapterCalls(t *testing.T, dir string) []adapterCall {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	var out []adapterCall
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, file, nil, goparser.SkipObjectResolution)
		require.NoError(t, err)
		sqlPkg := importName(f, "database/sql")
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains(adapterMethods, sel.Sel.Name) || len(call.Args) < 2 {
				return true
			}
			c := adapterCall{pos: fset.Position(call.Pos()).String(), method: sel.Sel.Name}
			c.pos = filepath.Base(c.pos)
			if name, ok := stringLit(call.Args[1]); ok {
				c.name = name
			} else {
				c.problems = append(c.problems, "the statement name is not a string literal")
			}
			if call.Ellipsis.IsValid() {
				c.problems = append(c.problems, "arguments passed as a slice...; pass each sql.Named(\"x\", v) in the call")
			}
			for i, arg := range call.Args[2:] {
				name, ok := namedArg(arg, sqlPkg)
				if !ok {
					c.problems = append(c.problems, "argument "+strconv.Itoa(i+3)+" is not sql.Named(\"literal\", ...)")
					continue
				}
				c.named = append(c.named, name)
			}
			out = append(out, c)
			return true
		})
	}
	return out
}

// adapterMethods are the Store methods that run a named batch.
var adapterMethods = []string{"query", "queryRow", "execRows", "exec"}

// importName is the name file f uses for the package at path.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path[strings.LastIndexByte(path, '/')+1:]
		}
	}
	return ""
}

// namedArg reads sql.Named("name", v); sqlPkg is the file's name for
// database/sql.
func namedArg(arg ast.Expr, sqlPkg string) (string, bool) {
	call, ok := arg.(*ast.CallExpr)
	if !ok || len(call.Args) != 2 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Named" {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || sqlPkg == "" || pkg.Name != sqlPkg {
		return "", false
	}
	return stringLit(call.Args[0])
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
