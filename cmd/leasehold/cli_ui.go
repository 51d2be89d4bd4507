package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/ui"
)

// The variables `leasehold ui` reads basic-auth credentials from: never
// flags, which every user of the machine can read in the process list.
const (
	uiUserEnv     = "LEASEHOLD_UI_USER"
	uiPasswordEnv = "LEASEHOLD_UI_PASSWORD"
)

// uiShutdownGrace bounds how long open requests may finish after SIGINT
// or SIGTERM.
const uiShutdownGrace = 5 * time.Second

func uiCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	rawURL := urlFlag(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on; one that is not loopback needs "+uiUserEnv+" and "+uiPasswordEnv)
	prefix := fs.String("prefix", "", "path prefix to serve under, such as /leasehold (behind a proxy)")
	readOnly := fs.Bool("read-only", false, "hide cancel and retry and refuse them")
	poll := fs.Duration("poll", 3*time.Second, "how often open pages refresh their live parts; 0 turns live updates off")
	silentAfter := fs.Duration("silent-after", 15*time.Second, "mark a node silent (maybe dead) when its last heartbeat is older than this, on the database clock")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM file), with -tls-key")
	tlsKey := fs.String("tls-key", "", "the private key (PEM file) of -tls-cert")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold ui [-url URL] [-listen ADDR] [-prefix /PATH] [-read-only] [-poll D]")
		fmt.Fprintln(w, "                    [-silent-after D] [-tls-cert FILE -tls-key FILE]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Serves the web dashboard until interrupted: nodes with their heartbeat age and")
		fmt.Fprintln(w, "leases, episode counts and charts (completed, failed, retried, taken over,")
		fmt.Fprintln(w, "takeover latency), the episode list with filters, each episode's timeline of")
		fmt.Fprintln(w, "grants with its journal, workflows and findings; and cancel and retry (the")
		fmt.Fprintln(w, "statements of 'leasehold episodes cancel|retry'), each behind a confirmation")
		fmt.Fprintln(w, "page and a CSRF token, unless -read-only. Every read is a named statement of")
		fmt.Fprintln(w, "sql/queries/<dialect>/dashboard.sql that locks nothing.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Security: it listens on loopback unless told otherwise, and refuses any other")
		fmt.Fprintf(w, "address unless %s and %s are set (HTTP basic auth, checked on\n", uiUserEnv, uiPasswordEnv)
		fmt.Fprintln(w, "every request; credentials are never read from flags). Basic auth sends the")
		fmt.Fprintln(w, "password with every request: beyond loopback, use -tls-cert/-tls-key or a TLS proxy.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	const cmd = "ui"
	pos, code, ok := parseArgs(fs, cmd, args, stdout, stderr)
	if !ok {
		return code
	}
	if err := noArgs(pos); err != nil {
		return exitCode(stderr, cmd, err)
	}
	user, password := os.Getenv(uiUserEnv), os.Getenv(uiPasswordEnv)
	switch {
	case (user == "") != (password == ""):
		return exitCode(stderr, cmd, usagef("set both %s and %s, or neither", uiUserEnv, uiPasswordEnv))
	case (*tlsCert == "") != (*tlsKey == ""):
		return exitCode(stderr, cmd, usagef("-tls-cert and -tls-key go together"))
	case *poll < 0:
		return exitCode(stderr, cmd, usagef("-poll must not be negative, got %v", *poll))
	case *silentAfter <= 0:
		return exitCode(stderr, cmd, usagef("-silent-after must be positive, got %v", *silentAfter))
	}
	if err := ui.CheckPrefix(*prefix); err != nil {
		return exitCode(stderr, cmd, usagef("-prefix: %v", strings.TrimPrefix(err.Error(), "ui: ")))
	}
	cfg := ui.Config{Prefix: *prefix, ReadOnly: *readOnly, PollInterval: *poll, NodeSilentAfter: *silentAfter, SecureCookie: *tlsCert != "",
		Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	if *poll == 0 {
		cfg.PollInterval = -1
	}
	operator := cliNodeID()
	cfg.Operator = func(*http.Request) string { return "ui@" + operator }
	if user != "" {
		cfg.Authorize = ui.BasicAuth(user, password, "leasehold")
		cfg.Operator = func(r *http.Request) string {
			u, _, _ := r.BasicAuth()
			return "ui:" + u + "@" + operator
		}
	}
	if err := ui.CheckListen(*listen, cfg.Authorize != nil); err != nil {
		if errors.Is(err, ui.ErrOpenListen) {
			err = usagef("-listen %s is not loopback: set %s and %s to require basic auth (never on the command line)", *listen, uiUserEnv, uiPasswordEnv)
		} else {
			err = usagef("%v", err)
		}
		return exitCode(stderr, cmd, err)
	}
	conn, err := openChecked(ctx, *rawURL, stderr, cmd)
	if err != nil {
		return exitCode(stderr, cmd, err)
	}
	defer conn.close()
	store, ok := conn.store.(ui.Store)
	if !ok {
		return exitCode(stderr, cmd, fmt.Errorf("the %s adapter does not implement the dashboard's reads", conn.dialect))
	}
	h, err := ui.New(store, cfg)
	if err != nil {
		return exitCode(stderr, cmd, usagef("%v", err))
	}
	mux := http.NewServeMux()
	mux.Handle(cfg.Prefix+"/", h)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return exitCode(stderr, cmd, fmt.Errorf("listen on %s: %w", *listen, err))
	}
	srv := &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	}
	mode := "cancel and retry enabled"
	if *readOnly {
		mode = "read-only"
	}
	auth := "no authentication (loopback only)"
	if cfg.Authorize != nil {
		auth = "basic auth as " + user
	}
	fmt.Fprintf(stdout, "leasehold ui: serving %s://%s%s/ for %s (%s; %s); Ctrl-C stops it\n",
		scheme, ln.Addr(), cfg.Prefix, conn.where, mode, auth)
	served := make(chan error, 1)
	go func() {
		if *tlsCert != "" {
			served <- srv.ServeTLS(ln, *tlsCert, *tlsKey)
		} else {
			served <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return exitCode(stderr, cmd, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uiShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return exitCode(stderr, cmd, fmt.Errorf("shut down: %w", err))
	}
	fmt.Fprintln(stdout, "leasehold ui: stopped")
	return 0
}
