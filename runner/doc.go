// Package runner runs actors on a cluster of nodes: every node registers the
// same actors and receives the same triggers, and exactly one episode runs
// per trigger, under a work claim, with every step journaled.
//
// # Episode lifecycle and the statement that decides each transition
//
//	trigger on N nodes
//	   │  (schedule ticks: random jitter, default 0–200 ms, spreads the winners;
//	   │   Fire: none unless Config.EventJitter)
//	   ├─ FireOptions.Delay, trigger_only here, or no free slot here ─────┐
//	   ▼  (a free slot is reserved first)                                 ▼
//	CreateEpisode ── no row ──► duplicate        CreateDeferredEpisode ── no row ──► duplicate
//	   │ one node's insert wins (filtered unique    │ one row: the episode queued,
//	   │ index on dedupe_key), and the same         │ unclaimed, due at run_after
//	   │ statement grants it the work claim         │ (database clock): AVAILABLE
//	   │ (its dedupe key, or episode:{id}): no      ▼
//	   │ crash leaves it queued without an owner  ClaimAvailable on any full node with
//	   │                                            │ free slots, reserved before it asks
//	   │                                            │ (SKIP LOCKED / READPAST; due only;
//	   │                                            │ at most the reserved slots): the
//	   │                                            │ work claim granted to that node,
//	   │                                            │ fence + 1, and the episode started
//	   │                                            │ under it, one statement (no
//	   │                                            │ StartEpisode); woken by NOTIFY, a
//	   ▼                                            ▼ slot freeing, or a due time
//	queued, claim held by this node (a slot's, or its slot queue's: recovered
//	   │    work, or Poll.Disabled)
//	   ▼
//	StartEpisode  (fenced: queued → running, owner_node = this node; refuses a
//	   │           grant already expired on the database clock)
//	   ▼
//	Init, then Step … each step: AppendStep (fenced; refreshes last_step_at)
//	   │
//	   ├─ Done ─────────────► FinishEpisode status done,     claim done
//	   ├─ error, retries ───► RetryEpisode (fenced): claim released, the error journaled,
//	   │   left (RetryPolicy)  episode queued as its next attempt and available
//	   │                       again at now() + backoff (run_after), as above
//	   ├─ error / panic ────► FinishEpisode status failed,   class error | panic
//	   ├─ budget ───────────► FinishEpisode status failed,   class budget_exceeded
//	   ├─ Node.Cancel ──────► FinishEpisode status canceled, class canceled
//	   ├─ lease lost ───────► nothing more is written: another grant owns the episode
//	   └─ Node.Drain/Stop ──► ReleaseClaims at the episode's next step boundary (queued
//	                          ones at once, in one statement): the episode stays
//	                          running (or queued) for recovery, and any node takes
//	                          it at once
//
// Attempts: the first run is attempt 1; a restart by recovery or a retry
// starts the next; MaxAttempts bounds both (episodes.Episode.Attempt).
// Permanent errors, panics and exhausted budgets never retry.
//
// Grouped finishing: the runs of one node that end while a terminal write
// is in flight are sent together, in one FinishEpisodes statement (at most
// Config.FinishBatch rows), each row conditioned on its own grant (key,
// owner, fence, claimed) exactly as FinishEpisode; a row that matches
// nothing writes nothing and its run learns ErrLeaseLost, the others
// commit together, and every event is emitted after the commit. The window
// is the previous group's round trip: a lone finish goes out at once. A
// group whose statement fails is sent again row by row, each with the
// single write's bounds.
//
// FinishEpisode writes the episode's terminal status and the claim's final
// state in one statement, so neither lands without the other.
//
// # Fencing
//
// StartEpisode, AppendStep and FinishEpisode each carry the run's claim token
// (key, owner, fence) and check it in the same statement, locking the claim
// row FOR SHARE so that a concurrent steal is ordered before or after the
// write, never around it. A write that matches nothing returns
// claims.ErrLeaseLost: the run stops at once, the strategy's context is
// cancelled, and nothing is overwritten. The heartbeat cancels the context
// too when a renewal shows the lease gone, or when no renewal succeeded
// before the lease's local deadline.
//
// # Clocks
//
// Lease deadlines and every timestamp in the database come from the
// database clock. The node's clock names schedule windows (the planned tick
// in UTC, so skewed nodes still agree on the key), measures the wall-time
// budget of a run it executes, and keeps the heartbeat's local deadline; it
// never grants or extends a lease.
//
// # Where a run's local lease clock starts
//
// A run's lease starts, locally, at the instant just before the statement
// that granted it was sent — CreateEpisode for a trigger this node won,
// ClaimAvailable for available work, ClaimForRecovery for a recovered
// orphan — never when the answer arrives or the run is queued (see package
// claims, "Where the local lease clock starts"). The adapter stamps the
// claim; the heartbeat refuses a claim without a stamp. StartEpisode also
// refuses, in the statement, a grant whose lease already expired on the
// database clock, so a late answer cannot start a run that another node may
// already be stealing. The run's context is cancelled at local start +
// lease - margin unless a renewal succeeded, so the strategy always stops
// before the database could hand the episode to another node.
//
// # What bounds each write
//
// Every write the runner makes (StartEpisode, AppendStep, FinishEpisode,
// releases, membership, the poller's statements) goes through one retry
// loop. A write is sent again only after an error the adapter marked
// claims.ErrRetryable (nothing reached the server — a failed connect, a
// connection found bad before sending — or the server rolled it back: a
// restart, a deadlock, a lock timeout), with jittered backoff, and stops at
// the first of:
//
//	bound                                    applies to
//	---------------------------------------  ----------------------------------
//	Config.WriteTimeout (default 30 s)        every write
//	the lease's local deadline, as renewals   writes on behalf of a run's lease;
//	  move it (Heartbeat.WithLease; one         a short outage is ridden out, a
//	  attempt of at most a lease if the         long one ends the run in time,
//	  lease is no longer held: a release)       and a write queued behind others
//	                                            (SQLite's write lock on a loaded
//	                                            host) keeps its place while the
//	                                            renewals land
//	the drain's hard stop                     every write of the node
//	the poller's intake context               the poller's writes
//
// A write's context never inherits the run's (a run cancelled for its budget
// still records why); the fence alone decides whether it lands. It carries
// claims.TxBound(lease), the server-side bound on the transactions and
// takeover statements the adapter runs for it.
//
// A run stopped because its lease passed its local deadline (no renewal got
// through: the database or this host was too slow) gives its grant back,
// fenced, once it has stopped (giveBack): the episode is then recovery's at
// once instead of after the lease, and the run does not count as an attempt
// (package recovery, "What an attempt is"). A grant taken over or finished
// elsewhere is left alone.
//
// # Drain and readiness under faults
//
// Drain returns by its context's deadline plus Config.DrainGrace (default
// 1 s): writes may go on for half the grace after the deadline, then every
// write of the node is cancelled, and runs that have not returned by the
// end of the grace are reported Abandoned. Each episode is released as soon
// as it reaches a step boundary, not behind the slowest run; DrainSummary
// counts each handed-over episode once as Released, Lost (the grant was
// already gone; the only case that emits lease_lost) or Unreleased (the
// release failed; the lease expires instead).
//
// Readiness is degraded while the last statement that reached for the
// database failed: a lease renewal, or the membership refresh, which runs
// every min(heartbeat interval, 5 s) with that timeout (every retry
// interval while failing) and so probes the database even when the node
// holds nothing. A node cut off is degraded within two such periods, and
// ready again after the first statement that succeeds.
//
// # Dedupe keys
//
// See package dedupe: schedule:{actor}:{expectation}:{window} and
// event:{actor}:{expectation}:{event id or SHA-256 of canonical JSON}.
// Manual runs have no dedupe key and are never deduplicated. A node with an
// env folds it in front: env:{env}:{key}; the unset env leaves keys as they
// are.
//
// # Start
//
// Start refuses a database whose leasehold schema is missing or older than
// the binary (ErrSchema, the one sentinel of every dialect; health.Schema
// serves the same check as a probe), then records the recovery policy and
// max attempts of every registered expectation (PutAgentDefinition), so the
// sweepers of nodes without an actor's code, and the operator CLI, apply
// the policy this node would.
//
// # Modes and available work
//
// Available work is an episode row (schema 16; until then a trigger
// request was a row of its own): status queued, run_after the instant it
// falls due on the database clock, nobody holding a live grant on it, and
// opts, what a trigger_only node passes on. Every kind of available work
// is this one state: a trigger_only node's trigger, an overflow, a delayed
// run, a retry in its backoff, a recovered orphan, an operator's retry.
// One statement (ClaimAvailable) takes them all, and recovery leaves any
// available episode alone (sql/queries/<dialect>/available.sql states the
// invariant that keeps the two apart).
//
// A node with Poll.Disabled takes no available work: deferred, overflowing,
// delayed, retried and recovered episodes run on the nodes that poll, so
// every scope needs at least one polling full node.
//
// Each node has a mode, full (the default), trigger_only or disabled, and
// each actor may override it; both switch at runtime (SetMode,
// SetActorMode, ClearActorMode, ClearActorModes) and are read without a
// lock on the trigger path, so a switch applies from the next trigger.
//
//	trigger on a trigger_only node
//	   ▼
//	CreateDeferredEpisode ── no row ──► duplicate
//	   │ the episode, available, in one statement; an insert trigger
//	   │ NOTIFYs pollers (Postgres)
//	   ▼
//	ClaimAvailable on a full node (SKIP LOCKED / READPAST; only its env, its
//	   │ stack scope and its full actors' pairs; at most the slots it
//	   │ reserved): the episode's work claim granted to this node (fence + 1)
//	   │ and the episode started under that grant, one statement
//	   ▼
//	running under this node's claim, then as above from Init
//
// A poll reserves up to its actor's free slots (PollConfig.Batch at most)
// before it asks, and asks for no more: every episode the statement starts
// here starts in a reserved slot the moment it is running, so running in
// the database means the strategy is being called, and a local trigger
// that finds the slots reserved overflows into available work for the
// nodes with capacity. Slots the poll did not use are given back. After
// each poll the poller asks the database how long until the next available
// episode of its scope falls due (NextAvailableDue: a delayed run, a
// retry's backoff) and sleeps no longer than that, so due work starts at
// its due time on the database clock; the interval is the fallback for
// what nothing wakes it for (on SQLite and SQL Server, which have no
// NOTIFY, another node's new work).
//
// A drain waits for a poll in flight (both take the node's intake), so
// what the poll took starts here and the drain hands it back at its next
// step boundary. A poller that dies after its statement leaves ordinary
// running episodes under its grants, which recovery finds once the leases
// end. Available work waits for a full node however long it takes: expiry
// is opt-in. With PollConfig.TTL (or maintenance's RequestTTL) set,
// available episodes due longer ago than it expire (ExpireAvailable): they
// end canceled, class trigger_expired, and that work never runs unless
// triggered again, so set a TTL only for work that is worthless late. A
// deferred episode is queued without a claim, which recovery never
// mistakes for an orphan.
//
// # Stacks and envs
//
// StackSlug stamps source_stack on episodes; the recovery sweep and the
// poller see their own stack plus unstamped rows ("" sees every stack). Env stamps source_env and is matched by strict
// equality everywhere (recovery, poller, findings), the unset env being its
// own world; FireOptions.Env, recovery.Options.Env and PollConfig.SourceEnv
// target another env for one call or one poller.
//
// # Next: one row per unit of available work (design; issue 32, being built)
//
// This section is the design the available path is being rebuilt to. It is
// written before the code, as the statements' guarantees are; the sections
// above describe what runs today, and each part moves from here to there as
// it lands (all three dialects at once: the model is the schema).
//
// Landed (schema 16): the trigger request is folded into the episode row
// (run_after, opts) and a poll is one statement, ClaimAvailable. An
// available unit now writes five rows where it wrote eight: the episode
// inserted, the work claim inserted (or upserted) and the episode started
// by the poll, and at the end the episode and the claim finished. A River
// job writes one row three times. What remains is the episode's lease, in
// the episode row instead of a claim row:
//
//	leasehold_episodes gains  fence       bigint, 0 until the first grant
//	                          lease_until the grant's expiry (database clock),
//	                                      NULL while nobody holds it
//	                          claimed_at, grant_kind (fresh | handover |
//	                                      recovery | retry | operator)
//	(landed in schema 16)     run_after   when available work falls due
//	                          opts        what a trigger_only node passes on
//
// owner_node already exists. An episode is then in exactly one of:
//
//	available  status queued, lease_until NULL, due at run_after
//	held       status queued or running, owner_node, fence, lease_until
//	           (live while lease_until > now(), on the database clock)
//	ended      a terminal status; nothing can be granted again
//
// and every transition is one UPDATE of that row, decided on its latest
// version under its row lock:
//
//	transition           statement              condition on the locked row
//	-------------------  ---------------------  ----------------------------------
//	trigger, free slot   CreateEpisode          insert wins on dedupe_key; held,
//	                                            running, fence 1: one row
//	trigger, no slot /   CreateDeferredEpisode  insert wins on dedupe_key;
//	  delay / trigger_     (s: COPY-fed batch)  available, run_after = now() + delay
//	  only
//	poll                 ClaimAvailable         SKIP LOCKED pick of due available
//	                                            (or queued with an expired lease)
//	                                            rows of runnable pairs, at most
//	                                            the free slots; then fence + 1,
//	                                            owner, lease, running: the claim
//	                                            and the start in one write
//	step                 AppendStep             (id, owner, fence) and not ended;
//	                                            step row inserted only then
//	heartbeat            RenewEpisodes          (id, fence) pairs still owned
//	finish (grouped)     FinishEpisodes         (id, owner, fence) and not ended
//	retry                RetryEpisode           (id, owner, fence): available,
//	                                            fence + 1, run_after = backoff
//	drain / give back    ReleaseEpisodes        (id, owner, fence): available at
//	                                            once, fence + 1, same attempt
//	orphan               RequeueOrphan          held, lease_until <= now():
//	                                            available, fence + 1, attempt + 1
//	                     ClaimForRecovery       (policy fail) held by the sweeper
//	cancel               CancelEpisode          available: canceled at once;
//	                                            held: cancel requested (as today)
//	caller's tx          HoldEpisode            (id, owner, fence) FOR SHARE in
//	                                            the caller's transaction
//
// A unit of available work then costs three row writes (insert, claim and
// start, finish) and three statements, the poll's and the finish's shared
// by their batches; the local path costs two (its insert holds the grant).
// Each journaled step adds its step row and one update, as today.
//
// What keeps each guarantee:
//
//   - One episode per trigger: the dedupe_key unique index, unchanged.
//   - Fenced writes: the token stays (key, owner, fence), with the episode's
//     id (claims.Token.Episode) naming the row the fence lives on; every
//     write is conditioned on it in the statement, and zero rows is
//     ErrLeaseLost. A row has one fence, so no write can pass between a
//     check on one row and a write on another: the two-row lock order
//     (claim row, then episode row) and RequeueOrphanLock, which exists
//     only to see another row's change, are no longer needed.
//   - Recovery exactly once: a takeover matches only an expired lease on
//     the row's latest version and bumps the fence in the same write; a
//     second sweeper re-checks after the first commits and matches nothing.
//     A queued row whose holder died before starting it is simply
//     available again to ClaimAvailable (fence + 1, no attempt counted);
//     a running one is recovery's, which counts the attempt.
//   - Database clock: every lease_until, run_after and expiry is now() on
//     the server; the local deadline starts before the statement that
//     granted the lease is sent (ClaimAvailable, CreateEpisode,
//     ClaimForRecovery), as today.
//   - Renewals stay cheap: lease_until is in no index and the available
//     index's predicate (status = 'queued' AND lease_until IS NULL) does
//     not change on a renewal, so with free space on the page (fillfactor)
//     a renewal is a HOT update that writes no index entry.
//   - The keyed claims table stays for Gate, findings and any key that
//     outlives an episode; a Node's heartbeat renews both kinds it holds.
//
// Upgrade (a goose migration per dialect). Schema 16 (landed): open
// requests became available rows (run_after and opts kept; a request a
// poller had claimed is due at once) unless the episode's claim was live,
// the requests were closed, and an insert trigger on the requests table
// refuses what an older binary would still write there (a deferred
// trigger, a retry, a requeue), so an old node fails loudly instead of
// leaving work that no new poller sees. An old node's local path, fenced
// writes and recovery of ordinary orphans still work on schema 16; its
// poller finds nothing to claim. The next migration moves the lease: each
// live episode's claim (state claimed) is copied into its row with its
// fence + 1 and its lease_until unchanged, so an old node's next fenced
// write matches nothing (it stops; its renewals stop too, so it stops
// before that lease ends) and nobody takes the episode before the lease it
// held runs out; terminal episodes are untouched, and an insert trigger on
// episode-type work claims refuses the old model's grants.
//
// Deploy order follows: the new binary refuses a database without the
// migration (ErrSchema), and the migrated database refuses the old binary's
// writes of the old model. Drain and stop the old nodes, migrate, start the
// new ones; or migrate under running old nodes, whose deferred triggers
// and retries then fail (the caller retries them on a new node) while
// their runs in flight finish, or are recovered once their leases end.
package runner
