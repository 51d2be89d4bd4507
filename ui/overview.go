package ui

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// The overview page: nodes, episode counts per actor and status, and the
// charts over a window (see charts.go).

type overviewPage struct {
	page
	Window      chartWindow
	Windows     []chartWindow
	Nodes       []nodeView
	Actors      []actorCounts
	Statuses    []episodes.Status
	Charts      []chart
	Definitions []inspect.Definition
	SilentAfter time.Duration
}

type nodeView struct {
	inspect.Node
	Silent bool
}

type actorCounts struct {
	ActorID string
	Counts  []int64 // by Statuses
	Total   int64
}

// statuses are the episode statuses, in lifecycle order.
var statuses = []episodes.Status{
	episodes.StatusQueued, episodes.StatusRunning, episodes.StatusBlocked, episodes.StatusDone,
	episodes.StatusFailed, episodes.StatusPartiallyFailed, episodes.StatusCanceled,
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := r.URL.Query().Get("window")
	if key == "" {
		key = defaultWindow
	}
	win, ok := windowByKey(key)
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "unknown chart window "+strconv.Quote(key))
		return
	}
	p, err := h.base(w, r, "Overview", "overview")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.live(&p, r)
	nodes, err := h.store.DashboardNodes(ctx)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	var defs []inspect.Definition
	if !partial(r) { // listed outside the live block
		if defs, err = h.store.DashboardDefinitions(ctx); err != nil {
			h.failErr(w, r, err)
			return
		}
	}
	counts, err := h.store.DashboardStatusCounts(ctx)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	sq := inspect.SeriesQuery{Window: win.Window, Bucket: win.Bucket}
	outcomes, err := h.store.DashboardOutcomes(ctx, sq)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	handovers, err := h.store.DashboardHandovers(ctx, sq)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := overviewPage{page: p, Window: win, Windows: chartWindows, Statuses: statuses, Definitions: defs,
		SilentAfter: h.cfg.NodeSilentAfter, Charts: overviewCharts(win, p.Now, outcomes, handovers)}
	for _, n := range nodes {
		data.Nodes = append(data.Nodes, nodeView{Node: n, Silent: n.HeartbeatAge > h.cfg.NodeSilentAfter})
	}
	for _, c := range counts {
		if len(data.Actors) == 0 || data.Actors[len(data.Actors)-1].ActorID != c.ActorID {
			data.Actors = append(data.Actors, actorCounts{ActorID: c.ActorID, Counts: make([]int64, len(statuses))})
		}
		a := &data.Actors[len(data.Actors)-1]
		if i := slices.Index(statuses, c.Status); i >= 0 {
			a.Counts[i] += c.Episodes
		}
		a.Total += c.Episodes
	}
	h.render(w, r, "overview", http.StatusOK, data)
}
