// Package sqlite is leasehold's SQLite adapter, on modernc.org/sqlite (pure
// Go, no cgo; driver name "sqlite"): it implements the stores the core
// packages declare (claims.Store, membership.Store and the rest) on
// database/sql, with the statements sqlc compiled from sql/queries/sqlite
// into package db/sqlitedb. Read the .sql files to audit what it does; the
// only SQL beside them is schema.sql (the schema version CheckSchema reads).
//
// # Clock
//
// The only clock is SQLite's, read inside the deciding statement as
//
//	CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
//
// milliseconds since the Unix epoch, UTC: every time column is an INTEGER
// of such milliseconds (millisecond resolution, as SQLite's 'subsec' has),
// and callers pass durations in milliseconds, never times. SQLite keeps
// 'now' constant for the whole of one statement, so one statement reads one
// instant, as now() does on Postgres. The clock is the host's: every process
// on the file reads the same one.
//
// # Lock
//
// SQLite has one writer per database file, and its database write lock is
// leasehold's lock. A write statement takes it when it starts and holds it
// to its end (in autocommit) or to COMMIT, so each statement decides on the
// latest committed state with no other writer in between: where Postgres
// relies on row locks (ON CONFLICT, UPDATE, FOR UPDATE, FOR SHARE, SKIP
// LOCKED), the write lock covers every row at once, and the statements say
// so. Open sets _txlock=immediate, so every transaction the Store (or a
// caller, on a pool from Open) begins is BEGIN IMMEDIATE: it holds the write
// lock from its first statement, and an operation that is one statement on
// Postgres may be several statements in one such transaction here, every
// deciding condition (fence, owner, lease against the clock, status) still
// in SQL. Run.Hold's HoldClaim is a fenced no-op write of the claim row, so
// a caller's transaction keeps the lock, and every takeover out, until it
// ends.
//
// The journal is WAL: readers never wait for the writer nor it for them,
// and the processes on one host share the file. Commits are
// synchronous=FULL (a DSN may ask for less), except lease writes', and
// foreign keys are on.
//
// Who gets the write lock. SQLite's busy handler has no queue: every
// waiter polls, sleeping longer the longer it has waited (100 ms between
// polls after the first quarter second), so on a loaded host a process with
// a backlog takes the lock again and again between the others' polls, and
// the oldest waiters starve, lease renewals among them. Measured on
// TestChaosSQLite (4 worker processes, -race, two CPU hogs beside) with the
// write-lock profile (LockProfileEnv): the lock was held 97% of the time;
// renewals waited up to 0.7 s and releases up to 1.4 s, and 46 of 144
// renewals and 62 of 172 releases ran out of time; a failed BEGIN IMMEDIATE
// had waited 1 s at the median, 10.6 s at p99; the lost leases fed 502
// requeues, whose transactions held the lock 30 s of the run's 146; 81
// episodes were still unfinished two minutes after the faults. Beside three
// processes writing in a loop, a renewal waited out the whole busy_timeout
// (TestLeaseWritesLandUnderAFlood). So the pools from Open queue their
// writes themselves, and only one connection on the whole file asks SQLite:
//
//   - The write gate: one queue per process and file (every pool a process
//     opens on the file shares it), in four lanes, each in arrival order:
//     lease writes (RenewClaim(s), ReleaseClaim(s), so renewals, releases
//     and a drain's hand-over), then takeovers (recovery's RequeueOrphan(s)
//     and ClaimForRecovery: orphaned work on its way to a live node, in a
//     sweep's bounded batches), then the writes of
//     work a node holds (journal steps, finishes, retries, Complete, Fail,
//     and every write whose context says it is made on behalf of a held
//     lease, claims.OnBehalf: a caller's transaction begun inside a run),
//     then everything else: new work above all (creations, the pollers'
//     ClaimAvailable), membership, callers' transactions
//     outside a run. Work a node holds goes before work it takes on: when
//     the file cannot serve both, new work waits (and a Fire or a poll
//     fails retryably after busy_timeout) instead of starving the writes
//     that keep running work within its lease (see Overload below). A
//     write outside a transaction runs in a BEGIN IMMEDIATE of its own
//     (what SQLite does in autocommit); a transaction begun with BeginTx
//     holds its place from before its BEGIN IMMEDIATE to its COMMIT or
//     ROLLBACK. A write of a later lane still waiting hands its place to
//     one of an earlier lane. The order is a preference with one bound: a
//     write of held work stands back for takeovers (this process's and the
//     others') for at most a second from when it began, then only lease
//     writes go before it, so nodes whose sweeps run back to back cannot
//     starve a run's journal steps and finish while its lease is renewed
//     (seen as runs that never ended; TestHeldWritesAreNotStarvedByTakeovers:
//     beside three processes flooding takeovers, held writes landed in
//     1.05 s at the median, 1.13 s at most, where before each ran out of
//     busy_timeout).
//   - The turn, across processes: the gate's holder takes an exclusive
//     record lock (fcntl) on one byte of <database>-leasehold-turn before
//     it asks SQLite, and every process with a lease write, a takeover or
//     a write of held work waiting holds a shared lock on that lane's
//     byte, so that the other processes' writes of later lanes wait before
//     they take the turn; a process that just ended its turn waits 3 ms
//     before the next while others wait for one. Waiting for the turn polls every 0.5 ms (lease
//     writes) or 1 ms: a system call, where a try of BEGIN IMMEDIATE is an
//     SQLite statement (234 µs each under -race). The operating system
//     drops the locks of a process that exits or is killed.
//   - SQLite's own busy handler then waits only for writers outside
//     leasehold's pools (another program on the file): each connection's
//     PRAGMA busy_timeout is one try, 10 ms, and the conn tries again.
//
// busy_timeout (BusyTimeout, ten seconds, or the DSN's) bounds the whole
// wait, gate and turn included: a write that did not get the lock fails
// SQLITE_BUSY having applied nothing, reported as claims.ErrRetryable.
// Open's pool has MaxOpenConns connections: each write waiting in the gate
// holds one, and the others serve readers and the earlier lanes. Why not
// fewer, larger transactions or synchronous=NORMAL everywhere: the lock's
// time under -race on a loaded host goes to statements (a journal write
// holds it ~20 ms, a requeue ~50 ms, a poller's batch hand-over of trigger
// requests before migration 00016 ~150 ms) and to COMMIT's fsync (p50 2-8
// ms, seconds at p99 when other processes load the disk), which fewer
// transactions would share and NORMAL would skip at the
// price of the last commits on a power loss: a finish or a grant undone
// would run an episode twice or hand a fence out twice. The gate orders the
// writes but cannot make room that is not there.
//
// Lease writes (renewals and releases, the lease lane) are the exception:
// they commit at synchronous=NORMAL (conn.syncFor; or the DSN's level, if
// lower), so a renewal holds the lock for its statement and not for an
// fsync. A NORMAL commit is lost only with a power loss or an operating
// system crash, never with a process; WAL needs shared memory, so every
// process on the file runs on this host and such a loss ends every
// lease's holder with it, and WAL replays its frames in order, so no later
// durable commit survives without an earlier renewal or release. A renewal
// or release undone there keeps no one running on a lease the database
// forgot: nothing is lost or run twice. What NORMAL cannot save is the wait
// for the holder a lease write finds: its COMMIT at FULL holds the lock
// through its fsync. Beside three processes writing in a loop with two
// CPU hogs, a renewal took up to 0.8-7.7 s in 5 of 8 runs when those
// writers committed at FULL (one holder's fsync) and 23-28 ms at most when
// they committed at NORMAL. A lease must therefore outlast the host's
// fsync at its worst, as it must outlast a pause of the process; the
// default lease (claims.DefaultLease, two minutes) does by far. A DSN may
// set _synchronous=NORMAL for every write where a lost last commit on a
// power loss is acceptable (a run repeated after one): the package then
// never raises it.
//
// The same chaos run with the gate, turn and lanes (two CPU hogs, a quiet
// host otherwise): the lock still held 91-94% of the time; lease writes
// waited 11-19 ms at the median, 135-984 ms at p99; 2-4 of ~250 renewals
// ran out of time; every episode finished, exactly once. Beside the flood
// of three processes, renewals waited 8 ms at the median and 21 ms at
// most.
//
// Takeovers of a departed worker's work still took 6-29 s there, and the
// profile showed why: a sweep requeued its orphans one transaction each,
// and each waited for the lock again (a requeue: ~50 ms held, ~200 ms
// waited on average, the listing and its reads starved of CPU besides), so
// a sweep that met 30 orphans after several workers died took 5-15 s. A
// sweep now hands all its restarts to RequeueOrphans (recovery's
// BatchRequeuer), which runs them in as few transactions as requeueHold
// allows, each orphan in a SAVEPOINT of its own. Measured in the same
// setting (TestChaosSQLite, -race, two CPU hogs): most departures' work was
// another worker's within 2-4 s (lease 2 s, sweep 0.5 s); the slowest took
// 6-8 s in most runs and up to 29 s in one of nine, when the lock stayed
// 90%+ busy with the fire rate's writes (10 triggers/s, more than the file
// keeps up with under -race on two loaded cores). The chaos suite's bound
// for SQLite therefore adds busy_timeout and a sweep: a requeue may wait
// that long for the lock before the next sweep tries again; and make test,
// where other suites share the two cores, reports it without failing
// (6-25 s seen there), while make chaos asserts it.
//
// Overload. When the writes asked of the file exceed what it serves (the
// lock busy 90%+ of the time), something must wait, and it should be new
// work, not the work already running: a journal step or a finish that
// waits past its lease loses the run, recovery requeues it, the repeat
// costs the file the same writes again, and the goodput falls while the
// backlog grows. Before the held lane, journal steps and finishes queued
// in arrival order with every creation, and the pollers' claims and
// dispatches went before them; a client that retries unanswered triggers
// (the chaos driver re-sends each every 3 s) fills that queue without
// bound. Measured with TestChaosSQLite at twice its fire rate (a trigger
// every 50 ms for 30 s, four CPU hogs, -race, a 2 s lease; a deliberate
// overload, several times what the file serves there): with the journal in
// the last lane, its steps waited 1.3-1.4 s at the median in the gate and
// 220-347 of ~720 episodes were done two minutes after the faults; with
// the held lane, 116-119 ms and 392-407; in the default run beside five
// hogs, the slowest takeover fell from 27.8 s to 19.0 s and lost leases
// from 42 to 26. (Those runs predate migration 00016: a poll then claimed
// trigger requests and handed them over in batches of its own; a poll is
// now ClaimAvailable, three set-based statements in one transaction for
// every episode it takes, at most the slots its node reserved.) What the
// lanes cannot do
// is make room: under a sustained overload the backlog stays in the
// database (available, exactly once) until the offered load falls.
//
// A grant's local lease clock (claims.Claim.SetLocalStart) starts when the
// granting statement or transaction held the write lock, not when it was
// sent (Store.grantStart): the grant runs after that instant, on the same
// host's clock, so the database starts the lease no earlier, and the time
// spent queued behind other writers, most of a lease on a loaded host, is
// not taken from the run. A renewal's likewise (claims.Renewed.Start). A
// poll's grants (ClaimAvailable) start their clocks just before the grant
// statement is sent, inside the transaction, so its pick is not taken
// from them either.
//
// A Store bound to a caller's transaction (WithTx) runs an operation of
// several statements inside a SAVEPOINT of it, rolled back to when the
// operation fails, so the caller's transaction goes on without its writes;
// except that a fenced write there that matched no row (FinishEpisode from
// Run.CompleteTx or Run.FailTx, HoldClaim from Run.Hold: the grant is
// gone) dooms the caller's transaction, as an error aborts one on Postgres.
// A failed statement does not end an SQLite transaction, so the Store
// then writes, outside its savepoint, a row of
// leasehold_doomed_transactions (DoomTransaction, migration 00011) whose
// foreign key no row can satisfy and which is DEFERRABLE INITIALLY
// DEFERRED: the COMMIT fails (SQLITE_CONSTRAINT_FOREIGNKEY),
// modernc.org/sqlite rolls the transaction back, and its connection goes
// back to the pool outside any transaction; so a caller that ignores
// claims.ErrLeaseLost and commits lands nothing. It needs foreign keys on
// (Open's DSN); a ROLLBACK TO a savepoint taken before the write undoes it.
// Maintain waits for the write lock (up to busy_timeout) where Postgres
// skips a run whose lock is held, and takes no lock when nothing is due
// (MaintenanceDue).
//
// # Limits
//
// One host, many processes: every process of every node on that host opens
// the same file (a local file system; not a network share, where SQLite's
// locks are unreliable). Nodes on several hosts need Postgres or SQL Server.
//
// There are no per-row locks and no server to end a stuck session: a
// process frozen (SIGSTOP, a hung VM) inside a write transaction, or
// holding the turn, blocks every writer of the file, each of which fails
// claims.ErrRetryable after busy_timeout and retries, until the frozen
// process exits (the operating system releases its locks) or resumes. One
// frozen with a write of an earlier lane waiting holds that lane's byte of
// the turn file: the others' later writes wait for it only while nobody
// takes the turn for 1 s (flagStale), once per process, then go on. Postgres's BoundTransaction and
// its takeovers' own lock_timeout have no equivalent (sql/queries/dialects.go); keep
// transactions short.
//
// There is no LISTEN/NOTIFY: pollers find available episodes on their poll
// interval, as they do on Postgres when a notification is lost.
//
// Migrate (and NewMigrator) serialize the processes migrating one file at
// once with a lock on a file beside it (see migrate.go).
package sqlite
