// Package queries loads leasehold's named SQL statements.
//
// The coordination statements live in one folder per dialect, under the same
// "-- name: Name :kind" headers (sqlc's format):
//
//   - postgres/*.sql is compiled by sqlc into package db (make generate); Go
//     code calls the generated methods and this package is not involved.
//   - sqlserver/*.sql holds the same statements in T-SQL. sqlc does not
//     support SQL Server, so these files are embedded here and the SQL Server
//     adapter loads them by name with SQLServer. Each entry is one batch,
//     sent to the server as it is written, comments included.
//
// Parse reads either folder; the static tests use it to check that both
// dialects declare the same statements with the same kinds.
package queries

import (
	"bufio"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Query is one named statement.
type Query struct {
	Name string // from the header, e.g. "AcquireClaim"
	Kind string // sqlc's result kind as written in the header: ":one", ":many", ":exec", ...
	// SQL is the text from the header line up to the next header, trailing
	// blank lines removed. It starts with the header comment, so the name
	// shows in server-side traces of the batch.
	SQL  string
	File string // path of the file in the fs.FS it was parsed from
}

//go:embed sqlserver/*.sql
var sqlserverFiles embed.FS

// SQLServer returns the T-SQL statements of sql/queries/sqlserver by name.
// An error means the embedded files are malformed, which the static tests
// in adapters/sqlserver rule out.
func SQLServer() (map[string]Query, error) {
	return Parse(sqlserverFiles, "sqlserver/*.sql")
}

var (
	// headerRE matches any line that starts a header, well formed or not.
	headerRE = regexp.MustCompile(`^--\s*name:`)
	// wellFormedRE is a whole header: "-- name: Name :kind".
	wellFormedRE = regexp.MustCompile(`^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s+(:[a-z]+)\s*$`)
)

// Parse reads the named statements of the files in fsys matching glob
// (fs.Glob syntax), in lexical file order. It fails when no file matches, on
// a malformed header (a header without a kind included), on a name declared
// twice (across files too), on SQL before a file's first header, and on a
// header with no statement under it.
func Parse(fsys fs.FS, glob string) (map[string]Query, error) {
	files, err := fs.Glob(fsys, glob)
	if err != nil {
		return nil, fmt.Errorf("queries: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("queries: no file matches %q", glob)
	}
	sort.Strings(files)
	out := map[string]Query{}
	for _, file := range files {
		text, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("queries: %w", err)
		}
		qs, err := parseFile(file, string(text))
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			if prev, dup := out[q.Name]; dup {
				return nil, fmt.Errorf("queries: %s: query %s is already declared in %s", file, q.Name, prev.File)
			}
			out[q.Name] = q
		}
	}
	return out, nil
}

// parseFile splits one file at its headers.
func parseFile(file, text string) ([]Query, error) {
	var (
		out  []Query
		cur  *Query
		body []string
	)
	flush := func() error {
		if cur == nil {
			return nil
		}
		if !hasStatement(body[1:]) {
			return fmt.Errorf("queries: %s: query %s has no statement", file, cur.Name)
		}
		cur.SQL = strings.TrimRight(strings.Join(body, "\n"), " \t\r\n")
		out = append(out, *cur)
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if headerRE.MatchString(trimmed) {
			m := wellFormedRE.FindStringSubmatch(trimmed)
			if m == nil {
				return nil, fmt.Errorf("queries: %s:%d: malformed header %q, want \"-- name: Name :kind\"", file, n, trimmed)
			}
			if err := flush(); err != nil {
				return nil, err
			}
			cur, body = &Query{Name: m[1], Kind: m[2], File: file}, []string{line}
			continue
		}
		if cur == nil {
			if hasStatement([]string{line}) {
				return nil, fmt.Errorf("queries: %s:%d: SQL before the first \"-- name:\" header", file, n)
			}
			continue
		}
		body = append(body, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("queries: %s: %w", file, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// hasStatement reports whether lines hold anything but blank lines and "--"
// comments.
func hasStatement(lines []string) bool {
	for _, l := range lines {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
			return true
		}
	}
	return false
}

// Statement returns the query's SQL without its comment lines and final
// semicolon: the statement alone, for tools that take one statement (pgbench
// scripts, EXPLAIN).
func (q Query) Statement() string {
	var lines []string
	for _, line := range strings.Split(q.SQL, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	return strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "\n")), ";")
}

// Statement returns a func that parses the files of fsys matching glob on
// its first call and returns the SQL of the statement called name; later
// calls return the same result. Adapters use it for the few statements
// that live beside their code (a migrator's privilege check, the schema
// version read), which are no coordination and have no twin here.
func Statement(fsys fs.FS, glob, name string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		qs, err := Parse(fsys, glob)
		if err != nil {
			return "", err
		}
		q, ok := qs[name]
		if !ok {
			return "", fmt.Errorf("queries: statement %s missing from %s", name, glob)
		}
		return q.SQL, nil
	})
}
