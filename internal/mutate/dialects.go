package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A target is one dialect's statements and the tests that read them.
type target struct {
	dialect string
	// files are where its statements' text lives in the module: sqlc's
	// generated Go for Postgres and SQLite (the text the adapters send,
	// comments stripped), the .sql files themselves for T-SQL (embedded,
	// and read from disk by the static checks).
	files string
	// pkg is the package whose tests run against each mutant, with run as
	// their -test.run filter ("" runs them all).
	pkg, run string
	// needs says what the tests need, printed when they cannot run.
	needs string
	// locks are the dialect's lock clauses that live in Go rather than in
	// a statement (SQLite's BEGIN IMMEDIATE), each removed by one mutant.
	locks []generated
	// routines are the migrations whose Up section creates a routine
	// (a function or procedure users and statements call, such as
	// leasehold_hold, or a trigger and the function it executes, such as
	// leasehold_episodes_key_version): each routine's body is mutated like
	// a statement, named after the routine. Migrations are embedded, so each of these
	// mutants rebuilds the tests.
	routines string
}

// sqliteLocks removes SQLite's write lock where the adapter takes it: the
// BEGIN IMMEDIATE its write gate sends before a statement's own
// transaction, and the DSN's _txlock=immediate (with the check that keeps
// a caller's DSN from overriding it), which makes every BeginTx
// transaction take the lock when it begins rather than at its first write.
var sqliteLocks = []generated{
	{
		ID: "sqlite:WriteGate:lock#1", File: "adapters/sqlite/conn.go", Statement: "WriteGate", Op: "lock",
		Old: `x.ExecContext(ctx, "BEGIN IMMEDIATE", nil)`, New: `x.ExecContext(ctx, "BEGIN", nil)`,
		What: `WriteGate: a gated statement's own transaction BEGIN IMMEDIATE -> BEGIN (deferred)`,
	},
	{
		ID: "sqlite:BeginTx:lock#1", File: "adapters/sqlite/store.go", Statement: "BeginTx", Op: "lock",
		Old: `{"_txlock", "immediate"},
	}
	required = map[string]string{"_journal_mode": "WAL", "_foreign_keys": "1", "_txlock": "immediate"}`,
		New: `{"_txlock", "deferred"},
	}
	required = map[string]string{"_journal_mode": "WAL", "_foreign_keys": "1", "_txlock": "deferred"}`,
		What: `BeginTx: the DSN's _txlock=immediate -> deferred (transactions take the write lock at their first write)`,
	},
}

var targets = []target{
	{dialect: "postgres", files: "db/*.sql.go", routines: "sql/schema/postgres/*.sql", pkg: "adapters/postgres", needs: "a Postgres (make mutate starts a throwaway one when none is reachable)"},
	{dialect: "sqlite", files: "db/sqlitedb/*.sql.go", routines: "sql/schema/sqlite/*.sql", pkg: "adapters/sqlite", run: "^Test(Conformance|Hold|FinishTx|Savepoint|Store|Grant|Due|Lanes|ClaimAvailable|PollAndExpiry)",
		locks: sqliteLocks},
	{dialect: "sqlserver", files: "sql/queries/sqlserver/*.sql", routines: "sql/schema/sqlserver/*.sql", pkg: "adapters/sqlserver", run: "^Test(Static|Unit)"},
}

// operatorReads are the files whose statements only read for operators
// (the dashboard, the inspect CLI): no coordination decision rests on
// them, so no mutant of theirs can break a guarantee; they are left out.
var operatorReads = regexp.MustCompile(`(dashboard|inspect)\.sql`)

var goConst = regexp.MustCompile("(?s)const \\w+ = `-- name: (\\w+) :\\w+\\n(.*?)`")
var sqlName = regexp.MustCompile(`(?m)^-- name: (\w+) :\w+`)

// routineBlock is a goose statement block that creates a function, a
// procedure or a trigger; group 1 is the block, group 2 the routine's
// name.
var routineBlock = regexp.MustCompile(`(?s)-- \+goose StatementBegin\n(CREATE (?:OR REPLACE )?(?:FUNCTION|PROCEDURE|TRIGGER) (\w+).*?)-- \+goose StatementEnd`)

// insertTrigger finds the table a routine that creates an INSERT trigger
// fires on (group 1).
var insertTrigger = regexp.MustCompile(`(?is)^CREATE TRIGGER \w+\s+(?:BEFORE|AFTER)\s+INSERT\s+ON\s+(\w+)`)

// callTexts are the texts a statement that runs routine r contains: its
// call, name(; for an INSERT trigger, an insert into its table; for a
// function a trigger of rs executes, that trigger's texts.
func callTexts(r routine, rs []routine) []string {
	out := []string{r.name + "("}
	if m := insertTrigger.FindStringSubmatch(r.body); m != nil {
		out = append(out, "INSERT INTO "+m[1])
	}
	for _, other := range rs {
		if other.name != r.name && insertTrigger.MatchString(other.body) && strings.Contains(other.body, r.name+"(") {
			out = append(out, callTexts(other, nil)...)
		}
	}
	return out
}

// routine is one function or procedure a migration's Up section creates.
type routine struct{ file, name, body string } // file relative to the module root

// routinesOf returns the routines t's migrations create (none when t has
// no routines glob), in file order.
func routinesOf(root string, t target) ([]routine, error) {
	if t.routines == "" {
		return nil, nil
	}
	migrations, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(t.routines)))
	if err != nil {
		return nil, err
	}
	sort.Strings(migrations)
	var out []routine
	for _, f := range migrations {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		rel, _ := filepath.Rel(root, f)
		for _, m := range routineBlock.FindAllStringSubmatch(up, -1) {
			out = append(out, routine{file: filepath.ToSlash(rel), name: m[2], body: m[1]})
		}
	}
	return out, nil
}

// mutantsOf generates every mutant of target t's statements in the module
// at root.
func mutantsOf(root string, t target) ([]generated, error) {
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(t.files)))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []generated
	for _, f := range files {
		if operatorReads.MatchString(filepath.Base(f)) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		rel = filepath.ToSlash(rel)
		text := string(b)
		if strings.HasSuffix(f, ".go") {
			for _, m := range goConst.FindAllStringSubmatch(text, -1) {
				out = append(out, generate(t.dialect, rel, m[1], m[2])...)
			}
			continue
		}
		locs := sqlName.FindAllStringSubmatchIndex(text, -1)
		for i, l := range locs {
			end := len(text)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			out = append(out, generate(t.dialect, rel, text[l[2]:l[3]], text[l[1]:end])...)
		}
	}
	rs, err := routinesOf(root, t)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		out = append(out, generate(t.dialect, r.file, r.name, r.body)...)
	}
	for _, g := range t.locks {
		g.Dialect = t.dialect
		out = append(out, g)
	}
	// A statement whose text occurs twice in its file cannot be told apart
	// by its text: keep the first.
	seen := map[string]bool{}
	kept := out[:0]
	for _, g := range out {
		if seen[g.File+"\x00"+g.Old+"\x00"+g.New] {
			continue
		}
		seen[g.File+"\x00"+g.Old+"\x00"+g.New] = true
		kept = append(kept, g)
	}
	return kept, nil
}

// applyGenerated returns file's text with g's statement mutated; the
// statement's text must occur in it exactly once.
func applyGenerated(file string, g generated) (string, error) {
	if n := strings.Count(file, g.Old); n != 1 {
		return "", fmt.Errorf("%s: the statement %s occurs %d times in %s", g.ID, g.Statement, n, g.File)
	}
	return strings.Replace(file, g.Old, g.New, 1), nil
}
