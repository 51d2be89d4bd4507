package main

// equivalents lists the generated mutants that survive the tests because
// they cannot change an outcome, each with the reason. A mutant listed here
// is not counted as guarantee-breaking; every other survivor is, and must be
// killed by a test. Keys are generated IDs (<dialect>:<statement>:<op>#<n>).
var equivalents = map[string]string{
	"sqlite:RetryEpisodeClaim:drop#2": "RetryEpisode's third statement, in the same BEGIN IMMEDIATE transaction, " +
		"re-checks the claim's owner and fence (EXISTS ... c.fence = @fence) and rolls the whole retry back when " +
		"they do not match, so a stale token's release of the live claim never commits",
	"sqlite:ListNodes:drop#1": "an operator read (leasehold nodes ls, the dashboard): it counts the leases each node " +
		"holds for display; no grant, finish or recovery decision reads it",
}
