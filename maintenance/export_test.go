package maintenance

import "time"

// InitialDelay exposes the random delay before a Runner's first run.
func InitialDelay(r *Runner) time.Duration { return r.initialDelay() }
