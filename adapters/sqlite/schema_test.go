package sqlite_test

import (
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/db"
	"github.com/leasehold/leasehold/db/sqlitedb"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/sql/schema"
)

// TestSchemaMatchesPostgres: the migrated SQLite schema is the final
// Postgres schema: the same tables with the same columns in the same order
// and the same nullability (read from the models sqlc generates from each
// schema), and the same indexes, each written exactly as the last Postgres
// CREATE INDEX of its name (so partial-index predicates are identical).
func TestSchemaMatchesPostgres(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]any{
		{db.LeaseholdWorkClaim{}, sqlitedb.LeaseholdWorkClaim{}},
		{db.LeaseholdEpisode{}, sqlitedb.LeaseholdEpisode{}},
		{db.LeaseholdEpisodeStep{}, sqlitedb.LeaseholdEpisodeStep{}},
		{db.LeaseholdAgentDefinition{}, sqlitedb.LeaseholdAgentDefinition{}},
		{db.LeaseholdTriggerRequest{}, sqlitedb.LeaseholdTriggerRequest{}},
		{db.LeaseholdFinding{}, sqlitedb.LeaseholdFinding{}},
		{db.LeaseholdNode{}, sqlitedb.LeaseholdNode{}},
		{db.LeaseholdWorkflowInstance{}, sqlitedb.LeaseholdWorkflowInstance{}},
		{db.LeaseholdWorkflowStep{}, sqlitedb.LeaseholdWorkflowStep{}},
		{db.LeaseholdWorkflowDefinition{}, sqlitedb.LeaseholdWorkflowDefinition{}},
	} {
		pg, lite := reflect.TypeOf(pair[0]), reflect.TypeOf(pair[1])
		want := columns(pg)
		for i, c := range want {
			if _, ok := notNullJSONB[pg.Name()+"."+strings.TrimSuffix(c, " NULL")]; ok {
				want[i] = strings.TrimSuffix(c, " NULL")
			}
		}
		require.Equal(t, want, columns(lite), pg.Name())
	}

	want := postgresIndexes(t)
	got := map[string]string{}
	rows, err := sqlitetest.DB(t).Query(`SELECT name, sql FROM sqlite_schema
		WHERE type = 'index' AND sql IS NOT NULL AND name LIKE 'leasehold_%'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name, sql string
		require.NoError(t, rows.Scan(&name, &sql))
		got[name] = normalize(sql)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
}

// notNullJSONB are the Postgres jsonb columns declared NOT NULL: sqlc
// models every jsonb column as []byte, which columns reads as nullable.
var notNullJSONB = map[string]struct{}{
	"LeaseholdNode.Runnable":                 {}, // migration 00012, NOT NULL DEFAULT '[]'
	"LeaseholdWorkflowDefinition.Definition": {}, // migration 00013, NOT NULL
}

// sqliteOnlyTables are the SQLite tables Postgres has no counterpart of,
// each with its reason.
var sqliteOnlyTables = map[string]string{
	"leasehold_doomed_transactions": "migration 00011: a row of it makes the caller's transaction fail at COMMIT " +
		"after a fenced write there matched no row; Postgres raises LH001 (leasehold_lease_lost) instead",
}

// TestSchemaTablesMatchPostgres: the SQLite tables are those
// TestSchemaMatchesPostgres compares with Postgres, goose's version table,
// and the declared sqliteOnlyTables, nothing else.
func TestSchemaTablesMatchPostgres(t *testing.T) {
	t.Parallel()
	want := []string{"leasehold_schema_version"}
	for _, m := range []any{
		db.LeaseholdWorkClaim{}, db.LeaseholdEpisode{}, db.LeaseholdEpisodeStep{}, db.LeaseholdAgentDefinition{},
		db.LeaseholdTriggerRequest{}, db.LeaseholdFinding{}, db.LeaseholdNode{}, db.LeaseholdWorkflowInstance{},
		db.LeaseholdWorkflowStep{}, db.LeaseholdWorkflowDefinition{},
	} {
		want = append(want, snakePlural(reflect.TypeOf(m).Name()))
	}
	want = append(want, "leasehold_key_version") // db.LeaseholdKeyVersion: one row, so singular
	for name := range sqliteOnlyTables {
		want = append(want, name)
	}
	var got []string
	rows, err := sqlitetest.DB(t).Query(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'leasehold_%'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		got = append(got, name)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, want, got)
}

// snakePlural is the table name of an sqlc model: LeaseholdWorkClaim is
// leasehold_work_claims.
func snakePlural(model string) string {
	var b strings.Builder
	for i, r := range model {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String() + "s"
}

// columns lists a model's fields with their nullability.
func columns(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		null := ""
		if k := f.Type.Kind(); k == reflect.Pointer || (k == reflect.Slice && f.Type.Elem().Kind() == reflect.Uint8) {
			null = " NULL"
		}
		out = append(out, f.Name+null)
	}
	return out
}

var (
	createIndexRE = regexp.MustCompile(`(?is)CREATE\s+(UNIQUE\s+)?INDEX\s+(\w+)\s+ON\s+[^;]+;`)
	dropIndexRE   = regexp.MustCompile(`(?i)DROP\s+INDEX\s+(\w+)\s*;`)
	commentRE     = regexp.MustCompile(`--[^\n]*`)
)

// postgresIndexes replays the Up sections of the Postgres migrations'
// CREATE INDEX and DROP INDEX statements.
func postgresIndexes(t *testing.T) map[string]string {
	t.Helper()
	files, err := fs.Glob(schema.Postgres(), "*.sql")
	require.NoError(t, err)
	slices.Sort(files)
	out := map[string]string{}
	for _, file := range files {
		text, err := fs.ReadFile(schema.Postgres(), file)
		require.NoError(t, err)
		up, _, _ := strings.Cut(string(text), "-- +goose Down")
		up = commentRE.ReplaceAllString(up, "")
		for _, m := range dropIndexRE.FindAllStringSubmatch(up, -1) {
			delete(out, m[1])
		}
		for _, m := range createIndexRE.FindAllStringSubmatch(up, -1) {
			out[m[2]] = normalize(m[0])
		}
	}
	require.NotEmpty(t, out)
	return out
}

func normalize(sql string) string {
	return strings.TrimSuffix(strings.Join(strings.Fields(sql), " "), ";")
}
