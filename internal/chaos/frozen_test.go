//go:build unix

package chaos_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
)

// TestFrozenInTransaction makes deterministic what the chaos run's freezes
// do by chance (issue 14, item 6): a holder stopped inside one of
// leasehold's multi-statement transactions. Worker A runs the only episode;
// its finish (the worker's own transaction: Run.Hold, the ledger insert, Run.CompleteTx) runs FinishEpisode and
// then sits in the open transaction, holding the claim row's lock, and the
// test SIGSTOPs A there: its connection stays open and healthy to the
// server. Only a server-side bound on the transaction (claims.TxBound) can
// end it; then worker B's recovery takes the episode over within lease +
// sweep + TxBound. After SIGCONT, A's commit must fail and A must write
// nothing: the episode is done by B's grant, with B's ledger row.
//
// Without the bound, B's recovery claim waits on the lock for as long as A
// is stopped: the test then fails at its deadline (it never hangs), and says
// what happened once A was resumed.
func TestFrozenInTransaction(t *testing.T) {
	cfg := loadConfig(1)
	ctx := t.Context()
	srv := startServer(t)
	pool := newDatabase(t, ctx, srv)
	exe, err := os.Executable()
	require.NoError(t, err)
	book := newTriggerBook()
	histDir := historyDir(t)
	cl := newCluster(exe, 2, book, func(slot int, id string) []string {
		return []string{
			envWorker + "=" + id,
			envURL + "=" + srv.URL(schema),
			envLease + "=" + strconv.FormatInt(cfg.lease.Milliseconds(), 10),
			envSweep + "=" + strconv.FormatInt(cfg.sweep.Milliseconds(), 10),
			envHistory + "=" + filepath.Join(histDir, id+".jsonl"),
		}
	})
	t.Cleanup(cl.stopAll) // SIGKILL ends a stopped process too
	for slot := range 2 {
		_, err := cl.start(slot)
		require.NoError(t, err)
	}
	a, b := cl.current(0), cl.current(1)
	for _, p := range []*proc{a, b} {
		require.NoError(t, waitReady(p, readyTimeout))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []*proc{a, b} {
				t.Logf("--- stderr of %s (last 16 KiB) ---\n%s", p.id, p.log.String())
			}
		}
	})

	// Only A hears the trigger, so A's insert wins and A runs the episode.
	a.send("freeze")
	tr := book.add("frozen-1")
	a.send("fire " + tr.id)
	book.sent(tr, 1)
	// A fire that failed or went unanswered (a loaded host: the worker's
	// Fire has fireTimeout) is sent again, to A only, as the driver of the
	// main suite re-sends its triggers. On a loaded host A may also lose
	// the run's lease before it finishes, and B's recovery finish it: while
	// A reaches no finish, another trigger is fired on A every freezeWait
	// (A stays armed: its first finish of any of them is frozen).
	var x intx
	reached := time.After(60 * time.Second)
	resend := time.NewTicker(pollEvery)
	defer resend.Stop()
	another := time.NewTicker(freezeWait)
	defer another.Stop()
	mine := map[*trigger]bool{tr: true}
