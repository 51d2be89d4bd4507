package workflows

// FailAfterFinish makes e's advancing transactions fail, after the
// episode's terminal write and before the advance, while f returns an
// error: a crash at the worst moment.
func FailAfterFinish(e *Engine, f func() error) { e.failAfterFinish = f }

// BeforeReadRunning runs f in e's Start after its insert lost to a running
// instance and before it reads that instance.
func BeforeReadRunning(e *Engine, f func()) { e.beforeReadRunning = f }
