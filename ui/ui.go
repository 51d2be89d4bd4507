package ui

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/workflows"
)

// Store is what the dashboard needs from a dialect adapter: the reads of
// sql/queries/<dialect>/dashboard.sql, and the two cluster-wide actions
// of episodes.sql (the statements `leasehold episodes cancel|retry` run).
// adapters/postgres.Store and adapters/sqlserver.Store implement it.
type Store interface {
	DashboardClock(ctx context.Context) (time.Time, error)
	DashboardNodes(ctx context.Context) ([]inspect.Node, error)
	DashboardDefinitions(ctx context.Context) ([]inspect.Definition, error)
	DashboardStatusCounts(ctx context.Context) ([]inspect.StatusCount, error)
	DashboardOutcomes(ctx context.Context, q inspect.SeriesQuery) ([]inspect.Outcome, error)
	DashboardHandovers(ctx context.Context, q inspect.SeriesQuery) ([]inspect.Handover, error)
	DashboardEpisodes(ctx context.Context, f inspect.EpisodeFilter) ([]inspect.EpisodeRow, error)
	// DashboardEpisode returns episodes.ErrNotFound for an unknown ID.
	DashboardEpisode(ctx context.Context, id int64) (inspect.EpisodeDetail, error)
	DashboardGrants(ctx context.Context, episodeID int64) ([]inspect.Grant, error)
	DashboardJournal(ctx context.Context, episodeID int64, limit int) ([]inspect.Step, error)
	DashboardWorkflows(ctx context.Context, q inspect.WorkflowQuery) ([]inspect.WorkflowInstance, error)
	DashboardFindings(ctx context.Context, q inspect.FindingQuery) ([]inspect.Finding, error)
	DashboardFindingHistory(ctx context.Context, env, key string, limit int) ([]inspect.Finding, error)
	// CancelEpisode and RequeueEpisode are the cluster-wide cancel and
	// retry (CancelEpisode, RequeueEpisode): errors wrapping
	// episodes.ErrNotFound, ErrNotLive or ErrNotRetryable when the
	// episode is not in a state they apply to.
	CancelEpisode(ctx context.Context, id int64, detail json.RawMessage) (episodes.Canceled, error)
	RequeueEpisode(ctx context.Context, id int64, by string) (episodes.Retried, error)
	// ListWaitingForNode (nodes.sql) marks the queued episodes that no
	// live node can run; a read that decides nothing.
	membership.WaitingReader
}

// Config configures the dashboard. The zero value serves every page with
// actions enabled at the root path, with no authentication of its own:
// mount it behind your own, or set Authorize.
type Config struct {
	// Prefix is the path the handler is mounted at, such as
	// "/admin/leasehold" (no trailing slash; "" is the root). Mount the
	// handler at Prefix+"/" (http.ServeMux: mux.Handle(prefix+"/", h));
	// it reads the full request path, and every link and form it renders
	// starts with Prefix.
	Prefix string
	// ReadOnly hides the cancel and retry actions and refuses their POSTs
	// (403).
	ReadOnly bool
	// Authorize, when set, is called first for every request, static
	// files included. It returns true to let the request through; false
	// means it has written the response itself (a 401 with a challenge, a
	// redirect to a login page). BasicAuth builds one. CheckListen counts
	// a dashboard with Authorize as authenticated.
	Authorize func(w http.ResponseWriter, r *http.Request) bool
	// Operator names who acts, for the record an action leaves (the cancel
	// detail's "by", RequeueEpisode's source node) and the log. Default: a
	// function returning "leasehold-ui".
	Operator func(r *http.Request) string
	// Workflows are the workflow definitions whose step graphs the
	// workflow pages draw with their dependencies. The database stores
	// each instance's steps but not the edges between them: without the
	// definition of an instance's workflow its steps are drawn unlinked,
	// in order of their episodes.
	Workflows []workflows.Definition
	// NodeSilentAfter marks a node whose heartbeat is older than this on
	// the database clock as silent (it may be dead), and such a node is
	// not counted as able to run the queued work the episode pages mark
	// as waiting for a node. Default membership.DefaultSilentAfter (15 s):
	// three membership refreshes of a node with the default heartbeat.
	NodeSilentAfter time.Duration
	// PollInterval is how often an open overview, episode list or
	// episode page refreshes its live parts (short polling of the same
	// page). Default 3 s; negative turns live updates off.
	PollInterval time.Duration
	// PageSize is the number of rows per page of the lists. Default 50.
	PageSize int
	// JournalSteps bounds the journal steps an episode page shows (the
	// last ones; every grant is still listed). Default 200.
	JournalSteps int
	// Secret keys the CSRF tokens (HMAC-SHA256 of the session cookie).
	// Default: 32 random bytes drawn in New, so tokens of a restarted
	// process are refused and the form is shown again. Give several
	// replicas behind one address the same secret of at least 32 bytes.
	Secret []byte
	// SecureCookie sets the Secure attribute on the session cookie even
	// when the request did not arrive over TLS (a TLS-terminating proxy
	// in front). A request over TLS always gets it.
	SecureCookie bool
	// Logger receives one line per action (cancel, retry) with the
	// operator. Default: slog.Default().
	Logger *slog.Logger
}

