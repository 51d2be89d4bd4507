// Package membership is leasehold's advisory record of the nodes sharing a
// database: identity, stack, env, mode, whether a node is draining, which
// (actor, expectation) pairs it runs, when it started and when it last
// showed life. heartbeat_at is written from the database clock (now() /
// SYSUTCDATETIME()) by the statements in sql/queries/<dialect>/nodes.sql.
//
// Membership decides nothing. Who may run an episode is decided by its work
// claim and fence alone, and which node takes deferred work by the pollers'
// poll (ClaimAvailable), which asks by the pairs the polling node
// runs; a node row can be stale, missing or duplicated after a crash
// without any effect on correctness. Operators read it (leasehold nodes
// ls) and placement may use it as a hint.
//
// # Work no live node can run
//
// During a rolling deploy, work of a pair that no live node runs (an
// expectation only the new version has, or one the new version removed)
// waits queued: no poller asks for it, so nothing starts it or spends its
// attempts. ListWaitingForNode says which work waits that way and for whom,
// from the node rows: a pair waits in an env when an unarchived queued
// episode of it has an open, due trigger request and no node row of that
// env is live (heartbeat within SilentAfter on the database clock, mode
// full, not draining, stack-compatible) and lists the pair. It is a read:
// it locks and changes nothing, and a node that registers the pair claims
// the work on its next poll whatever the read said. `leasehold episodes
// ls|show` and the dashboard show it; maintenance raises a finding for work
// that waited longer than maintenance.Config.WaitingForNodeAfter.
package membership
