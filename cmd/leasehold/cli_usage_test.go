package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runMain runs the binary's dispatch in-process.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// -h, -help, --help and 'help <command>' print the command's own usage on
// stdout, not the flag package's "Usage of ...", and exit 0: for every
// command, the hidden one too, and for a subcommand's -h.
func TestCLIHelpEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		want := "usage: leasehold " + c.name
		var first string
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "-help"}, {c.name, "--help"}, {"help", c.name}} {
			code, out, errOut := runMain(t, args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			require.Empty(t, errOut, "%v", args)
			require.True(t, strings.HasPrefix(out, want), "%v printed:\n%s", args, out)
			require.NotContains(t, out, "Usage of", "%v", args)
			if first == "" {
				first = out
			}
			require.Equal(t, first, out, "%v prints the same usage as -h", args)
		}
	}
	for _, args := range [][]string{
		{"episodes", "show", "-h"}, {"episodes", "ls", "-json", "-h"}, {"episodes", "show", "42", "--help"},
		{"workflows", "cancel", "-h"}, {"migrate", "up", "-h"}, {"claims", "ls", "-h"},
	} {
		code, out, errOut := runMain(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Empty(t, errOut, "%v", args)
		require.True(t, strings.HasPrefix(out, "usage: leasehold "+args[0]+" "), "%v printed:\n%s", args, out)
	}
	code, out, errOut := runMain(t, "episodes", "-h")
	require.Equal(t, 0, code)
	require.Empty(t, errOut)
	require.Contains(t, out, "leasehold episodes show ID [-steps N] [-json] [-url URL]")
	require.Contains(t, out, "-error-class")
	require.Contains(t, out, "-dedupe-key")

	for _, h := range []string{"-h", "-help", "--help", "help"} {
		code, out, errOut := runMain(t, h)
		require.Equal(t, 0, code, h)
		require.Empty(t, errOut, h)
		require.True(t, strings.HasPrefix(out, "usage: leasehold <command> [flags]\n"), out)
		require.Contains(t, out, "  episodes  episodes ls|show|cancel|retry")
		require.Contains(t, out, "  version   ")
		require.NotContains(t, out, demoNodeCommand, "the hidden command is not listed")
	}
}

