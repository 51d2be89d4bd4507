// Package health provides HTTP handlers for load-balancer and Kubernetes
// probes. Liveness answers while the process serves HTTP; readiness answers
// 200 only while the node is running, and turns 503 as soon as it begins to
// stop, so traffic and new triggers go to other nodes first.
//
// Neither probe decides anything about leases: a node that is not ready may
// still hold leases until Stop has released them, and the database alone
// grants work.
package health

import (
	"net/http"
)

// Readier reports whether a node takes work (a *runner.Node).
type Readier interface{ Ready() bool }

// Liveness returns a handler that answers 200 "ok".
func Liveness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusOK, "ok")
	})
}

// Readiness returns a handler that answers 200 "ready" while r is ready and
// 503 "not ready" otherwise.
func Readiness(r Readier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if r.Ready() {
			write(w, http.StatusOK, "ready")
			return
		}
		write(w, http.StatusServiceUnavailable, "not ready")
	})
}

func write(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body + "\n"))
}
