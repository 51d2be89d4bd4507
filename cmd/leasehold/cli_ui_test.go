package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer written by the command's goroutine and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCLIUIRefusesOpenListen: an address beyond loopback needs credentials
// from the environment; every refusal is one usage line and exit 2, and
// none reaches a database.
func TestCLIUIRefusesOpenListen(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	t.Setenv(uiUserEnv, "")
	t.Setenv(uiPasswordEnv, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ui", "-listen", "0.0.0.0:8080"}, "leasehold ui: -listen 0.0.0.0:8080 is not loopback: set LEASEHOLD_UI_USER and LEASEHOLD_UI_PASSWORD to require basic auth (never on the command line)"},
		{[]string{"ui", "-listen", ":8080"}, "leasehold ui: -listen :8080 is not loopback: set LEASEHOLD_UI_USER and LEASEHOLD_UI_PASSWORD to require basic auth (never on the command line)"},
		{[]string{"ui", "-listen", "nonsense"}, `leasehold ui: ui: listen address "nonsense": address nonsense: missing port in address`},
		{[]string{"ui", "-prefix", "admin"}, `leasehold ui: -prefix: prefix "admin" must start with / and not end with one ("" is the root)`},
		{[]string{"ui", "-tls-cert", "c.pem"}, "leasehold ui: -tls-cert and -tls-key go together"},
		{[]string{"ui", "-poll", "-1s"}, "leasehold ui: -poll must not be negative, got -1s"},
		{[]string{"ui", "extra"}, "leasehold ui: unexpected arguments: extra"},
		{[]string{"ui", "-password", "x"}, "leasehold ui: flag provided but not defined: -password"},
	} {
		code, out, errOut := runMain(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out, "%v", tc.args)
		require.Equal(t, tc.want+"\n", errOut, "%v", tc.args)
	}
	t.Setenv(uiUserEnv, "ops")
	code, _, errOut := runMain(t, "ui", "-listen", "0.0.0.0:8080")
	require.Equal(t, 2, code)
	require.Equal(t, "leasehold ui: set both LEASEHOLD_UI_USER and LEASEHOLD_UI_PASSWORD, or neither\n", errOut)
}

// TestCLIUIServes: with credentials in the environment, `leasehold ui`
// serves the dashboard behind basic auth, on any address, and stops on
// its context's end (SIGINT, SIGTERM).
func TestCLIUIServes(t *testing.T) {
	_, url, _ := cliSchema(t)
	t.Setenv(uiUserEnv, "ops")
	t.Setenv(uiPasswordEnv, "pass word")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- uiCmd(ctx, []string{"-url", url, "-listen", "127.0.0.1:0", "-prefix", "/lh", "-read-only"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+/lh/) `)
	var base string
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(stdout.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 20*time.Second, 20*time.Millisecond, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "read-only; basic auth as ops")

	res, err := http.Get(base)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	req, _ := http.NewRequest(http.MethodGet, base+"episodes", nil)
	req.SetBasicAuth("ops", "pass word")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), `id="read-only"`)
	require.True(t, strings.Contains(string(body), `href="/lh/episodes`), "links carry the prefix")

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("leasehold ui did not stop")
	}
	require.Contains(t, stdout.String(), "leasehold ui: stopped")
}

// TestCLIUIRequiresSchema: like the other database commands, ui refuses a
// schema without leasehold's migrations (exit 3) before it listens.
func TestCLIUIRequiresSchema(t *testing.T) {
	name, _ := emptySchema(t)
	code, out, errOut := runMain(t, "ui", "-url", schemaURL(name), "-listen", "127.0.0.1:0")
	require.Equal(t, 3, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "leasehold migrate up")
}
