package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// sessionCookie names the cookie that carries the browser's session ID;
// the CSRF token of its forms is derived from it.
const sessionCookie = "leasehold_ui_session"

// csrfField is the form field that carries the token.
const csrfField = "csrf"

// csrf issues and checks the per-session tokens of the dashboard's forms.
// A session is a random ID in a cookie (HttpOnly, SameSite=Strict, scoped
// to the dashboard's path); its token is HMAC-SHA256(secret, ID). A POST
// passes only with a session cookie and the token that belongs to it in
// the form, so another site can neither read the token nor forge one, and
// a planted cookie without the secret yields no valid token.
type csrf struct {
	secret []byte
	path   string
	secure bool
}

// session returns the request's session ID, setting a new session cookie
// on w when it carries none (or a malformed one).
func (c csrf) session(w http.ResponseWriter, r *http.Request) (string, error) {
	if ck, err := r.Cookie(sessionCookie); err == nil && validSessionID(ck.Value) {
		return ck.Value, nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("ui: draw a session ID: %w", err)
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: c.path, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.secure || r.TLS != nil,
	})
	return id, nil
}

func validSessionID(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// token is the CSRF token of session id.
func (c csrf) token(id string) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte("leasehold-ui csrf\x00"))
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// check reports whether r carries a session cookie and, in its form, the
// token of that session.
func (c csrf) check(r *http.Request) error {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || !validSessionID(ck.Value) {
		return errors.New("no dashboard session cookie: reload the page and try again")
	}
	got := r.PostFormValue(csrfField)
	if got == "" || !hmac.Equal([]byte(got), []byte(c.token(ck.Value))) {
		return errors.New("the form's CSRF token does not match this session: reload the page and try again")
	}
	return nil
}

// BasicAuth returns an Authorize function that admits requests carrying
// HTTP basic-auth credentials equal to user and password (compared in
// constant time), and answers every other request 401 with a challenge
// for realm. Basic auth sends the password with every request: serve the
// dashboard over TLS (or behind a TLS proxy) anywhere but loopback.
func BasicAuth(user, password, realm string) func(w http.ResponseWriter, r *http.Request) bool {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	challenge := "Basic realm=" + strconv.Quote(realm) + ", charset=\"UTF-8\""
	return func(w http.ResponseWriter, r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		if ok && userOK&passOK == 1 {
			return true
		}
		w.Header().Set("WWW-Authenticate", challenge)
		http.Error(w, "leasehold ui: authentication required", http.StatusUnauthorized)
		return false
	}
}

// ErrOpenListen is CheckListen's refusal.
var ErrOpenListen = errors.New("ui: refusing to serve the dashboard beyond loopback without authentication")

// CheckListen refuses (ErrOpenListen) to serve the dashboard on a listen
// address other than loopback unless authenticated is true (an Authorize
// hook, such as BasicAuth, is configured). Loopback is a host that is a
// loopback IP (127.0.0.0/8, ::1) or "localhost"; an empty host (":8080")
// listens on every interface and is refused like any other.
func CheckListen(addr string, authenticated bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("ui: listen address %q: %w", addr, err)
	}
	if authenticated || IsLoopback(host) {
		return nil
	}
	what := strconv.Quote(host)
	if host == "" {
		what = "every interface"
	}
	return fmt.Errorf("%w: %q listens on %s", ErrOpenListen, addr, what)
}

// IsLoopback reports whether host (as in a listen address, without port)
// names only the loopback interface.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}
