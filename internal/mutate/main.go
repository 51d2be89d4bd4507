// Command mutate measures what the tests catch of plausible mistakes in the
// SQL. It runs two kinds of mutants on a scratch copy of the module (the
// real files are never written; the copy is removed on exit, interrupt
// included):
//
//   - listed: the hand-labelled T-SQL mutations of mutations.go, each
//     marked guarantee-breaking or not, against the SQL Server static and
//     unit checks;
//   - generated (generate.go): for every statement of every dialect, each
//     comparison on a deciding term flipped, each such predicate removed and
//     negated, each lock clause or hint removed, each pair of adjacent
//     RETURNING/OUTPUT columns swapped; applied to the text the adapter
//     sends (sqlc's generated Go for Postgres and SQLite, the .sql files for
//     T-SQL) and run against the tests that read that dialect (dialects.go).
//     Every survivor counts as guarantee-breaking unless equivalent.go lists
//     it with the reason it cannot change an outcome.
//
// A mutant is caught when a test fails that passes on the unmutated copy,
// so work in progress elsewhere does not count as a catch. It prints
// caught / total and guarantee-breaking caught / total per dialect and
// exits non-zero while a guarantee-breaking mutant survives. Run it as make
// mutate (a sample) or make mutate-all. It is not part of make test.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

// sqlserverChecks is the target the listed mutations run against: the
// SQL Server static and unit checks.
var sqlserverChecks = targets[slices.IndexFunc(targets, func(t target) bool { return t.dialect == "sqlserver" })]

var (
	flagDialects = flag.String("dialects", "listed,sqlserver,sqlite,postgres", "what to run, in order: listed (the hand-labelled T-SQL set against the static checks) and the generated mutants of sqlserver, sqlite, postgres")
	flagSample   = flag.String("sample", "", "run a sample of the generated mutants of a dialect, e.g. postgres=40,sqlite=60 (default: all)")
	flagSeed     = flag.Uint64("seed", 0, "the sample's seed (default: the time)")
	flagList     = flag.Bool("list", false, "print the generated mutants and run nothing")
	flagVerbose  = flag.Bool("v", false, "name the test that caught each mutant")
	flagMatch    = flag.String("match", "", "run only the generated mutants whose ID matches this regular expression")
	flagWhat     = flag.String("what", "", "run only the generated mutants whose description matches this regular expression")
	flagAlways   = flag.String("always", "", "with -sample, also run every generated mutant whose ID and description (\"ID What\") match this regular expression")
	flagWorkers  = flag.Int("workers", 1, "run this many generated mutants at once, each in its own scratch copy of the module")
)

