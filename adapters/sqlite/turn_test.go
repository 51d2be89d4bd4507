//go:build unix

package sqlite_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/internal/testbound"
)

// Environment of the child process of TestFrozenLeaseWaiterStopsNobody.
const frozenTurnEnv = "LEASEHOLD_SQLITE_FROZEN_TURN_FILE"

// A process frozen (SIGSTOP) while it had a lease write waiting keeps the
// lease lane's byte of the turn file locked, and never takes the turn: the
// other processes' writes wait for it only while nobody takes the turn for
// a moment (flagStale, 1 s), then go on, and the later ones do not wait for
// it again. The child here holds that byte and does nothing else.
func TestFrozenLeaseWaiterStopsNobody(t *testing.T) {
	if os.Getenv(frozenTurnEnv) != "" {
		t.Skip("child process")
	}
	t.Parallel()
	path := sqlitetest.Path(t)
	db := sqlitetest.Open(t, path) // creates the turn file beside the database
	_, err := db.ExecContext(t.Context(), `CREATE TABLE w (id INTEGER PRIMARY KEY)`)
	require.NoError(t, err)

	exe, err := os.Executable()
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestFrozenLeaseWaiterChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), frozenTurnEnv+"="+path+sqlite.TurnSuffix)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stop(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "HOLDING" {
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	for i := range 3 {
		start := time.Now()
		_, err := db.ExecContext(t.Context(), `INSERT INTO w DEFAULT VALUES`)
		require.NoError(t, err)
		took := time.Since(start)
		t.Logf("a write beside the frozen lease waiter took %v", took.Round(time.Millisecond))
		bound := testbound.Margin // the first finds the byte stale after sqlite.FlagStale
		if i == 0 {
			bound += sqlite.FlagStale
		}
		require.Less(t, took, bound, "a write waited for a process that will never take the turn")
	}
}

// TestFrozenLeaseWaiterChild holds the lease lane's byte of the turn file,
// shared, as a process with a lease write waiting does, until it is killed.
func TestFrozenLeaseWaiterChild(t *testing.T) {
	file := os.Getenv(frozenTurnEnv)
	if file == "" {
		t.Skip("run by TestFrozenLeaseWaiterStopsNobody")
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	require.NoError(t, err)
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart, Start: sqlite.LeaseLaneByte, Len: 1}
	require.NoError(t, syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk))
	fmt.Println("HOLDING")
	select {} // frozen
}
