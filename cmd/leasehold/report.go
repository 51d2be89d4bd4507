package main

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/sql/queries"
)

// The summary reads the demo's database directly: this is an operator tool
// inspecting its own throwaway schema (Postgres) or file (SQLite), not a
// coordination decision.

// episodeStatuses orders statuses in progress lines.
var episodeStatuses = []string{"queued", "running", "blocked", "done", "failed", "partially_failed", "canceled"}

// counts is episodes by actor, then status.
type counts map[string]map[string]int

// line formats one actor's counts, e.g. "queued 1 running 4 done 10".
func (c counts) line(actor string) string {
	var parts []string
	for _, s := range episodeStatuses {
		if n := c[actor][s]; n > 0 || s == "running" || s == "done" {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	return strings.Join(parts, " ")
}

// statusCounts counts episodes by actor and status.
func statusCounts(ctx context.Context, db *demoDB) (counts, error) {
	rows, err := db.query(ctx, "DemoStatusCounts")
	if err != nil {
		return nil, fmt.Errorf("count episodes: %w", err)
	}
	defer rows.Close()
	c := counts{}
	for rows.Next() {
		var actor, status string
		var n int
		if err := rows.Scan(&actor, &status, &n); err != nil {
			return nil, fmt.Errorf("count episodes: %w", err)
		}
		if c[actor] == nil {
			c[actor] = map[string]int{}
		}
		c[actor][status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count episodes: %w", err)
	}
	return c, nil
}

// heldEpisode is an unfinished episode whose claim a node holds.
type heldEpisode struct {
	id     int64
	actor  string
	status string
	steps  int
}

// victimHeld lists the unfinished episodes whose claim node holds: the ones
// it is running or has queued for a slot.
func victimHeld(ctx context.Context, db *demoDB, node string) ([]heldEpisode, error) {
	rows, err := db.query(ctx, "DemoVictimHeld", node)
	if err != nil {
		return nil, fmt.Errorf("episodes held by %s: %w", node, err)
	}
	defer rows.Close()
	var out []heldEpisode
	for rows.Next() {
		var h heldEpisode
		if err := rows.Scan(&h.id, &h.actor, &h.status, &h.steps); err != nil {
			return nil, fmt.Errorf("episodes held by %s: %w", node, err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("episodes held by %s: %w", node, err)
	}
	return out, nil
}

// episodeRow is one episode in a listing.
type episodeRow struct {
	id     int64
	actor  string
	status string
	owner  string
	claim  string // claim state and owner, for unfinished episodes
}

// notDone lists actor's episodes that are not done.
func notDone(ctx context.Context, db *demoDB, actor string) ([]episodeRow, error) {
	rows, err := db.query(ctx, "DemoNotDone", actor)
	if err != nil {
		return nil, fmt.Errorf("unfinished %s episodes: %w", actor, err)
	}
	defer rows.Close()
	var out []episodeRow
	for rows.Next() {
		var r episodeRow
		if err := rows.Scan(&r.id, &r.actor, &r.status, &r.owner, &r.claim); err != nil {
			return nil, fmt.Errorf("unfinished %s episodes: %w", actor, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("unfinished %s episodes: %w", actor, err)
	}
	return out, nil
}

// describeEpisodes formats a listing, "none" when empty.
func describeEpisodes(eps []episodeRow) string {
	if len(eps) == 0 {
		return "none"
	}
	s := make([]string, len(eps))
	for i, e := range eps {
		s[i] = fmt.Sprintf("%s #%d %s", e.actor, e.id, e.status)
		if e.owner != "" {
			s[i] += " on " + e.owner
		}
		if e.claim != "" {
			s[i] += " (claim: " + e.claim + ")"
		}
	}
	return strings.Join(s, ", ")
}

// actorEpisodes is how many episodes and distinct dedupe keys an actor has.
type actorEpisodes struct {
	actor    string
	episodes int
	keys     int
}

// episodesPerActor counts episodes and distinct dedupe keys per actor.
func episodesPerActor(ctx context.Context, db *demoDB) ([]actorEpisodes, error) {
	rows, err := db.query(ctx, "DemoEpisodesPerActor")
	if err != nil {
		return nil, fmt.Errorf("episodes per actor: %w", err)
	}
	defer rows.Close()
	var out []actorEpisodes
	for rows.Next() {
		var a actorEpisodes
		if err := rows.Scan(&a.actor, &a.episodes, &a.keys); err != nil {
			return nil, fmt.Errorf("episodes per actor: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("episodes per actor: %w", err)
	}
	return out, nil
}

// doneByOwner counts done episodes by owner node, then actor.
func doneByOwner(ctx context.Context, db *demoDB) (counts, error) {
	rows, err := db.query(ctx, "DemoDoneByOwner")
	if err != nil {
		return nil, fmt.Errorf("done episodes per node: %w", err)
	}
	defer rows.Close()
	c := counts{}
	for rows.Next() {
		var owner, actor string
		var n int
		if err := rows.Scan(&owner, &actor, &n); err != nil {
			return nil, fmt.Errorf("done episodes per node: %w", err)
		}
		if c[owner] == nil {
			c[owner] = map[string]int{}
		}
		c[owner][actor] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("done episodes per node: %w", err)
	}
	return c, nil
}

// recoveredEpisode is an episode that recovery took over (attempts > 0).
type recoveredEpisode struct {
	id         int64
	actor      string
	status     string
	attempts   int
	owner      string // node that ran it last: the one that recovered it
	fence      int64  // its claim's fence now
	grantKind  string // steal (expired lease) or reclaim (released)
	steps      int
	stepFences []int64 // distinct fences in its journal
}

// recoveredEpisodes lists the episodes recovery took over.
func recoveredEpisodes(ctx context.Context, db *demoDB) ([]recoveredEpisode, error) {
	rows, err := db.query(ctx, "DemoRecoveredEpisodes")
	if err != nil {
		return nil, fmt.Errorf("recovered episodes: %w", err)
	}
	defer rows.Close()
	var out []recoveredEpisode
	for rows.Next() {
		var r recoveredEpisode
		var fences string
		if err := rows.Scan(&r.id, &r.actor, &r.status, &r.attempts, &r.owner, &r.fence, &r.grantKind, &r.steps, &fences); err != nil {
			return nil, fmt.Errorf("recovered episodes: %w", err)
		}
		if r.stepFences, err = parseFences(fences); err != nil {
			return nil, fmt.Errorf("recovered episodes: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("recovered episodes: %w", err)
	}
	return out, nil
}

// duplicateKeys counts dedupe keys that have more than one episode.
func duplicateKeys(ctx context.Context, db *demoDB) (int, error) {
	var n int
	err := db.queryRow(ctx, "DemoDuplicateKeys").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("duplicate dedupe keys: %w", err)
	}
	return n, nil
}

// overJournaled lists episodes whose journal is longer than one run of their
// strategy can explain: a single fence with more steps than the strategy
// has, or more steps in total without a recovery and a second fence.
func overJournaled(ctx context.Context, db *demoDB) ([]episodeRow, error) {
	rows, err := db.query(ctx, "DemoOverJournaled", billingActor, billingSteps, reporterActor, reporterSteps)
	if err != nil {
		return nil, fmt.Errorf("over-journaled episodes: %w", err)
	}
	defer rows.Close()
	var out []episodeRow
	for rows.Next() {
		var r episodeRow
		if err := rows.Scan(&r.id, &r.actor, &r.status, &r.owner); err != nil {
			return nil, fmt.Errorf("over-journaled episodes: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("over-journaled episodes: %w", err)
	}
	return out, nil
}

// report prints the summary from the database and the nodes' progress
// lines. ok is true when nothing was lost or duplicated.
func report(ctx context.Context, db *demoDB, where string, nodes []*child, run demoRun) (ok bool, err error) {
	fmt.Printf("== summary (%s) ==\n", where)

	// Triggers, as the nodes reported them.
	fires, eventSeen, eventCreated := 0, 0, 0
	windows := map[string]bool{}
	var perNode []string
	for _, c := range nodes {
		fires += c.fires
		nodeWindows := 0
		for key, created := range c.triggers {
			if isScheduleKey(key) {
				windows[key] = true
				nodeWindows++
				continue
			}
			eventSeen++
			if created {
				eventCreated++
			}
		}
		note := ""
		if c.killed {
			note = ", SIGKILLed"
		}
		perNode = append(perNode, fmt.Sprintf("%s %d fires/%d windows%s", c.id, c.fires, nodeWindows, note))
	}
	fmt.Println("triggers")
	fmt.Printf("  Fire calls:            %d of %d planned (%d events x %d nodes): %s\n",
		fires, demoEvents*len(nodes), demoEvents, len(nodes), strings.Join(perNode, "; "))
	fmt.Printf("  event triggers seen:   %d -> %d created an episode, %d skipped as duplicates\n",
		eventSeen, eventCreated, eventSeen-eventCreated)
	fmt.Printf("  schedule windows seen: %d distinct (every 2s, ticked on every node)\n", len(windows))

	perActor, err := episodesPerActor(ctx, db)
	if err != nil {
		return false, err
	}
	fmt.Println("episodes created (one per trigger: episodes = distinct dedupe keys)")
	billingEpisodes := 0
	for _, a := range perActor {
		fmt.Printf("  %-9s %3d episodes, %3d distinct dedupe keys\n", a.actor, a.episodes, a.keys)
		if a.actor == billingActor {
			billingEpisodes = a.episodes
		}
	}

	done, err := doneByOwner(ctx, db)
	if err != nil {
		return false, err
	}
	fmt.Println("who ran what (done episodes by owner_node)")
	owners := make([]string, 0, len(done))
	for o := range done {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		fmt.Printf("  %-7s %s %2d, %s %2d\n", o, billingActor, done[o][billingActor], reporterActor, done[o][reporterActor])
	}

	fmt.Println("stolen and recovered")
	how := "while it held " + describeHeld(run.killedRunning)
	if run.killedAnyway {
		how = "anyway (no running billing episode seen)"
	}
	fmt.Printf("  killed: %s at t=%.1fs %s\n", run.victim, run.killedAt.Seconds(), how)
	rec, err := recoveredEpisodes(ctx, db)
	if err != nil {
		return false, err
	}
	recovered := map[int64]bool{}
	for _, r := range rec {
		recovered[r.id] = true
		fmt.Printf("  %-8s #%-3d %-7s attempt %d, claim fence %d (%s), recovered by %s, journal steps %d (fences %v)\n",
			r.actor, r.id, r.status, r.attempts+1, r.fence, r.grantKind, r.owner, r.steps, r.stepFences)
	}
	if len(rec) == 0 {
		fmt.Println("  no episode was recovered")
	}
	var unrecovered []string
	for _, h := range run.killedRunning {
		if !recovered[h.id] {
			unrecovered = append(unrecovered, fmt.Sprintf("#%d", h.id))
		}
	}
	if len(unrecovered) > 0 {
		fmt.Printf("  held by %s at the kill but not recovered: %s\n", run.victim, strings.Join(unrecovered, ", "))
	}

	billingOpen, err := notDone(ctx, db, billingActor)
	if err != nil {
		return false, err
	}
	reporterOpen, err := notDone(ctx, db, reporterActor)
	if err != nil {
		return false, err
	}
	var reporterLost, inFlight []episodeRow
	for _, e := range reporterOpen {
		if e.status == "queued" || e.status == "running" {
			inFlight = append(inFlight, e)
		} else {
			reporterLost = append(reporterLost, e)
		}
	}
	missing := max(demoEvents-billingEpisodes, 0)
	lost := missing + len(billingOpen) + len(reporterLost)
	fmt.Println("lost")
	fmt.Printf("  billing events without an episode: %d\n", missing)
	fmt.Printf("  billing episodes not done:         %d (%s)\n", len(billingOpen), describeEpisodes(billingOpen))
	fmt.Printf("  reporter episodes failed:          %d (%s)\n", len(reporterLost), describeEpisodes(reporterLost))
	fmt.Printf("  reporter in flight at stop:        %d (%s; handed over on SIGTERM, not lost)\n", len(inFlight), describeEpisodes(inFlight))

	dupKeys, err := duplicateKeys(ctx, db)
	if err != nil {
		return false, err
	}
	over, err := overJournaled(ctx, db)
	if err != nil {
		return false, err
	}
	duplicated := dupKeys + len(over)
	fmt.Println("duplicated")
	fmt.Printf("  dedupe keys with more than one episode:             %d\n", dupKeys)
	fmt.Printf("  journals longer than one run outside of a recovery: %d (%s)\n", len(over), describeEpisodes(over))

	fmt.Printf("\nlost %d, duplicated %d\n", lost, duplicated)
	return lost == 0 && duplicated == 0, nil
}

// parseFences reads the comma-separated fences DemoRecoveredEpisodes lists
// ("" for none).
func parseFences(s string) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("fence list %q: %w", s, err)
		}
		out[i] = n
	}
	return out, nil
}

// demoDB is the demo's database as the parent reads it: the summary's
// statements of its dialect, run through database/sql.
type demoDB struct {
	dialect string // "postgres" or "sqlite"
	db      *sql.DB
}

// query runs the named summary statement of the dialect.
func (d *demoDB) query(ctx context.Context, name string, args ...any) (*sql.Rows, error) {
	return d.db.QueryContext(ctx, demoQuery(d.dialect, name), args...)
}

// queryRow runs the named summary statement of the dialect for one row.
func (d *demoDB) queryRow(ctx context.Context, name string, args ...any) *sql.Row {
	return d.db.QueryRowContext(ctx, demoQuery(d.dialect, name), args...)
}

//go:embed demo_report.sql demo_report_sqlite.sql
var demoReportSQL embed.FS

// demoReportFiles names each dialect's file of summary statements: the
// same names and columns, each in its dialect's SQL.
var demoReportFiles = map[string]string{"postgres": "demo_report.sql", "sqlite": "demo_report_sqlite.sql"}

// demoQueries are the summary's statements per dialect, loaded by name from
// the dialect's file so that every query the demo runs can be read in one
// file.
var demoQueries = func() map[string]map[string]queries.Query {
	out := map[string]map[string]queries.Query{}
	for dialect, file := range demoReportFiles {
		qs, err := queries.Parse(demoReportSQL, file)
		if err != nil {
			panic(fmt.Sprintf("%s: %v", file, err)) // embedded at build time; a test loads it
		}
		out[dialect] = qs
	}
	return out
}()

// demoQuery returns the named summary statement of dialect.
func demoQuery(dialect, name string) string {
	q, ok := demoQueries[dialect][name]
	if !ok {
		panic(demoReportFiles[dialect] + " has no query " + name) // a programming error, caught by TestDemoReportQueries
	}
	return q.SQL
}
