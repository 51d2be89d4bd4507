package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/recovery"
)

// sweepLease is the lease the CLI takes on an orphan it claims; it fails
// or releases it at once, so the lease only matters if the CLI dies midway.
const sweepLease = 30 * time.Second

// cliNode is the recovery.Node of the sweep command, which only dry-runs: it
// has no registry (so it reports policies from the agent-definitions table,
// else the default) and resumes nothing.
type cliNode struct {
	id, stack, env string
}

func (n cliNode) ID() string                                   { return n.id }
func (n cliNode) Lease() time.Duration                         { return sweepLease }
func (n cliNode) Stack() string                                { return n.stack }
func (n cliNode) Env() string                                  { return n.env }
func (n cliNode) RecoveryPolicy(string, string) (string, bool) { return "", false }

var _ recovery.Node = cliNode{}

// cliNodeID is "cli-<hostname>".
func cliNodeID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	return "cli-" + h
}

// sweepJSON is the -json output of sweep.
type sweepJSON struct {
	DryRun    bool           `json:"dry_run"`
	Node      string         `json:"node"`
	Found     int            `json:"found"`
	Claimed   int            `json:"claimed"`
	Restarted int            `json:"restarted"`
	Failed    int            `json:"failed"`
	Skipped   int            `json:"skipped"`
	Decisions []decisionJSON `json:"decisions"`
}

type decisionJSON struct {
	EpisodeID     int64  `json:"episode_id"`
	ActorID       string `json:"actor_id"`
	ExpectationID string `json:"expectation_id"`
	Action        string `json:"action"`
	Policy        string `json:"policy,omitempty"`
	PolicySource  string `json:"policy_source,omitempty"`
	Reason        string `json:"reason"`
}

func sweepCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	dryRun := fs.Bool("dry-run", false, "only report what the sweep would do; claim and change nothing")
	stack := fs.String("stack", "", "sweep this stack (and unstamped episodes); empty means every stack")
	env := fs.String("env", "", "sweep this env; matched exactly, empty is the unset env")
	staleAfter := fs.Duration("stale-after", recovery.DefaultStaleAfter, "how long a running episode with no claim at all must have shown no sign of life")
	limit := fs.Int("limit", recovery.DefaultLimit, "at most this many orphans")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold sweep -dry-run [-stack S] [-env E] [-stale-after D] [-limit N] [-json] [-url URL]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Reports the orphaned episodes (running or queued with no live lease) and")
		fmt.Fprintln(w, "what recovery would do with each one, and why. It claims and changes nothing.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "-dry-run is required: sweep without it is refused (exit code 2). Recovering")
		fmt.Fprintln(w, "an orphan restarts or fails it by its actor's recovery policy, and those")
		fmt.Fprintln(w, "policies are compiled into your nodes; this CLI runs no actors and knows only")
		fmt.Fprintln(w, "the agent-definitions table, so acting here could fail episodes a node would")
		fmt.Fprintln(w, "restart. Recovery runs inside your nodes: run a recovery.Sweeper in each one.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "sweep", args, stdout, stderr)
	if !ok {
		return code
	}
	if err := noArgs(pos); err != nil {
		return exitCode(stderr, "sweep", err)
	}
	switch {
	case *staleAfter <= 0:
		return exitCode(stderr, "sweep", usagef("-stale-after must be positive, got %v", *staleAfter))
	case *limit <= 0:
		return exitCode(stderr, "sweep", usagef("-limit must be positive, got %d", *limit))
	case !*dryRun:
		return exitCode(stderr, "sweep", usagef("sweep without -dry-run is refused: recovery restarts or fails "+
			"each orphan by its actor's recovery policy, which is compiled into your nodes, not this CLI, so the CLI "+
			"must not act; run recovery.Sweeper inside your nodes to recover, and 'leasehold sweep -dry-run' to "+
			"inspect what it would do"))
	}
	conn, err := openChecked(ctx, *rawURL, stderr, "sweep")
	if err != nil {
		return exitCode(stderr, "sweep", err)
	}
	defer conn.close()

	node := cliNode{id: cliNodeID(), stack: *stack, env: *env}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := recovery.New(conn.store, node, logger, nil)
	if err != nil {
		return exitCode(stderr, "sweep", err)
	}
	rep, err := r.Sweep(ctx, recovery.Options{StaleAfter: *staleAfter, Limit: *limit, DryRun: *dryRun})
	if err != nil {
		return exitCode(stderr, "sweep", err)
	}
	if *asJSON {
		out := sweepJSON{
			DryRun: *dryRun, Node: node.id, Found: rep.Found, Claimed: rep.Claimed, Restarted: rep.Restarted,
			Failed: rep.Failed, Skipped: rep.Skipped, Decisions: []decisionJSON{},
		}
		for _, d := range rep.Decisions {
			out.Decisions = append(out.Decisions, decisionJSON{
				EpisodeID: d.EpisodeID, ActorID: d.ActorID, ExpectationID: d.ExpectationID, Action: string(d.Action),
				Policy: string(d.Policy), PolicySource: d.PolicySource, Reason: d.Reason,
			})
		}
		if err := writeJSONLines(stdout, []sweepJSON{out}); err != nil {
			return exitCode(stderr, "sweep", err)
		}
		return 0
	}
	mode := "sweep"
	if *dryRun {
		mode = "dry run (nothing claimed or changed)"
	}
	fmt.Fprintf(stdout, "%s as %s, stack %q, env %q\n", mode, node.id, *stack, *env)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EPISODE\tACTOR/EXPECTATION\tACTION\tPOLICY\tSOURCE\tREASON")
	for _, d := range rep.Decisions {
		fmt.Fprintf(tw, "%d\t%s/%s\t%s\t%s\t%s\t%s\n", d.EpisodeID, d.ActorID, d.ExpectationID, d.Action,
			dash(string(d.Policy)), dash(d.PolicySource), d.Reason)
	}
	if err := tw.Flush(); err != nil {
		return exitCode(stderr, "sweep", err)
	}
	fmt.Fprintf(stdout, "found %d, claimed %d, restarted %d, failed %d, skipped %d\n",
		rep.Found, rep.Claimed, rep.Restarted, rep.Failed, rep.Skipped)
	return 0
}
