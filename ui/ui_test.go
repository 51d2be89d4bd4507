package ui_test

import (
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/ui"
	"github.com/leasehold/leasehold/workflows"
)

// Both adapters are dashboard stores.
var (
	_ ui.Store = (*postgres.Store)(nil)
	_ ui.Store = (*sqlserver.Store)(nil)
)

// site is a dashboard served over HTTP against a seeded schema, and a
// browser-like client (cookies kept, redirects not followed).
type site struct {
	seeded
	srv    *httptest.Server
	client *http.Client
	prefix string
}

func newSite(t *testing.T, s seeded, cfg ui.Config) *site {
	t.Helper()
	if cfg.Workflows == nil {
		cfg.Workflows = []workflows.Definition{reportWorkflow}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := ui.New(s.store, cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(cfg.Prefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &site{seeded: s, srv: srv, client: c, prefix: cfg.Prefix}
}

// get fetches path (under the prefix) and returns the status and body.
func (s *site) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := s.client.Get(s.srv.URL + s.prefix + path)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func (s *site) post(t *testing.T, path string, form url.Values, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+s.prefix+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := s.client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res
}

var tokenRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func token(t *testing.T, body string) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF token in the form")
	return html.UnescapeString(m[1])
}

var rowRE = regexp.MustCompile(`<tr data-id="(\d+)" data-status="([a-z_]+)">`)

// rows returns the episode IDs a list page shows, in order.
func rows(body string) []int64 {
	var out []int64
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, id)
	}
	return out
}

