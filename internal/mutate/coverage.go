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

// A unit is what one traced run executes: a top-level test's subtest, or
// the whole test (sub "") when it has none, when its body executes the
// statement outside them, or when one of its subtests fails alone.
type unit struct{ top, sub string }

// statementTests maps a statement name (sqlc's method name) to the units
// of t's tests that execute it; every generated method has an entry, empty
// when no test executes it.
type statementTests map[string][]unit

// traceStatements runs t's tests (those t.run selects) one unit at a time
// from a coverage build and returns which statements each executed: first
// each top-level test whole (which also names its subtests), then each
// subtest alone. Subtests of the suites here build their own fixtures
// (a fresh schema or file each), so one runs alone as it runs beside the
// others; a test with a subtest that fails alone is traced whole.
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
	tops, err := listTests(ctx, scratch, t, bin)
	if err != nil {
		return nil, err
	}
	profiles, err := os.MkdirTemp(scratch, "cover-")
	if err != nil {
		return nil, err
	}
	wholes := make([]unit, len(tops))
	for i, top := range tops {
		wholes[i] = unit{top: top}
	}
	whole, err := traceUnits(ctx, scratch, t, bin, profiles, funcs, wholes)
	if err != nil {
		return nil, err
	}
	var subs []unit
	for _, u := range wholes {
		for _, sub := range whole[u].subs {
			subs = append(subs, unit{top: u.top, sub: sub})
		}
	}
	alone, err := traceUnits(ctx, scratch, t, bin, profiles, funcs, subs)
	if err != nil {
		return nil, err
	}
	out := statementTests{}
	for _, f := range funcs {
		out[f.statement] = nil
	}
	add := func(u unit, stmts []string) {
		for _, s := range stmts {
			if !slices.Contains(out[s], u) {
				out[s] = append(out[s], u)
			}
		}
	}
	for _, u := range wholes {
		w := whole[u]
		bySub := len(w.subs) > 0
		for _, sub := range w.subs {
			if a := alone[unit{u.top, sub}]; w.passed && !a.passed {
				bySub = false // it needs its siblings: trace the test whole
			}
		}
		if !bySub {
			add(u, w.stmts)
			continue
		}
		seen := map[string]bool{}
		for _, sub := range w.subs {
			su := unit{u.top, sub}
			add(su, alone[su].stmts)
			for _, s := range alone[su].stmts {
				seen[s] = true
			}
		}
		// What the test's own body executed outside every subtest.
		for _, s := range w.stmts {
			if !seen[s] {
				add(u, []string{s})
			}
		}
	}
	// A routine of the migrations (leasehold_hold) runs when a statement
	// that calls it runs: its mutants run those statements' tests.
	callers, err := routineCallers(scratch, t, genDir)
	if err != nil {
		return nil, err
	}
	for routine, stmts := range callers {
		for _, s := range stmts {
			for _, u := range out[s] {
				add(u, []string{routine})
			}
		}
		if out[routine] == nil {
			out[routine] = []unit{}
		}
	}
	for _, us := range out {
		slices.SortFunc(us, func(a, b unit) int { return strings.Compare(a.top+"/"+a.sub, b.top+"/"+b.sub) })
	}
	fmt.Printf("traced which of %d tests (%d subtests) execute each %s statement (%s)\n", len(tops), len(subs), t.dialect, time.Since(start).Round(time.Second))
	return out, ctx.Err()
}

// routineCallers maps each routine t's migrations create to the generated
// statements (in genDir) whose text calls it, or (a trigger, and the
// function it executes) inserts into its table (callTexts).
func routineCallers(scratch string, t target, genDir string) (map[string][]string, error) {
	rs, err := routinesOf(scratch, t)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(scratch, genDir, "*.sql.go"))
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range goConst.FindAllStringSubmatch(string(b), -1) {
			for _, r := range rs {
				for _, call := range callTexts(r, rs) {
					if strings.Contains(m[2], call) {
						out[r.name] = append(out[r.name], m[1])
						break
					}
				}
			}
		}
	}
	return out, nil
}

