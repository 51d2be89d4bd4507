package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/recovery"
)

// defaultJournalSteps bounds the journal episodes show prints unless -steps
// says otherwise: the last steps are the ones that explain where it is.
const defaultJournalSteps = 100

// episodeJSON is one episode in episodes ls -json; times are UTC RFC 3339,
// "" when unset.
type episodeJSON struct {
	ID            int64  `json:"id"`
	ActorID       string `json:"actor_id"`
	ExpectationID string `json:"expectation_id"`
	Status        string `json:"status"`
	Phase         string `json:"phase,omitempty"`
	ErrorClass    string `json:"error_class,omitempty"`
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
	// WaitingForNode is set on a queued episode whose (actor,
	// expectation) no live node of its env runs (ListWaitingForNode).
	WaitingForNode *waitingJSON `json:"waiting_for_node,omitempty"`
}

// waitingJSON says what a queued episode waits for: a node that runs
// actor/expectation; last_node is the node row that lists the pair and
// heartbeated last, omitted when none does.
type waitingJSON struct {
	ActorID         string `json:"actor_id"`
	ExpectationID   string `json:"expectation_id"`
	Since           string `json:"since"` // the pair's oldest waiting work, due since (database time)
	LastNode        string `json:"last_node,omitempty"`
	LastHeartbeatAt string `json:"last_heartbeat_at,omitempty"`
	Reason          string `json:"reason"`
}

// waitingKey is what ListWaitingForNode groups by.
type waitingKey struct{ env, actor, expectation string }

// waitingFor reads which work no live node can run, when some of list is
// queued (one read, which decides nothing), by env and pair.
func waitingFor(ctx context.Context, store cliStore, list []episodes.Episode) (map[waitingKey]membership.Waiting, error) {
	if !slices.ContainsFunc(list, func(e episodes.Episode) bool { return e.Status == episodes.StatusQueued }) {
		return nil, nil
	}
	ws, err := store.ListWaitingForNode(ctx, membership.WaitingQuery{})
	if err != nil {
		return nil, err
	}
	out := make(map[waitingKey]membership.Waiting, len(ws))
	for _, w := range ws {
		out[waitingKey{w.Env, w.ActorID, w.ExpectationID}] = w
	}
	return out, nil
}

// waitingOf is what queued episode e waits for, if no live node runs its
// pair; false otherwise.
func waitingOf(waiting map[waitingKey]membership.Waiting, e episodes.Episode) (membership.Waiting, bool) {
	if e.Status != episodes.StatusQueued {
		return membership.Waiting{}, false
	}
	w, ok := waiting[waitingKey{e.SourceEnv, e.ActorID, e.ExpectationID}]
	return w, ok
}

func toWaitingJSON(w membership.Waiting) *waitingJSON {
	out := &waitingJSON{ActorID: w.ActorID, ExpectationID: w.ExpectationID, Since: utc(w.Since), LastNode: w.LastNode, Reason: w.Reason()}
	if w.LastNode != "" {
		out.LastHeartbeatAt = utc(w.LastHeartbeatAt)
	}
	return out
}

// waitingText is w.Reason() for text output, its stored names escaped as
// every other cell is.
func waitingText(w membership.Waiting) string {
	w.ActorID, w.ExpectationID, w.LastNode = cell(w.ActorID), cell(w.ExpectationID), cell(w.LastNode)
	return w.Reason()
}

func toEpisodeJSON(e episodes.Episode) episodeJSON {
	return episodeJSON{
		ID: e.ID, ActorID: e.ActorID, ExpectationID: e.ExpectationID, Status: string(e.Status), Phase: e.Phase,
		ErrorClass: e.ErrorClass, TriggerType: string(e.TriggerType), DedupeKey: e.DedupeKey, Attempt: e.Attempt(),
		MaxAttempts: e.MaxAttempts, Owner: e.OwnerNode, Stack: e.SourceStack, Env: e.SourceEnv,
		CreatedAt: utc(e.CreatedAt), StartedAt: utcPtr(e.StartedAt), FinishedAt: utcPtr(e.FinishedAt),
		LastStepAt: utcPtr(e.LastStepAt),
	}
}

