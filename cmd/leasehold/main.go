// Command leasehold is leasehold's operator tool.
//
//	leasehold <command> [flags]
//
// Commands:
//
//	demo    run three nodes as separate processes against a throwaway schema,
//	        SIGKILL one of them mid-episode and show from the database that
//	        its work was recovered exactly once.
//	migrate   up|down|status: leasehold's schema migrations (-url or DATABASE_URL;
//	          postgres://, postgresql:// or sqlserver://).
//	claims    ls: list work claims.
//	episodes  ls: list episodes.
//	workflows ls: list workflow instances, parked ones with the reason;
//	          cancel -id N: cancel a running instance.
//	sweep     -dry-run: what recovery would do with orphaned episodes, and
//	          why. Without -dry-run it is refused: recovery runs in the nodes
//	          (recovery.Sweeper), which know the compiled recovery policies.
//
// Exit codes:
//
//	0  success
//	1  runtime or database error (including an unreachable database)
//	2  usage error, and sweep without -dry-run
//	3  the leasehold schema is missing or older than this binary
//	   (claims, episodes, nodes, workflows, sweep): run 'leasehold migrate up'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand: run gets the arguments after the command name
// and returns the process exit code.
type command struct {
	name    string
	summary string
	hidden  bool // internal, not listed in the usage
	run     func(ctx context.Context, args []string) int
}

// commands lists every subcommand; add new ones here.
var commands = []command{
	{name: "demo", summary: "crash-recovery demo: 3 node processes, one SIGKILLed mid-episode", run: runDemo},
	{name: "migrate", summary: "apply, roll back or show leasehold's schema migrations", run: runMigrate},
	{name: "claims", summary: "claims ls: list work claims", run: runClaims},
	{name: "episodes", summary: "episodes ls: list episodes", run: runEpisodes},
	{name: "nodes", summary: "nodes ls: list registered nodes (advisory membership)", run: runNodes},
	{name: "workflows", summary: "workflows ls|cancel: list workflow instances (parked ones with why), cancel one", run: runWorkflows},
	{name: "sweep", summary: "sweep -dry-run: what recovery would do with orphaned episodes, and why", run: runSweep},
	{name: demoNodeCommand, summary: "one node of the demo (started by demo)", hidden: true, run: runDemoNode},
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// run dispatches to the named command. SIGINT and SIGTERM cancel the
// command's context; each command decides how to wind down.
func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(os.Stdout)
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return c.run(ctx, args[1:])
	}
	fmt.Fprintf(os.Stderr, "leasehold: unknown command %q\n\n", args[0])
	usage(os.Stderr)
	return 2
}

// parseExit is the exit code after a flag parse error: 0 for -h, else 2.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// usage lists the public commands.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: leasehold <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'leasehold <command> -h' for a command's flags.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "exit codes:")
	fmt.Fprintln(w, "  0  success")
	fmt.Fprintln(w, "  1  runtime or database error (including an unreachable database)")
	fmt.Fprintln(w, "  2  usage error, and sweep without -dry-run (recovery runs in the nodes)")
	fmt.Fprintln(w, "  3  leasehold schema missing or older than this binary: run 'leasehold migrate up'")
}
