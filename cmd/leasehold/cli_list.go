package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/leasehold/leasehold/claims"
)

// defaultListLimit bounds a listing unless -limit says otherwise.
const defaultListLimit = 100

// claimJSON is one claim in claims ls -json; times are UTC RFC 3339.
type claimJSON struct {
	Key        string `json:"key"`
	State      string `json:"state"`
	Owner      string `json:"owner"`
	Fence      int64  `json:"fence"`
	Attempt    int32  `json:"attempt"`
	LeaseUntil string `json:"lease_until"`
	ClaimedAt  string `json:"claimed_at"`
	Grant      string `json:"grant"`
	WorkType   string `json:"work_type"`
}

func claimsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("claims", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	owner := fs.String("owner", "", "only claims owned by this node")
	expired := fs.Bool("expired", false, "only claimed leases past their deadline (database clock)")
	asJSON := fs.Bool("json", false, "print a JSON array, one claim per line")
	limit := fs.Int("limit", defaultListLimit, "at most this many claims")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold claims ls [-owner X] [-expired] [-json] [-limit N] [-url URL]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Lists work claims, soonest lease deadline first. A read-only snapshot: it")
		fmt.Fprintln(w, "locks nothing and may be stale by the time it is printed.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "claims", args, stdout, stderr)
	if !ok {
		return code
	}
	_, rest, code, ok := subcommand(fs, "claims", pos, stderr, "ls")
	if !ok {
		return code
	}
	if err := noArgs(rest); err != nil {
		return exitCode(stderr, "claims ls", err)
	}
	if *limit <= 0 {
		return exitCode(stderr, "claims ls", usagef("-limit must be positive, got %d", *limit))
	}
	conn, err := openChecked(ctx, *rawURL, stderr, "claims ls")
	if err != nil {
		return exitCode(stderr, "claims ls", err)
	}
	defer conn.close()
	list, err := conn.store.ListClaims(ctx, claims.ListQuery{Owner: *owner, ExpiredOnly: *expired, Limit: *limit})
	if err != nil {
		return exitCode(stderr, "claims ls", err)
	}
	if *asJSON {
		out := make([]claimJSON, len(list))
		for i, c := range list {
			out[i] = claimJSON{
				Key: c.Key, State: string(c.State), Owner: c.Owner, Fence: c.Fence, Attempt: c.Attempt,
				LeaseUntil: utc(c.LeaseUntil), ClaimedAt: utc(c.ClaimedAt), Grant: string(c.Grant), WorkType: c.WorkType,
			}
		}
		if err := writeJSONLines(stdout, out); err != nil {
			return exitCode(stderr, "claims ls", err)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tOWNER\tFENCE\tATTEMPT\tLEASE UNTIL\tCLAIMED AT\tGRANT\tWORK TYPE")
	for _, c := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", cell(c.Key), cell(string(c.State)), dash(cell(c.Owner)),
			c.Fence, c.Attempt, utc(c.LeaseUntil), utc(c.ClaimedAt), cell(string(c.Grant)), dash(cell(c.WorkType)))
	}
	if err := tw.Flush(); err != nil {
		return exitCode(stderr, "claims ls", err)
	}
	fmt.Fprintf(stderr, "%d claim(s)\n", len(list))
	return 0
}

// cell is s as one cell of a listing's text output: as it is, unless it
// could fake a row or a column or hide what it holds (a control character
// such as a newline or a tab, another non-printable rune, invalid UTF-8) or
// starts with '"'; then Go-quoted (strconv.Quote), so "a\nb" prints with
// its quotes and escape. JSON output stays verbatim.
func cell(s string) string {
	if s == "" || (s[0] != '"' && printable(s)) {
		return s
	}
	return strconv.Quote(s)
}

func printable(s string) bool {
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}
