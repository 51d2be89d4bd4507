package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/inspect"
)

// The findings pages: findings by status, env, class and key, and the
// history of one key in one env.

type findingsPage struct {
	page
	Status, Env, Class, Key string
	Statuses                []string
	Rows                    []inspect.Finding
	NextURL, NewestURL      string
	Error                   string
	Unset                   string
}

func (h *Handler) findingList(w http.ResponseWriter, r *http.Request) {
	p, err := h.base(w, r, "Findings", "findings")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	v := r.URL.Query()
	data := findingsPage{page: p, Status: findings.StatusActive, Env: v.Get("env"), Class: v.Get("class"), Key: v.Get("key"),
		Statuses: []string{findings.StatusActive, findings.StatusCleared}, Unset: unsetValue}
	if v.Has("status") {
		data.Status = v.Get("status") // "" is any
	}
	var before int64
	if b := v.Get("before"); b != "" {
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before <= 0 {
			data.Error = fmt.Sprintf("before must be a positive finding ID, got %q", b)
		}
	}
	if data.Status != "" && !slices.Contains(data.Statuses, data.Status) {
		data.Error = fmt.Sprintf("unknown status %q", data.Status)
	}
	if data.Error != "" {
		h.render(w, r, "findings", http.StatusBadRequest, data)
		return
	}
	q := inspect.FindingQuery{Status: data.Status, Class: data.Class, KeyContains: data.Key, BeforeID: before, Limit: h.pageSize + 1}
	switch data.Env {
	case "":
	case unsetValue:
		q.Env = new(string)
	default:
		q.Env = &data.Env
	}
	rows, err := h.store.DashboardFindings(r.Context(), q)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	link := func(before int64) string {
		q := url.Values{"status": {data.Status}}
		for k, s := range map[string]string{"env": data.Env, "class": data.Class, "key": data.Key} {
			if s != "" {
				q.Set(k, s)
			}
		}
		if before > 0 {
			q.Set("before", strconv.FormatInt(before, 10))
		}
		return h.cfg.Prefix + "/findings?" + q.Encode()
	}
	if len(rows) > h.pageSize {
		rows = rows[:h.pageSize]
		data.NextURL = link(rows[len(rows)-1].ID)
	}
	if before > 0 {
		data.NewestURL = link(0)
	}
	data.Rows = rows
	h.render(w, r, "findings", http.StatusOK, data)
}

type historyPage struct {
	page
	Env, Key string
	Rows     []inspect.Finding
	More     bool
}

func (h *Handler) findingHistory(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	if !v.Has("key") || v.Get("key") == "" {
		h.fail(w, r, http.StatusBadRequest, "which finding? the history needs a key (and an env, '' for the unset one)")
		return
	}
	p, err := h.base(w, r, "Finding history", "findings")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := historyPage{page: p, Env: v.Get("env"), Key: v.Get("key")}
	rows, err := h.store.DashboardFindingHistory(r.Context(), data.Env, data.Key, h.pageSize+1)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if len(rows) > h.pageSize {
		rows, data.More = rows[:h.pageSize], true
	}
	data.Rows = rows
	h.render(w, r, "history", http.StatusOK, data)
}