func run() error {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if *flagList {
		for _, t := range targets {
			ms, err := mutantsOf(root, t)
			if err != nil {
				return err
			}
			for _, m := range ms {
				fmt.Printf("%-60s %s\n", m.ID, m.What)
			}
			fmt.Printf("%s: %d mutants\n\n", t.dialect, len(ms))
		}
		return nil
	}
	samples := map[string]int{}
	for _, kv := range strings.Split(*flagSample, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("-sample %s: want dialect=count", kv)
			}
			samples[k] = n
		}
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	scratch, err := os.MkdirTemp("", "leasehold-mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	if *flagWorkers < 1 {
		return fmt.Errorf("-workers %d: want at least 1", *flagWorkers)
	}
	scratches := []string{scratch}
	for range *flagWorkers - 1 {
		dir, err := os.MkdirTemp("", "leasehold-mutate-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		scratches = append(scratches, dir)
	}
	for _, dir := range scratches {
		if err := copyModule(root, dir); err != nil {
			return err
		}
	}
	var failed []string
	results := map[string]tally{}
	for _, d := range strings.Split(*flagDialects, ",") {
		if d == "listed" {
			if err := runListed(ctx, scratch); err != nil {
				failed = append(failed, "listed: "+err.Error())
			}
			continue
		}
		i := slices.IndexFunc(targets, func(t target) bool { return t.dialect == d })
		if i < 0 {
			return fmt.Errorf("-dialects: %q is not listed, sqlserver, sqlite or postgres", d)
		}
		tl, err := runGenerated(ctx, scratches, targets[i], samples[d], seed, *flagVerbose)
		if err != nil {
			return err
		}
		results[d] = tl
	}
	fmt.Printf("\ngenerated mutants (seed %d):\n", seed)
	for _, d := range strings.Split(*flagDialects, ",") {
		tl, ok := results[d]
		if !ok {
			continue
		}
		fmt.Printf("  %-9s %4d run: %4d caught (%.1f%%); guarantee-breaking (all but the listed equivalents): %d of %d caught (%.1f%%)\n",
			d, tl.total, tl.caught, pct(tl.caught, tl.total), tl.breakingCaught, tl.breaking, pct(tl.breakingCaught, tl.breaking))
		for _, m := range tl.missed {
			if _, eq := equivalentOf(m); !eq {
				failed = append(failed, fmt.Sprintf("%s survives: %s", m.ID, m.What))
			}
		}
	}
	fmt.Printf("\n(%s)\n", time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		return fmt.Errorf("%d guarantee-breaking mutant(s) survive, or a run failed; kill each with a test or list it in equivalent.go with its reason:\n  %s",
			len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}

// runListed runs the hand-labelled T-SQL mutations of mutations.go against
// the SQL Server static checks.
func runListed(ctx context.Context, scratch string) error {
	start := time.Now()
	var stale []string
	for _, m := range mutations { // validate the whole list before running anything
		orig, err := os.ReadFile(filepath.Join(scratch, filepath.FromSlash(m.File)))
		if err == nil {
			_, err = m.apply(string(orig))
		}
		if err != nil {
			stale = append(stale, m.ID+": "+err.Error())
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("the mutation list is stale, fix it:\n%s", strings.Join(stale, "\n"))
	}
	bin := filepath.Join(scratch, "checks.test")
	if err := buildPkg(ctx, scratch, sqlserverChecks.pkg, bin); err != nil {
		return fmt.Errorf("building the checks on the unmutated copy: %w", err)
	}
	baseline, err := failingPkg(ctx, scratch, sqlserverChecks, bin, sqlserverChecks.run, nil)
	if err != nil {
		return err
	}
	if len(baseline) > 0 {
		fmt.Printf("note: %d test(s) fail on the unmutated tree and are ignored: %s\n\n", len(baseline), strings.Join(sortedKeys(baseline), ", "))
	}

	var total, caught, breaking, breakingCaught int
	var uncaught []mutation
	for _, m := range mutations {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		path := filepath.Join(scratch, filepath.FromSlash(m.File))
		orig, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w", m.ID, err)
		}
		mutated, err := m.apply(string(orig))
		if err != nil {
			return fmt.Errorf("%s: %w", m.ID, err)
		}
		if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
			return err
		}
		runBin, by := bin, ""
		if strings.HasSuffix(m.File, ".go") {
			runBin = filepath.Join(scratch, "mutant.test")
			if err := buildPkg(ctx, scratch, sqlserverChecks.pkg, runBin); err != nil {
				by = "build failed"
			}
		}
		var fails map[string]bool
		if by == "" {
			fails, err = failingPkg(ctx, scratch, sqlserverChecks, runBin, sqlserverChecks.run, baseline)
		}
		if werr := os.WriteFile(path, orig, 0o644); werr != nil {
			return werr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m.ID, err)
		}
		for name := range fails {
			if !baseline[name] && (by == "" || !strings.Contains(name, "/")) {
				if by == "" || len(name) < len(by) {
					by = name
				}
			}
		}
		total++
		if m.Breaks {
			breaking++
		}
		mark := "CAUGHT  "
		if by != "" {
			caught++
			if m.Breaks {
				breakingCaught++
			}
		} else {
			mark = "MISSED  "
			uncaught = append(uncaught, m)
		}
		label := "        "
		if m.Breaks {
			label = "breaks  "
		}
		fmt.Printf("%s%s%-5s %-6s %s\n", mark, label, m.ID, m.Class, m.What)
		if by != "" {
			fmt.Printf("                             by %s\n", by)
		}
	}
	fmt.Printf("\n%d mutations: %d caught (%.1f%%); guarantee-breaking: %d of %d caught (%.1f%%)\n",
		total, caught, pct(caught, total), breakingCaught, breaking, pct(breakingCaught, breaking))
	if len(uncaught) > 0 {
		fmt.Println("\nuncaught, and why each is harmless:")
		for _, m := range uncaught {
			fmt.Printf("  %s %s\n      %s\n", m.ID, m.What, m.Harmless)
		}
	}
	fmt.Printf("\n(%s)\n", time.Since(start).Round(time.Second))
	if breakingCaught < breaking || pct(caught, total) < 90 {
		return errors.New("below the goal: every guarantee-breaking mutation caught and at least 90% overall")
	}
	return nil
}

func pct(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}

// apply replaces the N-th (1-based; 0: the only) occurrence of Old.
func (m mutation) apply(text string) (string, error) {
	n := strings.Count(text, m.Old)
	switch {
	case n == 0:
		return "", fmt.Errorf("%q not found in %s", m.Old, m.File)
	case m.N == 0 && n > 1:
		return "", fmt.Errorf("%q occurs %d times in %s; set N", m.Old, n, m.File)
	case m.N > n:
		return "", fmt.Errorf("occurrence %d of %q: %s has %d", m.N, m.Old, m.File, n)
	}
	at, k := 0, max(m.N, 1)
	for i := 0; i < k; i++ {
		j := strings.Index(text[at:], m.Old)
		if i == k-1 {
			at += j
			break
		}
		at += j + len(m.Old)
	}
	return text[:at] + m.New + text[at+len(m.Old):], nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/leasehold/leasehold\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run inside the leasehold module")
		}
		dir = parent
	}
}

// copyModule copies the module's files (not .git, bin, nested modules).
func copyModule(root, dst string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." {
				if strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules" {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
