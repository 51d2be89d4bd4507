package ui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// pageNames are the templates in templates/, each parsed with layout.html.
var pageNames = []string{"overview", "episodes", "episode", "confirm", "workflows", "workflow", "findings", "history", "error"}

func parseTemplates() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: parse template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// page is what every page's layout needs.
type page struct {
	Title    string
	Nav      string // the section: overview, episodes, workflows, findings
	P        string // the prefix every link starts with
	CSRF     string
	ReadOnly bool
	Now      time.Time // the database clock when the page was read
	PollMs   int64     // live updates: refresh the live block every PollMs (0: off)
	PollURL  string    // what to fetch for the live block
	Notice   string
}

// partial reports whether r asks for a page's live block only
// (?partial=1: the pages' script refreshing it).
func partial(r *http.Request) bool { return r.URL.Query().Get("partial") == "1" }

// render writes template name with data: the whole page, or only its live
// block when the request asks for it.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, status int, data any) {
	t := h.pages[name]
	block := "layout"
	if partial(r) && t.Lookup("live") != nil {
		block = "live"
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, block, data); err != nil {
		h.log.ErrorContext(r.Context(), "leasehold ui: render", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "leasehold ui: render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// base fills the layout's part of a page: the session's CSRF token (a
// session cookie is set when the browser has none) and the database
// clock.
func (h *Handler) base(w http.ResponseWriter, r *http.Request, title, nav string) (page, error) {
	id, err := h.csrf.session(w, r)
	if err != nil {
		return page{}, err
	}
	now, err := h.store.DashboardClock(r.Context())
	if err != nil {
		return page{}, err
	}
	return page{Title: title, Nav: nav, P: h.cfg.Prefix, CSRF: h.csrf.token(id), ReadOnly: h.cfg.ReadOnly, Now: now}, nil
}

// live turns live updates on for the page, fetching pollURL.
func (h *Handler) live(p *page, r *http.Request) {
	if h.pollMs <= 0 {
		return
	}
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		return // never a URL the script could read as another host's
	}
	q := r.URL.Query()
	q.Del("notice")
	q.Set("partial", "1")
	p.PollMs, p.PollURL = h.pollMs, path+"?"+q.Encode()
}

type errorPage struct {
	page
	Status  int
	Message string
}

// fail renders the error page with status and msg (shown escaped).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p := page{Title: http.StatusText(status), P: h.cfg.Prefix, ReadOnly: h.cfg.ReadOnly}
	h.render(w, r, "error", status, errorPage{page: p, Status: status, Message: msg})
}

// failErr reports a database error: logged in full, shown briefly.
func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return // the browser went away
	}
	h.log.ErrorContext(r.Context(), "leasehold ui: read failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	h.fail(w, r, http.StatusInternalServerError, "reading the database failed: "+err.Error())
}
