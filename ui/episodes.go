package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/membership"
)

// The episode list (filters, keyset pages) and the episode page (its
// timeline of grants, see timeline.go).

// episodeQuery is the episode list's filter as the query string holds it.
type episodeQuery struct {
	Status, Actor, Expectation, ErrorClass, Env, Stack, Node, Key string
	Before                                                        int64
}

// unsetValue in the env or stack filter selects the unset env or stack
// (stored as the empty string); an empty field means any.
const unsetValue = "(unset)"

func parseEpisodeQuery(v url.Values) (episodeQuery, error) {
	q := episodeQuery{
		Status: v.Get("status"), Actor: v.Get("actor"), Expectation: v.Get("expectation"),
		ErrorClass: v.Get("error_class"), Env: v.Get("env"), Stack: v.Get("stack"), Node: v.Get("node"), Key: v.Get("key"),
	}
	if q.Status != "" && !slices.Contains(statuses, episodes.Status(q.Status)) {
		return q, fmt.Errorf("unknown status %q", q.Status)
	}
	if b := v.Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return q, fmt.Errorf("before must be a positive episode ID, got %q", b)
		}
		q.Before = n
	}
	return q, nil
}

func (q episodeQuery) filter(limit int) inspect.EpisodeFilter {
	opt := func(s string) *string {
		switch s {
		case "":
			return nil
		case unsetValue:
			return new(string)
		}
		return &s
	}
	return inspect.EpisodeFilter{
		Status: episodes.Status(q.Status), ActorID: q.Actor, ExpectationID: q.Expectation, ErrorClass: q.ErrorClass,
		Node: q.Node, Env: opt(q.Env), Stack: opt(q.Stack), DedupeKeyContains: q.Key, BeforeID: q.Before, Limit: limit,
	}
}

// values is the query string of q (empty fields left out), with before
// set to before (0: none).
func (q episodeQuery) values(before int64) url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"status": q.Status, "actor": q.Actor, "expectation": q.Expectation,
		"error_class": q.ErrorClass, "env": q.Env, "stack": q.Stack, "node": q.Node, "key": q.Key} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	return v
}

type episodesPage struct {
	page
	Q          episodeQuery
	Rows       []inspect.EpisodeRow
	Statuses   []episodes.Status
	Classes    []string
	Actors     []string
	Nodes      []string
	Filtered   bool
	NextURL    string // the next (older) page, "" on the last
	NewestURL  string // the first page, "" when on it
	Error      string
	Unset      string
	ShownLimit int
	// Waiting is, by episode ID, what a queued episode that no live node
	// can run waits for (membership.Waiting.Reason).
	Waiting map[int64]string
}

// errorClasses are the classes leasehold itself writes, offered in the
// filter (any other can be typed).
var errorClasses = []string{
	episodes.ClassError, episodes.ClassPanic, episodes.ClassBudgetExceeded, episodes.ClassCanceled,
	episodes.ClassOrphaned, episodes.ClassTriggerExpired,
}

func (h *Handler) episodeList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p, err := h.base(w, r, "Episodes", "episodes")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := episodesPage{page: p, Statuses: statuses, Classes: errorClasses, Unset: unsetValue, ShownLimit: h.pageSize}
	q, qerr := parseEpisodeQuery(r.URL.Query())
	data.Q = q
	if qerr != nil {
		data.Error = qerr.Error()
		h.render(w, r, "episodes", http.StatusBadRequest, data)
		return
	}
	h.live(&data.page, r)
	rows, err := h.store.DashboardEpisodes(ctx, q.filter(h.pageSize+1))
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if len(rows) > h.pageSize {
		rows = rows[:h.pageSize]
		data.NextURL = h.cfg.Prefix + "/episodes?" + q.values(rows[len(rows)-1].ID).Encode()
	}
	if q.Before > 0 {
		data.NewestURL = h.cfg.Prefix + "/episodes?" + q.values(0).Encode()
	}
	data.Rows = rows
	if data.Waiting, err = h.waiting(ctx, rows); err != nil {
		h.failErr(w, r, err)
		return
	}
	data.Filtered = len(q.values(0)) > 0
	if partial(r) {
		h.render(w, r, "episodes", http.StatusOK, data) // the live block has no form
		return
	}
	// Suggestions for the filter form; the list works without them.
	if defs, err := h.store.DashboardDefinitions(ctx); err == nil {
		for _, d := range defs {
			if !slices.Contains(data.Actors, d.ActorID) {
				data.Actors = append(data.Actors, d.ActorID)
			}
		}
	}
	if nodes, err := h.store.DashboardNodes(ctx); err == nil {
		for _, n := range nodes {
			data.Nodes = append(data.Nodes, n.ID)
		}
	}
	h.render(w, r, "episodes", http.StatusOK, data)
}

