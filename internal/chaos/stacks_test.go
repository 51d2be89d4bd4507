//go:build unix

package chaos_test

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// envStacks names the directory a worker writes its goroutines to, as
// <identity>.stacks, when it gets SIGUSR1: for a failure that says not only
// where work is stuck in the database but where its runs wait in the
// process (a run alive, renewing its lease, that never ends).
const envStacks = "LEASEHOLD_CHAOS_STACKS"

// dumpStacksOnSignal starts writing the process's goroutines to dir on
// every SIGUSR1, when dir is set.
func dumpStacksOnSignal(dir, id string) {
	if dir == "" || id == "" {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for range sig {
			buf := make([]byte, 16<<20)
			buf = buf[:runtime.Stack(buf, true)]
			tmp := filepath.Join(dir, id+".tmp")
			if os.WriteFile(tmp, buf, 0o600) == nil {
				_ = os.Rename(tmp, filepath.Join(dir, id+".stacks"))
			}
		}
	}()
}

// stacks asks every live worker for its goroutines and summarizes those
// that run leasehold's or the workers' code, grouped by where they wait.
func (c *cluster) stacks() string {
	if c.stacksDir == "" {
		return "(no stacks directory)"
	}
	var asked []*proc
	for _, p := range c.procs() {
		select {
		case <-p.exited:
			continue
		default:
		}
		_ = os.Remove(filepath.Join(c.stacksDir, p.id+".stacks"))
		if p.cmd.Process.Signal(syscall.SIGUSR1) == nil {
			asked = append(asked, p)
		}
	}
	var b strings.Builder
	for _, p := range asked {
		path := filepath.Join(c.stacksDir, p.id+".stacks")
		var dump []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			var err error
			if dump, err = os.ReadFile(path); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond) // the worker writes the file when its signal handler runs; nothing to wait on
		}
		fmt.Fprintf(&b, "\n--- goroutines of %s in leasehold or the worker's code, by where they wait ---\n%s", p.id, summarizeStacks(string(dump)))
	}
	return b.String()
}

// summarizeStacks groups a runtime.Stack dump's goroutines that have a
// frame of this module by their state and function frames, most first.
func summarizeStacks(dump string) string {
	if dump == "" {
		return "(no dump)\n"
	}
	type group struct {
		key string
		n   int
	}
	counts := map[string]int{}
	for _, g := range strings.Split(dump, "\n\n") {
		lines := strings.Split(strings.TrimSpace(g), "\n")
		if len(lines) < 2 || !strings.Contains(g, "github.com/leasehold/leasehold/") {
			continue
		}
		state := lines[0]
		if i, j := strings.Index(state, "["), strings.Index(state, "]"); i >= 0 && j > i {
			state = strings.SplitN(state[i+1:j], ",", 2)[0]
		}
		var frames []string
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "created by") {
				if i := strings.LastIndex(l, "("); i > 0 {
					l = l[:i]
				}
				frames = append(frames, "    "+strings.TrimPrefix(l, "github.com/leasehold/leasehold/"))
			}
			if len(frames) == 14 {
				break
			}
		}
		counts["["+state+"]\n"+strings.Join(frames, "\n")]++
	}
	var groups []group
	for k, n := range counts {
		groups = append(groups, group{k, n})
	}
	slices.SortFunc(groups, func(a, b group) int { return b.n - a.n })
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%d × %s\n", g.n, g.key)
	}
	return b.String()
}

// The summary keeps this module's goroutines, grouped, with their frames.
func TestSummarizeStacks(t *testing.T) {
	buf := make([]byte, 1<<20)
	sum := summarizeStacks(string(buf[:runtime.Stack(buf, true)]))
	require.Contains(t, sum, "internal/chaos_test.TestSummarizeStacks")
	require.Regexp(t, `(?m)^1 × \[running\]`, sum)
	require.Equal(t, "(no dump)\n", summarizeStacks(""))
}
