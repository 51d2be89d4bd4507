//go:build unix

package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pgServer is a throwaway PostgreSQL server of the suite's own, started from
// the local binaries (as scripts/with-postgres.sh does) because the suite
// restarts it: the shared server on 5432 is never touched.
type pgServer struct {
	bindir string              // initdb, pg_ctl and postgres
	dir    string              // temp dir: data/, the socket, the log
	data   string              // the cluster's data directory
	port   int                 // TCP port on 127.0.0.1
	cred   *syscall.Credential // the postgres OS user when we are root
}

// startServer initializes a cluster in a fresh temp dir and starts it on a
// free port. The server is stopped and its directory removed when t ends.
func startServer(t *testing.T) *pgServer {
	t.Helper()
	bindir, err := findPGBindir()
	require.NoError(t, err)
	cred, err := serverUser()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "leasehold-chaos-")
	require.NoError(t, err)
	s := &pgServer{bindir: bindir, dir: dir, data: filepath.Join(dir, "data"), cred: cred}
	t.Cleanup(func() {
		if t.Failed() {
			if log, err := os.ReadFile(s.logPath()); err == nil {
				t.Logf("--- the throwaway server's log (last 8 KiB) ---\n%s", log[max(0, len(log)-8<<10):])
			}
		}
		if err := s.stop(); err != nil {
			t.Logf("chaos: stop throwaway server: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("chaos: remove %s: %v", dir, err)
		}
	})
	if cred != nil {
		require.NoError(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// C locale: stable collation and messages; --no-sync: thrown away anyway.
	out, err := s.run(ctx, "initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	require.NoError(t, err, "initdb (binaries from %s): %s", bindir, out)
	conf := fmt.Sprintf(`
# added by the leasehold chaos suite (throwaway server)
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
`, dir)
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(conf)
	require.NoError(t, errors.Join(err, f.Close()))

	// Another process may take the port between the probe and the bind.
	for attempt := 1; ; attempt++ {
		s.port, err = freePort()
		require.NoError(t, err)
		out, err = s.run(ctx, "pg_ctl", "start", "-D", s.data, "-l", s.logPath(), "-w", "-t", "60", "-o", "-p "+strconv.Itoa(s.port))
		if err == nil {
			return s
		}
		log, _ := os.ReadFile(s.logPath())
		if attempt < 5 && bytes.Contains(log, []byte("Address already in use")) {
			continue
		}
		require.NoError(t, err, "pg_ctl start: %s\nserver log:\n%s", out, log)
	}
}

// URL is the server's address with search_path set to schema.
func (s *pgServer) URL(schema string) string {
	return s.urlAt(s.Addr(), schema)
}

// urlAt is a URL for this server's database reached through addr (a proxy).
func (s *pgServer) urlAt(addr, schema string) string {
	u := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	if schema != "" {
		u += "&search_path=" + schema
	}
	return u
}

// Addr is the server's host:port.
func (s *pgServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// restart stops the server (fast: open sessions are terminated) and starts
// it again on the same port, returning how long it took.
func (s *pgServer) restart(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	out, err := s.run(ctx, "pg_ctl", "restart", "-D", s.data, "-l", s.logPath(), "-m", "fast", "-w", "-t", "60")
	if err != nil {
		return 0, fmt.Errorf("pg_ctl restart: %w: %s", err, out)
	}
	return time.Since(start), nil
}

// stop stops the server if it runs: fast, else immediate.
func (s *pgServer) stop() error {
	if _, err := os.Stat(filepath.Join(s.data, "postmaster.pid")); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.run(ctx, "pg_ctl", "stop", "-D", s.data, "-m", "fast", "-w", "-t", "30"); err == nil {
		return nil
	}
	out, err := s.run(ctx, "pg_ctl", "stop", "-D", s.data, "-m", "immediate", "-w", "-t", "30")
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func (s *pgServer) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// run runs one of the server binaries as the server's OS user, from the
// temp dir (that user may not be able to enter our working directory).
func (s *pgServer) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bindir, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// pg_ctl's postmaster logs to -l and runs in its own session; should it
	// keep our pipe open anyway, do not wait for it forever.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

// findPGBindir finds a directory holding initdb, pg_ctl and postgres:
// pg_config --bindir, the directory of initdb on PATH, then the usual
// install locations, newest version first.
func findPGBindir() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
		candidates = append(candidates, filepath.Dir(p))
	}
	versioned, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versioned, func(i, j int) bool { return pgVersion(versioned[i]) > pgVersion(versioned[j]) })
	candidates = append(candidates, versioned...)
	candidates = append(candidates, "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin")
	for _, dir := range candidates {
		ok := true
		for _, bin := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, bin)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				ok = false
				break
			}
		}
		if ok {
			return dir, nil
		}
	}
	return "", fmt.Errorf("chaos: no PostgreSQL server binaries (initdb, pg_ctl, postgres) found via pg_config, PATH or /usr/lib/postgresql/*/bin; "+
		"the chaos suite restarts its own throwaway server and needs them: install PostgreSQL (apt-get install postgresql); looked in %v", candidates)
}

// pgVersion reads the version out of /usr/lib/postgresql/<version>/bin.
func pgVersion(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

// serverUser returns the credential to run PostgreSQL as: nil unless we are
// root, which PostgreSQL refuses; then the "postgres" user, created if
// missing.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "postgres").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("chaos: running as root and could not create the postgres user to run PostgreSQL as: %w: %s", err, out)
		}
		if u, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("chaos: uid of postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("chaos: gid of postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