func TestPages(t *testing.T) {
	s := newSite(t, seed(t, 0), ui.Config{})

	t.Run("overview", func(t *testing.T) {
		code, body := s.get(t, "/")
		require.Equal(t, http.StatusOK, code)
		for _, want := range []string{`data-node="node-1"`, `data-node="node-2"`, `badge silent`, `badge draining`,
			`id="counts"`, `id="chart-completed"`, `id="chart-failed"`, `id="chart-retried"`, `id="chart-recovered"`, `id="chart-latency"`} {
			require.Contains(t, body, want)
		}
		// node-1 still holds the orphan's expired lease; the node with
		// HTML in its name is text.
		require.Regexp(t, `data-node="node-1"[\s\S]*?<span class="warn"[^>]*>1</span>`, body)
		require.Contains(t, body, "node-&lt;i&gt;4&lt;/i&gt;")
		require.NotContains(t, body, "node-<i>4</i>")
		// The charts saw the retry and the takeover: each has a bar.
		for _, id := range []string{"chart-retried", "chart-recovered", "chart-latency", "chart-completed", "chart-failed"} {
			require.Regexp(t, `id="`+id+`"[\s\S]*?<rect x=`, body, "%s has a bar", id)
		}
		code, _ = s.get(t, "/?window=nope")
		require.Equal(t, http.StatusBadRequest, code)
		for _, w := range []string{"15m", "1h", "6h", "24h", "7d"} {
			code, _ = s.get(t, "/?window="+w)
			require.Equal(t, http.StatusOK, code, w)
		}
	})

	t.Run("episode timeline of a takeover", func(t *testing.T) {
		code, body := s.get(t, "/episodes/"+strconv.FormatInt(s.takenOver, 10))
		require.Equal(t, http.StatusOK, code)
		// fence 1: node-1's run, taken over; fence 2: recovery's
		// fence-out (RequeueOrphan), which wrote nothing; fence 3: the
		// current grant, node-3, done.
		require.Regexp(t, `data-fence="1" data-outcome="takeover"`, body)
		require.Regexp(t, `data-fence="2" data-outcome="fenceout"`, body)
		require.Regexp(t, `data-fence="3" data-outcome="done"`, body)
		require.Regexp(t, `data-fence="3"[\s\S]*?node-3`, body)
		require.Contains(t, body, "owner not recorded")
		require.Contains(t, body, `{&#34;n&#34;:3,&#34;resumed&#34;:true}`, "the step under its grant")
	})

	t.Run("episode timeline of a retry and of a live run", func(t *testing.T) {
		_, body := s.get(t, "/episodes/"+strconv.FormatInt(s.retried, 10))
		require.Regexp(t, `data-fence="1" data-outcome="retry"`, body)
		require.Regexp(t, `data-fence="2" data-outcome="done"`, body)
		_, body = s.get(t, "/episodes/"+strconv.FormatInt(s.running, 10))
		require.Regexp(t, `data-fence="1" data-outcome="live"`, body)
		require.Contains(t, body, `id="cancel"`)
		_, body = s.get(t, "/episodes/"+strconv.FormatInt(s.orphan, 10))
		require.Regexp(t, `data-fence="1" data-outcome="expired"`, body)
		_, body = s.get(t, "/episodes/"+strconv.FormatInt(s.available, 10))
		require.Contains(t, body, "No grant yet")
		require.Regexp(t, `<dl class="fields" id="available">\s*<dt>due</dt>`, body)
	})

	t.Run("stored text is shown as text", func(t *testing.T) {
		_, body := s.get(t, "/episodes/"+strconv.FormatInt(s.tricky, 10))
		require.NotContains(t, body, "<script>window.__xss")
		require.NotContains(t, body, "<img src=x")
		require.NotContains(t, body, "<b>key</b>")
		require.Contains(t, body, "&lt;script&gt;window.__xss=1&lt;/script&gt;")
		// The key holds a newline: it is shown Go-quoted, on one line.
		require.Contains(t, body, html.EscapeString(strconv.Quote(trickyKey)))
		// The payload's "\n" stays an escape inside the JSON document.
		require.Contains(t, body, `line1\nline2`)
		_, body = s.get(t, "/episodes?key="+url.QueryEscape("<b>key</b>"))
		require.Equal(t, []int64{s.tricky}, rows(body))
		require.Contains(t, body, html.EscapeString(strconv.Quote(trickyKey)))
	})

	t.Run("workflows", func(t *testing.T) {
		code, body := s.get(t, "/workflows")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `data-step="extract"`)
		require.Regexp(t, `class="node st-done" data-step="extract"`, body)
		require.Regexp(t, `class="node st-running" data-step="enrich"`, body)
		require.Regexp(t, `class="node st-pending" data-step="publish"`, body)
		require.Equal(t, 4, strings.Count(body, `class="edge"`), "extract→enrich, extract→score, enrich→publish, score→publish")
		version, err := reportWorkflow.Version()
		require.NoError(t, err)
		short := `<span class="version" title="` + version + `">` + version[:8] + `</span>`
		require.Contains(t, body, short, "the instance's definition version, short")
		code, body = s.get(t, "/workflows/"+strconv.FormatInt(s.instance, 10))
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `id="steps"`)
		require.Contains(t, body, `<dd class="version" title="`+version+`">`+version[:8]+`</dd>`)
		code, _ = s.get(t, "/workflows/999999")
		require.Equal(t, http.StatusNotFound, code)
	})

	t.Run("workflows without their definition", func(t *testing.T) {
		bare := newSite(t, s.seeded, ui.Config{Workflows: []workflows.Definition{}})
		_, body := bare.get(t, "/workflows")
		require.NotContains(t, body, `class="edge"`)
		require.Contains(t, body, "Dependencies are not drawn")

		// A definition of another version does not draw the instance's.
		changed := workflows.Definition{ID: reportWorkflow.ID, Steps: slices.Clone(reportWorkflow.Steps)}
		changed.Steps[0].MaxAttempts = 9
		other := newSite(t, s.seeded, ui.Config{Workflows: []workflows.Definition{changed}})
		_, body = other.get(t, "/workflows")
		require.NotContains(t, body, `class="edge"`)
	})

	t.Run("findings", func(t *testing.T) {
		code, body := s.get(t, "/findings")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 1, strings.Count(body, `data-status="active"`), "one active finding per key per env")
		require.Contains(t, body, "load above 95% on &lt;db-1&gt;")
		_, body = s.get(t, "/findings?status=")
		require.Equal(t, 2, strings.Count(body, "<tr data-id="), "the active and the cleared one")
		code, body = s.get(t, "/findings/history?env=&key=cpu%3Adb-1")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 1, strings.Count(body, `<li data-status="active">`))
		require.Equal(t, 1, strings.Count(body, `<li data-status="cleared">`))
		code, _ = s.get(t, "/findings/history")
		require.Equal(t, http.StatusBadRequest, code)
	})

	t.Run("not found and bad input", func(t *testing.T) {
		for _, p := range []string{"/episodes/0", "/episodes/abc", "/episodes/99999999", "/nope", "/episodes/1/delete"} {
			code, body := s.get(t, p)
			require.Equal(t, http.StatusNotFound, code, p)
			require.Contains(t, body, `id="error"`, p)
		}
		code, _ := s.get(t, "/episodes?status=bogus")
		require.Equal(t, http.StatusBadRequest, code)
		code, _ = s.get(t, "/episodes?before=-3")
		require.Equal(t, http.StatusBadRequest, code)
	})

	t.Run("live fragments", func(t *testing.T) {
		_, page := s.get(t, "/episodes?actor=billing")
		m := regexp.MustCompile(`data-poll="([^"]+)"`).FindStringSubmatch(page)
		require.NotNil(t, m)
		poll := html.UnescapeString(m[1])
		require.True(t, strings.HasPrefix(poll, "/episodes?"), poll)
		res, err := s.client.Get(s.srv.URL + poll)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.NotContains(t, string(b), "<html")
		require.Equal(t, rows(page), rows(string(b)))
	})

	t.Run("security headers", func(t *testing.T) {
		res, err := http.Get(s.srv.URL + "/") // a new browser: no session yet
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
		var session *http.Cookie
		for _, c := range res.Cookies() {
			if c.Name == "leasehold_ui_session" {
				session = c
			}
		}
		require.NotNil(t, session, "a session cookie")
		require.True(t, session.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, session.SameSite)
		res, err = s.client.Get(s.srv.URL + "/static/app.js")
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Contains(t, res.Header.Get("Content-Type"), "javascript")
		for _, p := range []string{"/static/", "/static/nope.js", "/static/x/app.js"} {
			code, _ := s.get(t, p)
			require.Equal(t, http.StatusNotFound, code, p)
		}
	})
}

