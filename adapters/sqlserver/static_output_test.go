package sqlserver_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	// declaredTable is a DECLARE @name TABLE ( ... ); group 2 is the body.
	declaredTable = regexp.MustCompile(`(?is)DECLARE\s+@(\w+)\s+TABLE\s*\((.*?)\);`)
	// outputInto is OUTPUT <columns> INTO @name [(<column list>)].
	outputInto = regexp.MustCompile(`(?is)\bOUTPUT\s+(.*?)\s+INTO\s+@(\w+)\s*(\(([^)]*)\))?`)
	// outputColumn names an OUTPUT item: inserted.x, deleted.x or "... AS x".
	outputColumn = regexp.MustCompile(`(?is)^(?:(?:inserted|deleted)\.(\w+)|.*\s+AS\s+(\w+))$`)
	lineComment  = regexp.MustCompile(`--[^\n]*`)
)

// OUTPUT ... INTO @table fills the table variable by position, not by name:
// two OUTPUT columns written in the wrong order put one column's value in
// another (a claim's state in its key, an attempt in its fence), and the
// batch's final SELECT reads the table variable by name, so neither the
// result set's shape nor any other static check notices. Every OUTPUT
// INTO a declared table variable names, in order, exactly the columns it
// fills: the variable's declared columns, or the column list after it.
func TestStaticOutputIntoFillsColumnsByName(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, q := range byName(sqlServerQueries(t)) {
		sql := lineComment.ReplaceAllString(q.SQL, "")
		declared := map[string][]string{}
		for _, m := range declaredTable.FindAllStringSubmatch(sql, -1) {
			declared[strings.ToLower(m[1])] = tableColumns(m[2])
		}
		for _, m := range outputInto.FindAllStringSubmatch(sql, -1) {
			target := strings.ToLower(m[2])
			want, ok := declared[target]
			if m[4] != "" {
				want, ok = splitNames(m[4]), true
			}
			if !ok {
				continue // not a table variable this batch declares
			}
			var got []string
			for _, item := range splitTopLevel(m[1]) {
				c := outputColumn.FindStringSubmatch(strings.TrimSpace(item))
				require.NotNil(t, c, "%s: OUTPUT item %q INTO @%s must be inserted.<column>, deleted.<column> or aliased with AS", q.Name, item, m[2])
				got = append(got, strings.ToLower(c[1]+c[2]))
			}
			assert.Equal(t, want, got, "%s: OUTPUT INTO @%s fills its columns by position; the names must line up", q.Name, m[2])
			checked++
		}
	}
	require.NotZero(t, checked, "no OUTPUT INTO a table variable was found: the pattern is stale")
}

// tableColumns reads the column names of a table variable's body.
func tableColumns(body string) []string {
	var names []string
	for _, def := range splitTopLevel(body) {
		fields := strings.Fields(strings.TrimSpace(def))
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "PRIMARY", "UNIQUE", "INDEX", "CONSTRAINT", "CHECK":
			continue
		}
		names = append(names, strings.ToLower(strings.Trim(fields[0], "[]")))
	}
	return names
}

func splitNames(list string) []string {
	var names []string
	for _, n := range strings.Split(list, ",") {
		names = append(names, strings.ToLower(strings.Trim(strings.TrimSpace(n), "[]")))
	}
	return names
}
