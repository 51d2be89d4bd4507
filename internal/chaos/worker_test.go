//go:build unix

package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/claimhistory"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/telemetry"
)

// Worker-process settings, passed through the environment.
const (
	envWorker = "LEASEHOLD_CHAOS_WORKER" // the node identity; set: this process is a worker
	envURL    = "LEASEHOLD_CHAOS_URL"    // Postgres through this worker's proxy, search_path set; or the SQLite file's path
	envLease  = "LEASEHOLD_CHAOS_LEASE_MS"
	envSweep  = "LEASEHOLD_CHAOS_SWEEP_MS"
	// envDialect is dialectSQLite for a worker of TestChaosSQLite; unset:
	// Postgres.
	envDialect = "LEASEHOLD_CHAOS_DIALECT"
)

// The one actor every worker registers.
const (
	actorID       = "chaos"
	expectationID = "apply"
	eventName     = "chaos.fired"
	// workSteps sleep 20–60 ms each (so that every worker has a few
	// episodes in flight when a fault hits); the next step writes the ledger.
	// One run in longEvery makes its second step long (1.25 leases), as a
	// call outside the database would be: such a step is what only the
	// run's local deadline can stop when the database is out of reach, and
	// its end (the cancellation) is what the overlap check measures. The
	// short steps never outlive a fault that long: their journal writes
	// block first.
	workSteps     = 3
	longEvery     = 20
	maxConcurrent = 8
	fireTimeout   = 5 * time.Second
	// pgPoll: the trigger-request poller's interval on Postgres, the
	// fallback for a missed NOTIFY.
	pgPoll       = 250 * time.Millisecond
	drainTimeout = time.Second
	// pgConnectTimeout bounds one new connection of a worker's pool. After
	// the server restart every worker reconnects at once, up to its pool's
	// 16 connections, each a fork by the one postmaster; on this 2-core
	// host under load the listen queue was seen holding 193 connections.
	// A timeout shorter than that wait (2 s once) fails every attempt: the
	// abandoned connections stay queued, each still costs the postmaster a
	// fork, and the next attempts wait behind them, so no connection ever
	// completes and the cluster stops (TestChaos, 1391 triggers never
	// answered). The cut's 4 s freeze is shorter; a connection it holds
	// completes when the cut heals.
	pgConnectTimeout = 15 * time.Second
	// freezeHold is how long an armed finish sits inside its transaction
	// after FinishEpisode (the driver SIGSTOPs the worker meanwhile): well
	// past claims.TxBound, so the server's bound, not this, ends it.
	freezeHold = 3 * time.Second
)

// The worker's control channel. The test writes commands on stdin, one a
// line:
//
//	fire <trigger>   Fire the trigger (the answer: fired or fireerr)
//	freeze           the next finish on this node stops inside its
//	                 transaction (see freezer): intx, then freezeHold
//	unfreeze         disarm freeze if no finish used it
//
// The worker writes on stdout, one line each:
//
//	ready                              node started, sweeper running
//	fired <trigger> created <episode>  Fire returned: this node's insert won
//	fired <trigger> duplicate          Fire returned: the episode exists
//	fireerr <trigger> <error>          Fire failed; the test sends it again
//	active <key> <fence> <unixnano>    Init or Step of the run of grant
//	                                   (key, fence) returned at that instant
//	                                   (wall clock, the server's clock too:
//	                                   same machine); dedupe keys have no
//	                                   spaces
//	intx <key> <fence> <episode>       an armed finish ran FinishEpisode in
//	                                   its open transaction and now waits
//	intxdone <key> <fence> <result>    that transaction ended: ok or the
//	                                   error, spaces folded
//	event lease_lost|handed_over       a run of this node stopped (telemetry)
//	event recovered <n>                a sweep of this node restarted n orphans
//	event write_failed <stmt> <why>    a runner write failed, not retried
//	event history_failed <why>         writing the claims history failed
//	drained <summary>                  SIGTERM: Drain returned
//
// stdin closing (the test went away) ends the worker at once.

// payload is what each trigger carries; it makes the dedupe key unique.
type payload struct {
	Trigger string `json:"trigger"`
}