wait:
	for {
		select {
		case x = <-a.intx:
			break wait
		case <-resend.C:
			for _, due := range book.due(time.Now().Add(-redeliverAfter)) {
				if mine[due] {
					a.send("fire " + due.id)
					book.sent(due, 1)
				}
			}
		case <-another.C:
			next := book.add(fmt.Sprintf("frozen-%d", len(mine)+1))
			mine[next] = true
			a.send("fire " + next.id)
			book.sent(next, 1)
		case <-reached:
			t.Fatalf("%s never reached its finish transaction (%d triggers fired on it); stderr (with its fire errors):\n%s",
				a.id, len(mine), a.log.String())
		}
	}
	at := time.Now()
	a.stop()
	resumed := false
	resume := func() {
		if !resumed {
			a.cont()
			resumed = true
		}
	}
	defer resume()

	bound := cfg.lease + cfg.sweep + claims.TxBound(cfg.lease) + freezeSlack
	grantOf := func() (h holder, state, status string, err error) {
		err = pool.QueryRow(ctx, query("GrantOfKey"), x.g.key).Scan(&h.owner, &h.fence, &state, &status)
		return h, state, status, err
	}
	// Poll until B's grant exists (and then until its finish), or the bound.
	var taken, done holder
	var tookGrant, tookDone time.Duration
	var state, status string
	deadline := at.Add(bound + 10*time.Second) // B's run (a few steps) after the grant
	for tick := time.NewTicker(pollEvery / 2); ; <-tick.C {
		h, st, stat, err := grantOf()
		if err == nil && h.fence > x.g.fence && taken.fence == 0 {
			taken, tookGrant = h, time.Since(at)
		}
		if err == nil && (st == "done" || st == "failed") {
			done, tookDone, state, status = h, time.Since(at), st, stat
			tick.Stop()
			break
		}
		if (taken.fence == 0 && time.Since(at) > bound) || time.Now().After(deadline) {
			tick.Stop()
			state, status = st, stat
			break
		}
	}
	if taken.fence == 0 {
		resume()
		result := "no intxdone line within 10s"
		select {
		case result = <-a.intxDone:
		case <-time.After(10 * time.Second):
		}
		time.Sleep(time.Second) // let the resumed commit, or its retry, land
		h, st, stat, err := grantOf()
		t.Fatalf("episode %d was not taken over within %.2fs of SIGSTOP (lease %v + sweep %v + TxBound %v + slack %v): "+
			"the recovery claim waited on the lock of %s's frozen transaction, which nothing on the server ended "+
			"(issue 14 item 6; expected to fail until every leasehold transaction is bounded server-side). "+
			"Before SIGCONT the claim was %s (%s, fence %d), episode %s; after SIGCONT %s's transaction ended with %q and "+
			"the claim is %s by %s, episode %s (err %v)",
			x.ep, bound.Seconds(), cfg.lease, cfg.sweep, claims.TxBound(cfg.lease), freezeSlack, a.id,
			state, a.id, x.g.fence, status, a.id, result, st, h, stat, err)
	}
	t.Logf("SIGSTOP of %s inside its finish transaction of episode %d (fence %d): %s's grant (fence %d) after %.2fs, done after %.2fs (bound %.2fs)",
		a.id, x.ep, x.g.fence, taken.owner, taken.fence, tookGrant.Seconds(), tookDone.Seconds(), bound.Seconds())
	require.LessOrEqual(t, tookGrant, bound, "taken over too late")
	require.Equal(t, "done", state, "the episode's claim ended %s (status %s), not done", state, status)
	require.Equal(t, b.id, done.owner, "the episode was finished by %s, not by B", done)
	require.Greater(t, done.fence, x.g.fence, "the episode was finished by the frozen grant")
	require.Equal(t, "done", status)

	stepsBefore, writesBefore, err := grantWrites(ctx, pgReads{pool}, x.g)
	require.NoError(t, err)
	resume()
	select {
	case result := <-a.intxDone:
		t.Logf("after SIGCONT, %s's frozen transaction ended: %s", a.id, result)
		require.NotEqual(t, "ok", result, "the frozen transaction committed after another grant finished the episode")
	case <-time.After(10 * time.Second):
		t.Fatalf("%s's frozen transaction did not end within 10s of SIGCONT", a.id)
	}
	// A's runner may retry the finish, and its heartbeat notices the lost
	// lease: give it a lease to write anything it would.
	time.Sleep(cfg.lease)
	steps, writes, err := grantWrites(ctx, pgReads{pool}, x.g)
	require.NoError(t, err)
	require.Equal(t, stepsBefore, steps, "journal steps of the frozen grant landed after SIGCONT")
	require.Equal(t, writesBefore, writes, "ledger writes of the frozen grant landed after SIGCONT")

	rows, err := pool.Query(ctx, query("EpisodeAudit"))
	require.NoError(t, err)
	var found bool
	for rows.Next() {
		var e audit
		require.NoError(t, rows.Scan(&e.id, &e.trigger, &e.status, &e.errorClass, &e.errorDetail, &e.attempts,
			&e.owner, &e.claimState, &e.claimOwner, &e.claimFence, &e.steps, &e.lastStepFence, &e.stepRegress,
			&e.ledgerRows, &e.ledgerOwner, &e.ledgerFence, &e.ledgerTrigger, &e.ledgerAll, &e.ledgerWrites, &e.ledgerGrants, &e.staleLedgerWrites))
		if e.id != x.ep {
			continue
		}
		found = true
		require.Equal(t, "done", e.status)
		require.Equal(t, int64(1), e.ledgerRows, "ledger rows: %s", e.ledgerAll)
		require.Equal(t, holder{b.id, done.fence}, holder{e.ledgerOwner, e.ledgerFence}, "the ledger row is B's")
		require.Equal(t, done.fence, e.lastStepFence, "the last journal step is B's")
		require.Zero(t, e.stepRegress, "journal steps of a fenced-out grant after a later grant's")
		require.Zero(t, e.staleLedgerWrites, "ledger writes of a fenced-out grant after a later grant's")
	}
	require.NoError(t, rows.Err())
	require.True(t, found, "episode %d not in the audit", x.ep)

	// The frozen run stopped before its lease ended: its activity before the
	// SIGSTOP, against the end of its grant on the database.
	ov := overlaps(grantEnds(t, ctx, pgReads{pool}), cl.procs(), nil, 0)
	t.Logf("overlap: %s", ov.worst())
	require.Empty(t, ov.bad)

	// And porcupine's verdict on both workers' claims history: A's frozen
	// finish, B's takeover, A's failed commit.
	rep, _, _, err := checkHistories(ctx, pgReads{pool}, histDir)
	t.Logf("claims history: %v", rep)
	require.NoError(t, err)
	require.Zero(t, cl.historyFailed.Load())
}