// traced is what one unit's run showed.
type traced struct {
	stmts  []string // the generated methods it executed
	subs   []string // its first-level subtests (a whole test's run only)
	passed bool
}

// traceUnits runs each unit alone from the coverage build bin, two at a
// time (the tests mostly wait on the database).
func traceUnits(ctx context.Context, scratch string, t target, bin, profiles string, funcs []methodSpan, units []unit) (map[unit]traced, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan int)
		errs []error
		out  = map[unit]traced{}
	)
	for range 2 {
		wg.Go(func() {
			for i := range next {
				u := units[i]
				prof := filepath.Join(profiles, fmt.Sprintf("%d-%d.out", len(units), i))
				run := exec.CommandContext(ctx, bin, "-test.count=1", "-test.v", "-test.run", u.pattern(),
					"-test.timeout="+mutantTimeout.String(), "-test.coverprofile="+prof)
				run.Dir = filepath.Join(scratch, filepath.FromSlash(t.pkg))
				run.Env = append(os.Environ(), "MSSQL_URL=")
				b, runErr := run.CombinedOutput()
				stmts, err := executed(prof, funcs)
				tr := traced{stmts: stmts, passed: runErr == nil}
				if u.sub == "" {
					tr.subs = subtestsOf(string(b), u.top)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", u.pattern(), err))
				}
				out[u] = tr
				mu.Unlock()
			}
		})
	}
	for i := range units {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return out, ctx.Err()
}

// pattern is u's -test.run filter.
func (u unit) pattern() string {
	p := "^" + regexp.QuoteMeta(u.top) + "$"
	if u.sub != "" {
		p += "/^" + regexp.QuoteMeta(u.sub) + "$"
	}
	return p
}

// subtestsOf returns the first-level subtests of top that a -test.v
// output ran, in order. A subtest whose own name holds a '/' (t.Run("a/"+x))
// is printed only under its full name, never as a level of its own: its
// first element is the unit, which -test.run's per-level matching selects
// it by.
func subtestsOf(out, top string) []string {
	var subs []string
	for _, l := range strings.Split(out, "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(l), "=== RUN")
		if !ok {
			continue
		}
		sub, ok := strings.CutPrefix(strings.TrimSpace(name), top+"/")
		sub, _, _ = strings.Cut(sub, "/")
		if ok && !slices.Contains(subs, sub) {
			subs = append(subs, sub)
		}
	}
	return subs
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

// testsFor returns the -test.run filters for a mutant of statement s:
// the units that execute it (a filter for the whole tests among them and
// one for the subtests, whose level-two alternatives may also run a
// same-named subtest of another listed test: more tests, never fewer);
// none when no test does; and t.run alone (all true) when s is not a
// generated method (a lock clause in the adapter's Go: everything runs).
func (st statementTests) testsFor(t target, s string) (runs []string, all bool) {
	us, generated := st[s]
	if !generated {
		return []string{t.run}, true
	}
	var wholes, subTops, subs []string
	for _, u := range us {
		if u.sub == "" {
			wholes = append(wholes, regexp.QuoteMeta(u.top))
		}
	}
	for _, u := range us {
		if u.sub != "" && !slices.Contains(wholes, regexp.QuoteMeta(u.top)) {
			if q := regexp.QuoteMeta(u.top); !slices.Contains(subTops, q) {
				subTops = append(subTops, q)
			}
			if q := regexp.QuoteMeta(u.sub); !slices.Contains(subs, q) {
				subs = append(subs, q)
			}
		}
	}
	if len(wholes) > 0 {
		runs = append(runs, "^("+strings.Join(wholes, "|")+")$")
	}
	if len(subs) > 0 {
		runs = append(runs, "^("+strings.Join(subTops, "|")+")$/^("+strings.Join(subs, "|")+")$")
	}
	return runs, false
}
