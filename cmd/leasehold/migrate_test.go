package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// cliHelperEnv carries a child process's CLI arguments, separated by U+001F.
const cliHelperEnv = "LEASEHOLD_TEST_CLI_ARGS"

// TestCLIHelperProcess is not a test: it is the leasehold CLI, run by
// cliProcess in a child process. It waits for one line on stdin, so the
// parent can start every child before any of them runs.
func TestCLIHelperProcess(t *testing.T) {
	args := os.Getenv(cliHelperEnv)
	if args == "" {
		t.Skip("the leasehold CLI in a child process, for the tests that start several")
	}
	os.Stdout.WriteString("ready\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
}

// `leasehold migrate up` run from several shells at once on a fresh schema
// (on which someone ran `migrate status` first, which creates goose's
// version table: without the lock, the processes then race on the first
// migration every time, not only most times): every process exits 0, and
// each migration is applied by exactly one.
func TestCLIMigrateUpConcurrentProcesses(t *testing.T) {
	name, pool := emptySchema(t)
	u := schemaURL(name)
	code, _, errOut := runCLI(t, migrateCmd, "status", "-url", u)
	require.Equal(t, 0, code, errOut)
	const n = 6
	type proc struct {
		cmd            *exec.Cmd
		stdin          interface{ Close() error }
		stdout, stderr bytes.Buffer
		read           chan struct{} // closed once stdout is read to EOF
	}
	procs := make([]*proc, n)
	for i := range procs {
		p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^TestCLIHelperProcess$"), read: make(chan struct{})}
		p.cmd.Env = append(os.Environ(), cliHelperEnv+"="+strings.Join([]string{"migrate", "up", "-url", u}, "\x1f"))
		in, err := p.cmd.StdinPipe()
		require.NoError(t, err)
		p.stdin = in
		out, err := p.cmd.StdoutPipe()
		require.NoError(t, err)
		p.cmd.Stderr = &p.stderr
		require.NoError(t, p.cmd.Start())
		t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		if err != nil {
			_ = p.cmd.Wait()
			require.NoError(t, err, "child %d: %s", i, p.stderr.String())
		}
		require.Equal(t, "ready\n", line)
		go func() { defer close(p.read); _, _ = p.stdout.ReadFrom(r) }()
		procs[i] = p
	}
	for _, p := range procs {
		_ = p.stdin.Close() // go
	}
	applied := map[string]int{}
	appliedRE := regexp.MustCompile(`(?m)^applied (\d+) `)
	for i, p := range procs {
		<-p.read
		err := p.cmd.Wait()
		require.NoError(t, err, "child %d: stderr:\n%s", i, p.stderr.String())
		out := p.stdout.String()
		for _, m := range appliedRE.FindAllStringSubmatch(out, -1) {
			applied[m[1]]++
		}
		if !appliedRE.MatchString(out) {
			require.Contains(t, out, "nothing to apply: the schema is current", "child %d", i)
		}
	}

	_, db := versionTable(t, pool)
	needed, _ := neededVersion(t, db)
	want := map[string]int{}
	rows, err := pool.Query(t.Context(), "SELECT version_id::text, count(*) FROM leasehold_schema_version GROUP BY version_id")
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		V string
		N int
	}, error) {
		var v struct {
			V string
			N int
		}
		return v, r.Scan(&v.V, &v.N)
	})
	require.NoError(t, err)
	for _, g := range got {
		require.Equal(t, 1, g.N, "version %s recorded %d times", g.V, g.N)
		if g.V != "0" {
			want[g.V] = 1
		}
	}
	require.Len(t, want, int(needed), "versions recorded: %v", got)
	require.Equal(t, want, applied, "which process applied what")
}

// A role with no DDL rights (USAGE on the schema and DML on its tables, as
// an application role has) runs `migrate up` on a current schema: exit 0,
// saying there is nothing to do. On a schema that is behind, the error
// names the missing privilege.
func TestCLIMigrateUpWithoutDDLRights(t *testing.T) {
	_, admURL, _ := cliSchema(t)
	schema := searchPathOf(t, admURL)
	role := testRole(t)
	admin := adminPool(t)
	for _, stmt := range []string{
		"GRANT USAGE ON SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + pgx.Identifier{role}.Sanitize(),
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + pgx.Identifier{role}.Sanitize(),
	} {
		_, err := admin.Exec(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	u := roleURL(t, role, schema)

	code, out, errOut := runCLI(t, migrateCmd, "up", "-url", u)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "nothing to apply: the schema is current\n", out)
	require.Empty(t, errOut)

	// Behind by one migration (rolled back by the owner): the role cannot
	// apply it, and the error says which privilege it lacks.
	code, _, errOut = runCLI(t, migrateCmd, "down", "-url", admURL)
	require.Equal(t, 0, code, errOut)
	code, _, errOut = runCLI(t, migrateCmd, "up", "-url", u)
	require.Equal(t, 1, code, errOut)
	// "permission denied for schema" (a CREATE), "must be owner of table"
	// (an ALTER) or "must be owner of index" (a DROP INDEX), depending on
	// what the newest migration does: all 42501.
	require.Regexp(t, `(permission denied for schema `+schema+`|must be owner of (table|index) \w+) \(SQLSTATE 42501\)`, errOut)
}

// A role without USAGE on the schema its search_path names: the error names
// the role, the schema and the missing privilege, and `migrate status` says
// the same, instead of `relation "leasehold_schema_version" does not
// exist`.
func TestCLIMigrateWithoutSchemaUsage(t *testing.T) {
	_, admURL, _ := cliSchema(t)
	schema := searchPathOf(t, admURL)
	role := testRole(t)
	u := roleURL(t, role, schema)
	for _, sub := range []string{"up", "status", "down"} {
		code, out, errOut := runCLI(t, migrateCmd, sub, "-url", u)
		require.Equal(t, 1, code, errOut)
		require.Empty(t, out)
		require.NotContains(t, errOut, "does not exist")
		require.Contains(t, errOut, `role "`+role+`" has no USAGE privilege on schema "`+schema+`"`, sub)
		require.Contains(t, errOut, "GRANT USAGE ON SCHEMA "+pgx.Identifier{schema}.Sanitize(), sub)
	}
}

// searchPathOf is the search_path a schemaURL sets.
func searchPathOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	sp := u.Query().Get("search_path")
	require.NotEmpty(t, sp)
	return sp
}

// adminPool is a pool on the test server as the URL's own user.
func adminPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(t.Context(), pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// testRole creates a LOGIN role with no privileges of its own, dropped
// (with every privilege granted to it) when t ends. The test server trusts
// local connections, so it needs no password.
func testRole(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "lh_test_role_" + hex.EncodeToString(b)
	admin := adminPool(t)
	_, err := admin.Exec(t.Context(), "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgtest.URL())
		if err != nil {
			t.Logf("drop role %s: %v", role, err)
			return
		}
		defer conn.Close(context.Background())
		for _, stmt := range []string{"DROP OWNED BY " + pgx.Identifier{role}.Sanitize(), "DROP ROLE " + pgx.Identifier{role}.Sanitize()} {
			if _, err := conn.Exec(context.Background(), stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	return role
}

// roleURL is the test server's URL as role, with search_path schema.
func roleURL(t *testing.T, role, schema string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	u.User = url.User(role)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
