package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// Environment of the child processes of TestAcquireRaceAcrossProcesses.
const (
	childDBEnv    = "LEASEHOLD_SQLITE_CHILD_DB"
	childOwnerEnv = "LEASEHOLD_SQLITE_CHILD_OWNER"
	childKeys     = 150
)

// Real processes, each with its own pool on one file (they migrate it
// together, too), race Acquire over the same keys, in the same order:
// every key is granted exactly once, to the owner the row names.
func TestAcquireRaceAcrossProcesses(t *testing.T) {
	if os.Getenv(childDBEnv) != "" {
		t.Skip("child process")
	}
	t.Parallel()
	path := sqlitetest.Path(t)
	exe, err := os.Executable()
	require.NoError(t, err)

	const procs = 3
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins = map[string][]string{}
	)
	for p := range procs {
		owner := fmt.Sprintf("proc-%d", p)
		cmd := exec.CommandContext(t.Context(), exe, "-test.run=^TestAcquireRaceChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childDBEnv+"="+path, childOwnerEnv+"="+owner)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if key, ok := strings.CutPrefix(sc.Text(), "WON "); ok {
					mu.Lock()
					wins[key] = append(wins[key], owner)
					mu.Unlock()
				} else {
					t.Logf("%s: %s", owner, sc.Text()) // the child's test output: why it failed
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("%s: %v", owner, err)
			}
		})
	}
	wg.Wait()
	require.Len(t, wins, childKeys)
	db := sqlitetest.OpenUnmigrated(t, path)
	for key, owners := range wins {
		require.Len(t, owners, 1, "key %s granted to %v", key, owners)
		var owner string
		var fence int64
		require.NoError(t, db.QueryRow(`SELECT owner_node, fence FROM leasehold_work_claims WHERE dedupe_key = ?`, key).Scan(&owner, &fence))
		require.Equal(t, owners[0], owner, key)
		require.EqualValues(t, 1, fence, key)
	}
}

// TestAcquireRaceChild is the child of TestAcquireRaceAcrossProcesses.
func TestAcquireRaceChild(t *testing.T) {
	path := os.Getenv(childDBEnv)
	if path == "" {
		t.Skip("run by TestAcquireRaceAcrossProcesses")
	}
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, sqlite.Migrate(ctx, db))
	s, owner := sqlite.New(db), os.Getenv(childOwnerEnv)
	for i := range childKeys {
		key := fmt.Sprintf("key-%d", i)
		// ErrRetryable is the answer to a write lock that stayed busy
		// past its bound (three processes and a loaded host): the caller
		// asks again, as the runner does. The grant is still one per key.
		var err error
		for try := 0; try == 0 || errors.Is(err, claims.ErrRetryable) && try < 5; try++ {
			_, err = s.Acquire(ctx, claims.AcquireParams{Key: key, Owner: owner, Lease: time.Minute})
		}
		switch {
		case err == nil:
			fmt.Printf("WON %s\n", key)
		case errors.Is(err, claims.ErrBusy):
		default:
			t.Fatalf("%s: %v", key, err)
		}
	}
}
