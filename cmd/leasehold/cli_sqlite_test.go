package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/workflows"
)

// The SQLite adapter serves every operator command.
var _ cliStore = (*sqlite.Store)(nil)

// The URL forms of a SQLite file.
func TestSQLiteURLForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, path, params string }{
		{"sqlite:///var/lib/app/leasehold.db", "/var/lib/app/leasehold.db", ""},
		{"sqlite:/var/lib/app/leasehold.db", "/var/lib/app/leasehold.db", ""},
		{"sqlite://leasehold.db", "leasehold.db", ""},
		{"sqlite://data/leasehold.db", "data/leasehold.db", ""},
		{"sqlite:data/leasehold.db", "data/leasehold.db", ""},
		{"SQLITE:leasehold.db", "leasehold.db", ""},
		{"file:///var/lib/app/leasehold.db", "/var/lib/app/leasehold.db", ""},
		{"file:leasehold.db", "leasehold.db", ""},
		{"sqlite:///tmp/with%20space.db?_busy_timeout=5000", "/tmp/with space.db", "_busy_timeout=5000"},
	} {
		require.True(t, isSQLiteURL(tc.url), tc.url)
		path, params, err := sqlitePath(tc.url)
		require.NoError(t, err, tc.url)
		require.Equal(t, tc.path, path, tc.url)
		require.Equal(t, tc.params, params, tc.url)
	}
	for _, u := range []string{"postgres://x", "sqlserver://x", "leasehold.db", "/abs/leasehold.db"} {
		require.False(t, isSQLiteURL(u), u)
	}
	for _, tc := range []struct{ url, want string }{
		{"sqlite:", "names no file"},
		{"sqlite://", "names no file"},
		{"sqlite::memory:", "in-memory"},
		{"file:x.db?mode=memory", "in-memory"},
		{"sqlite:%zz", "invalid SQLite URL"},
	} {
		_, _, err := sqlitePath(tc.url)
		require.ErrorContains(t, err, tc.want, tc.url)
		require.ErrorAs(t, err, new(usageError), tc.url)
	}
	p := filepath.Join(t.TempDir(), "a b.db")
	u := sqliteURL(p)
	require.True(t, strings.HasPrefix(u, "sqlite:///"), u)
	back, _, err := sqlitePath(u)
	require.NoError(t, err)
	require.Equal(t, p, back, "sqliteURL and sqlitePath round-trip")
}