// worker is the main of a worker process; it returns the exit code.
func worker() int {
	id := os.Getenv(envWorker)
	leaseMS, err1 := strconv.Atoi(os.Getenv(envLease))
	sweepMS, err2 := strconv.Atoi(os.Getenv(envSweep))
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker: bad settings:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With(slog.String("worker", id))
	out := &lines{}
	ctx := context.Background()

	var be backend
	var err error
	if os.Getenv(envDialect) == dialectSQLite {
		be, err = openSQLite(ctx, os.Getenv(envURL), time.Duration(leaseMS)*time.Millisecond)
	} else {
		be, err = openPostgres(ctx, os.Getenv(envURL), time.Duration(leaseMS)*time.Millisecond, id)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		return 1
	}
	hist, err := openHistory(os.Getenv(envHistory), out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker: history:", err)
		return 1
	}
	rec := claimhistory.NewRecorder(id, hist)
	recorded := newRecordingStore(be.store, rec)
	node, err := runner.NewNode(runner.Config{
		Store: spyStore{recorded, out}, Identity: id, Lease: time.Duration(leaseMS) * time.Millisecond,
		EventJitter: 20 * time.Millisecond, Logger: log, Observer: out, // spreads the wins
		// Pollers on: work that finds no free slot (a trigger fired on one
		// worker only) and retried attempts flow to any worker with a slot.
		// What a dead worker's poll granted is recovered as any of its
		// claims is: within lease + sweep.
		Poll: be.poll, TriggerWaker: be.waker,
	})
	fin := &freezer{}
	if err == nil {
		err = node.Register(chaosActor(be.ledger, out, rec, fin, time.Duration(leaseMS)*time.Millisecond))
	}
	if err == nil {
		err = node.Start(ctx)
	}
	var sweeper *recovery.Sweeper
	if err == nil {
		var rcv *recovery.Recoverer
		if rcv, err = recovery.New(recorded, node, log, out); err == nil {
			sweep := time.Duration(sweepMS) * time.Millisecond
			sweeper, err = recovery.NewSweeper(rcv, recovery.SweeperConfig{InitialDelay: sweep, Interval: sweep})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		return 1
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	swept := make(chan struct{})
	go func() { _ = sweeper.Run(sweepCtx); close(swept) }()

	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	gone := make(chan struct{})
	go func() { commands(node, fin, out); close(gone) }()
	out.printf("ready")

	select {
	case <-gone:
		return 0
	case <-term:
	}
	stopSweep()
	<-swept
	dctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	sum, err := node.Drain(dctx)
	// %+v: whatever fields the summary has.
	out.printf("drained %s err=%v", strings.Join(strings.Fields(fmt.Sprintf("%+v", sum)), " "), err)
	return 0
}

// backend is what a worker needs of its database: the adapter for the node
// and the sweeper, the poller's settings and waker, and the strategy's own
// transactions (the ledger).
type backend struct {
	store  nodeStore
	poll   runner.PollConfig
	waker  runner.TriggerWaker // nil: the poller polls
	ledger ledgerDB
}

// openPostgres connects to url (this worker's proxy, search_path set) as
// worker id (application_name): the
// poller is woken by NOTIFY and polls every 250 ms besides.
func openPostgres(ctx context.Context, url string, lease time.Duration, id string) (backend, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return backend{}, err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = id // the driver's HolderSessions finds them by it
	cfg.MaxConns = 16
	cfg.ConnConfig.ConnectTimeout = pgConnectTimeout
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return backend{}, err
	}
	// Never closed: the process exits instead, and Close would wait for a
	// connection frozen by a cut.
	return backend{
		store:  postgres.New(pool),
		poll:   runner.PollConfig{Interval: pgPoll},
		waker:  postgres.NewNotifier(pool),
		ledger: pgLedger{pool},
	}, nil
}

// ledgerDB is where the strategy writes its side effect, in one transaction
// of its own on the worker's database.
type ledgerDB interface {
	begin(ctx context.Context) (ledgerTx, error)
	// transient: the transaction failed for a reason worth trying again (a
	// lost connection, a server shutting down, a busy database); anything
	// else (a SQL error) is a bug and fails the episode.
	transient(err error) bool
}

// ledgerTx is one such transaction.
type ledgerTx interface {
	store() runner.TxStore // the adapter bound to the transaction
	insertLedger(ctx context.Context, episode int64, owner string, fence int64, trigger string) error
	commit(ctx context.Context) error
	// rollback ends the transaction if commit did not; under the run's
	// context, as a strategy should: once its lease is lost, pgx gives up
	// on the round trip and closes the connection instead of waiting for
	// a slow or frozen link past the lease.
	rollback(ctx context.Context)
}

// pgLedger: a pgx transaction and postgres.New(tx).
type pgLedger struct{ pool *pgxpool.Pool }

func (l pgLedger) begin(ctx context.Context) (ledgerTx, error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgTx{tx, postgres.New(tx)}, nil
}

func (pgLedger) transient(err error) bool { return transient(err) }

type pgTx struct {
	tx pgx.Tx
	st *postgres.Store
}

func (t pgTx) store() runner.TxStore { return t.st }

func (t pgTx) insertLedger(ctx context.Context, episode int64, owner string, fence int64, trigger string) error {
	_, err := t.tx.Exec(ctx, query("InsertLedger"), episode, owner, fence, trigger)
	return err
}

func (t pgTx) commit(ctx context.Context) error { return t.tx.Commit(ctx) }
func (t pgTx) rollback(ctx context.Context)     { _ = t.tx.Rollback(ctx) }

// commands runs the commands read from stdin until it closes.
func commands(node *runner.Node, fin *freezer, out *lines) {
	h := newHandlers()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch f := strings.Fields(sc.Text()); {
		case len(f) == 2 && f[0] == "fire":
			h.serve(out, f[1], func() { fire(node, out, f[1]) })
		case len(f) == 1 && f[0] == "freeze":
			fin.armed.Store(true)
		case len(f) == 1 && f[0] == "unfreeze":
			fin.armed.Store(false)
		}
	}
}

