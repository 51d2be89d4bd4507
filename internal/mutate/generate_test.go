package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A swap of returned columns in a CTE (read by name) hands each value to
// the other column's name; in a list read by position it swaps the columns.
func TestReturnedColumnsSwapTheirValuesUnderEachOthersNames(t *testing.T) {
	text := "WITH g AS (\n    UPDATE c SET fence = fence + 1\n    RETURNING c.fence, c.attempt, g.key AS claim_key\n)\nSELECT g.fence, g.attempt FROM g"
	var got []string
	for _, m := range generate("postgres", "f", "S", text) {
		if m.Op == "ret-swap" {
			got = append(got, m.New)
		}
	}
	require.Equal(t, []string{
		"WITH g AS (\n    UPDATE c SET fence = fence + 1\n    RETURNING c.attempt AS fence, c.fence AS attempt, g.key AS claim_key\n)\nSELECT g.fence, g.attempt FROM g",
		"WITH g AS (\n    UPDATE c SET fence = fence + 1\n    RETURNING c.fence, g.key AS attempt, c.attempt AS claim_key\n)\nSELECT g.fence, g.attempt FROM g",
	}, got)
	require.Equal(t, "count(*)", renamed("count(*)", "now() - x"), "an expression has no name to keep")

	var final []string
	for _, m := range generate("sqlserver", "f", "S", "UPDATE c SET fence = fence + 1\nOUTPUT inserted.fence, inserted.attempt INTO @t;") {
		if m.Op == "ret-swap" {
			final = append(final, m.New)
		}
	}
	require.Equal(t, []string{"UPDATE c SET fence = fence + 1\nOUTPUT inserted.attempt, inserted.fence INTO @t;"}, final)
}

// A JSON operator (->, ->>, #>, #>>) is not a comparison: no mutant flips
// its '>'.
func TestJSONArrowsAreNotComparisons(t *testing.T) {
	text := "SELECT (j ->> 'id')::bigint AS id, j #> '{a}' AS a, j -> 'fence' AS fence FROM x WHERE f.fence > 1"
	var got []string
	for _, m := range generate("postgres", "f", "S", text) {
		if strings.HasPrefix(m.Op, "cmp") {
			got = append(got, m.What)
		}
	}
	require.Equal(t, []string{
		`S: ">" -> "<" in "SELECT (j ->> 'id')::bigint AS id, j #> '{a}' AS a, j -> 'fence' AS fence FROM x WHERE f.fence > 1"`,
		`S: ">" -> ">=" in "SELECT (j ->> 'id')::bigint AS id, j #> '{a}' AS a, j -> 'fence' AS fence FROM x WHERE f.fence > 1"`,
	}, got)
}
