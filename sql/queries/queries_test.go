package queries_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/sql/queries"
)

func TestParse(t *testing.T) {
	t.Parallel()

	files := fstest.MapFS{
		"a.sql": {Data: []byte("-- file comment\n\n-- name: One :one\n-- why\nSELECT 1;\n\n-- name: Two :exec\nUPDATE t SET x = 1;\n\n")},
		"b.sql": {Data: []byte("-- name: Three :many\nSELECT 3;\n")},
	}
	got, err := queries.Parse(files, "*.sql")
	require.NoError(t, err)
	require.Equal(t, map[string]queries.Query{
		"One":   {Name: "One", Kind: ":one", SQL: "-- name: One :one\n-- why\nSELECT 1;", File: "a.sql"},
		"Two":   {Name: "Two", Kind: ":exec", SQL: "-- name: Two :exec\nUPDATE t SET x = 1;", File: "a.sql"},
		"Three": {Name: "Three", Kind: ":many", SQL: "-- name: Three :many\nSELECT 3;", File: "b.sql"},
	}, got)
}

func TestParseErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		files   fstest.MapFS
		wantErr string
	}{
		{
			name:    "header without kind",
			files:   fstest.MapFS{"a.sql": {Data: []byte("-- name: One\nSELECT 1;\n")}},
			wantErr: `a.sql:1: malformed header "-- name: One"`,
		},
		{
			name:    "duplicate name in one file",
			files:   fstest.MapFS{"a.sql": {Data: []byte("-- name: One :one\nSELECT 1;\n-- name: One :many\nSELECT 2;\n")}},
			wantErr: "query One is already declared in a.sql",
		},
		{
			name: "duplicate name across files",
			files: fstest.MapFS{
				"a.sql": {Data: []byte("-- name: One :one\nSELECT 1;\n")},
				"b.sql": {Data: []byte("-- name: One :one\nSELECT 1;\n")},
			},
			wantErr: "b.sql: query One is already declared in a.sql",
		},
		{
			name:    "statement without header",
			files:   fstest.MapFS{"a.sql": {Data: []byte("SELECT 0;\n-- name: One :one\nSELECT 1;\n")}},
			wantErr: `a.sql:1: SQL before the first "-- name:" header`,
		},
		{
			name:    "header without statement",
			files:   fstest.MapFS{"a.sql": {Data: []byte("-- name: One :one\n-- only a comment\n\n-- name: Two :one\nSELECT 2;\n")}},
			wantErr: "query One has no statement",
		},
		{
			name:    "no files",
			files:   fstest.MapFS{},
			wantErr: `no file matches "*.sql"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := queries.Parse(tt.files, "*.sql")
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestStatementDropsComments(t *testing.T) {
	q := queries.Query{SQL: "-- name: X :one\n-- why it is safe\nSELECT 1\n  -- inline note\nFROM t;\n"}
	require.Equal(t, "SELECT 1\nFROM t", q.Statement())
}
