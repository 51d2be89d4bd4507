package main

import (
	"bufio"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A mutant of a Postgres or SQLite statement changes the text one
// generated method of sqlc's (db, db/sqlitedb) sends, and only a test that
// calls that method can see it. statementTests finds those tests once per
// run: it builds the target's tests with coverage of the generated package
// (go test -c -cover -coverpkg), runs each top-level test alone, and
// reads which generated methods each one executed. A mutant then runs
// only the tests that execute its statement (all of them, none skipped:
// a test that never sends the statement cannot fail because of it), and a
// statement no test executes is reported at once as missed. This turns a
// Postgres mutant from about two minutes (every adapters/postgres test)
// into the build plus the few tests that matter.

// statementTests maps a statement name (sqlc's method name) to the
// top-level tests of t that execute it; every generated method has an
// entry, empty when no test executes it.
type statementTests map[string][]string

// traceStatements runs t's top-level tests (those t.run selects) one at a
// time from a coverage build and returns which statements each executed.
func traceStatements(ctx context.Context, scratch string, t target) (statementTests, error) {
	start := time.Now()
	genDir := filepath.Dir(filepath.FromSlash(t.files)) // db or db/sqlitedb
	bin := filepath.Join(scratch, t.dialect+".cover.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-cover", "-covermode=set",
		"-coverpkg=./"+filepath.ToSlash(genDir), "-o", bin, "./"+t.pkg)
	cmd.Dir = scratch
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s's tests with coverage: %w\n%s", t.pkg, err, b)
	}
	funcs, err := generatedMethods(filepath.Join(scratch, genDir))
	if err != nil {
		return nil, err
	}
	tests, err := listTests(ctx, scratch, t, bin)
	if err != nil {
		return nil, err
	}
	profiles, err := os.MkdirTemp(scratch, "cover-")
	if err != nil {
		return nil, err
	}
	out := statementTests{}
	for _, f := range funcs {
		out[f.statement] = nil
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan string)
		errs []error
	)
	// Two at a time: the tests are mostly waiting on the database.
	for range 2 {
		wg.Go(func() {
			for name := range next {
				prof := filepath.Join(profiles, name+".out")
				run := exec.CommandContext(ctx, bin, "-test.count=1", "-test.run", "^"+regexp.QuoteMeta(name)+"$",
					"-test.timeout="+mutantTimeout.String(), "-test.coverprofile="+prof)
				run.Dir = filepath.Join(scratch, filepath.FromSlash(t.pkg))
				run.Env = append(os.Environ(), "MSSQL_URL=")
				_ = run.Run() // a failing test is the baseline's business
				stmts, err := executed(prof, funcs)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
				}
				for _, s := range stmts {
					out[s] = append(out[s], name)
				}
				mu.Unlock()
			}
		})
	}
	for _, name := range tests {
		if ctx.Err() != nil {
			break
		}
		next <- name
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	for _, ts := range out {
		slices.Sort(ts)
	}
	fmt.Printf("traced which of %d tests execute each %s statement (%s)\n", len(tests), t.dialect, time.Since(start).Round(time.Second))
	return out, ctx.Err()
}

// listTests returns t's top-level tests that t.run selects.
func listTests(ctx context.Context, scratch string, t target, bin string) ([]string, error) {
	pattern := t.run
	if pattern == "" {
		pattern = "."
	}
	cmd := exec.CommandContext(ctx, bin, "-test.list", pattern)
	cmd.Dir = filepath.Join(scratch, filepath.FromSlash(t.pkg))
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing %s's tests: %w", t.pkg, err)
	}
	var names []string
	for _, l := range strings.Fields(string(b)) {
		if strings.HasPrefix(l, "Test") {
			names = append(names, l)
		}
	}
	return names, nil
}

// methodSpan is one generated method's lines in its file.
type methodSpan struct {
	file      string // base name, e.g. recovery.sql.go
	from, to  int
	statement string
}

// generatedMethods returns the spans of sqlc's query methods in dir.
func generatedMethods(dir string) ([]methodSpan, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.sql.go"))
	if err != nil {
		return nil, err
	}
	var spans []methodSpan
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			spans = append(spans, methodSpan{file: filepath.Base(f), from: fset.Position(fd.Pos()).Line,
				to: fset.Position(fd.End()).Line, statement: fd.Name.Name})
		}
	}
	return spans, nil
}

// executed reads a coverage profile (mode set) and returns the statements
// whose generated method ran.
func executed(profile string, spans []methodSpan) ([]string, error) {
	f, err := os.Open(profile)
	if os.IsNotExist(err) {
		return nil, nil // the test binary died before writing it
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// path/file.go:L1.C1,L2.C2 statements count
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || !strings.HasSuffix(line, " 1") {
			continue
		}
		loc, _, _ := strings.Cut(line, " ")
		file, pos, ok := strings.Cut(loc, ":")
		if !ok {
			continue
		}
		l1, _, _ := strings.Cut(pos, ".")
		n, err := strconv.Atoi(l1)
		if err != nil {
			continue
		}
		base := filepath.Base(file)
		for _, s := range spans {
			if s.file == base && s.from <= n && n <= s.to {
				seen[s.statement] = true
			}
		}
	}
	stmts := make([]string, 0, len(seen))
	for s := range seen {
		stmts = append(stmts, s)
	}
	return stmts, sc.Err()
}

// testsFor returns the -test.run filter for a mutant of statement s:
// the tests that execute it, "" and true when no test does, and all of
// t's tests (all false) when s is not a generated method (a lock clause in
// the adapter's Go: everything runs).
func (st statementTests) testsFor(t target, s string) (run string, all bool) {
	ts, generated := st[s]
	if !generated {
		return t.run, true
	}
	if len(ts) == 0 {
		return "", false
	}
	quoted := make([]string, len(ts))
	for i, n := range ts {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$", false
}
