// Command leasehold is leasehold's operator tool.
//
//	leasehold <command> [flags]
//
// Commands:
//
//	demo      run three nodes as separate processes on a throwaway database (a
//	          SQLite file in a temporary directory; -db postgres for a schema on
//	          Postgres), SIGKILL one of them mid-episode and show from the
//	          database that its work was recovered exactly once.
//	migrate   up|down|status: leasehold's schema migrations (-url or DATABASE_URL;
//	          postgres://, postgresql://, sqlserver://, or a SQLite file:
//	          sqlite:///abs/path.db, sqlite://rel/path.db, sqlite:path.db,
//	          file:path.db).
//	claims    ls: list work claims.
//	episodes  ls: list episodes (filters: status, actor, error class, dedupe
//	          key, stale); show ID: one episode in full, with its claim and
//	          fence and its journal.
//	nodes     ls: list registered nodes.
//	workflows ls: list workflow instances, parked ones with the reason;
//	          cancel -id N: cancel a running instance.
//	sweep     -dry-run: what recovery would do with orphaned episodes, and
//	          why. Without -dry-run it is refused: recovery runs in the nodes
//	          (recovery.Sweeper), which know the compiled recovery policies.
//	ui        serve the web dashboard (-listen, loopback by default; any other
//	          address needs LEASEHOLD_UI_USER and LEASEHOLD_UI_PASSWORD).
//	version   the leasehold version of this binary (also --version).
//
// 'leasehold <command> -h' (or 'leasehold help <command>') prints a
// command's usage on stdout. A usage error is one line on stderr, prefixed
// with the command ("leasehold episodes show: missing episode ID").
//
// Exit codes:
//
//	0  success
//	1  runtime or database error (including an unreachable database)
//	2  usage error, and sweep without -dry-run
//	3  the leasehold schema is missing or older than this binary
//	   (claims, episodes, nodes, workflows, sweep, ui): run 'leasehold migrate up'
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand: run gets the arguments after the command name
// and returns the process exit code.
type command struct {
	name    string
	summary string
	hidden  bool // internal, not listed in the usage
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands lists every subcommand; add new ones here. Each prints its own
// usage on stdout for -h.
var commands = []command{
	{name: "demo", summary: "crash-recovery demo: 3 node processes, one SIGKILLed mid-episode", run: runDemo},
	{name: "migrate", summary: "apply, roll back or show leasehold's schema migrations", run: migrateCmd},
	{name: "claims", summary: "claims ls: list work claims", run: claimsCmd},
	{name: "episodes", summary: "episodes ls|show|cancel|retry: list episodes, show one with its claim and journal, cancel or retry one", run: episodesCmd},
	{name: "nodes", summary: "nodes ls: list registered nodes (advisory membership)", run: nodesCmd},
	{name: "keys", summary: "keys show|switch: the dedupe key version the database uses; move it to version 2", run: keysCmd},
	{name: "workflows", summary: "workflows ls|cancel: list workflow instances (parked ones with why), cancel one", run: workflowsCmd},
	{name: "sweep", summary: "sweep -dry-run: what recovery would do with orphaned episodes, and why", run: sweepCmd},
	{name: "ui", summary: "serve the web dashboard (loopback by default; cancel and retry behind a confirmation)", run: uiCmd},
	{name: "version", summary: "print the leasehold version of this binary (also --version)", run: versionCmd},
	{name: demoNodeCommand, summary: "one node of the demo (started by demo)", hidden: true, run: runDemoNode},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to the named command. SIGINT and SIGTERM cancel the
// command's context; each command decides how to wind down.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help": // help <command> is <command> -h
		if len(rest) == 0 {
			usage(stdout)
			return 0
		}
		name, rest = rest[0], []string{"-h"}
	case "-version", "--version":
		name = "version"
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return c.run(ctx, rest, stdout, stderr)
	}
	if strings.HasPrefix(name, "-") {
		fmt.Fprintf(stderr, "leasehold: unknown flag %s: flags follow the command\n\n", name)
	} else {
		fmt.Fprintf(stderr, "leasehold: unknown command %q\n\n", name)
	}
	usage(stderr)
	return 2
}

// usage lists the public commands.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: leasehold <command> [flags]")
	fmt.Fprintln(w, "       leasehold --version")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'leasehold <command> -h' (or 'leasehold help <command>') for a command's usage.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "exit codes:")
	fmt.Fprintln(w, "  0  success")
	fmt.Fprintln(w, "  1  runtime or database error (including an unreachable database)")
	fmt.Fprintln(w, "  2  usage error, and sweep without -dry-run (recovery runs in the nodes)")
	fmt.Fprintln(w, "  3  leasehold schema missing or older than this binary: run 'leasehold migrate up'")
}
