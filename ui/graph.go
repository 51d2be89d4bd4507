package ui

import (
	"fmt"
	"sort"

	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/workflows"
)

// A workflow instance's step graph, laid out in layers: a step sits one
// layer right of the deepest step it comes after. The edges come from the
// workflow's Definition (Config.Workflows): the database stores the steps
// of an instance, not their dependencies.

const (
	nodeW, nodeH = 168, 48
	gapX, gapY   = 44, 14
	pad          = 8
)

type graph struct {
	ID            int64  // the instance's: unique element IDs
	P             string // the dashboard's path prefix, for links
	Width, Height int
	Nodes         []graphNode
	Edges         []graphEdge
	Linked        bool // edges known (the definition was registered)
}

type graphNode struct {
	X, Y      int
	W, H      int
	StepID    string
	Label     string // the step ID, cut to fit
	Status    string // the step row's status, "missing" when the instance has no row for it
	EpisodeID int64
	Line      string // status, episode and attempts
	Tip       string
}

type graphEdge struct{ Path string }

// stepGraph lays out in's steps; def may be nil.
func stepGraph(in inspect.WorkflowInstance, def *workflows.Definition) graph {
	rows := map[string]inspect.WorkflowStep{}
	for _, s := range in.Steps {
		rows[s.StepID] = s
	}
	after := map[string][]string{}
	var ids []string
	if def != nil {
		for _, s := range def.Steps {
			ids = append(ids, s.ID)
			after[s.ID] = s.After
		}
	}
	known := map[string]bool{}
	for _, id := range ids {
		known[id] = true
	}
	var extra []string // rows the definition does not name (or no definition)
	for _, s := range in.Steps {
		if !known[s.StepID] {
			extra = append(extra, s.StepID)
		}
	}
	sort.SliceStable(extra, func(i, j int) bool {
		a, b := rows[extra[i]].EpisodeID, rows[extra[j]].EpisodeID
		if (a == 0) != (b == 0) {
			return b == 0 // steps that have an episode first
		}
		return a < b
	})
	layer := map[string]int{}
	var depth func(id string, seen map[string]bool) int
	depth = func(id string, seen map[string]bool) int {
		if l, ok := layer[id]; ok {
			return l
		}
		if seen[id] { // a cycle: Definition validation forbids it, be safe
			return 0
		}
		seen[id] = true
		l := 0
		for _, dep := range after[id] {
			if known[dep] {
				l = max(l, depth(dep, seen)+1)
			}
		}
		layer[id] = l
		return l
	}
	for _, id := range ids {
		depth(id, map[string]bool{})
	}
	g := graph{Linked: def != nil}
	base := 0
	for _, l := range layer {
		base = max(base, l+1)
	}
	for i, id := range extra { // unlinked steps continue in a row after the graph
		layer[id] = base + i
	}
	byLayer := map[int][]string{}
	maxLayer, maxRows := 0, 0
	for _, id := range append(ids, extra...) {
		l := layer[id]
		byLayer[l] = append(byLayer[l], id)
		maxLayer, maxRows = max(maxLayer, l), max(maxRows, len(byLayer[l]))
	}
	pos := map[string]graphNode{}
	for l := 0; l <= maxLayer; l++ {
		for r, id := range byLayer[l] {
			n := graphNode{X: pad + l*(nodeW+gapX), Y: pad + r*(nodeH+gapY), W: nodeW, H: nodeH, StepID: id, Label: cut(visible(id), 22)}
			if s, ok := rows[id]; ok {
				n.Status, n.EpisodeID = s.Status, s.EpisodeID
				n.Line = s.Status
				if s.EpisodeID != 0 {
					n.Line += fmt.Sprintf(" · #%d", s.EpisodeID)
				}
				n.Line += fmt.Sprintf(" · %d/%d", s.Attempts, s.MaxAttempts)
				n.Tip = fmt.Sprintf("%s: %s, episode %d (%s), attempt %d of %d", visible(id), s.Status, s.EpisodeID, dashStatus(string(s.EpisodeStatus)), s.Attempts, s.MaxAttempts)
			} else {
				n.Status, n.Line = "missing", "no step row"
				n.Tip = visible(id) + ": in the definition, but the instance has no row for it"
			}
			pos[id] = n
			g.Nodes = append(g.Nodes, n)
		}
	}
	for _, id := range ids {
		to := pos[id]
		for _, dep := range after[id] {
			from, ok := pos[dep]
			if !ok {
				continue
			}
			x1, y1 := from.X+from.W, from.Y+from.H/2
			x2, y2 := to.X, to.Y+to.H/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, graphEdge{Path: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2-4, y2)})
		}
	}
	g.Width = pad*2 + (maxLayer+1)*nodeW + maxLayer*gapX
	g.Height = pad*2 + max(maxRows, 1)*nodeH + max(maxRows-1, 0)*gapY
	return g
}

func dashStatus(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}
