package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/ui"
	"github.com/leasehold/leasehold/workflows"
)

// The browser tests drive the dashboard in headless Chromium (the Debian
// chromium package, or LEASEHOLD_CHROMIUM) with chromedp: they load every
// page against a seeded schema, filter the episode list, watch it update
// live, open an episode, cancel one and retry one through the
// confirmation pages and check the database changed, and save
// screenshots at a phone and a desktop width. Without Chromium they say so
// loudly and skip; .ci/run installs it, so CI always runs them.

const (
	phoneW, phoneH     = 390, 844
	desktopW, desktopH = 1280, 900
	// actionTimeout bounds each browser step, so a stuck page fails the
	// test at the step instead of hanging it.
	actionTimeout = 20 * time.Second
)

// chromium returns the browser to drive, or skips the test with a banner.
func chromium(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("LEASEHOLD_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	banner := strings.Join([]string{
		"==================================================================",
		"BROWSER TESTS SKIPPED: no Chromium found (chromium, chromium-browser,",
		"google-chrome, or LEASEHOLD_CHROMIUM). The dashboard was checked by",
		"its handler tests only. Install it to run them:",
		"    apt-get install -y chromium",
		"==================================================================",
	}, "\n")
	t.Log("\n" + banner)
	fmt.Fprintln(os.Stderr, banner)
	t.Skip("no Chromium: browser tests skipped")
	return ""
}

// artifacts is where the screenshots go: LEASEHOLD_UI_ARTIFACTS, else a
// new directory under the system's temporary one, kept after the test.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LEASEHOLD_UI_ARTIFACTS")
	if dir == "" {
		var err error
		dir, err = os.MkdirTemp("", "leasehold-ui-browser-")
		require.NoError(t, err)
	} else {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	t.Logf("browser test screenshots: %s", dir)
	fmt.Fprintf(os.Stderr, "leasehold ui browser tests: screenshots in %s\n", dir)
	return dir
}

// browser starts headless Chromium and returns a tab's context.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in a container
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(desktopW, desktopH),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// screenshot saves a full-page screenshot at width w.
func screenshot(t *testing.T, ctx context.Context, dir, name string, w, h int64) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(w, h),
		chromedp.Sleep(150*time.Millisecond), // relayout at the new width
	))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

