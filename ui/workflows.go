package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/workflows"
)

// The workflow pages: instances with their step graphs (see graph.go).

type workflowsPage struct {
	page
	WorkflowID string
	Status     string
	Statuses   []string
	Instances  []instanceView
	NextURL    string
	NewestURL  string
	Error      string
}

type instanceView struct {
	inspect.WorkflowInstance
	Graph  graph
	Counts map[string]int
}

var instanceStatuses = []string{workflows.InstanceRunning, workflows.InstanceDone, workflows.InstanceFailed, workflows.InstanceCanceled}

func (h *Handler) instanceView(in inspect.WorkflowInstance) instanceView {
	// The configured definition draws the graph of the instances that
	// follow it (or started before versions): another version's steps
	// are drawn from the instance's rows alone.
	var def *workflows.Definition
	if d, ok := h.defs[in.WorkflowID]; ok && (in.DefinitionVersion == "" || in.DefinitionVersion == h.versions[d.ID]) {
		def = &d
	}
	v := instanceView{WorkflowInstance: in, Graph: stepGraph(in, def), Counts: map[string]int{}}
	v.Graph.ID, v.Graph.P = in.ID, h.cfg.Prefix
	for _, s := range in.Steps {
		v.Counts[s.Status]++
	}
	return v
}

func (h *Handler) workflowList(w http.ResponseWriter, r *http.Request) {
	p, err := h.base(w, r, "Workflows", "workflows")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	v := r.URL.Query()
	data := workflowsPage{page: p, WorkflowID: v.Get("workflow"), Status: v.Get("status"), Statuses: instanceStatuses}
	var before int64
	if b := v.Get("before"); b != "" {
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before <= 0 {
			data.Error = fmt.Sprintf("before must be a positive instance ID, got %q", b)
			h.render(w, r, "workflows", http.StatusBadRequest, data)
			return
		}
	}
	if data.Status != "" && !slices.Contains(instanceStatuses, data.Status) {
		data.Error = fmt.Sprintf("unknown status %q", data.Status)
		h.render(w, r, "workflows", http.StatusBadRequest, data)
		return
	}
	h.live(&data.page, r)
	list, err := h.store.DashboardWorkflows(r.Context(), inspect.WorkflowQuery{
		WorkflowID: data.WorkflowID, Status: data.Status, BeforeID: before, Limit: h.pageSize + 1,
	})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	link := func(before int64) string {
		q := url.Values{}
		if data.WorkflowID != "" {
			q.Set("workflow", data.WorkflowID)
		}
		if data.Status != "" {
			q.Set("status", data.Status)
		}
		if before > 0 {
			q.Set("before", strconv.FormatInt(before, 10))
		}
		return h.cfg.Prefix + "/workflows?" + q.Encode()
	}
	if len(list) > h.pageSize {
		list = list[:h.pageSize]
		data.NextURL = link(list[len(list)-1].ID)
	}
	if before > 0 {
		data.NewestURL = link(0)
	}
	for _, in := range list {
		data.Instances = append(data.Instances, h.instanceView(in))
	}
	h.render(w, r, "workflows", http.StatusOK, data)
}

type workflowPage struct {
	page
	I instanceView
}

func (h *Handler) workflow(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("workflow instance ID must be a positive integer, got %q", r.PathValue("id")))
		return
	}
	p, err := h.base(w, r, fmt.Sprintf("Workflow instance %d", id), "workflows")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.live(&p, r)
	list, err := h.store.DashboardWorkflows(r.Context(), inspect.WorkflowQuery{InstanceID: id, Limit: 1})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if len(list) == 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no workflow instance %d", id))
		return
	}
	h.render(w, r, "workflow", http.StatusOK, workflowPage{page: p, I: h.instanceView(list[0])})
}