// The read commands on a SQLite file that does not exist: exit 3, saying
// to migrate, and no file created. migrate up creates and migrates it; a
// URL that sets what the adapter's guarantees rest on is a usage error.
func TestCLISQLiteSchemaMissing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "new.db")
	u := sqliteURL(path)
	for _, tc := range []struct {
		cmd  string
		args []string
	}{
		{"claims ls", []string{"claims", "ls"}}, {"episodes ls", []string{"episodes", "ls"}}, {"nodes ls", []string{"nodes", "ls"}},
		{"workflows ls", []string{"workflows", "ls"}}, {"sweep", []string{"sweep", "-dry-run"}}, {"ui", []string{"ui", "-listen", "127.0.0.1:0"}},
	} {
		code, out, errOut := runMain(t, append(tc.args, "-url", u)...)
		require.Equal(t, 3, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out, "%v", tc.args)
		require.Equal(t, "leasehold "+tc.cmd+": leasehold schema not found: there is no SQLite file "+path+
			": run `leasehold migrate up` to create it\n", errOut, "%v", tc.args)
	}
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "a read created the file")

	// An existing file without the schema: the same exit code, nothing written.
	empty := filepath.Join(t.TempDir(), "empty.db")
	sqlitetest.OpenUnmigrated(t, empty)
	code, out, errOut := runMain(t, "episodes", "ls", "-url", "sqlite:"+empty)
	require.Equal(t, 3, code, errOut)
	require.Empty(t, out)
	require.Equal(t, "leasehold episodes ls: leasehold schema not found in SQLite file "+empty+": run `leasehold migrate up`\n", errOut)

	code, out, errOut = runMain(t, "migrate", "up", "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^applied 1 00001_leasehold_init\.sql `, out)
	code, out, errOut = runMain(t, "migrate", "up", "-url", "file://"+path)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "nothing to apply: the schema is current\n", out)
	code, out, errOut = runMain(t, "migrate", "status", "-url", "sqlite:"+path)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^1\s+00001_leasehold_init\.sql\s+applied\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s*$`, out)
	code, _, errOut = runMain(t, "episodes", "ls", "-url", u)
	require.Equal(t, 0, code, errOut)

	code, _, errOut = runMain(t, "episodes", "ls", "-url", u+"?_txlock=deferred")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "leasehold needs _txlock=immediate")
	code, _, errOut = runMain(t, "claims", "ls", "-url", "sqlite::memory:")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "in-memory")
	code, _, errOut = runMain(t, "claims", "ls", "-url", "mysql://x")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "use postgres://, postgresql://, sqlserver://, sqlite: or file:")
}

// Every operator command on a SQLite file: the same output as on Postgres
// (the commands run no SQL of their own, only the adapter's methods).
func TestCLISQLiteCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := sqlitetest.Path(t)
	db := sqlitetest.Open(t, path)
	store := sqlite.New(db)
	u := sqliteURL(path)

	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-a", Stack: "hatch", Env: "rc", Mode: "full"}))
	c, err := store.CreateEpisode(ctx, episodes.New{ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerEvent,
		DedupeKey: "inv:1", MaxAttempts: 3, Owner: "node-a", Lease: time.Minute, Start: true})
	require.NoError(t, err)
	id := c.Episode.ID
	require.NoError(t, store.AppendStep(ctx, id, c.Claim.Token, 1, json.RawMessage(`{"step":1}`), time.Minute))
	wf, created, err := store.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "report", Subject: "c-1", Env: "rc"})
	require.NoError(t, err)
	require.True(t, created)

	code, out, errOut := runMain(t, "nodes", "ls", "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^node-a\s+hatch\s+rc\s+full\s+false\s+\S+\s+\S+ ago\s+1$`, out)

	code, out, errOut = runMain(t, "claims", "ls", "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "inv:1")

	code, out, errOut = runMain(t, "episodes", "ls", "-url", u, "-json")
	require.Equal(t, 0, code, errOut)
	var eps []episodeJSON
	require.NoError(t, json.Unmarshal([]byte(out), &eps), out)
	require.Len(t, eps, 1)
	require.Equal(t, id, eps[0].ID)
	require.Equal(t, "running", eps[0].Status)

	code, out, errOut = runMain(t, "episodes", "show", strconv.FormatInt(id, 10), "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "inv:1")
	require.Contains(t, out, `{"step":1}`)

	code, out, errOut = runMain(t, "workflows", "ls", "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^`+strconv.FormatInt(wf, 10)+`\s+report\s+-\s+c-1\s+running`, out)

	sqlitetest.ExpireClaim(t, db, "inv:1")
	sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET started_at = started_at - 3600000 WHERE id = ?`, id)
	code, out, errOut = runMain(t, "sweep", "-dry-run", "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, strconv.FormatInt(id, 10))

	code, out, errOut = runMain(t, "episodes", "cancel", strconv.FormatInt(id, 10), "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "canceled")
	e, err := store.GetEpisode(ctx, id)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusCanceled, e.Status)
	_, err = store.Acquire(ctx, claims.AcquireParams{Key: "job", Owner: "node-a", Lease: time.Minute})
	require.NoError(t, err)
}

// TestCLIUIServesSQLite: the dashboard serves a SQLite file.
func TestCLIUIServesSQLite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := sqlitetest.Path(t)
	store := sqlite.New(sqlitetest.Open(t, path))
	_, err := store.CreateEpisode(ctx, episodes.New{ActorID: "billing", ExpectationID: "charge", TriggerType: episodes.TriggerEvent,
		DedupeKey: "inv:ui", MaxAttempts: 3, Owner: "node-a", Lease: time.Minute, Start: true})
	require.NoError(t, err)

	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- uiCmd(ctx, []string{"-url", sqliteURL(path), "-listen", "127.0.0.1:0", "-read-only"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+/) for SQLite file `)
	var base string
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(stdout.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 20*time.Second, 20*time.Millisecond, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	for _, page := range []string{"", "episodes", "episodes?key=inv"} {
		res, err := http.Get(base + page)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", page, body)
		if strings.HasPrefix(page, "episodes") {
			require.Contains(t, string(body), "inv:ui", page)
		}
	}
	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("leasehold ui did not stop")
	}
}
