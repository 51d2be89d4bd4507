// Package health provides HTTP handlers for load-balancer and Kubernetes
// probes. Liveness answers while the process serves HTTP; readiness answers
// 200 only while the node is running, and turns 503 as soon as it begins to
// drain, so traffic and new triggers go to other nodes first.
//
// Neither probe decides anything about leases: a node that is not ready may
// still hold leases until Stop has released them, and the database alone
// grants work.
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Readier reports whether a node takes work (a *runner.Node).
type Readier interface{ Ready() bool }

// Liveness returns a handler that answers 200 "ok".
func Liveness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusOK, "ok")
	})
}

// Detailer is a Readier that can describe its state (a *runner.Node: state
// starting | ready | draining | drained | degraded, active and queued
// episodes, held leases, the last drain's summary).
type Detailer interface {
	Readier
	ReadinessDetail() any
}

// Readiness returns a handler that answers 200 while r is ready and 503
// otherwise. The body is "ready" or "not ready", or, when r is a Detailer,
// its detail as JSON.
func Readiness(r Readier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		status, body := http.StatusServiceUnavailable, "not ready"
		if r.Ready() {
			status, body = http.StatusOK, "ready"
		}
		if d, ok := r.(Detailer); ok {
			if b, err := json.Marshal(d.ReadinessDetail()); err == nil {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Cache-Control", "no-store")
				w.WriteHeader(status)
				_, _ = w.Write(append(b, '\n'))
				return
			}
		}
		write(w, status, body)
	})
}

// SchemaChecker can tell whether the database's leasehold schema is
// current: a *runner.Node, or an adapter (*postgres.Store, *sqlserver.Store).
type SchemaChecker interface {
	CheckSchema(ctx context.Context) error
}

// SchemaTimeout bounds each check Schema runs.
const SchemaTimeout = 5 * time.Second

// Schema returns a handler (a startup probe) that answers 200 "schema
// current" when the database holds every leasehold migration this binary
// needs, and 503 with the reason otherwise: the schema missing or older
// (errors.Is(err, schema.ErrSchema): run the migrations) or the database
// unreachable. Each request runs one read, bounded by SchemaTimeout.
func Schema(c SchemaChecker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), SchemaTimeout)
		defer cancel()
		if err := c.CheckSchema(ctx); err != nil {
			write(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		write(w, http.StatusOK, "schema current")
	})
}

func write(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body + "\n"))
}