const (
	defaultSilentAfter  = membership.DefaultSilentAfter
	defaultPollInterval = 3 * time.Second
	defaultPageSize     = 50
	defaultJournalSteps = 200
	maxPageSize         = 500
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Handler serves the dashboard. Build it with New.
type Handler struct {
	store    Store
	cfg      Config
	pages    map[string]*template.Template
	mux      *http.ServeMux
	static   http.Handler
	csrf     csrf
	origin   *http.CrossOriginProtection
	defs     map[string]workflows.Definition
	versions map[string]string // of defs, by workflow ID
	log      *slog.Logger
	pollMs   int64
	pageSize int
}

// New returns the dashboard over store. It fails on a bad Config (a
// Prefix that does not start with "/" or ends with one, a Secret shorter
// than 32 bytes).
func New(store Store, cfg Config) (*Handler, error) {
	if store == nil {
		return nil, errors.New("ui: nil Store")
	}
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.Secret == nil {
		cfg.Secret = make([]byte, 32)
		if _, err := rand.Read(cfg.Secret); err != nil {
			return nil, fmt.Errorf("ui: draw a CSRF secret: %w", err)
		}
	} else if len(cfg.Secret) < 32 {
		return nil, fmt.Errorf("ui: Secret holds %d bytes, want at least 32", len(cfg.Secret))
	}
	if cfg.Operator == nil {
		cfg.Operator = func(*http.Request) string { return "leasehold-ui" }
	}
	if cfg.NodeSilentAfter <= 0 {
		cfg.NodeSilentAfter = defaultSilentAfter
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = defaultPageSize
	}
	cfg.PageSize = min(cfg.PageSize, maxPageSize)
	if cfg.JournalSteps <= 0 {
		cfg.JournalSteps = defaultJournalSteps
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{
		store: store, cfg: cfg, log: cfg.Logger, pageSize: cfg.PageSize,
		csrf:   csrf{secret: cfg.Secret, path: cfg.Prefix + "/", secure: cfg.SecureCookie},
		origin: http.NewCrossOriginProtection(),
		defs:   map[string]workflows.Definition{}, versions: map[string]string{},
	}
	if cfg.PollInterval > 0 {
		h.pollMs = cfg.PollInterval.Milliseconds()
	}
	for _, d := range cfg.Workflows {
		h.defs[d.ID] = d
		h.versions[d.ID], _ = d.Version()
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	files := http.StripPrefix(cfg.Prefix+"/static/", http.FileServerFS(static))
	h.static = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, cfg.Prefix+"/static/")
		if name == "" || strings.Contains(name, "/") {
			h.fail(w, r, http.StatusNotFound, "no such file") // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	h.routes()
	return h, nil
}

// CheckPrefix reports whether prefix can be Config.Prefix: "" (the root),
// or a path that starts with "/", does not end with one, and holds no
// pattern character, space or control character.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("ui: prefix %q must start with / and not end with one (\"\" is the root)", prefix)
	}
	for _, r := range prefix {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("{}?#%", r) {
			return fmt.Errorf("ui: prefix %q must not hold %q", prefix, r)
		}
	}
	return nil
}

func (h *Handler) routes() {
	p := h.cfg.Prefix
	m := http.NewServeMux()
	m.HandleFunc("GET "+p+"/{$}", h.overview)
	m.HandleFunc("GET "+p+"/episodes", h.episodeList)
	m.HandleFunc("GET "+p+"/episodes/{id}", h.episode)
	m.HandleFunc("GET "+p+"/episodes/{id}/{action}", h.confirm)
	m.HandleFunc("POST "+p+"/episodes/{id}/{action}", h.act)
	m.HandleFunc("GET "+p+"/workflows", h.workflowList)
	m.HandleFunc("GET "+p+"/workflows/{id}", h.workflow)
	m.HandleFunc("GET "+p+"/findings", h.findingList)
	m.HandleFunc("GET "+p+"/findings/history", h.findingHistory)
	m.Handle("GET "+p+"/static/", h.static)
	if p != "" {
		m.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "no such page")
	})
	h.mux = m
}

// ServeHTTP serves one request: the host's Authorize first, then the
// security headers every response carries, then the page. Unsafe methods
// must come from the dashboard's own pages: the cross-origin check
// (Sec-Fetch-Site / Origin) and the CSRF token both apply to every POST.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Authorize != nil && !h.cfg.Authorize(w, r) {
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	if err := h.origin.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "cross-origin request refused")
		return
	}
	h.mux.ServeHTTP(w, r)
}