func fire(node *runner.Node, out *lines, trigger string) {
	ctx, cancel := context.WithTimeout(context.Background(), fireTimeout)
	defer cancel()
	res, err := node.Fire(ctx, actorID, eventName, payload{Trigger: trigger}, runner.FireOptions{})
	switch {
	case err != nil:
		out.printf("fireerr %s %s", trigger, strings.Join(strings.Fields(err.Error()), " "))
	case res[0].Duplicate:
		out.printf("fired %s duplicate", trigger)
	default:
		out.printf("fired %s created %d", trigger, res[0].EpisodeID)
	}
}

// transientEvery: one attempt in this many (of the first two) fails its
// first step with errTransient and is retried.
const transientEvery = 12

var errTransient = errors.New("chaos: transient failure, retried")

// chaosActor is the actor every worker registers: restart recovery, so
// every orphan is re-run, and attempts high enough never to run out.
func chaosActor(ledger ledgerDB, out *lines, rec *claimhistory.Recorder, fin *freezer, lease time.Duration) runner.Actor {
	return runner.Actor{ID: actorID, MaxConcurrent: maxConcurrent, Expectations: []runner.Expectation{{
		ID: expectationID, Trigger: runner.Event{Name: eventName}, Strategy: apply{ledger, out, rec, fin, lease + lease/4},
		Recovery: runner.RecoveryRestart, MaxAttempts: 1000,
		Retry: runner.RetryPolicy{Backoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond},
	}}}
}

// apply works for a few steps, then, through the public API only, writes
// its effect to the ledger and ends the run in one transaction of its own:
// Run.Hold (leasehold_hold), the ledger insert, Run.CompleteTx, COMMIT. Each
// return of Init and Step is reported (active): the last one is where the
// run's activity ended, which the driver compares with its lease's end on
// the database.
type apply struct {
	db   ledgerDB
	out  *lines
	rec  *claimhistory.Recorder // each Hold and finish in the transaction
	fin  *freezer
	long time.Duration // a long step's length
}

func (a apply) Init(_ context.Context, r *runner.Run) error {
	defer a.out.active(r)
	r.State = new(int) // steps done by this run; a restarted run starts over
	return nil
}