// waiting reads, when some of rows are queued, which of them no live node
// can run (ListWaitingForNode, one read that decides nothing), and returns
// what each waits for by episode ID.
func (h *Handler) waiting(ctx context.Context, rows []inspect.EpisodeRow) (map[int64]string, error) {
	if !slices.ContainsFunc(rows, func(e inspect.EpisodeRow) bool { return e.Status == episodes.StatusQueued }) {
		return nil, nil
	}
	ws, err := h.store.ListWaitingForNode(ctx, membership.WaitingQuery{SilentAfter: h.cfg.NodeSilentAfter})
	if err != nil {
		return nil, err
	}
	type pair struct{ env, actor, expectation string }
	by := make(map[pair]membership.Waiting, len(ws))
	for _, w := range ws {
		by[pair{w.Env, w.ActorID, w.ExpectationID}] = w
	}
	out := map[int64]string{}
	for _, e := range rows {
		if w, ok := by[pair{e.SourceEnv, e.ActorID, e.ExpectationID}]; ok && e.Status == episodes.StatusQueued {
			out[e.ID] = w.Reason()
		}
	}
	return out, nil
}

type episodePage struct {
	page
	// Waiting is what the episode waits for when it is queued and no live
	// node can run it; "" otherwise.
	Waiting    string
	E          inspect.EpisodeDetail
	Grants     []grantView
	Shown      int // journal steps loaded
	CanCancel  bool
	CanRetry   bool
	Terminal   bool
	Attempt    int32
	HasClaim   bool
	ClaimLater bool // the claim row belongs to a later run of the same key
}

func episodeID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("episode ID must be a positive integer, got %q", r.PathValue("id"))
	}
	return id, nil
}

func terminal(s episodes.Status) bool {
	switch s {
	case episodes.StatusDone, episodes.StatusFailed, episodes.StatusPartiallyFailed, episodes.StatusCanceled:
		return true
	}
	return false
}

// loadEpisode reads the episode page's data: the episode, its grants, the
// last steps of its journal and, when it is queued, whether a live node
// can run it (up to four statements, as many snapshots).
func (h *Handler) loadEpisode(ctx context.Context, p page, id int64) (episodePage, error) {
	d, err := h.store.DashboardEpisode(ctx, id)
	if err != nil {
		return episodePage{}, err
	}
	grants, err := h.store.DashboardGrants(ctx, id)
	if err != nil {
		return episodePage{}, err
	}
	steps, err := h.store.DashboardJournal(ctx, id, h.cfg.JournalSteps)
	if err != nil {
		return episodePage{}, err
	}
	waiting, err := h.waiting(ctx, []inspect.EpisodeRow{{Episode: d.Episode.Episode}})
	if err != nil {
		return episodePage{}, err
	}
	data := episodePage{page: p, E: d, Grants: timeline(d, grants, steps, p.Now), Shown: len(steps),
		Terminal: terminal(d.Status), Attempt: d.Attempt(), HasClaim: d.Claim != nil, Waiting: waiting[d.ID]}
	data.ClaimLater = d.Claim != nil && laterRun(d, d.Claim)
	live := (d.Status == episodes.StatusQueued || d.Status == episodes.StatusRunning) && d.ArchivedAt == nil
	data.CanCancel = !h.cfg.ReadOnly && live && d.CancelRequestedAt == nil
	data.CanRetry = !h.cfg.ReadOnly && (d.Status == episodes.StatusFailed || d.Status == episodes.StatusCanceled) && d.ArchivedAt == nil
	return data, nil
}

func (h *Handler) episode(w http.ResponseWriter, r *http.Request) {
	id, err := episodeID(r)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, err.Error())
		return
	}
	p, err := h.base(w, r, fmt.Sprintf("Episode %d", id), "episodes")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.live(&p, r)
	p.Notice = notices[r.URL.Query().Get("notice")]
	data, err := h.loadEpisode(r.Context(), p, id)
	if errors.Is(err, episodes.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no episode %d", id))
		return
	}
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.render(w, r, "episode", http.StatusOK, data)
}

// notices are the fixed messages an action's redirect may name: nothing a
// request carries is echoed.
var notices = map[string]string{
	"canceled":         "Canceled: nobody held a live lease on the episode, so it ended canceled at once.",
	"cancel-requested": "Cancel requested: its holder reads the request within one heartbeat interval and ends the episode canceled.",
	"retried":          "Retried: the episode is available again as its next attempt, to any full node with a free slot for its actor.",
}