// episodeShowJSON is episodes show -json: the episode's fields as in ls,
// then its documents verbatim (null when unset), its claim (null when the
// claim key has no row), when it falls due while it is available work
// (run_after, omitted otherwise) and the shown part of its journal in step
// order.
type episodeShowJSON struct {
	episodeJSON
	TriggerRef   json.RawMessage `json:"trigger_ref"`
	Payload      json.RawMessage `json:"payload"`
	Result       json.RawMessage `json:"result"`
	ErrorDetail  json.RawMessage `json:"error_detail"`
	ArchivedAt   string          `json:"archived_at,omitempty"`
	ClaimKey     string          `json:"claim_key"`
	Claim        *claimShowJSON  `json:"claim"`
	RunAfter     string          `json:"run_after,omitempty"`
	JournalSteps int64           `json:"journal_steps"` // the journal's length; Journal holds the last -steps
	Journal      []stepJSON      `json:"journal"`
}

// claimShowJSON is the claim in episodes show -json: claims ls -json's
// fields, the last renewal, and whether the lease was live on the database
// clock when read.
type claimShowJSON struct {
	claimJSON
	HeartbeatAt string `json:"heartbeat_at,omitempty"`
	Live        bool   `json:"live"`
}

// stepJSON is one journal step; owner is omitted when not recorded (see
// inspect.Step).
type stepJSON struct {
	StepNo    int32           `json:"step_no"`
	Fence     int64           `json:"fence"`
	Owner     string          `json:"owner,omitempty"`
	CreatedAt string          `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

var listableStatuses = []episodes.Status{
	episodes.StatusQueued, episodes.StatusRunning, episodes.StatusBlocked, episodes.StatusDone,
	episodes.StatusFailed, episodes.StatusPartiallyFailed, episodes.StatusCanceled,
}

func episodesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("episodes", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	status := fs.String("status", "", "ls: only episodes in this status (queued, running, blocked, done, failed, partially_failed, canceled)")
	actor := fs.String("actor", "", "ls: only episodes of this actor")
	errorClass := fs.String("error-class", "", "ls: only episodes with this error class (such as error, panic, budget_exceeded, orphaned)")
	dedupeKey := fs.String("dedupe-key", "", "ls: only the episodes of this dedupe key, archived ones included")
	stale := fs.Bool("stale", false, "ls: only running episodes with no step for -stale-after (database clock)")
	staleAfter := fs.Duration("stale-after", recovery.DefaultStaleAfter, "ls: how long without a step makes a running episode stale, with -stale")
	limit := fs.Int("limit", defaultListLimit, "ls: at most this many episodes")
	steps := fs.Int("steps", defaultJournalSteps, "show: how many journal steps to print, the last ones")
	asJSON := fs.Bool("json", false, "ls: print a JSON array, one episode per line; show: print one JSON object")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold episodes ls [-status S] [-actor A] [-error-class C] [-dedupe-key K]")
		fmt.Fprintln(w, "                             [-stale [-stale-after D]] [-json] [-limit N] [-url URL]")
		fmt.Fprintln(w, "       leasehold episodes show ID [-steps N] [-json] [-url URL]")
		fmt.Fprintln(w, "       leasehold episodes cancel ID [-json] [-url URL]")
		fmt.Fprintln(w, "       leasehold episodes retry ID [-json] [-url URL]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "ls lists episodes, newest first, with their error class. A stale episode is")
		fmt.Fprintln(w, "not necessarily an orphan (its lease may be live); 'leasehold sweep -dry-run'")
		fmt.Fprintln(w, "shows the orphans. A queued episode whose actor and expectation no live node")
		fmt.Fprintln(w, "of its env runs (a rolling deploy added or removed it) is listed after the")
		fmt.Fprintln(w, "table, as in show: waiting for a node that runs actor/expectation, and the")
		fmt.Fprintln(w, "node that last listed it. It waits without spending attempts; cancel ends it.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "show prints one episode: status, attempt, error class and detail, payload,")
		fmt.Fprintln(w, "result, stack, env and owner; its work claim (state, owner, fence, lease, and")
		fmt.Fprintln(w, "whether the lease is live on the database clock), when it falls due while it")
		fmt.Fprintln(w, "is available work (deferred, delayed, retried or recovered, not taken yet); and")
		fmt.Fprintln(w, "the last -steps steps of its journal, each with its number, fence, owner and")
		fmt.Fprintln(w, "time. A step's owner is known while its fence is the claim's current one;")
		fmt.Fprintln(w, "steps of earlier grants (before a steal or a recovery) show '-'.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "cancel cancels an episode wherever it is (CancelEpisode): one nobody holds a")
		fmt.Fprintln(w, "live lease on (available, delayed, waiting for a retry, orphaned) ends")
		fmt.Fprintln(w, "canceled at once; one that runs is asked to stop, and its node ends it")
		fmt.Fprintln(w, "canceled within one heartbeat interval. retry runs a failed or canceled")
		fmt.Fprintln(w, "episode again as its next attempt (RequeueEpisode): available at once to any")
		fmt.Fprintln(w, "full node with a free slot for its actor.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "ls and show are read-only snapshots: they lock nothing and may be stale by the time")
		fmt.Fprintln(w, "they are printed. Text output escapes control and other non-printable")
		fmt.Fprintln(w, "characters (a value that holds one is Go-quoted; JSON documents get \\u")
		fmt.Fprintln(w, "escapes); -json prints every value verbatim.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "episodes", args, stdout, stderr)
	if !ok {
		return code
	}
	sub, rest, code, ok := subcommand(fs, "episodes", pos, stderr, "ls", "show", "cancel", "retry")
	if !ok {
		return code
	}
	cmd := "episodes " + sub
	// check validates the arguments of sub, and returns show's episode ID.
	check := func() (int64, error) {
		if sub == "cancel" || sub == "retry" {
			id, err := episodeID(rest)
			if err == nil {
				err = flagsFor(fs, sub, "json")
			}
			return id, err
		}
		if sub == "show" {
			id, err := episodeID(rest)
			if err == nil {
				err = flagsFor(fs, sub, "steps", "json")
			}
			if err == nil && *steps <= 0 {
				err = usagef("-steps must be positive, got %d", *steps)
			}
			return id, err
		}
		if err := noArgs(rest); err != nil {
			return 0, err
		}
		if err := flagsFor(fs, sub, "status", "actor", "error-class", "dedupe-key", "stale", "stale-after", "limit", "json"); err != nil {
			return 0, err
		}
		switch {
		case *limit <= 0:
			return 0, usagef("-limit must be positive, got %d", *limit)
		case *staleAfter < 0:
			return 0, usagef("-stale-after must not be negative, got %v", *staleAfter)
		case *status != "" && !slices.Contains(listableStatuses, episodes.Status(*status)):
			return 0, usagef("unknown -status %q: want one of %v", *status, listableStatuses)
		}
		return 0, nil
	}
	id, err := check()
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	conn, err := openChecked(ctx, *rawURL, stderr, cmd)
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	defer conn.close()
	switch sub {
	case "show":
		return showEpisode(ctx, conn.store, id, *steps, *asJSON, stdout, stderr)
	case "cancel", "retry":
		return actOnEpisode(ctx, conn.store, sub, id, *asJSON, stdout, stderr)
	}
	list, err := conn.store.InspectEpisodes(ctx, inspect.EpisodeQuery{
		Status: episodes.Status(*status), ActorID: *actor, ErrorClass: *errorClass, DedupeKey: *dedupeKey,
		StaleOnly: *stale, StaleAfter: *staleAfter, Limit: *limit,
	})
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	waiting, err := waitingFor(ctx, conn.store, list)
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	if *asJSON {
		out := make([]episodeJSON, len(list))
		for i, e := range list {
			out[i] = toEpisodeJSON(e)
			if w, ok := waitingOf(waiting, e); ok {
				out[i].WaitingForNode = toWaitingJSON(w)
			}
		}
		if err := writeJSONLines(stdout, out); err != nil {
			return exitCode(stderr, cmd, err)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tERROR CLASS\tACTOR\tEXPECTATION\tATTEMPT\tOWNER\tSTACK\tENV\tCREATED AT\tLAST STEP AT\tFINISHED AT")
	for _, e := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, cell(string(e.Status)), dash(cell(e.ErrorClass)),
			cell(e.ActorID), dash(cell(e.ExpectationID)), attempt(e), dash(cell(e.OwnerNode)),
			dash(cell(e.SourceStack)), dash(cell(e.SourceEnv)), utc(e.CreatedAt), dash(utcPtr(e.LastStepAt)), dash(utcPtr(e.FinishedAt)))
	}
	if err := tw.Flush(); err != nil {
		return exitCode(stderr, cmd, err)
	}
	for _, e := range list {
		if w, ok := waitingOf(waiting, e); ok {
			fmt.Fprintf(stdout, "episode %d: %s\n", e.ID, waitingText(w))
		}
	}
	fmt.Fprintf(stderr, "%d episode(s)\n", len(list))
	return 0
}

// actionJSON is what episodes cancel and retry print with -json.
type actionJSON struct {
	ID     int64  `json:"id"`
	Action string `json:"action"`           // cancel | retry
	Result string `json:"result"`           // canceled | cancel_requested | available
	Status string `json:"status,omitempty"` // the episode's status after the statement
	// Attempt is the attempt a retry made available; RunAfter when it is
	// due (database time).
	Attempt  int32  `json:"attempt,omitempty"`
	RunAfter string `json:"run_after,omitempty"`
}

// actOnEpisode cancels or retries episode id through the cluster-wide
// statements (CancelEpisode, RequeueEpisode); an episode that is not in a
// state the action applies to exits 1 with the reason.
func actOnEpisode(ctx context.Context, store cliStore, action string, id int64, asJSON bool, stdout, stderr io.Writer) int {
	cmd := "episodes " + action
	var out actionJSON
	var line string
	switch action {
	case "cancel":
		detail, _ := json.Marshal(map[string]string{"reason": "canceled", "by": cliNodeID()})
		res, err := store.CancelEpisode(ctx, id, detail)
		if err != nil {
			return exitCode(stderr, cmd, err)
		}
		out = actionJSON{ID: id, Action: action, Result: "canceled", Status: string(res.Status)}
		line = fmt.Sprintf("episode %d canceled (nobody held a live lease on it)", id)
		if !res.Ended {
			out.Result = "cancel_requested"
			line = fmt.Sprintf("episode %d is %s: its holder was asked to cancel it and ends it canceled within one heartbeat interval", id, res.Status)
		}
	case "retry":
		res, err := store.RequeueEpisode(ctx, id, cliNodeID())
		if err != nil {
			return exitCode(stderr, cmd, err)
		}
		next := episodes.Episode{Attempts: res.Attempts}.Attempt()
		out = actionJSON{ID: id, Action: action, Result: "available", Status: string(episodes.StatusQueued), Attempt: next, RunAfter: utc(res.RunAfter)}
		line = fmt.Sprintf("episode %d is available again as attempt %d, due %s", id, next, utc(res.RunAfter))
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return exitCode(stderr, cmd, err)
		}
		return 0
	}
	fmt.Fprintln(stdout, line)
	return 0
}

// episodeID reads show's, cancel's and retry's one positional argument.
func episodeID(rest []string) (int64, error) {
	switch {
	case len(rest) == 0:
		return 0, usagef("missing episode ID")
	case len(rest) > 1:
		return 0, noArgs(rest[1:])
	}
	id, err := strconv.ParseInt(rest[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("episode ID must be a positive integer, got %q", rest[0])
	}
	return id, nil
}

// attempt is "attempt/max".
func attempt(e episodes.Episode) string {
	return strconv.Itoa(int(e.Attempt())) + "/" + strconv.Itoa(int(e.MaxAttempts))
}

// showEpisode reads episode id (two statements: the episode with its claim
// and request, then the last steps of its journal) and prints it.
func showEpisode(ctx context.Context, store cliStore, id int64, steps int, asJSON bool, stdout, stderr io.Writer) int {
	const cmd = "episodes show"
	ep, err := store.InspectEpisode(ctx, id)
	if errors.Is(err, episodes.ErrNotFound) {
		return exitCode(stderr, cmd, fmt.Errorf("no episode %d", id))
	}
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	journal, err := store.InspectJournal(ctx, id, steps)
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	waiting, err := waitingFor(ctx, store, []episodes.Episode{ep.Episode})
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	w, _ := waitingOf(waiting, ep.Episode) // zero when it waits for nothing
	if asJSON {
		err = writeEpisodeJSON(stdout, ep, journal, w)
	} else {
		err = writeEpisodeText(stdout, ep, journal, w)
	}
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	return 0
}

// writeEpisodeJSON prints the episode; waiting is what it waits for when
// no live node runs its pair (zero otherwise).
func writeEpisodeJSON(w io.Writer, ep inspect.Episode, journal []inspect.Step, waiting membership.Waiting) error {
	out := episodeShowJSON{
		episodeJSON: toEpisodeJSON(ep.Episode),
		TriggerRef:  jsonValue(ep.TriggerRef), Payload: jsonValue(ep.Payload), Result: jsonValue(ep.Result),
		ErrorDetail: jsonValue(ep.ErrorDetail), ArchivedAt: utcPtr(ep.ArchivedAt), ClaimKey: ep.ClaimKey,
		JournalSteps: ep.JournalSteps, Journal: make([]stepJSON, len(journal)),
	}
	if waiting.ActorID != "" {
		out.WaitingForNode = toWaitingJSON(waiting)
	}
	if c := ep.Claim; c != nil {
		out.Claim = &claimShowJSON{
			claimJSON: claimJSON{
				Key: c.Key, State: string(c.State), Owner: c.Owner, Fence: c.Fence, Attempt: c.Attempt,
				LeaseUntil: utc(c.LeaseUntil), ClaimedAt: utc(c.ClaimedAt), Grant: string(c.Grant), WorkType: c.WorkType,
			},
			HeartbeatAt: utcPtr(c.HeartbeatAt), Live: c.Live,
		}
	}
	out.RunAfter = utcPtr(ep.RunAfter)
	for i, s := range journal {
		out.Journal[i] = stepJSON{StepNo: s.StepNo, Fence: s.Fence, Owner: s.Owner, CreatedAt: utc(s.CreatedAt), Data: jsonValue(s.Data)}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // verbatim: no \u003c for '<' in a payload
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// jsonValue is a stored JSON document for JSON output, as it is; nil stays
// nil (null). Text that is not JSON (SQL Server checks only some columns
// with ISJSON) is emitted as a JSON string, so the output stays JSON.
func jsonValue(raw json.RawMessage) json.RawMessage {
	if raw == nil || json.Valid(raw) {
		return raw
	}
	quoted, _ := json.Marshal(string(raw)) // a string always marshals
	return quoted
}

// writeEpisodeText prints the episode as labelled lines, its claim, and the
// journal as a table. Every value goes through cell or jsonText, so no
// stored text can fake a line or hide what it holds. A queued episode no
// live node can run gets a "waiting" line after its due time.
func writeEpisodeText(w io.Writer, ep inspect.Episode, journal []inspect.Step, waiting membership.Waiting) error {
	var b strings.Builder
	field := func(label, value string) { fmt.Fprintf(&b, "  %-13s %s\n", label, value) }
	e := ep.Episode
	fmt.Fprintf(&b, "episode %d\n", e.ID)
	field("status", cell(string(e.Status)))
	field("phase", dash(cell(e.Phase)))
	field("attempt", attempt(e))
	field("error class", dash(cell(e.ErrorClass)))
	field("error detail", jsonText(e.ErrorDetail))
	field("actor", cell(e.ActorID))
	field("expectation", dash(cell(e.ExpectationID)))
	field("trigger", cell(string(e.TriggerType)))
	field("trigger ref", jsonText(e.TriggerRef))
	field("dedupe key", dash(cell(e.DedupeKey)))
	field("owner", dash(cell(e.OwnerNode)))
	field("stack", dash(cell(e.SourceStack)))
	field("env", dash(cell(e.SourceEnv)))
	field("payload", jsonText(e.Payload))
	field("result", jsonText(e.Result))
	field("created at", utc(e.CreatedAt))
	field("started at", dash(utcPtr(e.StartedAt)))
	field("last step at", dash(utcPtr(e.LastStepAt)))
	field("finished at", dash(utcPtr(e.FinishedAt)))
	field("archived at", dash(utcPtr(e.ArchivedAt)))
	field("available", dash(prefix("due ", utcPtr(ep.RunAfter))))
	if waiting.ActorID != "" {
		field("waiting", strings.TrimPrefix(waitingText(waiting), "waiting "))
	}
	if c := ep.Claim; c != nil {
		fmt.Fprintf(&b, "claim %s\n", cell(c.Key))
		state := cell(string(c.State))
		switch {
		case c.Live:
			state += " (lease live)"
		case c.State == claims.StateClaimed:
			state += " (lease expired on the database clock)"
		}
		field("state", state)
		field("owner", cell(c.Owner))
		field("fence", strconv.FormatInt(c.Fence, 10))
		field("attempt", strconv.Itoa(int(c.Attempt)))
		field("grant", cell(string(c.Grant)))
		field("work type", dash(cell(c.WorkType)))
		field("claimed at", utc(c.ClaimedAt))
		field("lease until", utc(c.LeaseUntil))
		field("heartbeat at", dash(utcPtr(c.HeartbeatAt)))
	} else {
		fmt.Fprintf(&b, "claim %s: none (no node holds or held it)\n", cell(ep.ClaimKey))
	}
	switch n := int64(len(journal)); {
	case ep.JournalSteps == 0 && n == 0:
		b.WriteString("journal: no steps\n")
	case n < ep.JournalSteps:
		fmt.Fprintf(&b, "journal: the last %d of %d steps (-steps N for more)\n", n, ep.JournalSteps)
	default:
		fmt.Fprintf(&b, "journal: %d step(s)\n", n)
	}
	if len(journal) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  STEP\tFENCE\tOWNER\tAT\tDATA")
		for _, s := range journal {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\n", s.StepNo, s.Fence, dash(cell(s.Owner)), utc(s.CreatedAt), jsonText(s.Data))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonText is a stored JSON document for text output: compacted, with
// every rune that is not printable (strconv.IsPrint: a control character
// such as ESC or a C1 code, U+2028, a bidirectional override, ...) written
// as a \u escape, which inside a JSON string means the same, so the text
// stays JSON with the same value. Compacted JSON holds such runes only
// inside strings. Text that is not JSON is quoted as cell does; "-" when
// there is none.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return strconv.Quote(string(raw))
	}
	s := compact.String()
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		switch {
		case r == utf8.RuneError && size == 1: // invalid UTF-8
			b.WriteString(`\ufffd`)
		case strconv.IsPrint(r):
			b.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// prefix is p + s, or "" when s is.
func prefix(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}
