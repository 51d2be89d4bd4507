package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// tally counts one dialect's outcomes.
type tally struct {
	total, caught, breaking, breakingCaught int
	missed                                  []generated
}

// runGenerated runs target t's generated mutants (a sample of n of them
// when n > 0, chosen by seed) against its package's tests, spread over the
// scratch copies of the module (one worker each; scratches[0] also runs the
// baseline and the tracing), and returns what they caught.
func runGenerated(ctx context.Context, scratches []string, t target, n int, seed uint64, verbose bool) (tally, error) {
	var tl tally
	scratch := scratches[0]
	all, err := mutantsOf(scratch, t)
	if err != nil {
		return tl, err
	}
	if err := checkEquivalents(t, all); err != nil {
		return tl, err
	}
	if *flagMatch != "" {
		re, err := regexp.Compile(*flagMatch)
		if err != nil {
			return tl, fmt.Errorf("-match: %w", err)
		}
		all = slices.DeleteFunc(all, func(g generated) bool { return !re.MatchString(g.ID) })
	}
	if *flagWhat != "" {
		re, err := regexp.Compile(*flagWhat)
		if err != nil {
			return tl, fmt.Errorf("-what: %w", err)
		}
		all = slices.DeleteFunc(all, func(g generated) bool { return !re.MatchString(g.What) })
	}
	picked := all
	if n > 0 && n < len(all) {
		shuffled := slices.Clone(all)
		rand.New(rand.NewPCG(seed, 0x6d757461)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		picked = slices.Clone(shuffled[:n])
		if *flagAlways != "" { // the classes a run must never leave out, beside the sample
			re, err := regexp.Compile(*flagAlways)
			if err != nil {
				return tl, fmt.Errorf("-always: %w", err)
			}
			for _, g := range shuffled[n:] {
				if re.MatchString(g.ID + " " + g.What) {
					picked = append(picked, g)
				}
			}
		}
		slices.SortFunc(picked, func(a, b generated) int { return strings.Compare(a.ID, b.ID) })
	}
	fmt.Printf("\n== %s: %d generated mutants, running %d against go test ./%s (-run %q), %d at a time\n",
		t.dialect, len(all), len(picked), t.pkg, t.run, min(len(scratches), max(len(picked), 1)))
	if len(picked) == 0 {
		return tl, nil
	}
	workers := make([]worker, min(len(scratches), len(picked)))
	for i := range workers {
		w := &workers[i]
		w.dir, w.t = scratches[i], t
		if strings.HasSuffix(t.files, ".go") {
			if w.vars, err = prepareOverride(w.dir, t.files); err != nil {
				return tl, err
			}
		}
		w.bin = filepath.Join(w.dir, t.dialect+".test")
		if err := buildPkg(ctx, w.dir, t.pkg, w.bin); err != nil {
			return tl, fmt.Errorf("building %s's tests on the unmutated copy: %w", t.pkg, err)
		}
	}
	baseline, err := failingPkg(ctx, scratch, t, workers[0].bin, t.run, nil)
	if err != nil {
		return tl, err
	}
	if len(baseline) > 0 {
		fmt.Printf("note: %d test(s) fail on the unmutated tree and are ignored: %s\n", len(baseline), strings.Join(sortedKeys(baseline), ", "))
	}
	var traced statementTests
	if strings.HasSuffix(t.files, ".go") {
		if traced, err = traceStatements(ctx, scratch, t); err != nil {
			return tl, err
		}
	}
	for i := range workers {
		workers[i].baseline, workers[i].traced = baseline, traced
	}

	// Each worker takes the next mutant; outcomes are printed in the
	// mutants' order as soon as every earlier one is known.
	next := make(chan int)
	done := make(chan outcome)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for j := range next {
				o := workers[i].run(wctx, picked[j])
				o.index = j
				done <- o
			}
		})
	}
	go func() {
		defer close(next)
		for j := range picked {
			select {
			case next <- j:
			case <-wctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(done) }()
	got := make([]*outcome, len(picked))
	printed := 0
	var firstErr error
	for o := range done {
		if firstErr != nil {
			continue // draining after a failed run
		}
		if o.err != nil {
			firstErr = fmt.Errorf("%s: %w", picked[o.index].ID, o.err)
			cancel()
			continue
		}
		got[o.index] = &o
		for printed < len(picked) && got[printed] != nil {
			tl.record(picked[printed], got[printed].by, verbose, got[printed].note, got[printed].took)
			printed++
		}
	}
	if firstErr != nil {
		return tl, firstErr
	}
	return tl, ctx.Err()
}

// A worker runs mutants in its own scratch copy of the module, so a mutant
// that rewrites a file (T-SQL, a routine, what the override cannot
// express) never meets another's.
type worker struct {
	dir, bin string
	t        target
	vars     statementVars
	baseline map[string]bool
	traced   statementTests
}

// outcome is one mutant's run: the test that caught it ("" when none), a
// note on why when it was not run, and its duration.
type outcome struct {
	index int
	by    string
	note  string
	took  time.Duration
	err   error
}

// run runs mutant g against the worker's copy and puts the copy back.
func (w *worker) run(ctx context.Context, g generated) outcome {
	start := time.Now()
	t := w.t
	path := filepath.Join(w.dir, filepath.FromSlash(g.File))
	orig, err := os.ReadFile(path)
	if err != nil {
		return outcome{err: err}
	}
	mutated, err := applyGenerated(string(orig), g)
	if err != nil {
		return outcome{err: err}
	}
	env, err := w.vars.overrideOf(w.dir, g)
	if err != nil {
		return outcome{err: err}
	}
	// A mutant the override cannot express rewrites its file, and the
	// file is put back after its run; an overridden one leaves it alone.
	if env == nil {
		if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
			return outcome{err: err}
		}
		defer func() {
			if werr := os.WriteFile(path, orig, 0o644); werr != nil {
				panic(fmt.Sprintf("internal/mutate: putting %s back: %v", path, werr)) // the copy is unusable
			}
		}()
	}
	runs := []string{t.run}
	if w.traced != nil {
		var all bool
		if runs, all = w.traced.testsFor(t, g.Statement); len(runs) == 0 && !all {
			return outcome{note: "no test executes " + g.Statement, took: time.Since(start)}
		}
	}
	by := ""
	runBin := w.bin
	if env == nil && (strings.HasSuffix(g.File, ".go") || strings.HasPrefix(g.File, "sql/schema/")) { // compiled or embedded
		runBin = filepath.Join(w.dir, t.dialect+"-mutant.test")
		if err := buildPkg(ctx, w.dir, t.pkg, runBin); err != nil {
			if ctx.Err() != nil {
				return outcome{err: ctx.Err()}
			}
			by = "build failed"
		}
	}
	fails := map[string]bool{}
	for _, run := range runs {
		if by != "" || newFailure(fails, w.baseline) {
			break
		}
		f, err := failingPkg(ctx, w.dir, t, runBin, run, w.baseline, env...)
		if err != nil {
			return outcome{err: err}
		}
		maps.Copy(fails, f)
	}
	if ctx.Err() != nil {
		return outcome{err: ctx.Err()}
	}
	for name := range fails {
		if !w.baseline[name] && (by == "" || len(name) < len(by)) {
			by = name
		}
	}
	return outcome{by: by, took: time.Since(start)}
}

