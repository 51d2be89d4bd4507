package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// LockProfileEnv names the environment variable that turns the write-lock
// profile on: set to a directory, every process that opens a database with
// Open appends one line per write (a statement outside a transaction, or a
// transaction) to <dir>/lock-<pid>.tsv, as it ends:
//
//	start_unix_us  name  lane  gate_wait_us  turn_wait_us  lock_wait_us  hold_us  commit_us  error
//
// name is the statement's sqlc name (a transaction: "tx:" and the names of
// its statements); lane is "lease", "takeover" or "other" (see lane); gate_wait is
// the wait in this process's queue, turn_wait the wait for the file's turn
// (the other processes' writes), lock_wait SQLite's (BEGIN IMMEDIATE, with
// its busy handler; -1 when the statement ran as it is and its wait is
// part of its hold), hold the time from holding SQLite's write lock to
// giving it back, commit that of its COMMIT (in the hold: with synchronous
// FULL, the fsync); error is "", "busy" (busy_timeout ran out), "ctx" (the
// caller's context ended) or "error". A directory of them is summarized by
//
//	go run ./adapters/sqlite/internal/lockreport DIR
//
// The profile costs one write(2) per line; it is for measuring, not for
// production.
const LockProfileEnv = "LEASEHOLD_SQLITE_LOCK_PROFILE"

// lockProfile appends the lines of one process.
type lockProfile struct {
	mu sync.Mutex
	f  *os.File
}

var (
	profileOnce sync.Once
	profile     *lockProfile
)

// processProfile returns the process's profile, nil when LockProfileEnv is
// unset or its file cannot be opened.
func processProfile() *lockProfile {
	profileOnce.Do(func() {
		dir := os.Getenv(LockProfileEnv)
		if dir == "" {
			return
		}
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("lock-%d.tsv", os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "leasehold: sqlite: %s: %v (no lock profile)\n", LockProfileEnv, err)
			return
		}
		profile = &lockProfile{f: f}
	})
	return profile
}

func (p *lockProfile) record(o *op, end time.Time, err error) {
	lockWait := (o.lockAt.Sub(o.start) - o.gateWait - o.turnWait).Microseconds()
	if o.unsplit {
		lockWait = -1
	}
	class := ""
	switch {
	case err == nil:
	case isRetryable(err):
		class = "busy"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		class = "ctx"
	default:
		class = "error"
	}
	line := fmt.Sprintf("%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", o.start.UnixMicro(), strings.ReplaceAll(o.name, "\t", " "), o.lane,
		o.gateWait.Microseconds(), o.turnWait.Microseconds(), lockWait, end.Sub(o.lockAt).Microseconds(), o.commit.Microseconds(), class)
	p.mu.Lock()
	_, _ = p.f.WriteString(line)
	p.mu.Unlock()
}