func (a apply) Step(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
	defer a.out.active(r)
	done := r.State.(*int)
	*done++
	if *done == 1 && r.Attempt <= 2 && rand.IntN(transientEvery) == 0 {
		// A transient failure before any effect: the attempt ends with
		// RetryEpisode and the episode runs again, on whichever worker
		// has a slot after the backoff.
		return runner.StepResult{}, errTransient
	}
	if *done <= workSteps {
		d := time.Duration(20+rand.IntN(41)) * time.Millisecond
		if *done == 2 && rand.IntN(longEvery) == 0 {
			d = a.long
		}
		if err := pause(ctx, d); err != nil {
			return runner.StepResult{}, err
		}
		return runner.StepResult{Data: map[string]int{"work": *done}}, nil
	}
	return runner.StepResult{}, a.finish(ctx, r)
}

// finish writes the ledger row and ends the run done in one transaction:
// Hold, then the insert, then CompleteTx (fenced on the grant), then
// COMMIT. A stolen grant's Hold or finish fails with claims.ErrLeaseLost
// and its transaction commits nothing, so the ledger holds exactly one row
// per episode by construction (no unique constraint: a second row would be
// visible). A connection error (a server restart, a cut) rolls the
// transaction back and it is tried again, until it commits, the grant is
// found gone, or the run is stopped; a COMMIT whose answer was lost is
// settled by the retry's Hold (the claim is done) and the runner's read of
// the episode.
func (a apply) finish(ctx context.Context, r *runner.Run) error {
	var p payload
	if err := r.Payload(&p); err != nil {
		return err
	}
	t := r.Token()
	backoff := 20 * time.Millisecond
	for {
		err := a.finishOnce(ctx, r, t, p.Trigger)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, claims.ErrLeaseLost):
			return fmt.Errorf("ledger of episode %d: %w", r.EpisodeID(), err)
		case ctx.Err() != nil || !a.db.transient(err):
			return fmt.Errorf("ledger of episode %d: %w", r.EpisodeID(), err)
		}
		if err := pause(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func (a apply) finishOnce(ctx context.Context, r *runner.Run, t claims.Token, trigger string) error {
	tx, err := a.db.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.rollback(ctx)
	store := tx.store()
	hold := a.rec.Call(claimhistory.Op{Kind: claimhistory.KindHold, Source: "Run.Hold", Key: t.Key, Episode: r.EpisodeID(), Owner: t.Owner, Fence: t.Fence})
	err = r.Hold(ctx, store)
	if errors.Is(err, claims.ErrLeaseLost) {
		hold.Return(claimhistory.Response{Outcome: claimhistory.NotOwner})
		return err
	}
	hold.ReturnErr(err)
	if err != nil {
		return err
	}
	if err := tx.insertLedger(ctx, r.EpisodeID(), t.Owner, t.Fence, trigger); err != nil {
		return err
	}
	done := episodes.Finish{Status: episodes.StatusDone}
	// Recorded from before FinishEpisode to after COMMIT: now() in the
	// finish is the transaction's start, and its effect lands at COMMIT.
	call := a.rec.Call(finishOp("Run.CompleteTx", r.EpisodeID(), t, done))
	if err := r.CompleteTx(ctx, store, map[string]any{"owner": t.Owner, "fence": t.Fence}); err != nil {
		call.ReturnErr(err)
		return err
	}
	frozen := false
	if a.fin.armed.CompareAndSwap(true, false) {
		frozen = true
		// The hold is counted from before the line: the SIGSTOP that
		// follows it may land before Sleep is called.
		until := time.Now().Add(freezeHold)
		a.out.printf("intx %s %d %d", t.Key, t.Fence, r.EpisodeID())
		time.Sleep(time.Until(until)) // not ctx: a frozen holder notices nothing
	}
	err = tx.commit(ctx)
	call.ReturnErr(err)
	if frozen {
		result := "ok"
		if err != nil {
			result = strings.Join(strings.Fields(err.Error()), " ")
		}
		a.out.printf("intxdone %s %d %s", t.Key, t.Fence, result)
	}
	return err
}

// transient: the connection failed or the server is shutting down or
// starting; anything else (a SQL error) is a bug and fails the episode.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // network, connect, closed connection
	}
	switch pgErr.Code[:2] {
	case "08", "57": // connection exception, operator intervention (shutdown)
		return true
	}
	return pgErr.Code == "40001" || pgErr.Code == "40P01"
}