func TestBrowser(t *testing.T) {
	exe := chromium(t)
	start := time.Now()
	s := seed(t, 8)
	h, err := ui.New(s.store, ui.Config{
		Workflows: []workflows.Definition{reportWorkflow}, PollInterval: 400 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	dir := artifacts(t)
	ctx := browser(t, exe)
	base := srv.URL
	ep := func(id int64) string { return base + "/episodes/" + strconv.FormatInt(id, 10) }
	do := func(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		require.NoError(t, chromedp.Do(actx, steps...))
	}
	// eval evaluates js and decodes its value into out.
	eval := func(t *testing.T, js string, out any) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		raw, err := chromedp.Run(actx, chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
		require.NoError(t, err, js)
		require.NoError(t, json.Unmarshal(raw, out), js)
	}
	rowIDs := func(t *testing.T) []int64 {
		t.Helper()
		var ids []int64
		eval(t, `[...document.querySelectorAll('#episodes tbody tr')].map(r => +r.dataset.id)`, &ids)
		return ids
	}
	poll := func(js string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(10*time.Second))
	}
	// follow runs click, which navigates, and waits for the new page: a
	// poll or a wait that spanned the navigation would lose its document.
	// A live update that replaces the element between chromedp's query and
	// its click (a loaded host stretches that gap past the 400 ms poll)
	// loses the node; the click is made again on the new one, as a person
	// would click again.
	follow := func(t *testing.T, click chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		for attempt := 1; ; attempt++ {
			res, err := chromedp.RunResponse(actx, click)
			if err != nil && attempt < 3 && strings.Contains(err.Error(), "Could not find node with given id") {
				t.Logf("click %d lost its element to a live update (%v); clicking again", attempt, err)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, int64(http.StatusOK), res.Status, "%s", res.URL)
			return
		}
	}
	shot := func(t *testing.T, name string, w, h int64) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		screenshot(t, actx, dir, name, w, h)
	}
	noHorizontalScroll := func(t *testing.T, what string) {
		t.Helper()
		var wide bool
		eval(t, `document.documentElement.scrollWidth > window.innerWidth + 1`, &wide)
		require.False(t, wide, "%s scrolls sideways at %dpx", what, phoneW)
	}

	t.Run("overview", func(t *testing.T) {
		do(t,
			chromedp.EmulateViewport(desktopW, desktopH),
			chromedp.Navigate(base+"/"),
			chromedp.WaitVisible(`#nodes`),
			// The script ran under the CSP: it announced live updates.
			chromedp.WaitVisible(`#live-stamp`),
			poll(`document.getElementById('live-stamp').textContent.startsWith('live ·')`),
		)
		var silent, expired string
		eval(t, `document.querySelector('tr[data-node="node-1"] .badge.silent').textContent`, &silent)
		eval(t, `document.querySelector('tr[data-node="node-1"] .warn').textContent`, &expired)
		require.Equal(t, "silent", silent)
		require.Equal(t, "1", expired, "node-1 still holds the orphan's expired lease")
		var bars map[string]int
		eval(t, `Object.fromEntries([...document.querySelectorAll('.chart-card')].map(c => [c.id, c.querySelectorAll('rect:not(.overlay)').length]))`, &bars)
		for _, id := range []string{"chart-completed", "chart-failed", "chart-retried", "chart-recovered", "chart-latency"} {
			require.Positive(t, bars[id], "%s draws a bar", id)
		}
		var tricky string
		eval(t, `[...document.querySelectorAll('#nodes td:first-child a')].map(a => a.textContent).join('|')`, &tricky)
		require.Contains(t, tricky, trickyNode, "HTML in a node name is text")
		shot(t, "overview-desktop", desktopW, desktopH)
		shot(t, "overview-phone", phoneW, phoneH)
		noHorizontalScroll(t, "the overview")
	})

	t.Run("episodes: filter, live update, open one", func(t *testing.T) {
		do(t,
			chromedp.EmulateViewport(desktopW, desktopH),
			chromedp.Navigate(base+"/episodes"),
			chromedp.WaitVisible(`#filters`),
			chromedp.SendKeys(`input[name="actor"]`, "monitor"),
		)
		follow(t, chromedp.Click(`#apply`))
		do(t, chromedp.WaitVisible(`#episodes`))
		var loc string
		eval(t, `location.href`, &loc)
		require.Contains(t, loc, "actor=monitor")
		require.Equal(t, []int64{s.running, s.failed}, rowIDs(t))

		// The dedupe-key search treats its text literally.
		do(t,
			chromedp.Navigate(base+"/episodes"),
			chromedp.WaitVisible(`#filters`),
			chromedp.SendKeys(`input[name="key"]`, "<b>key</b>"),
		)
		follow(t, chromedp.Click(`#apply`))
		do(t, chromedp.WaitVisible(`#episodes`))
		require.Equal(t, []int64{s.tricky}, rowIDs(t))

		// Live: a new episode shows up without a reload.
		do(t, chromedp.Navigate(base+"/episodes?actor=reports"), chromedp.WaitVisible(`#episodes`))
		require.Equal(t, []int64{s.available}, rowIDs(t))
		d, err := s.store.CreateDeferredEpisode(context.Background(), episodes.Deferred{New: episodes.New{ActorID: "reports",
			ExpectationID: "build", TriggerType: episodes.TriggerManual, DedupeKey: "report:live", MaxAttempts: 3}})
		require.NoError(t, err)
		do(t, poll(fmt.Sprintf(`document.querySelector('#episodes tbody tr[data-id="%d"]') !== null`, d.Episode.ID))) // the list updated live
		require.Equal(t, []int64{d.Episode.ID, s.available}, rowIDs(t))
		shot(t, "episodes-desktop", desktopW, desktopH)
		shot(t, "episodes-phone", phoneW, phoneH)
		noHorizontalScroll(t, "the episode list")

		// Open the taken-over episode from the list.
		do(t,
			chromedp.EmulateViewport(desktopW, desktopH),
			chromedp.Navigate(base+"/episodes?key=inv-2"),
			chromedp.WaitVisible(`#episodes`),
		)
		follow(t, chromedp.Click(fmt.Sprintf(`#episodes tr[data-id="%d"] a`, s.takenOver)))
		do(t, chromedp.WaitVisible(`#timeline`))
		var outcomes []string
		eval(t, `[...document.querySelectorAll('#timeline li.grant')].map(g => g.dataset.fence + ':' + g.dataset.outcome)`, &outcomes)
		require.Equal(t, []string{"1:takeover", "2:fenceout", "3:done"}, outcomes)
		var owner string
		eval(t, `document.querySelector('#timeline li[data-fence="3"] .owner').textContent`, &owner)
		require.Contains(t, owner, "node-3")
		shot(t, "episode-timeline-desktop", desktopW, desktopH)
		shot(t, "episode-timeline-phone", phoneW, phoneH)
		noHorizontalScroll(t, "the episode page")
	})

	t.Run("stored HTML and newlines are text", func(t *testing.T) {
		do(t, chromedp.EmulateViewport(desktopW, desktopH), chromedp.Navigate(ep(s.tricky)), chromedp.WaitVisible(`#payload`))
		var xss any
		eval(t, `window.__xss === undefined ? null : window.__xss`, &xss)
		require.Nil(t, xss, "the payload's script did not run")
		var payload, key string
		var injected int
		eval(t, `document.querySelector('#payload pre').textContent`, &payload)
		eval(t, `document.querySelector('#dedupe-key code').textContent`, &key)
		eval(t, `document.querySelectorAll('main img, main script, #dedupe-key b').length`, &injected)
		require.Contains(t, payload, `<script>window.__xss=1</script>`)
		require.Contains(t, payload, `line1\nline2`)
		require.Equal(t, strconv.Quote(trickyKey), key, "the newline is shown as \\n, the HTML as text")
		require.Zero(t, injected, "no element came from stored text")
		shot(t, "episode-html-payload-desktop", desktopW, desktopH)
		shot(t, "episode-html-payload-phone", phoneW, phoneH)
		noHorizontalScroll(t, "the episode page with a long key")
	})

	t.Run("cancel through the confirmation page", func(t *testing.T) {
		do(t,
			chromedp.EmulateViewport(desktopW, desktopH),
			chromedp.Navigate(ep(s.available)),
			chromedp.WaitVisible(`#cancel`),
		)
		follow(t, chromedp.Click(`#cancel`))
		do(t, chromedp.WaitVisible(`#confirm-button`))
		require.Equal(t, episodes.StatusQueued, s.status(t, s.available).Status, "the confirmation page changes nothing")
		shot(t, "confirm-cancel-phone", phoneW, phoneH)
		do(t, chromedp.EmulateViewport(desktopW, desktopH))
		follow(t, chromedp.Click(`#confirm-button`))
		do(t, chromedp.WaitVisible(`#notice`))
		var status string
		eval(t, `document.getElementById('summary').dataset.status`, &status)
		require.Equal(t, "canceled", status)
		e := s.status(t, s.available)
		require.Equal(t, episodes.StatusCanceled, e.Status, "the database changed")
		require.Equal(t, episodes.ClassCanceled, e.ErrorClass)
	})

	t.Run("retry through the confirmation page", func(t *testing.T) {
		do(t,
			chromedp.Navigate(ep(s.failed)),
			chromedp.WaitVisible(`#retry`),
		)
		follow(t, chromedp.Click(`#retry`))
		do(t, chromedp.WaitVisible(`#confirm-button`))
		follow(t, chromedp.Click(`#confirm-button`))
		do(t, chromedp.WaitVisible(`#notice`))
		e := s.status(t, s.failed)
		require.Equal(t, episodes.StatusQueued, e.Status, "the database changed")
		require.Equal(t, int32(2), e.Attempt())
		shot(t, "episode-retried-desktop", desktopW, desktopH)
	})

	t.Run("a forged POST is refused", func(t *testing.T) {
		// A form posted from the page itself with the token removed.
		do(t, chromedp.Navigate(ep(s.running)), chromedp.WaitVisible(`#summary`))
		var status int
		eval(t, fmt.Sprintf(`fetch('/episodes/%d/cancel', {method: 'POST', `+
			`headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'csrf=forged'}).then(r => r.status)`, s.running), &status)
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, episodes.StatusRunning, s.status(t, s.running).Status)
	})

	t.Run("workflows and findings", func(t *testing.T) {
		do(t, chromedp.EmulateViewport(desktopW, desktopH), chromedp.Navigate(base+"/workflows"), chromedp.WaitVisible(`#instances`))
		var graph struct{ Nodes, Edges int }
		eval(t, `({Nodes: document.querySelectorAll('svg.graph g.node').length, Edges: document.querySelectorAll('svg.graph path.edge').length})`, &graph)
		require.Equal(t, 4, graph.Nodes)
		require.Equal(t, 4, graph.Edges)
		var states map[string]string
		eval(t, `Object.fromEntries([...document.querySelectorAll('svg.graph g.node')].map(g => [g.dataset.step, g.getAttribute('class')]))`, &states)
		require.Equal(t, "node st-done", states["extract"])
		require.Equal(t, "node st-running", states["enrich"])
		shot(t, "workflows-desktop", desktopW, desktopH)
		shot(t, "workflows-phone", phoneW, phoneH)
		noHorizontalScroll(t, "the workflow list")
		do(t, chromedp.EmulateViewport(desktopW, desktopH))
		follow(t, chromedp.Click(`svg.graph g.node[data-step="enrich"] a`))
		do(t, chromedp.WaitVisible(`#timeline`))

		do(t, chromedp.Navigate(base+"/findings"), chromedp.WaitVisible(`#findings`))
		var active int
		eval(t, `document.querySelectorAll('#findings tbody tr[data-status="active"]').length`, &active)
		require.Equal(t, 1, active)
		shot(t, "findings-desktop", desktopW, desktopH)
		do(t, chromedp.EmulateViewport(desktopW, desktopH))
		follow(t, chromedp.Click(`#findings a.history`))
		do(t, chromedp.WaitVisible(`#history`))
		var history []string
		eval(t, `[...document.querySelectorAll('#history li')].map(l => l.dataset.status)`, &history)
		require.Equal(t, []string{"active", "cleared"}, history)
		shot(t, "finding-history-phone", phoneW, phoneH)
	})
	t.Logf("browser tests took %v (seeding and Chromium's start included)", time.Since(start).Round(time.Millisecond))
}

