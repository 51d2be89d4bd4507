// Package handover benchmarks how soon another node takes over a node's
// running episodes: after a graceful Drain (claims released in one
// statement, taken by the next sweep) versus after SIGKILL (leases must
// expire first). The node that leaves runs in a separate OS process, the
// test binary re-executed as a worker. It has no non-test code.
package handover