func TestEpisodeFilters(t *testing.T) {
	s := newSite(t, seed(t, 12), ui.Config{PageSize: 5})
	list := func(t *testing.T, q string) []int64 {
		t.Helper()
		code, body := s.get(t, "/episodes?"+q)
		require.Equal(t, http.StatusOK, code, q)
		return rows(body)
	}
	// Every filter narrows the list to what it names.
	require.Equal(t, []int64{s.failed}, list(t, "status=failed"))
	require.Equal(t, []int64{s.available}, list(t, "env=rc"))
	require.Equal(t, []int64{s.available}, list(t, "stack=blue"))
	require.Empty(t, list(t, "env=(unset)&actor=reports"), "the available one is in env rc")
	require.Equal(t, []int64{s.running, s.failed}, list(t, "env=(unset)&stack=(unset)&actor=monitor"))
	require.Equal(t, []int64{s.failed}, list(t, "error_class=error"))
	require.Equal(t, []int64{s.running, s.failed}, list(t, "actor=monitor"))
	require.Equal(t, []int64{s.running}, list(t, "actor=monitor&expectation=watch"))
	require.Equal(t, []int64{s.orphan}, list(t, "node=node-1"))
	require.Equal(t, []int64{s.takenOver}, list(t, "key=inv-2"))
	// LIKE's wildcards are searched for as text: "_%" is in the bulk keys
	// only, and "%" alone would match every key if it were a wildcard.
	require.Len(t, list(t, "key="+url.QueryEscape("_%")), 5)
	require.Empty(t, list(t, "key="+url.QueryEscape("%%")))
	require.Empty(t, list(t, "key="+url.QueryEscape("inv_1")))

	// Keyset pages: every bulk episode exactly once, newest first, five a
	// page, following the "older" links.
	var all []int64
	next := "/episodes?actor=bulk"
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, 10)
		code, body := s.get(t, strings.TrimPrefix(next, s.prefix))
		require.Equal(t, http.StatusOK, code)
		all = append(all, rows(body)...)
		next = ""
		if m := regexp.MustCompile(`href="([^"]+)" id="older"`).FindStringSubmatch(body); m != nil {
			next = html.UnescapeString(m[1])
		}
	}
	want := slices.Clone(s.bulk)
	slices.Reverse(want)
	require.Equal(t, want, all)
}