// checkEquivalents refuses an entry of equivalents for t's dialect whose ID
// no longer names the mutant it was written for (its statement changed and
// the IDs moved) or names none.
func checkEquivalents(t target, all []generated) error {
	what := map[string]string{}
	for _, g := range all {
		what[g.ID] = g.What
	}
	var stale []string
	for _, id := range sortedKeys(equivalents) {
		if !strings.HasPrefix(id, t.dialect+":") {
			continue
		}
		switch got, ok := what[id]; {
		case !ok:
			stale = append(stale, fmt.Sprintf("%s is no longer generated", id))
		case got != equivalents[id].what:
			stale = append(stale, fmt.Sprintf("%s now names %q, not %q", id, got, equivalents[id].what))
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("internal/mutate/equivalent.go is stale (re-check each entry's reason against its mutant):\n  %s", strings.Join(stale, "\n  "))
	}
	return nil
}

// newFailure reports whether fails holds a test that passes unmutated.
func newFailure(fails, baseline map[string]bool) bool {
	for name := range fails {
		if !baseline[name] {
			return true
		}
	}
	return false
}

// record counts mutant g, caught by test by ("" when it survived; note
// says why, when known), and prints its line.
func (tl *tally) record(g generated, by string, verbose bool, note string, took time.Duration) {
	eq, isEq := equivalentOf(g)
	breaks := !isEq
	tl.total++
	if breaks {
		tl.breaking++
	}
	mark := "CAUGHT  "
	switch {
	case by != "":
		tl.caught++
		if breaks {
			tl.breakingCaught++
		}
	default:
		mark = "MISSED  "
		tl.missed = append(tl.missed, g)
	}
	label := "breaks  "
	if isEq {
		label = "equiv   "
	}
	fmt.Printf("%s%s%-58s %s (%s)\n", mark, label, g.ID, g.What, took.Round(100*time.Millisecond))
	if by != "" && verbose {
		fmt.Printf("                by %s\n", by)
	}
	if note != "" {
		fmt.Printf("                %s\n", note)
	}
	if by == "" && isEq {
		fmt.Printf("                equivalent: %s\n", eq.why)
	}
}

// mutantTimeout bounds one run of a package's tests: a mutant that makes
// a test wait for ever (a grant never given, a lock never released) is
// caught by it. The unmutated adapters/postgres tests take about 30 s.
const mutantTimeout = 3 * time.Minute

// baselineTimeout bounds the unmutated run of a package's whole suite,
// which a loaded 2-core host (other runs beside it) can stretch past
// mutantTimeout: measured over 3 minutes at a load average of 8.
const baselineTimeout = 15 * time.Minute

func buildPkg(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", out, "./"+pkg)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, b)
	}
	return nil
}