// Every usage error is one line on stderr, prefixed with the command,
// nothing on stdout, and exit code 2. None of these reaches a database.
func TestCLIUsageErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"episodes", "show"}, "leasehold episodes show: missing episode ID"},
		{[]string{"episodes", "show", "abc"}, `leasehold episodes show: episode ID must be a positive integer, got "abc"`},
		{[]string{"episodes", "show", "0"}, `leasehold episodes show: episode ID must be a positive integer, got "0"`},
		{[]string{"episodes", "show", "1", "2"}, "leasehold episodes show: unexpected arguments: 2"},
		{[]string{"episodes", "show", "1", "-status", "failed"}, "leasehold episodes show: -status does not apply to show"},
		{[]string{"episodes", "show", "1", "-steps", "0"}, "leasehold episodes show: -steps must be positive, got 0"},
		{[]string{"episodes", "ls", "-steps", "5", "-limit", "3"}, "leasehold episodes ls: -steps does not apply to ls"},
		{[]string{"episodes", "ls", "extra"}, "leasehold episodes ls: unexpected arguments: extra"},
		{[]string{"episodes", "ls", "-limit", "0"}, "leasehold episodes ls: -limit must be positive, got 0"},
		{[]string{"episodes", "ls", "-stale-after", "-1s"}, "leasehold episodes ls: -stale-after must not be negative, got -1s"},
		{[]string{"episodes", "ls", "-status", "bogus"}, `leasehold episodes ls: unknown -status "bogus": want one of [queued running blocked done failed partially_failed canceled]`},
		{[]string{"episodes", "ls", "-bogus"}, "leasehold episodes: flag provided but not defined: -bogus"},
		{[]string{"episodes", "ls", "-limit", "x"}, `leasehold episodes: invalid value "x" for flag -limit: parse error`},
		{[]string{"episodes", "rm", "1"}, `leasehold episodes: unknown subcommand "rm": want ls, show, cancel or retry`},
		{[]string{"claims", "ls", "x"}, "leasehold claims ls: unexpected arguments: x"},
		{[]string{"claims", "rm"}, `leasehold claims: unknown subcommand "rm": want ls`},
		{[]string{"nodes", "ls", "-expired"}, "leasehold nodes: flag provided but not defined: -expired"},
		{[]string{"migrate", "sideways"}, `leasehold migrate: unknown subcommand "sideways": want up, down or status`},
		{[]string{"migrate", "up", "now"}, "leasehold migrate up: unexpected arguments: now"},
		{[]string{"workflows", "cancel", "-id", "1", "-json"}, "leasehold workflows cancel: -json does not apply to cancel"},
		{[]string{"workflows", "ls", "-id", "1", "-reason", "x"}, "leasehold workflows ls: -id, -reason do not apply to ls"},
		{[]string{"workflows", "cancel"}, "leasehold workflows cancel: -id must name an instance, got 0"},
		{[]string{"sweep", "-dry-run", "now"}, "leasehold sweep: unexpected arguments: now"},
		{[]string{"sweep", "-dry-run", "-limit", "0"}, "leasehold sweep: -limit must be positive, got 0"},
		{[]string{"demo", "now"}, "leasehold demo: unexpected arguments: now"},
		{[]string{"version", "now"}, "leasehold version: unexpected arguments: now"},
		{[]string{demoNodeCommand, "-id", "n"}, "leasehold demo-node: -id and -url are required, and -schema with a Postgres URL"},
		{[]string{demoNodeCommand, "-id", "n", "-url", "postgres://x"}, "leasehold demo-node: -id and -url are required, and -schema with a Postgres URL"},
		{[]string{"demo", "-db", "mysql"}, `leasehold demo: unknown -db "mysql": want sqlite or postgres`},
		{[]string{"demo", "-db", "sqlite", "-url", "postgres://x"}, "leasehold demo: -url is for -db postgres: the SQLite demo makes its own file in a temporary directory"},
		{[]string{"demo", "-url", "sqlite:x.db"}, "leasehold demo: the Postgres demo needs a postgres:// or postgresql:// URL, got sqlite:x.db (from -url)"},
	} {
		code, out, errOut := runMain(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out, "%v", tc.args)
		require.Equal(t, tc.want+"\n", errOut, "%v", tc.args)
	}

	// A missing subcommand says so first, then shows the usage.
	for _, c := range []string{"episodes", "claims", "nodes", "migrate", "workflows"} {
		code, out, errOut := runMain(t, c)
		require.Equal(t, 2, code, c)
		require.Empty(t, out, c)
		line, rest, _ := strings.Cut(errOut, "\n")
		require.Regexp(t, `^leasehold `+c+`: missing subcommand: want \S`, line)
		require.True(t, strings.HasPrefix(rest, "\nusage: leasehold "+c), errOut)
	}

	code, out, errOut := runMain(t, "nosuch")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.True(t, strings.HasPrefix(errOut, "leasehold: unknown command \"nosuch\"\n\nusage: leasehold <command>"), errOut)
	code, _, errOut = runMain(t, "-json")
	require.Equal(t, 2, code)
	require.True(t, strings.HasPrefix(errOut, "leasehold: unknown flag -json: flags follow the command\n"), errOut)
	code, out, errOut = runMain(t)
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.True(t, strings.HasPrefix(errOut, "usage: leasehold <command>"), errOut)
}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	var first string
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		code, out, errOut := runMain(t, args...)
		require.Equal(t, 0, code, errOut)
		require.Empty(t, errOut)
		require.Regexp(t, `^leasehold \S+ \(go\S+\)\n$`, out)
		if first == "" {
			first = out
		}
		require.Equal(t, first, out, "%v", args)
	}
	bi, ok := debug.ReadBuildInfo()
	if ok && bi.Main.Version != "" {
		require.Equal(t, "leasehold "+bi.Main.Version+" ("+bi.GoVersion+")\n", first)
	} else {
		require.True(t, strings.HasPrefix(first, "leasehold (devel) ("), first)
	}

	for _, tc := range []struct {
		bi           *debug.BuildInfo
		ok           bool
		version, goV string
		name         string
	}{
		{name: "release", bi: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/leasehold/leasehold", Version: "v1.2.3"}},
			ok: true, version: "v1.2.3", goV: "go1.26.0"},
		{name: "checkout", bi: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, ok: true,
			version: "(devel)", goV: "go1.26.0"},
		{name: "no main version", bi: &debug.BuildInfo{GoVersion: "go1.26.0"}, ok: true, version: "(devel)", goV: "go1.26.0"},
		{name: "no build info", ok: false, version: "(devel)", goV: "unknown go version"},
	} {
		v, g := buildVersion(tc.bi, tc.ok)
		require.Equal(t, tc.version, v, tc.name)
		require.Equal(t, tc.goV, g, tc.name)
	}
}