func TestActions(t *testing.T) {
	s := newSite(t, seed(t, 0), ui.Config{})
	id := strconv.FormatInt(s.available, 10)

	code, body := s.get(t, "/episodes/"+id+"/cancel")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "it ends canceled at once")
	tok := token(t, body)

	// Refused: no token, a wrong one, one from another session, a
	// cross-site request.
	for name, tc := range map[string]struct {
		form   url.Values
		header http.Header
		client *http.Client
	}{
		"no token":     {form: url.Values{}},
		"wrong token":  {form: url.Values{"csrf": {tok + "x"}}},
		"no cookie":    {form: url.Values{"csrf": {tok}}, client: &http.Client{}},
		"cross-site":   {form: url.Values{"csrf": {tok}}, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		"other origin": {form: url.Values{"csrf": {tok}}, header: http.Header{"Origin": {"https://evil.example"}}},
	} {
		t.Run(name, func(t *testing.T) {
			c := s.client
			if tc.client != nil {
				s.client = tc.client
			}
			res := s.post(t, "/episodes/"+id+"/cancel", tc.form, tc.header)
			s.client = c
			require.Equal(t, http.StatusForbidden, res.StatusCode)
			require.Equal(t, episodes.StatusQueued, s.status(t, s.available).Status, "nothing changed")
		})
	}

	res := s.post(t, "/episodes/"+id+"/cancel", url.Values{"csrf": {tok}}, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/episodes/"+id+"?notice=canceled", res.Header.Get("Location"))
	e := s.status(t, s.available)
	require.Equal(t, episodes.StatusCanceled, e.Status)
	require.Equal(t, episodes.ClassCanceled, e.ErrorClass)
	require.JSONEq(t, `{"reason":"canceled","by":"leasehold-ui"}`, string(e.ErrorDetail))
	_, body = s.get(t, "/episodes/"+id+"?notice=canceled")
	require.Contains(t, body, `id="notice"`)
	_, body = s.get(t, "/episodes/"+id+"?notice=<script>")
	require.NotContains(t, body, `id="notice"`, "only known notices are shown")

	// A second cancel is refused by the statement: 409, the reason shown.
	res = s.post(t, "/episodes/"+id+"/cancel", url.Values{"csrf": {tok}}, nil)
	require.Equal(t, http.StatusConflict, res.StatusCode)

	// A live episode's cancel is a request to its holder.
	res = s.post(t, "/episodes/"+strconv.FormatInt(s.running, 10)+"/cancel", url.Values{"csrf": {tok}}, nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Contains(t, res.Header.Get("Location"), "notice=cancel-requested")
	require.Equal(t, episodes.StatusRunning, s.status(t, s.running).Status)
	_, body = s.get(t, "/episodes/"+strconv.FormatInt(s.running, 10))
	require.Contains(t, body, "cancel requested")

	// Retry the failed one: queued again as its next attempt.
	fid := strconv.FormatInt(s.failed, 10)
	code, body = s.get(t, "/episodes/"+fid+"/retry")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "attempt 2")
	res = s.post(t, "/episodes/"+fid+"/retry", url.Values{"csrf": {token(t, body)}}, nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	e = s.status(t, s.failed)
	require.Equal(t, episodes.StatusQueued, e.Status)
	require.Equal(t, int32(2), e.Attempt())
	res = s.post(t, "/episodes/"+fid+"/retry", url.Values{"csrf": {tok}}, nil)
	require.Equal(t, http.StatusConflict, res.StatusCode, "only failed or canceled work is retried")

	// The canceled one can be retried too.
	res = s.post(t, "/episodes/"+id+"/retry", url.Values{"csrf": {tok}}, nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, episodes.StatusQueued, s.status(t, s.available).Status)
}

func TestReadOnly(t *testing.T) {
	s := newSite(t, seed(t, 0), ui.Config{ReadOnly: true})
	fid := strconv.FormatInt(s.failed, 10)
	_, body := s.get(t, "/episodes/"+fid)
	require.Contains(t, body, `id="read-only"`)
	require.NotContains(t, body, `id="retry"`)
	require.NotContains(t, body, `id="cancel"`)
	code, _ := s.get(t, "/episodes/"+fid+"/retry")
	require.Equal(t, http.StatusForbidden, code)
	_, home := s.get(t, "/")
	res := s.post(t, "/episodes/"+fid+"/retry", url.Values{"csrf": {"x"}}, nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.NotEmpty(t, home)
	require.Equal(t, episodes.StatusFailed, s.status(t, s.failed).Status)
}

func TestPrefixAndAuth(t *testing.T) {
	s := newSite(t, seed(t, 0), ui.Config{Prefix: "/admin/lh", Authorize: ui.BasicAuth("ops", "s3cret pass", "leasehold")})
	res, err := s.client.Get(s.srv.URL + "/admin/lh/")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Contains(t, res.Header.Get("WWW-Authenticate"), `Basic realm="leasehold"`)

	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/admin/lh/episodes", nil)
	req.SetBasicAuth("ops", "wrong")
	res, err = s.client.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
		req.SetBasicAuth("ops", "s3cret pass")
		res, err := s.client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := get("/admin/lh/episodes")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/admin/lh/episodes/`)
	require.Contains(t, body, `href="/admin/lh/static/app.css"`)
	require.NotRegexp(t, `href="/episodes`, body, "every link carries the prefix")
	code, _ = get("/admin/lh/static/app.css")
	require.Equal(t, http.StatusOK, code)
	req, _ = http.NewRequest(http.MethodGet, s.srv.URL+"/admin/lh", nil)
	req.SetBasicAuth("ops", "s3cret pass")
	res, err = s.client.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, 3, res.StatusCode/100, "redirected to the dashboard's root")
	require.Equal(t, "/admin/lh/", res.Header.Get("Location"))
}

func TestConfig(t *testing.T) {
	s := seed(t, 0)
	for _, cfg := range []ui.Config{{Prefix: "admin"}, {Prefix: "/admin/"}, {Secret: []byte("short")}} {
		_, err := ui.New(s.store, cfg)
		require.Error(t, err, "%+v", cfg)
	}
	_, err := ui.New(nil, ui.Config{})
	require.Error(t, err)
	// The handler answers with the database's errors, not a panic.
	_, err = ui.New(s.store, ui.Config{Prefix: "/x"})
	require.NoError(t, err)
	gone := pgtest.Another(t, s.pool)
	gone.Close()
	h, err := ui.New(postgres.New(gone), ui.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/episodes", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, rec.Body.String(), "reading the database failed")
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr string
		auth bool
		ok   bool
	}{
		{"127.0.0.1:8080", false, true},
		{"127.10.0.3:8080", false, true},
		{"[::1]:8080", false, true},
		{"localhost:8080", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"[::]:8080", false, false},
		{"192.168.1.4:8080", false, false},
		{"example.com:80", false, false},
		{"0.0.0.0:8080", true, true},
		{"nonsense", true, false},
	} {
		err := ui.CheckListen(tc.addr, tc.auth)
		if tc.ok {
			require.NoError(t, err, tc.addr)
		} else {
			require.Error(t, err, tc.addr)
		}
	}
	require.ErrorIs(t, ui.CheckListen(":8080", false), ui.ErrOpenListen)
}
