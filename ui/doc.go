// Package ui is leasehold's web dashboard: an http.Handler that shows the
// coordination itself (who held each episode under which fence, when a
// lease was lost or taken over, what recovery did) and lets an operator
// cancel or retry an episode. `leasehold ui -url … -listen 127.0.0.1:8080`
// serves it; a host mounts it in its own server under a path prefix:
//
//	h, err := ui.New(postgres.New(pool), ui.Config{
//		Prefix:    "/admin/leasehold",
//		Authorize: myAuth, // or ui.BasicAuth(user, password, "leasehold")
//	})
//	mux.Handle("/admin/leasehold/", h)
//
// Everything is server-rendered HTML and SVG from templates and files
// embedded in the binary (no build step, no CDN). One small script polls
// the live parts of a page; every page works without it.
//
// # Reads
//
// Every read goes through a named statement of
// sql/queries/<dialect>/dashboard.sql (Postgres compiled by sqlc, the
// T-SQL twin checked statically), through the Store the adapter
// implements. None locks anything or decides anything, so every page is a
// snapshot; ages, lease liveness and chart windows are computed on the
// database clock (DashboardClock), never the browser's or this process's.
// A value a user typed (a filter, a search, an ID) reaches SQL only as a
// statement parameter.
//
// # Pages
//
//	/                    overview: nodes (identity, stack, env, mode, draining,
//	                     heartbeat age, live and expired leases, running
//	                     episodes), episode counts per actor and status,
//	                     charts over a window (15m, 1h, 6h, 24h, 7d)
//	/episodes            the episode list: filters (status, actor, expectation,
//	                     error class, env, stack, node, dedupe-key search),
//	                     keyset pages by ID (?before=ID), live
//	/episodes/{id}       one episode: a timeline of its grants with the journal
//	                     steps under each, its claim row and trigger request,
//	                     payload, result, error detail; cancel and retry
//	/episodes/{id}/cancel, /episodes/{id}/retry
//	                     the confirmation page (GET) and the action (POST)
//	/workflows           instances with their step graphs
//	/workflows/{id}      one instance: graph, steps and their episodes
//	/findings            findings, active ones by default (one per key per env)
//	/findings/history    every raise and clear of one key in one env
//
// # What the charts read
//
// The schema keeps the current state of each row, not an event log, so the
// charts are derived, each in one statement:
//
//   - Completed, Failed: episodes by finished_at bucket and status
//     (DashboardOutcomes; done, and failed or partially_failed). Archived
//     episodes are not counted.
//   - Retried, Taken over by recovery, Takeover latency: hand-overs read
//     from the journal's fences (DashboardHandovers). Every grant of a claim
//     has a fence one above the one before, and every step records its
//     fence. Two consecutive journaled grants one fence apart mean the old
//     holder ended its own grant and the next followed directly: a retry.
//     Two or more apart mean another node fenced the old grant out in
//     between: a takeover (recovery, after the holder died, lost its lease
//     or released the work on drain). Latency runs from the old grant's last
//     step to the new grant's first, an upper bound on how long the work
//     stood still; each hand-over is counted in the bucket of that first
//     step. A grant that journaled no step is not seen, and only the
//     journals of queued and running episodes and of those that ended in
//     the window are read.
//
// The episode timeline is derived the same way (see timeline.go): fences
// from the journal and the claim row's current grant. The schema records
// the owner of the current grant only, so earlier grants show "owner not
// recorded"; and it stores no trace context yet, so the trace ID is a
// placeholder until it does.
//
// # Security
//
//   - Authentication is the host's: Config.Authorize runs before anything
//     else (BasicAuth builds one). CheckListen refuses a listen address
//     other than loopback without it; `leasehold ui` applies it, with
//     credentials from LEASEHOLD_UI_USER and LEASEHOLD_UI_PASSWORD (never
//     flags, which other users can read in the process list).
//   - Cancel and retry are POSTs from a confirmation page, accepted only
//     with the form's CSRF token: HMAC-SHA256 of the browser's session
//     cookie (random, HttpOnly, SameSite=Strict, scoped to Prefix, Secure
//     over TLS), checked in constant time. Cross-origin POSTs are refused
//     before that (http.CrossOriginProtection: Sec-Fetch-Site, Origin).
//     Config.ReadOnly hides the actions and refuses their POSTs.
//   - Every value is escaped by html/template for its context; stored
//     text with control or invisible characters (a key holding a newline)
//     is shown Go-quoted, and JSON documents with \u escapes. The
//     Content-Security-Policy allows only the dashboard's own script and
//     stylesheet (no inline script or style), no framing, forms to itself.
package ui
