//go:build unix

package sqlite

import (
	"io"
	"os"
	"syscall"
)

// turnFile is a process's handle on a database's turn file (see turn):
// POSIX record locks on single bytes of <database>-leasehold-turn, which
// the operating system releases when the process exits or is killed.
// Locks of one process never conflict with each other, so the queries
// below see the other processes only; and closing any descriptor of the
// file would drop all of the process's locks on it, so the one descriptor
// is opened once per process and never closed.
type turnFile struct{ f *os.File }

func openTurnFile(path string) *turnFile {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil // no turn: the gate and SQLite's busy handler alone
	}
	return &turnFile{f: f}
}

func (t *turnFile) lock(cmd int, typ int16, b int64) (syscall.Flock_t, error) {
	lk := syscall.Flock_t{Type: typ, Whence: io.SeekStart, Start: b, Len: 1}
	err := syscall.FcntlFlock(t.f.Fd(), cmd, &lk)
	return lk, err
}

// try takes byte b exclusively, if no other process holds it.
func (t *turnFile) try(b int64) bool {
	_, err := t.lock(syscall.F_SETLK, syscall.F_WRLCK, b)
	return err == nil
}

// share holds byte b shared (a flag other processes see).
func (t *turnFile) share(b int64) { _, _ = t.lock(syscall.F_SETLK, syscall.F_RDLCK, b) }

// drop releases byte b.
func (t *turnFile) drop(b int64) { _, _ = t.lock(syscall.F_SETLK, syscall.F_UNLCK, b) }

// heldElsewhere reports whether another process holds byte b.
func (t *turnFile) heldElsewhere(b int64) bool {
	lk, err := t.lock(syscall.F_GETLK, syscall.F_WRLCK, b)
	return err == nil && lk.Type != syscall.F_UNLCK
}