// pause simulates work; it returns early with the cause when ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// freezer arms the driver's freeze: the next finish says intx after its
// CompleteTx and waits freezeHold before committing, so the claim row stays
// locked by an open transaction while the driver SIGSTOPs the process. Only
// the server can then end that transaction.
type freezer struct{ armed atomic.Bool }

// spyStore is the node's Store: the adapter (through recordingStore),
// reporting on stdout each journal or terminal write that failed with a
// database error the runner does not retry (a lost lease is not one), so
// that the report can say what the faults did to the runner's own writes.
type spyStore struct {
	recordingStore
	out *lines
}

func (s spyStore) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error {
	err := s.recordingStore.AppendStep(ctx, id, t, stepNo, data, lease)
	s.failed("AppendStep", err)
	return err
}

func (s spyStore) FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	err := s.recordingStore.FinishEpisode(ctx, id, t, f)
	s.failed("FinishEpisode("+string(f.Status)+")", err)
	return err
}

func (s spyStore) failed(statement string, err error) {
	if err == nil || errors.Is(err, claims.ErrLeaseLost) || errors.Is(err, claims.ErrNotOwner) || errors.Is(err, claims.ErrRetryable) {
		return
	}
	s.out.printf("event write_failed %s %s", statement, errWhat(err))
}

// errWhat names a failed write's cause for the report: its SQLSTATE
// (Postgres), its result code (SQLite), or "connection".
func errWhat(err error) string {
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
		return "SQLSTATE-" + pgErr.Code
	}
	if code, ok := sqliteCode(err); ok {
		return fmt.Sprintf("SQLITE-%d", code)
	}
	return "connection"
}

// handlers bounds the requests (fire, start) a worker serves at once, as
// an application server's request handlers do. A request that finds every
// handler busy is refused at once (fireerr ... busy) and the driver sends
// it again later, as a client retries a 503. Unbounded, the driver's
// redeliveries after a server restart on a loaded host queued about 1,500
// Fire calls per worker for a pool of 16 connections, and the runner's own
// statements (polls, renewals, sweeps) waited behind them for tens of
// seconds.
type handlers chan struct{}

// maxInFlight: the handlers of one worker, half its pool's connections
// (Postgres: MaxConns 16; SQLite: sqlite.MaxOpenConns, 16). A request holds
// a connection while its statement waits (for a row lock, for SQLite's one
// write lock); with more handlers than that, requests hold every
// connection and the runner's renewals, sweeps and dispatches wait for one
// behind them: with 32 a rolling deploy on SQLite left 90 episodes queued
// two minutes after its workload stopped, and a Postgres chaos run's
// sweeps took up to 9.5 s against a 500 ms interval.
const maxInFlight = 8

func newHandlers() handlers { return make(handlers, maxInFlight) }

// serve runs handle on a free handler, or refuses the request for id.
func (h handlers) serve(out *lines, id string, handle func()) {
	select {
	case h <- struct{}{}:
	default:
		out.printf("fireerr %s busy: %d requests in flight", id, cap(h))
		return
	}
	go func() {
		defer func() { <-h }()
		handle()
	}()
}

// lines writes the worker's answers and telemetry to stdout, one per line.
type lines struct{ mu sync.Mutex }

func (l *lines) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// active reports that a call of r's strategy returned now.
func (l *lines) active(r *runner.Run) {
	t := r.Token()
	l.printf("active %s %d %d", t.Key, t.Fence, time.Now().UnixNano())
}

// Observe implements telemetry.Observer: the few events the test counts.
func (l *lines) Observe(_ context.Context, e telemetry.Event) {
	switch e.Name {
	case runner.EventLeaseLost:
		l.printf("event lease_lost")
	case runner.EventReleased:
		l.printf("event handed_over")
	case runner.EventStarted:
		l.printf("event started %d %d", e.EpisodeID, e.Attempt)
	case recovery.EventSweep:
		if n := e.Counts["restarted"]; n > 0 {
			l.printf("event recovered %d", n)
		}
	}
}
