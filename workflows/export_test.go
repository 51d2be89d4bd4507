package workflows

// FailAfterFinish makes e's advancing transactions fail, after the
// episode's terminal write and before the advance, while f returns an
// error: a crash at the worst moment.
func FailAfterFinish(e *Engine, f func() error) { e.failAfterFinish = f }
