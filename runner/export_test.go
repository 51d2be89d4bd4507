package runner

// SetAfterPoll makes n's poller call f after each poll, before it looks
// ahead for the next due time: the one instant a test cannot reach through
// the store.
func SetAfterPoll(n *Node, f func()) { n.afterPoll.Store(&f) }
