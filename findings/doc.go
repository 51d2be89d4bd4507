// Package findings records facts that episodes raise and clear: a limit
// breached, a check failing, a resource missing. A finding stays active,
// across episodes and across nodes, until an episode clears it; cleared
// findings stay in the table as history.
//
// # Which statement decides, on which clock
//
// Every write is one statement in sql/queries/<dialect>/findings.sql, run on
// the database clock (now() on Postgres, SYSUTCDATETIME() on SQL Server):
// raised_at, updated_at and cleared_at are database times, and no node clock
// takes part in any decision.
//
//	operation  statement           decided by
//	---------  ------------------  --------------------------------------------
//	Raise      RaiseFinding        the filtered unique index (env, finding_key)
//	                               WHERE status = 'active': one insert wins,
//	                               every other raise of the key is absorbed by
//	                               it (ON CONFLICT DO UPDATE, raise_count + 1)
//	Update     UpdateFinding       UPDATE ... WHERE env, key, status = 'active'
//	Clear      ClearFinding        UPDATE ... SET status = 'cleared' WHERE env,
//	                               key, status = 'active'; the row leaves the
//	                               index
//	ActiveFor  ListActiveFindings  read only; decides nothing
//
//	            Raise (insert, raise_count 1, new id)
//	  (none) ──────────────────────────────────────► active ◄──┐ Raise: absorbed,
//	    ▲                                              │  │  ───┘ raise_count + 1
//	    │                                              │  └─────── Update: details,
//	    │        Clear                                 │           no count
//	    └── cleared (history, kept) ◄──────────────────┘
//	        the next Raise of the key inserts a new row with a new id
//
// # One active finding per key per env
//
// At most one finding per (env, key) is active; the unique index guarantees
// it, so N nodes raising the same key at the same instant leave one active
// row whose raise_count is N. The index covers active rows only, so raise,
// clear, raise, clear never collides with the history. The unset env is
// stored as "" (never NULL) on every dialect, so it is one value in the
// index like any other env.
//
// # Fencing
//
// A finding is written on behalf of a running episode: Raise, Update and
// Clear take a Holder (a *runner.Run) and send its episode id and its work
// claim token (key, owner, fence). The statement checks, in the same
// statement as the write, that the token is the episode's live claim
// (locking the claim row FOR SHARE, so a steal is ordered before or after the
// write, never around it) and that the episode is running under that owner.
// When it is not (the lease was stolen or expired, the episode finished, a
// zombie after A→B→A re-acquisition) nothing is written and the call returns
// ErrLeaseLost, which is claims.ErrLeaseLost: the run must stop.
//
// # Env
//
// Writes: a finding takes the env (and the stack and actor) of the episode
// that raised it, read from the episode row by the statement itself; the
// caller cannot pass one. An episode of env "rc" raises, updates and clears
// only env "rc" findings, whichever node runs it. To write into another env,
// create the episode in that env and raise from its run.
//
// Reads: ActiveFor reads the env the Findings was created with (normally the
// node's env). Filter.Env overrides it for one call: new("demo") reads env
// "demo", new("") reads the unset env. Envs are matched by strict equality:
// the unset env "" is a world of its own and sees neither "rc" nor any other
// env, and no env sees it.
//
// # Validation
//
// Inputs are checked before any statement is sent, and rejected (never
// truncated) with an error that wraps ErrInvalid: the key is required and at
// most MaxKeyLen characters, the class at most MaxClassLen, the severity at
// most MaxSeverityLen; text must be valid UTF-8 without NUL; Data must be
// valid JSON that every dialect can store (no \u0000, no unpaired surrogate).
package findings
