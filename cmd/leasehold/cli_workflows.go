package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/leasehold/leasehold/workflows"
)

// instanceJSON is one instance in workflows ls -json; times are UTC RFC
// 3339, "" when unset.
type instanceJSON struct {
	ID          int64           `json:"id"`
	WorkflowID  string          `json:"workflow_id"`
	Version     string          `json:"definition_version"`
	Subject     string          `json:"subject"`
	Env         string          `json:"env"`
	Stack       string          `json:"stack"`
	Status      string          `json:"status"`
	Parked      string          `json:"parked_reason,omitempty"`
	ErrorDetail json.RawMessage `json:"error_detail,omitempty"`
	CreatedAt   string          `json:"created_at"`
	FinishedAt  string          `json:"finished_at,omitempty"`
}

func workflowsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("workflows", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	workflow := fs.String("workflow", "", "ls: only instances of this workflow")
	subject := fs.String("subject", "", "ls: only instances for this subject")
	status := fs.String("status", "", "ls: only instances in this status (running, done, failed, canceled)")
	env := fs.String("env", "", "ls: only instances of this env (with -env set; \"\" is the unset env)")
	parked := fs.Bool("parked", false, "ls: only parked instances (a definition that no longer matches)")
	asJSON := fs.Bool("json", false, "ls: print a JSON array, one instance per line")
	limit := fs.Int("limit", defaultListLimit, "ls: at most this many instances")
	id := fs.Int64("id", 0, "cancel, migrate: the instance")
	reason := fs.String("reason", "canceled by an operator", "cancel: stored in the instance's error detail")
	to := fs.String("to", "", "migrate: the recorded version of the workflow to move the instance to")
	mapFlag := fs.String("map", "", "migrate: what becomes of every step of the instance: old=new,... (old= removes it)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold workflows ls [-workflow W] [-subject S] [-status S] [-env E] [-parked] [-json] [-limit N] [-url URL]")
		fmt.Fprintln(w, "       leasehold workflows cancel -id N [-reason R] [-url URL]")
		fmt.Fprintln(w, "       leasehold workflows migrate -id N -to VERSION -map old=new,... [-url URL]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "ls lists workflow instances, newest first, with the reason a parked one")
		fmt.Fprintln(w, "waits (a rolling deploy changed its steps; a node with the instance's steps")
		fmt.Fprintln(w, "advances it, or cancel ends it). VERSION is the first characters of the")
		fmt.Fprintln(w, "version of the definition the instance follows (-json: all of it), - for")
		fmt.Fprintln(w, "one started before definitions were versioned. A read-only snapshot: it")
		fmt.Fprintln(w, "locks nothing.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "cancel ends a running instance as canceled, under the instance lock: steps")
		fmt.Fprintln(w, "not started are skipped; episodes already running finish and start nothing.")
		fmt.Fprintln(w, "An instance that already ended is left as it is (exit code 0).")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "migrate moves a running instance (a parked one, say) to another version of")
		fmt.Fprintln(w, "its workflow, one a node recorded (the full version: ls -json), under the")
		fmt.Fprintln(w, "instance lock: -map names every step of the instance with the step of that")
		fmt.Fprintln(w, "version that takes its state, or nothing (old=) to remove a step that is not")
		fmt.Fprintln(w, "running; steps of the version nothing maps to are added. Then the steps")
		fmt.Fprintln(w, "that are ready start, and the parked reason is cleared. A mapping that")
		fmt.Fprintln(w, "leaves a step out, or that the version cannot take, changes nothing (exit 2).")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	pos, code, ok := parseArgs(fs, "workflows", args, stdout, stderr)
	if !ok {
		return code
	}
	sub, rest, code, ok := subcommand(fs, "workflows", pos, stderr, "ls", "cancel", "migrate")
	if !ok {
		return code
	}
	envSet := false
	fs.Visit(func(f *flag.Flag) { envSet = envSet || f.Name == "env" })
	cmd := "workflows " + sub
	err := noArgs(rest)
	switch {
	case err != nil:
	case sub == "ls":
		if err = flagsFor(fs, sub, "workflow", "subject", "status", "env", "parked", "json", "limit"); err == nil && *limit <= 0 {
			err = usagef("-limit must be positive, got %d", *limit)
		}
	case sub == "migrate":
		if err = flagsFor(fs, sub, "id", "to", "map"); err == nil && *id <= 0 {
			err = usagef("-id must name an instance, got %d", *id)
		}
		if err == nil && *to == "" {
			err = usagef("-to must name the version to migrate to")
		}
	default: // cancel
		if err = flagsFor(fs, sub, "id", "reason"); err == nil && *id <= 0 {
			err = usagef("-id must name an instance, got %d", *id)
		}
	}
	var mapping map[string]string
	if err == nil && sub == "migrate" {
		mapping, err = parseStepMap(*mapFlag)
	}
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	conn, err := openChecked(ctx, *rawURL, stderr, cmd)
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	defer conn.close()
	if sub == "migrate" {
		inst, err := workflows.Migrate(ctx, conn.store, cliNodeID(), *id, *to, mapping)
		if err != nil {
			return exitCode(stderr, cmd, instanceErr(*id, err))
		}
		fmt.Fprintf(stdout, "instance %d (%s for %s) follows version %s; %s\n", inst.ID, cell(inst.WorkflowID), cell(inst.Subject),
			cell(inst.DefinitionVersion), inst.Status)
		return 0
	}
	if sub == "cancel" {
		inst, canceled, err := workflows.Cancel(ctx, conn.store, *id, *reason)
		switch {
		case err != nil:
			return exitCode(stderr, cmd, instanceErr(*id, err))
		case !canceled:
			fmt.Fprintf(stdout, "instance %d (%s for %s) had already ended: %s; nothing canceled\n",
				inst.ID, cell(inst.WorkflowID), cell(inst.Subject), inst.Status)
		default:
			fmt.Fprintf(stdout, "instance %d (%s for %s) canceled\n", inst.ID, cell(inst.WorkflowID), cell(inst.Subject))
		}
		return 0
	}
	q := workflows.ListQuery{WorkflowID: *workflow, Subject: *subject, Status: *status, ParkedOnly: *parked, Limit: *limit}
	if envSet {
		q.Env = env
	}
	list, err := workflows.List(ctx, conn.store, q)
	if errors.Is(err, workflows.ErrInvalid) {
		return exitCode(stderr, cmd, usagef("%v", err))
	}
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	if *asJSON {
		out := make([]instanceJSON, len(list))
		for i, in := range list {
			out[i] = instanceJSON{
				ID: in.ID, WorkflowID: in.WorkflowID, Version: in.DefinitionVersion, Subject: in.Subject, Env: in.Env, Stack: in.SourceStack,
				Status: in.Status, Parked: in.ParkedReason, ErrorDetail: in.ErrorDetail,
				CreatedAt: utc(in.CreatedAt), FinishedAt: utcPtr(in.FinishedAt),
			}
		}
		if err := writeJSONLines(stdout, out); err != nil {
			return exitCode(stderr, cmd, err)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWORKFLOW\tVERSION\tSUBJECT\tSTATUS\tSTACK\tENV\tCREATED AT\tFINISHED AT\tPARKED")
	for _, in := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, cell(in.WorkflowID),
			dash(cell(shortVersion(in.DefinitionVersion))), cell(in.Subject), cell(in.Status),
			dash(cell(in.SourceStack)), dash(cell(in.Env)), utc(in.CreatedAt), dash(utcPtr(in.FinishedAt)), dash(cell(in.ParkedReason)))
	}
	if err := tw.Flush(); err != nil {
		return exitCode(stderr, cmd, err)
	}
	fmt.Fprintf(stderr, "%d instance(s)\n", len(list))
	return 0
}

// shortVersion is the first 8 characters of a definition version, enough
// to tell a workflow's versions apart on screen.
func shortVersion(v string) string {
	if len(v) > 8 {
		return v[:8]
	}
	return v
}

// parseStepMap reads -map: old=new pairs separated by commas, old= for a
// step removed. Each old step once.
func parseStepMap(v string) (map[string]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, usagef("-map must name what becomes of every step of the instance (old=new,...)")
	}
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		from, into, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || from == "" {
			return nil, usagef("-map: %q is not old=new (or old= to remove the step)", pair)
		}
		if _, dup := out[from]; dup {
			return nil, usagef("-map names step %q twice", from)
		}
		out[from] = into
	}
	return out, nil
}

// instanceErr is what a cancel or migrate of instance id reports: no such
// instance, a usage error (exit 2) for what was refused before anything
// changed, or the error.
func instanceErr(id int64, err error) error {
	switch {
	case errors.Is(err, workflows.ErrNoInstance):
		return fmt.Errorf("no workflow instance %d", id)
	case errors.Is(err, workflows.ErrInvalid):
		return usagef("%v", err)
	}
	return err
}
