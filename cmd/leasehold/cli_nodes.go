package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// nodeJSON is one node in nodes ls -json; times are UTC RFC 3339.
type nodeJSON struct {
	ID             string `json:"id"`
	Stack          string `json:"stack"`
	Env            string `json:"env"`
	Mode           string `json:"mode"`
	Draining       bool   `json:"draining"`
	StartedAt      string `json:"started_at"`
	HeartbeatAt    string `json:"heartbeat_at"`
	HeartbeatAgeMs int64  `json:"heartbeat_age_ms"`
	LiveLeases     int64  `json:"live_leases"`
}

func nodesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nodes", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON array, one node per line")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold nodes ls [-json] [-url URL]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Lists the nodes that registered with this database: stack, env, mode,")
		fmt.Fprintln(w, "whether draining, and the age of the last heartbeat and the live leases")
		fmt.Fprintln(w, "held, on the database clock. Membership is advisory: a crashed node's row")
		fmt.Fprintln(w, "stays until maintenance removes it, and only leases grant work.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "nodes", args, stdout, stderr)
	if !ok {
		return code
	}
	_, rest, code, ok := subcommand(fs, "nodes", pos, stderr, "ls")
	if !ok {
		return code
	}
	if err := noArgs(rest); err != nil {
		return exitCode(stderr, "nodes ls", err)
	}
	conn, err := openChecked(ctx, *rawURL, stderr, "nodes ls")
	if err != nil {
		return exitCode(stderr, "nodes ls", err)
	}
	defer conn.close()
	rows, err := conn.store.ListNodes(ctx)
	if err != nil {
		return exitCode(stderr, "nodes ls", err)
	}
	if *asJSON {
		out := make([]nodeJSON, len(rows))
		for i, r := range rows {
			out[i] = nodeJSON{
				ID: r.ID, Stack: r.Stack, Env: r.Env, Mode: r.Mode, Draining: r.Draining,
				StartedAt: utc(r.StartedAt), HeartbeatAt: utc(r.HeartbeatAt),
				HeartbeatAgeMs: r.HeartbeatAge.Milliseconds(), LiveLeases: r.LiveLeases,
			}
		}
		if err := writeJSONLines(stdout, out); err != nil {
			return exitCode(stderr, "nodes ls", err)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTACK\tENV\tMODE\tDRAINING\tSTARTED AT\tLAST HEARTBEAT\tLIVE LEASES")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%s ago\t%d\n", cell(r.ID), dash(cell(r.Stack)), dash(cell(r.Env)), cell(r.Mode), r.Draining,
			utc(r.StartedAt), r.HeartbeatAge.Round(time.Millisecond), r.LiveLeases)
	}
	if err := tw.Flush(); err != nil {
		return exitCode(stderr, "nodes ls", err)
	}
	fmt.Fprintf(stderr, "%d node(s)\n", len(rows))
	return 0
}
