package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// asCLIEnv makes the test binary the leasehold binary: with it set,
// TestMain runs the CLI on the process's arguments instead of the tests.
// The demo starts its nodes as os.Executable() demo-node ..., so a demo run
// from the test binary starts the test binary, which then runs the node:
// separate processes, as with the real binary.
const asCLIEnv = "LEASEHOLD_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLIEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runDemoProcess runs `leasehold demo args...` as a separate process, its
// temporary files under tmp, and returns its exit code and output.
func runDemoProcess(t *testing.T, tmp string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"demo"}, args...)...)
	cmd.Env = append(os.Environ(), asCLIEnv+"=1", "TMPDIR="+tmp)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if code == -1 {
		require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

// requireDemoSummary checks what every demo run must show: a node
// SIGKILLed while it ran billing work, that work recovered, all billing
// episodes done, nothing lost or duplicated.
func requireDemoSummary(t *testing.T, out string) {
	t.Helper()
	require.Regexp(t, `(?m)^started 3 node processes \(node-1 pid \d+, node-2 pid \d+, node-3 pid \d+\)`, out)
	require.Regexp(t, `(?m)^t=\s*\d+\.\ds SIGKILL node-[123] \(pid \d+\) while it held billing #\d+ \(running`, out)
	require.Regexp(t, `(?m)^  billing  #\d+\s+done\s+attempt 2, claim fence \d+ \(\w+\), recovered by node-[123]`, out)
	require.Contains(t, out, "all 20 billing episodes done after")
	require.Regexp(t, `(?m)^  billing\s+20 episodes,\s+20 distinct dedupe keys$`, out)
	require.Contains(t, out, "  billing events without an episode: 0\n")
	require.Contains(t, out, "  billing episodes not done:         0 (none)\n")
	require.Contains(t, out, "  dedupe keys with more than one episode:             0\n")
	require.Contains(t, out, "\nlost 0, duplicated 0\n")
}

// TestDemoSQLite runs `leasehold demo` as a user does, with no flag: the
// three nodes are separate processes on one SQLite file in a new temporary
// directory, one of them is SIGKILLed mid-episode, and the summary read
// from the file shows nothing lost or duplicated. The directory is removed
// afterwards.
func TestDemoSQLite(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	code, out, errOut := runDemoProcess(t, tmp)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "database SQLite (the default; -db postgres runs the demo on Postgres)\n")
	m := regexp.MustCompile(`(?m)^SQLite file (\S+) \(new, in a temporary directory\)$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Equal(t, tmp, filepath.Dir(filepath.Dir(m[1])), "in a new directory under TMPDIR")
	requireDemoSummary(t, out)
	require.Contains(t, out, "== summary (SQLite file "+m[1]+") ==")
	require.Contains(t, out, "removed "+filepath.Dir(m[1])+"\n")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the demo's directory is removed")
	t.Logf("demo output:\n%s", out)
}

// TestDemoSQLiteKeep: with -keep the file stays, and the command the demo
// prints reads it: `leasehold episodes ls` on the kept file lists the
// demo's episodes.
func TestDemoSQLiteKeep(t *testing.T) {
	t.Parallel()
	code, out, errOut := runDemoProcess(t, t.TempDir(), "-keep")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	requireDemoSummary(t, out)
	m := regexp.MustCompile(`(?m)^  leasehold ui -url '(sqlite:///\S+)'$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Regexp(t, `(?m)^and remove it afterwards with rm -r \S+$`, out)
	code, lsOut, lsErr := runMain(t, "episodes", "ls", "-url", m[1], "-actor", "billing", "-status", "done", "-limit", "100")
	require.Equal(t, 0, code, lsErr)
	require.Equal(t, 21, len(strings.Split(strings.TrimSpace(lsOut), "\n")), "a header and 20 done billing episodes:\n%s", lsOut)
}

// TestDemoPostgres runs `leasehold demo -db postgres` on the test server:
// the same three processes, on a throwaway schema, dropped afterwards.
func TestDemoPostgres(t *testing.T) {
	t.Parallel()
	code, out, errOut := runDemoProcess(t, t.TempDir(), "-db", "postgres", "-url", pgtest.URL())
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "(from -url)\n")
	m := regexp.MustCompile(`(?m)^schema (lh_demo_[0-9a-f]+) on `).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	requireDemoSummary(t, out)
	require.Contains(t, out, "== summary (schema "+m[1]+") ==")
	require.Contains(t, out, "dropped schema "+m[1]+"\n")
}
