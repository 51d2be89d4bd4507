package sqlserver_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/sql/queries"
)

// TestStaticMigrationLock: the two batches of migrate.sql parse as T-SQL,
// call sp_getapplock / sp_releaseapplock with a session-owned lock on one
// resource, and take exactly the parameters the locker passes (@wait_ms to
// acquire, none to release). Like every static test, it proves nothing
// about locking on a real server.
func TestStaticMigrationLock(t *testing.T) {
	t.Parallel()
	qs, err := queries.Parse(os.DirFS("."), "migrate.sql")
	require.NoError(t, err)
	require.Len(t, qs, 2)
	for name, want := range map[string]struct {
		proc   string
		params []string
	}{
		"AcquireMigrationLock": {"sp_getapplock", []string{"wait_ms"}},
		"ReleaseMigrationLock": {"sp_releaseapplock", nil},
	} {
		t.Run(name, func(t *testing.T) {
			q, ok := qs[name]
			require.True(t, ok)
			require.Equal(t, ":one", q.Kind)
			_, err := parseTSQL(q.SQL)
			require.NoError(t, err)
			got := batchParams(t, q.SQL)
			if len(want.params) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, want.params, got)
			}
			body := strings.ToLower(q.SQL)
			require.Contains(t, body, "exec @result = "+want.proc)
			require.Contains(t, body, "@lockowner = n'session'")
			require.Contains(t, body, "@resource = @resource")
			require.Contains(t, body, "concat(n'leasehold.migrate:', db_name(), n'.', schema_name())")
		})
	}
}

// TestStaticRetiredTriggerRequests: migration 00016 refuses what a binary
// older than schema 16 would still write, a trigger request: an INSTEAD OF
// INSERT trigger on leasehold_trigger_requests (no other event) whose body
// THROWs sqlserver.RetiredRequestsError unconditionally (only SET NOCOUNT
// ON beside it), with a message that names schema 16; its Down drops it.
func TestStaticRetiredTriggerRequests(t *testing.T) {
	t.Parallel()
	const file = "00016_leasehold_available_episodes.sql"
	sections := migrationStatements(t)
	var triggers []any
	for _, sql := range sections[file+" Up"] {
		for _, st := range topStatements(mustParse(t, sql)) {
			if getString(st, "$type") == "CreateTriggerStatement" {
				triggers = append(triggers, st)
			}
		}
	}
	require.Len(t, triggers, 1, "%s creates one trigger", file)
	trg := triggers[0]
	name := getString(trg, "Name", "BaseIdentifier", "Value")
	require.Equal(t, "leasehold_trigger_requests", getString(trg, "TriggerObject", "Name", "BaseIdentifier", "Value"))
	require.Equal(t, "InsteadOf", getString(trg, "TriggerType"), "the row never lands: INSTEAD OF")
	actions := getList(trg, "TriggerActions")
	var kinds []string
	for _, a := range actions {
		kinds = append(kinds, getString(a, "TriggerActionType"))
	}
	// UPDATE too: the older T-SQL reopened an existing request with an
	// UPDATE, which an insert trigger never sees.
	require.ElementsMatch(t, []string{"Insert", "Update"}, kinds, "an old binary's inserts and updates are refused")

	body := childStatements(trg)
	require.Len(t, body, 1)
	require.Equal(t, "BeginEndBlockStatement", getString(body[0], "$type"))
	var throws int
	for _, st := range childStatements(body[0]) {
		switch getString(st, "$type") {
		case "ThrowStatement":
			throws++
			require.Equal(t, strconv.Itoa(sqlserver.RetiredRequestsError), getString(st, "ErrorNumber", "Value"))
			require.Contains(t, getString(st, "Message", "Value"), "schema 16", "the error names the schema version that retired requests")
		case "PredicateSetStatement":
		default:
			require.Fail(t, "the trigger's body only THROWs", "found %s", getString(st, "$type"))
		}
	}
	require.Equal(t, 1, throws, "the body THROWs, unconditionally")

	var dropped bool
	for _, sql := range sections[file+" Down"] {
		for _, st := range topStatements(mustParse(t, sql)) {
			if getString(st, "$type") == "DropTriggerStatement" {
				for _, o := range getList(st, "Objects") {
					dropped = dropped || strings.EqualFold(getString(o, "BaseIdentifier", "Value"), name)
				}
			}
		}
	}
	require.True(t, dropped, "the Down drops %s", name)
}
