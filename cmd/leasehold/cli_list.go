package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/recovery"
)

// defaultListLimit bounds a listing unless -limit says otherwise.
const defaultListLimit = 100

// runClaims is the claims command.
func runClaims(ctx context.Context, args []string) int {
	return claimsCmd(ctx, args, os.Stdout, os.Stderr)
}

// runEpisodes is the episodes command.
func runEpisodes(ctx context.Context, args []string) int {
	return episodesCmd(ctx, args, os.Stdout, os.Stderr)
}

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
	fs.SetOutput(stderr)
	rawURL := urlFlag(fs)
	owner := fs.String("owner", "", "only claims owned by this node")
	expired := fs.Bool("expired", false, "only claimed leases past their deadline (database clock)")
	asJSON := fs.Bool("json", false, "print a JSON array, one claim per line")
	limit := fs.Int("limit", defaultListLimit, "at most this many claims")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: leasehold claims ls [-owner X] [-expired] [-json] [-limit N] [-url URL]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Lists work claims, soonest lease deadline first. A read-only snapshot: it")
		fmt.Fprintln(stderr, "locks nothing and may be stale by the time it is printed.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	sub, code, ok := parseSub(fs, args)
	if !ok {
		return code
	}
	if code, ok := onlyLs(fs, stderr, "claims", sub); !ok {
		return code
	}
	if *limit <= 0 {
		return exitCode(stderr, "claims ls", usagef("-limit must be positive, got %d", *limit))
	}
	raw, err := resolveURL(*rawURL)
	if err != nil {
		return exitCode(stderr, "claims ls", err)
	}
	conn, err := openDB(ctx, raw)
	if err != nil {
		return exitCode(stderr, "claims ls", err)
	}
	defer conn.close()
	if err := requireSchema(ctx, conn, stderr, "claims ls"); err != nil {
		return exitCode(stderr, "claims ls", err)
	}
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

// episodeJSON is one episode in episodes ls -json; times are UTC RFC 3339,
// "" when unset.
type episodeJSON struct {
	ID            int64  `json:"id"`
	ActorID       string `json:"actor_id"`
	ExpectationID string `json:"expectation_id"`
	Status        string `json:"status"`
	Phase         string `json:"phase,omitempty"`
	TriggerType   string `json:"trigger_type"`
	DedupeKey     string `json:"dedupe_key,omitempty"`
	Attempt       int32  `json:"attempt"` // episodes.Episode.Attempt: 1 for the first run
	MaxAttempts   int32  `json:"max_attempts"`
	Owner         string `json:"owner,omitempty"`
	Stack         string `json:"stack"`
	Env           string `json:"env"`
	CreatedAt     string `json:"created_at"`
	StartedAt     string `json:"started_at,omitempty"`
	FinishedAt    string `json:"finished_at,omitempty"`
	LastStepAt    string `json:"last_step_at,omitempty"`
}

var listableStatuses = []episodes.Status{
	episodes.StatusQueued, episodes.StatusRunning, episodes.StatusBlocked, episodes.StatusDone,
	episodes.StatusFailed, episodes.StatusPartiallyFailed, episodes.StatusCanceled,
}

func episodesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("episodes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawURL := urlFlag(fs)
	status := fs.String("status", "", "only episodes in this status (queued, running, blocked, done, failed, partially_failed, canceled)")
	actor := fs.String("actor", "", "only episodes of this actor")
	stale := fs.Bool("stale", false, "only running episodes with no step for -stale-after (database clock)")
	staleAfter := fs.Duration("stale-after", recovery.DefaultStaleAfter, "how long without a step makes a running episode stale, with -stale")
	asJSON := fs.Bool("json", false, "print a JSON array, one episode per line")
	limit := fs.Int("limit", defaultListLimit, "at most this many episodes")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: leasehold episodes ls [-status S] [-actor A] [-stale [-stale-after D]] [-json] [-limit N] [-url URL]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Lists episodes, newest first. A read-only snapshot: it locks nothing and may")
		fmt.Fprintln(stderr, "be stale by the time it is printed. A stale episode is not necessarily an")
		fmt.Fprintln(stderr, "orphan (its lease may be live); 'leasehold sweep -dry-run' shows the orphans.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	sub, code, ok := parseSub(fs, args)
	if !ok {
		return code
	}
	if code, ok := onlyLs(fs, stderr, "episodes", sub); !ok {
		return code
	}
	switch {
	case *limit <= 0:
		return exitCode(stderr, "episodes ls", usagef("-limit must be positive, got %d", *limit))
	case *staleAfter < 0:
		return exitCode(stderr, "episodes ls", usagef("-stale-after must not be negative, got %v", *staleAfter))
	case *status != "" && !slices.Contains(listableStatuses, episodes.Status(*status)):
		return exitCode(stderr, "episodes ls", usagef("unknown -status %q: want one of %v", *status, listableStatuses))
	}
	raw, err := resolveURL(*rawURL)
	if err != nil {
		return exitCode(stderr, "episodes ls", err)
	}
	conn, err := openDB(ctx, raw)
	if err != nil {
		return exitCode(stderr, "episodes ls", err)
	}
	defer conn.close()
	if err := requireSchema(ctx, conn, stderr, "episodes ls"); err != nil {
		return exitCode(stderr, "episodes ls", err)
	}
	list, err := conn.store.ListEpisodes(ctx, episodes.ListQuery{
		Status: episodes.Status(*status), ActorID: *actor, StaleOnly: *stale, StaleAfter: *staleAfter, Limit: *limit,
	})
	if err != nil {
		return exitCode(stderr, "episodes ls", err)
	}
	if *asJSON {
		out := make([]episodeJSON, len(list))
		for i, e := range list {
			out[i] = episodeJSON{
				ID: e.ID, ActorID: e.ActorID, ExpectationID: e.ExpectationID, Status: string(e.Status), Phase: e.Phase,
				TriggerType: string(e.TriggerType), DedupeKey: e.DedupeKey, Attempt: e.Attempt(), MaxAttempts: e.MaxAttempts,
				Owner: e.OwnerNode, Stack: e.SourceStack, Env: e.SourceEnv, CreatedAt: utc(e.CreatedAt),
				StartedAt: utcPtr(e.StartedAt), FinishedAt: utcPtr(e.FinishedAt), LastStepAt: utcPtr(e.LastStepAt),
			}
		}
		if err := writeJSONLines(stdout, out); err != nil {
			return exitCode(stderr, "episodes ls", err)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tACTOR\tEXPECTATION\tATTEMPT\tOWNER\tSTACK\tENV\tCREATED AT\tLAST STEP AT\tFINISHED AT")
	for _, e := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, cell(string(e.Status)), cell(e.ActorID),
			dash(cell(e.ExpectationID)), strconv.Itoa(int(e.Attempt()))+"/"+strconv.Itoa(int(e.MaxAttempts)), dash(cell(e.OwnerNode)),
			dash(cell(e.SourceStack)), dash(cell(e.SourceEnv)), utc(e.CreatedAt), dash(utcPtr(e.LastStepAt)), dash(utcPtr(e.FinishedAt)))
	}
	if err := tw.Flush(); err != nil {
		return exitCode(stderr, "episodes ls", err)
	}
	fmt.Fprintf(stderr, "%d episode(s)\n", len(list))
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

// onlyLs accepts the one subcommand the list commands have, ls; otherwise it
// prints usage (nothing given) or the error, and returns exit code 2.
func onlyLs(fs *flag.FlagSet, stderr io.Writer, command, sub string) (int, bool) {
	switch sub {
	case "ls":
		return 0, true
	case "":
		fs.Usage()
		return 2, false
	default:
		return exitCode(stderr, command, usagef("unknown subcommand %q: want ls", sub)), false
	}
}
