package claims

import "time"

// SetClock replaces the Heartbeat's local monotonic clock, so tests move
// local deadlines instead of sleeping past them.
func (h *Heartbeat) SetClock(now func() time.Time) { h.now = now }
