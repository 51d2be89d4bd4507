// Package chaos is leasehold's multi-process chaos suite. It has no
// non-test code: the suite is TestChaos (Postgres) and TestChaosSQLite (one
// SQLite file, process faults only; see On SQLite below), run by `go test
// ./...` in a short version (about 20 s and 15 s of faults) and by `make
// chaos` (CHAOS=1) in a long one.
//
// # Setup
//
//	 test process                                    throwaway Postgres
//	┌────────────────────────────────────────┐      (initdb + pg_ctl on a free
//	│ driver ── "fire <trigger>" on stdin ──┐│       port, in a temp dir; never
//	│ fault schedule (seeded)               ││       the shared server on 5432)
//	│ takeover watchers, invariant checks ──┼┼──────────────► :port
//	│ proxy 0 … proxy K-1 (one per worker) ◄┼┼──┐             ▲
//	└───────────────────────────────────────┼┘  │             │ forwarded
//	                                        ▼   │             │
//	 worker-<slot>-<generation> × K: this test binary re-executed, each a
//	 runner.Node (lease 2 s, default heartbeat) with one actor, a
//	 recovery.Sweeper (every 500 ms), and its pool pointed at its own proxy
//
// The worker's actor is an event-triggered expectation with recovery policy
// restart. Its strategy sleeps 20–60 ms in each of three steps (so a
// fault finds a few episodes in flight on every worker; one run in 20 sleeps
// 1.25 leases in its second step instead, as a call outside the database
// would, which only the run's local deadline can stop during a fault) and
// in a fourth writes its side effect and ends the run through the public
// API alone, in one transaction of its own: Run.Hold (leasehold_hold,
// migration 00009, locks the claim row and refuses a grant that is not the
// current one), a plain insert of one row into the test-only ledger table
// (chaos.sql, InsertLedger), Run.CompleteTx (the fenced FinishEpisode), and
// COMMIT. A stolen grant's transaction commits neither, so the ledger
// holds exactly one row per episode by construction (it has no unique
// constraint, so a second row would show); every insert that lands is also
// appended to ledger_writes, the audit of who wrote when. Every return of Init or Step
// is printed with its wall-clock instant and its grant (claim key, fence),
// and a test-only trigger on leasehold_work_claims records in grant_ends the
// database's end (lease_until) of every grant that a later grant superseded;
// the two are compared after the run (same machine, one clock).
//
// Work flows: every worker runs the trigger-request poller (woken by
// NOTIFY), so an episode whose trigger finds no free slot on its worker is
// created available and taken by a worker with one; one attempt in 12 (of
// an episode's first two) fails its first step transiently and is retried
// (RetryPolicy, 50 ms backoff doubling to 400 ms) on whichever worker has a
// slot then. The report gives the done episodes per worker slot and the
// attempts retried.
//
// # Faults
//
// For a bounded time the driver fires triggers continuously (each on two
// live workers, one in four on a single worker, as an HTTP handler would;
// unanswered ones are sent again until some worker's Fire returns) and, on
// a seeded schedule, injects:
//
//   - SIGKILL of a random worker, restarted at once under a new identity;
//   - SIGTERM of a random worker (it drains: node.Drain with a 1 s timeout),
//     restarted once it has exited;
//   - one restart of the Postgres server (pg_ctl restart -m fast);
//   - one cut of a worker's database link for twice its lease: its proxy
//     holds every byte in both directions and delivers them when the cut
//     heals, so the cut-off worker's writes reach Postgres late, after its
//     leases were taken over;
//   - slow answers (one phase, a few with CHAOS=1): for 1.5 leases every
//     byte from the server to one worker is delivered half a lease late, in
//     order, while its own bytes reach the server at once, so its grants
//     (episode creation, recovery claims) and renewals land on the database
//     half a lease before it learns of them; the first phase (every other
//     one with CHAOS=1) ends in a cut of twice the lease, so the runs granted
//     under slow answers must stop by their local deadlines alone;
//   - SIGSTOP inside a transaction (one, a few with CHAOS=1): a worker is
//     armed (freeze on stdin), its next finish runs FinishEpisode in its
//     open transaction and says so, and the driver SIGSTOPs it there, with
//     the claim row locked and the connection healthy, for twice the lease,
//     then SIGCONTs it. Only the server's bound on leasehold's transactions
//     (claims.TxBound) can end that transaction.
//
// # Invariants
//
// After the faults stop, every worker is live again, nothing new is fired,
// and the test polls the database until no episode is queued or running.
// Then, from what the database recorded:
//
//   - every trigger acknowledged by a Fire has exactly one episode, and
//     every episode belongs to a fired trigger;
//   - every episode is done;
//   - each episode has exactly one ledger row, for its trigger, whose
//     (owner, fence) is the grant that finished the episode: the claim row
//     (state done), the episode's owner and the fence of its last journal
//     step;
//   - no ledger write and no journal step of a fenced-out grant landed after
//     a later grant's (fences never go back in admission order);
//   - nothing is queued or running, and no claim is claimed or released;
//   - no work is held by a departed worker past its bound: every killed,
//     drained, cut-off or frozen worker's held work (claims it holds, live
//     or expired; claims it released while their episode still ran, for a
//     sweep; trigger requests its poller claimed) was a live worker's (or
//     done) within lease + sweep + poll + testbound.Margin, plus the fault's
//     own length where the worker lived through it (the drain; 2 leases for
//     a cut or a SIGSTOP, whose held bytes or resumed heartbeat reach the
//     database at its end) and a Postgres restart's length and one more
//     sweep where a restart overlapped; on SQLite, plus busy_timeout and a
//     sweep, because the sweep's requeues queue for the file's one write
//     lock behind the live workload and may wait that long before the next
//     sweep tries again (takeoverBound); that SQLite bound is asserted by
//     make chaos (CHAOS=1) and only reported by make test, where other
//     suites share the host and the lock's queue, not the configuration,
//     sets the time (SLOW in the report). The available work
//     it left (queued with a pending request: nobody's, dispatched as slots
//     free) is reported with its time; the final phase bounds it;
//   - every run stopped before its lease ended on the database: for each
//     superseded grant (grant_ends) whose run printed any activity, its last
//     activity minus the old lease_until is negative (the largest, by how
//     the grant ended, is reported). Only what a worker printed counts (a
//     SIGKILLed worker's last lines may be lost, and it stopped anyway); a
//     run its worker was SIGSTOPped through cannot stop itself, so its
//     activity after the SIGSTOP is reported apart, and fencing (above) must
//     reject its writes;
//   - each frozen episode was taken over by another grant within lease +
//     sweep + claims.TxBound + 2 s, finished (done) by a later grant, and
//     the frozen grant's journal steps and ledger writes did not change
//     after SIGCONT (its commit must fail);
//   - no worker process reported a data race;
//   - the claims history is linearizable (next section).
//
// # On SQLite
//
// TestChaosSQLite runs the process faults on the SQLite adapter (issue 21):
// K workers, the same worker code, all opening ONE database file
// (adapters/sqlite: WAL, BEGIN IMMEDIATE for every write transaction,
// busy_timeout), no proxy, no server. For a bounded time (15 s in `go test
// ./...`, 2 min with CHAOS=1) the driver fires triggers (one every 100 ms:
// every write of every worker takes the file's one write lock, and under
// -race on two cores 20 a second already saturate it) and, every
// 0.6–1.5 s, SIGKILLs a random worker (restarted at once under a
// new identity; it may die holding the file's write lock in the middle of a
// transaction, which the kernel then releases and SQLite rolls back) or
// SIGTERMs it (drain, then restart). The worker's backend is the only
// difference: sqlite.New(db) for the node and the sweeper, a poller that
// polls every 200 ms (SQLite has no NOTIFY), and the strategy's transaction
// a *sql.Tx begun on the worker's *sql.DB with the adapter bound to it by
// Store.WithTx(tx): Run.Hold, the ledger insert, Run.CompleteTx, COMMIT.
// The driver reads the file with chaos_sqlite.sql: the statements of
// chaos.sql under the same names in SQLite's dialect (times in
// milliseconds; the ledger_writes row comes from a trigger, SQLite having
// no data-modifying CTE). Every invariant above is checked and reported the
// same way but the frozen-transaction one (a SIGSTOPped holder of SQLite's
// write lock stops every writer of the file, and no server bounds its
// transaction), and the overlap bound is SQLite's clock resolution: 'now'
// is read in whole milliseconds, truncated, so a run whose last activity
// precedes its release by less than 1 ms may show an overlap of up to
// +1 ms; from +1 ms on it is a violation.
//
// # The claims history, judged by porcupine
//
// The invariants above are the project's own. The claims are also judged
// by a checker nobody here wrote: every worker records each claims
// operation it issues (package internal/claimhistory) in its own file,
// LEASEHOLD_CHAOS_HISTORY, one JSON line at the invocation (written before
// the statement is sent, so a SIGKILL leaves it behind as an operation
// with no answer) and one at the response. The node's and the sweeper's
// store is wrapped by recordingStore, which embeds the stores' interface:
// AcquireClaim, RenewClaim(s) (one operation per lease of the heartbeat's
// batch), Complete/Fail/ReleaseClaim, ReleaseClaims (drain), and the
// statements that grant or change a claim with their own work:
// CreateEpisode, ClaimForRecovery and ClaimAvailable (acquires,
// with the fence and lease_until they returned), RequeueOrphan (a
// fence-out), AppendStep (an extension), StartEpisode (a check of a live
// grant), Run.Hold (a fence check that reads no clock), FinishEpisode and
// RetryEpisode (complete or fail, release); Run.CompleteTx is recorded from
// before its FinishEpisode to after COMMIT. An error that is not a definite refusal is recorded as
// unknown: the operation may have taken effect, at any time after its call.
//
// After the invariants, the driver reads every worker's file (the dead
// ones' too), fills in the claim key of operations that named only their
// episode (ClaimKeys), and checks the whole with porcupine against a model
// of one lease per key on the database clock (see internal/claimhistory
// for how operations are placed in time). The report says
// "linearizable: N operations across K keys", with the unknown ones and
// the checker's time; a failure names the keys and writes porcupine's HTML
// visualization to the temp dir, and a failed test keeps the workers'
// history files there too (the log says where). TestFrozenInTransaction
// checks its two workers' history the same way.
//
// The suite prints the faults injected, what they did to the runner's own
// writes (a test-only Store wrapper in the workers reports each journal or
// terminal write that failed and was not retried) and to the workers' logs,
// and the invariants checked with their counts (t.Log; also stdout with
// CHAOS=1). Knobs: CHAOS=1 (long version, 2 min of faults), -chaos.duration,
// -chaos.workers, -chaos.seed (the fault schedule; timing still varies),
// -chaos.every (the trigger rate).
//
// # Rolling deploy
//
// TestRollingDeploy (Postgres) and TestRollingDeploySQLite (issue 31) run
// three worker processes of an application's version A (rolling_worker_test.go:
// billing/charge and billing/legacy, workflow order reserve -> charge ->
// notify) beside version B's trigger_only frontend, under a steady
// workload (charges, refunds, legacy events, orders; sent again when
// unanswered), and replace the A workers one at a time by version B
// (billing/charge and billing/refund; order's last step renamed confirm):
// SIGTERM (drain), SIGKILL, SIGTERM. Refunds fired while only A workers
// run wait, listed by membership.ListWaitingForNode, and run on B; the
// legacy work the last A worker leaves is listed waiting once no live row
// lists billing/legacy, and the test cancels it (Store.CancelEpisode, as
// `leasehold episodes cancel` does). Checked from the database: every
// acknowledged unit of work has one episode (or instance), every episode
// done but the canceled legacy ones, one ledger row per done episode, no
// failed episode whose strategy never ran (rolling_calls journals every
// call), no refund run by an A worker nor an attempt spent without a run,
// every order done by its own version's steps (A's finished on B workers
// by A's recorded definition), no data race, and the claims history
// linearizable; the longest wait of a refund for a capable node is
// reported (database clock). A unit of work every 50 ms (150 ms on
// SQLite; -chaos.every) for 20 s in `go test ./...`, 2 min with CHAOS=1
// (-chaos.duration), plus the wait for the legacy work to be listed.
//
// TestServerRestartDuringStep makes deterministic one case the suite hits
// only by chance: a step's journal write meeting a connection the server
// restart terminated; see its comment. TestFrozenInTransaction does the same
// for a freeze: two workers, one episode, its holder SIGSTOPped inside its
// finish transaction; the other must take it over in time and the frozen one
// write nothing once resumed. TestProxySlowAnswers and
// TestProxyHoldsAndDelivers pin the proxy's two faults.
package chaos
