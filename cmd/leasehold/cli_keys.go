package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/dedupe"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
)

func keysCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	live := fs.Duration("live-within", membership.DefaultSilentAfter,
		"switch: a node whose last heartbeat is older (database clock) does not hold the switch back")
	lockWait := fs.Duration("lock-wait", episodes.DefaultKeySwitchLockWait,
		"switch: how long to wait for the lock on the episodes table (Postgres) before giving up, changing nothing")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold keys show [-url URL]")
		fmt.Fprintln(w, "       leasehold keys switch [-live-within 15s] [-lock-wait 5s] [-url URL]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "An event fired without an event id is deduplicated by the hash of its payload's")
		fmt.Fprintln(w, "canonical JSON, in the database's key version: 1 keeps numbers as written")
		fmt.Fprintln(w, "(1, 1.0 and 1e0 are three keys), 2 is RFC 8785's form (one key). A new database")
		fmt.Fprintln(w, "starts at 2; one migrated from before schema 14 at 1. show prints the version;")
		fmt.Fprintln(w, "switch moves the database to 2, once, refused while a live node cannot compute")
		fmt.Fprintln(w, "it (upgrade or stop those nodes first). A trigger fired before the switch is")
		fmt.Fprintln(w, "still a duplicate after it; no node writes a version 1 key afterwards. SQL Server")
		fmt.Fprintln(w, "databases stay on version 1.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "keys", args, stdout, stderr)
	if !ok {
		return code
	}
	sub, rest, code, ok := subcommand(fs, "keys", pos, stderr, "show", "switch")
	if !ok {
		return code
	}
	name := "keys " + sub
	if err := noArgs(rest); err != nil {
		return exitCode(stderr, name, err)
	}
	if *live <= 0 || *lockWait <= 0 {
		return exitCode(stderr, name, usagef("-live-within and -lock-wait must be positive"))
	}
	conn, err := openChecked(ctx, *rawURL, stderr, name)
	if err != nil {
		return exitCode(stderr, name, err)
	}
	defer conn.close()
	if sub == "show" {
		v, at, err := conn.store.KeyVersion(ctx)
		if err != nil {
			return exitCode(stderr, name, err)
		}
		fmt.Fprintf(stdout, "dedupe key version %d (%s)", int(v), keyVersionForm(v))
		if at != nil {
			fmt.Fprintf(stdout, ", since %s", utc(*at))
		}
		fmt.Fprintln(stdout)
		return 0
	}
	v, laggards, err := conn.store.SwitchKeyVersion(ctx, episodes.KeySwitch{LiveWithin: *live, LockWait: *lockWait})
	if err != nil {
		return exitCode(stderr, name, err)
	}
	if v >= dedupe.KeyV2 {
		fmt.Fprintf(stdout, "dedupe key version %d (%s)\n", int(v), keyVersionForm(v))
		return 0
	}
	fmt.Fprintf(stderr, "leasehold keys switch: refused: %d live node(s) compute only version %d; upgrade or stop them, then switch again:\n",
		len(laggards), int(dedupe.KeyV1))
	tw := tabwriter.NewWriter(stderr, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTACK\tENV\tKEY VERSION\tLAST HEARTBEAT")
	for _, l := range laggards {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\n", cell(l.NodeID), dash(cell(l.Stack)), dash(cell(l.Env)), int(l.KeyVersion),
			l.HeartbeatAge.Round(time.Millisecond))
	}
	_ = tw.Flush()
	return 1
}

// keyVersionForm names what version v hashes.
func keyVersionForm(v dedupe.KeyVersion) string {
	switch v {
	case dedupe.KeyV1:
		return "numbers as written"
	case dedupe.KeyV2:
		return "RFC 8785"
	}
	return "unknown to this binary"
}