// TestDocsScreenshots photographs a running dashboard for the README:
// LEASEHOLD_UI_DOCS_URL is its address (`leasehold ui` against the
// database `leasehold demo -keep` uses), LEASEHOLD_UI_DOCS_WAIT a selector
// the overview must show first (its live updates bring it, such as the
// killed node's expired leases: tr[data-node="node-1"] .warn), and
// LEASEHOLD_UI_DOCS_EPISODE the episode whose timeline to show, if any.
// The images go to LEASEHOLD_UI_DOCS_DIR (default docs/img). Skipped unless
// the URL is set: it is how docs/img was made, not a check.
func TestDocsScreenshots(t *testing.T) {
	url := strings.TrimSuffix(os.Getenv("LEASEHOLD_UI_DOCS_URL"), "/")
	if url == "" {
		t.Skip("LEASEHOLD_UI_DOCS_URL not set: no dashboard to photograph for the README")
	}
	exe := chromium(t)
	dir := os.Getenv("LEASEHOLD_UI_DOCS_DIR")
	if dir == "" {
		dir = filepath.Join("..", "docs", "img")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx := browser(t, exe)
	wait := os.Getenv("LEASEHOLD_UI_DOCS_WAIT")
	if wait == "" {
		wait = "#nodes"
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, chromedp.Do(actx, chromedp.EmulateViewport(desktopW, desktopH),
		chromedp.Navigate(url+"/?window=15m"), chromedp.WaitVisible(wait)))
	screenshot(t, actx, dir, "ui-overview", desktopW, desktopH)
	if id := os.Getenv("LEASEHOLD_UI_DOCS_EPISODE"); id != "" {
		require.NoError(t, chromedp.Do(actx, chromedp.Navigate(url+"/episodes/"+id), chromedp.WaitVisible("#timeline")))
		screenshot(t, actx, dir, "ui-episode-timeline", desktopW, desktopH)
	}
}