// failingPkg runs t's tests that run selects from bin and returns the
// tests that failed. With stopAt (the baseline), it stops the binary at the
// first failing test stopAt does not hold: that is all a mutant's run needs
// to know, and a mutant often also makes some other test wait until the
// binary's timeout (a grant never given, a lock never released), which
// would cost minutes per mutant for nothing.
func failingPkg(ctx context.Context, dir string, t target, bin, run string, stopAt map[string]bool, env ...string) (map[string]bool, error) {
	timeout := mutantTimeout
	if stopAt == nil { // the unmutated baseline: every test of the package, on a loaded host
		timeout = baselineTimeout
	}
	args := []string{"-test.count=1", "-test.v", "-test.failfast", "-test.timeout=" + timeout.String()}
	if run != "" {
		args = append(args, "-test.run", run)
	}
	if t.dialect == "sqlserver" {
		args = append(args, "-test.skip", "^TestStaticEmbeddedMatchesFiles$")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = filepath.Join(dir, filepath.FromSlash(t.pkg))
	cmd.Env = append(append(os.Environ(), "MSSQL_URL="), env...)
	cmd.WaitDelay = 10 * time.Second // a child the binary started may hold its output open
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fails := map[string]bool{}
	var out strings.Builder
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		stopped := false
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line)
			out.WriteByte('\n')
			if m := failRE.FindStringSubmatch(line); m != nil {
				fails[m[1]] = true
				if stopAt != nil && !stopAt[m[1]] && !stopped {
					stopped = true
					_ = cmd.Process.Kill()
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	_ = pw.Close()
	<-scanned
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) && !errors.Is(err, exec.ErrWaitDelay) {
		return nil, err
	}
	if err != nil && len(fails) == 0 { // a panic or a timeout: count it
		fails["(test binary failed: "+strings.TrimSpace(lastLine(out.String()))+")"] = true
	}
	return fails, nil
}
