//go:build !unix

package sqlite

// turnFile is not available here: the processes on a database file have
// no turn (see turn), only each its write gate and SQLite's busy handler.
type turnFile struct{}

func openTurnFile(string) *turnFile { return nil }

func (*turnFile) try(int64) bool           { return true }
func (*turnFile) share(int64)              {}
func (*turnFile) drop(int64)               {}
func (*turnFile) heldElsewhere(int64) bool { return false }
