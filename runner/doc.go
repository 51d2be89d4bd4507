// Package runner runs actors on a cluster of nodes: every node registers the
// same actors and receives the same triggers, and exactly one episode runs
// per trigger, under a work claim, with every step journaled.
//
// # Episode lifecycle and the statement that decides each transition
//
//	trigger on N nodes
//	   │  (random jitter, default 0–200 ms, spreads the winners)
//	   ▼
//	CreateEpisode ── no row ──► duplicate: silent skip (episode.duplicate)
//	   │ one node's insert wins (filtered unique index on dedupe_key), and the
//	   │ same statement grants it the episode's work claim (its dedupe key, or
//	   │ episode:{id}): no crash can leave it queued without an owner
//	   ▼
//	queued, claim held by this node, renewed by the node heartbeat while it
//	   │    waits for a slot
//	   │ a slot of the actor frees (max concurrent, FIFO)
//	   ▼
//	StartEpisode  (fenced: queued → running, owner_node = this node)
//	   │
//	   ▼
//	Init, then Step … each step: AppendStep (fenced; refreshes last_step_at)
//	   │
//	   ├─ Done ─────────────► FinishEpisode status done,     claim done
//	   ├─ error / panic ────► FinishEpisode status failed,   class error | panic
//	   ├─ budget ───────────► FinishEpisode status failed,   class budget_exceeded
//	   ├─ Node.Cancel ──────► FinishEpisode status canceled, class canceled
//	   ├─ lease lost ───────► nothing more is written: another grant owns the episode
//	   └─ Node.Stop ────────► ReleaseClaim: episode stays running (or queued) for recovery,
//	                          any node can acquire the claim at once
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
// # Dedupe keys
//
// See package dedupe: schedule:{actor}:{expectation}:{window} and
// event:{actor}:{expectation}:{event id or SHA-256 of canonical JSON}.
// Manual runs have no dedupe key and are never deduplicated.
package runner
