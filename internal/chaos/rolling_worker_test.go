//go:build unix

package chaos_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/claimhistory"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/workflows"
)

// The rolling deploy's worker process (rolling_test.go drives it): the
// chaos worker's backend, claims history, ledger and stdout protocol, with
// the actors and the workflow of one of two versions of an application.
//
//	version A  billing: charge (event charge), legacy (event legacy)
//	           orders:  reserve, notify (manual)
//	           order:   reserve -> charge -> notify
//	version B  billing: charge (event charge), refund (event refund)
//	           orders:  reserve, notify (manual)
//	           order:   reserve -> charge -> confirm (orders/notify: the
//	                    step notify renamed)
//
// With envRollingFrontend set the process is version B's frontend: billing
// only, in mode trigger_only (it fires, it never runs), as the web tier of
// a deploy that went out before the workers.
//
// stdin (instead of the chaos worker's commands):
//
//	fire <event> <trigger> <delay ms>  Fire billing's event, payload {"trigger": <trigger>, "amount": 1}, the amount written one of several ways
//	start <subject>                   start order for subject, unless an instance of it exists
//
// stdout: ready, drained, the runner's events, and for both commands the
// chaos worker's answer (fired <id> created|duplicate, fireerr <id> ...),
// so the driver's trigger book tracks workflow starts as it tracks fires.

const (
	// envRolling is the version a rolling worker runs ("A" or "B"); set:
	// this process is one.
	envRolling = "LEASEHOLD_CHAOS_ROLLING"
	// envRollingFrontend set: the process is version B's trigger_only
	// frontend.
	envRollingFrontend = "LEASEHOLD_CHAOS_ROLLING_FRONTEND"

	billingActor  = "billing"
	ordersActor   = "orders"
	orderWorkflow = "order"
	// rollingSteps: each run works this many steps (20–60 ms each) before
	// its finish transaction, so a drain or a SIGKILL finds runs in flight.
	rollingSteps = 2
)

// rollingActors are the actors version registers; the frontend registers
// billing only.
func rollingActors(version string, s runner.Strategy) []runner.Actor {
	exp := func(id string, trig runner.Trigger) runner.Expectation {
		return runner.Expectation{ID: id, Trigger: trig, Strategy: s, Recovery: runner.RecoveryRestart, MaxAttempts: 100,
			Retry: runner.RetryPolicy{Backoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}}
	}
	billing := runner.Actor{ID: billingActor, MaxConcurrent: maxConcurrent, Expectations: []runner.Expectation{
		exp("charge", runner.Event{Name: "charge"}),
	}}
	if version == "A" {
		billing.Expectations = append(billing.Expectations, exp("legacy", runner.Event{Name: "legacy"}))
	} else {
		billing.Expectations = append(billing.Expectations, exp("refund", runner.Event{Name: "refund"}))
	}
	orders := runner.Actor{ID: ordersActor, MaxConcurrent: maxConcurrent, Expectations: []runner.Expectation{
		exp("reserve", runner.Manual{}), exp("notify", runner.Manual{}),
	}}
	return []runner.Actor{billing, orders}
}

// orderDefinition is version's workflow order: B renames its last step.
func orderDefinition(version string) workflows.Definition {
	last := "notify"
	if version == "B" {
		last = "confirm"
	}
	return workflows.Definition{ID: orderWorkflow, Steps: []workflows.Step{
		{ID: "reserve", Actor: ordersActor, Expectation: "reserve"},
		{ID: "charge", Actor: billingActor, Expectation: "charge", After: []string{"reserve"}},
		{ID: last, Actor: ordersActor, Expectation: "notify", After: []string{"charge"}},
	}}
}

// rollingWorker is the main of a rolling worker process.
func rollingWorker() int {
	version, id := os.Getenv(envRolling), os.Getenv(envWorker)
	frontend := os.Getenv(envRollingFrontend) != ""
	leaseMS, err1 := strconv.Atoi(os.Getenv(envLease))
	sweepMS, err2 := strconv.Atoi(os.Getenv(envSweep))
	if err := errors.Join(err1, err2); err != nil || (version != "A" && version != "B") {
		fmt.Fprintln(os.Stderr, "rolling worker: bad settings:", err, version)
		return 2
	}
	lease := time.Duration(leaseMS) * time.Millisecond
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With(slog.String("worker", id))
	out := &lines{}
	ctx := context.Background()

	var be backend
	var err error
	if os.Getenv(envDialect) == dialectSQLite {
		be, err = openSQLite(ctx, os.Getenv(envURL), lease)
	} else {
		be, err = openPostgres(ctx, os.Getenv(envURL), lease, id)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rolling worker:", err)
		return 1
	}
	hist, err := openHistory(os.Getenv(envHistory), out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rolling worker: history:", err)
		return 1
	}
	rec := claimhistory.NewRecorder(id, hist)
	recorded := newRecordingStore(be.store, rec)
	mode := runner.ModeFull
	if frontend {
		mode = runner.ModeTriggerOnly
	}
	node, err := runner.NewNode(runner.Config{
		Store: spyStore{recorded, out}, Identity: id, Lease: lease, Mode: mode,
		EventJitter: 20 * time.Millisecond, Logger: log, Observer: out,
		Poll: be.poll, TriggerWaker: be.waker,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "rolling worker:", err)
		return 1
	}
	strategy := rollingStrategy{a: apply{db: be.ledger, out: out, rec: rec, fin: &freezer{}}, calls: newCallJournal(be.ledger),
		slow: lease / 4}
	actors := rollingActors(version, strategy)
	if frontend {
		actors = actors[:1]
	}
	for _, a := range actors {
		if err == nil {
			err = node.Register(a)
		}
	}
	var engine *workflows.Engine
	if err == nil && !frontend {
		wfStore, ok := be.store.(workflows.Store)
		if !ok {
			err = fmt.Errorf("%T is not a workflows.Store", be.store)
		}
		if err == nil {
			engine, err = workflows.New(wfStore, node, log)
		}
		if err == nil {
			err = engine.Register(orderDefinition(version))
		}
	}
	if err == nil {
		err = node.Start(ctx)
	}
	var sweeper *recovery.Sweeper
	if err == nil && !frontend {
		var rcv *recovery.Recoverer
		if rcv, err = recovery.New(recorded, node, log, out); err == nil {
			sweep := time.Duration(sweepMS) * time.Millisecond
			sweeper, err = recovery.NewSweeper(rcv, recovery.SweeperConfig{InitialDelay: sweep, Interval: sweep,
				AfterSweep: func(ctx context.Context) { _, _ = engine.Reconcile(ctx, workflows.ReconcileOptions{}) }})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rolling worker:", err)
		return 1
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	swept := make(chan struct{})
	if sweeper != nil {
		go func() { _ = sweeper.Run(sweepCtx); close(swept) }()
	} else {
		close(swept)
	}

	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	gone := make(chan struct{})
	go func() { rollingCommands(node, engine, out); close(gone) }()
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
	out.printf("drained %s err=%v", strings.Join(strings.Fields(fmt.Sprintf("%+v", sum)), " "), err)
	return 0
}

// rollingCommands runs the commands read from stdin until it closes.
func rollingCommands(node *runner.Node, engine *workflows.Engine, out *lines) {
	h := newHandlers()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch f := strings.Fields(sc.Text()); {
		case len(f) == 4 && f[0] == "fire":
			delay, err := strconv.Atoi(f[3])
			if err != nil {
				out.printf("fireerr %s bad delay %q", f[2], f[3])
				continue
			}
			h.serve(out, f[2], func() { fireEvent(node, out, f[1], f[2], time.Duration(delay)*time.Millisecond) })
		case len(f) == 2 && f[0] == "start" && engine != nil:
			h.serve(out, f[1], func() { startOrder(engine, out, f[1]) })
		}
	}
}

// amountWritings are ways producers in different languages write one
// amount. The database is new, so it uses dedupe key version 2 (RFC 8785),
// under which they are one key: a trigger the driver sends to several
// workers, each writing it its own way, must still make one episode.
var amountWritings = []string{"1", "1.0", "1e0", "10E-1", "0.1e1"}

func fireEvent(node *runner.Node, out *lines, event, trigger string, delay time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), fireTimeout)
	defer cancel()
	quoted, _ := json.Marshal(trigger)
	raw := json.RawMessage(`{"trigger":` + string(quoted) + `,"amount":` + amountWritings[rand.IntN(len(amountWritings))] + `}`)
	res, err := node.Fire(ctx, billingActor, event, raw, runner.FireOptions{Delay: delay})
	switch {
	case err != nil:
		out.printf("fireerr %s %s", trigger, strings.Join(strings.Fields(err.Error()), " "))
	case res[0].Duplicate:
		out.printf("fired %s duplicate", trigger)
	default:
		out.printf("fired %s created %d", trigger, res[0].EpisodeID)
	}
}

// startOrder starts order for subject unless an instance of it exists
// (running or ended): Start alone would start a second one for a start
// sent again after the first one's answer was lost and its instance ended.
// The driver sends a start to one worker at a time, so the two statements
// do not race with another start of the same subject.
func startOrder(engine *workflows.Engine, out *lines, subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), fireTimeout)
	defer cancel()
	have, err := engine.List(ctx, workflows.ListQuery{WorkflowID: orderWorkflow, Subject: subject, Limit: 1})
	if err == nil && len(have) > 0 {
		out.printf("fired %s duplicate", subject)
		return
	}
	var created bool
	if err == nil {
		_, created, err = engine.Start(ctx, orderWorkflow, subject, payload{Trigger: subject}, workflows.StartOptions{})
	}
	switch {
	case err != nil:
		out.printf("fireerr %s %s", subject, strings.Join(strings.Fields(err.Error()), " "))
	case !created:
		out.printf("fired %s duplicate", subject)
	default:
		out.printf("fired %s created", subject)
	}
}

// rollingStrategy is every expectation's strategy, of both versions: Init
// records the call in the journal (rolling_calls: which episode, attempt
// and grant ran the strategy, on the database clock), the steps sleep, and
// the last one writes the ledger row and ends the run in one transaction
// (apply.finish: Run.Hold, the ledger insert, Run.CompleteTx, COMMIT; for
// a workflow step, CompleteTx advances its instance in that transaction).
type rollingStrategy struct {
	a     apply
	calls callJournal
	slow  time.Duration // each step of orders/reserve: a quarter lease
}

func (s rollingStrategy) Init(ctx context.Context, r *runner.Run) error {
	if err := s.calls.record(ctx, r); err != nil {
		return err
	}
	r.State = new(int)
	return nil
}

func (s rollingStrategy) Step(ctx context.Context, r *runner.Run) (runner.StepResult, error) {
	done := r.State.(*int)
	*done++
	if *done <= rollingSteps {
		d := time.Duration(20+rand.IntN(41)) * time.Millisecond
		if r.Episode.ExpectationID == "reserve" {
			// Long enough that an order started just before its node
			// drains is handed over at a step boundary and finished by
			// the next version's nodes.
			d = s.slow
		}
		if err := pause(ctx, d); err != nil {
			return runner.StepResult{}, err
		}
		return runner.StepResult{Data: map[string]int{"work": *done}}, nil
	}
	return runner.StepResult{}, s.a.finish(ctx, r)
}

// callJournal inserts one rolling_calls row per strategy call, in a
// statement of its own (not fenced: a call is recorded even if its grant
// is later lost), retried while the failure is transient. Its context is
// detached from the run's: a run whose lease passes its local deadline
// while the insert waits (SQLite's write lock on a loaded host) was still
// called, and the check counts its calls against its attempts.
// callJournalTimeout bounds the recording of one call.
const callJournalTimeout = time.Minute

type callJournal struct {
	ledger ledgerDB
	pg     *pgxpool.Pool
	lite   *sql.DB
}

func newCallJournal(l ledgerDB) callJournal {
	c := callJournal{ledger: l}
	switch l := l.(type) {
	case pgLedger:
		c.pg = l.pool
	case sqliteLedger:
		c.lite = l.db
	}
	return c
}

func (c callJournal) record(runCtx context.Context, r *runner.Run) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), callJournalTimeout)
	defer cancel()
	t := r.Token()
	backoff := 20 * time.Millisecond
	for {
		var err error
		if c.pg != nil {
			_, err = c.pg.Exec(ctx, rollingPG("InsertRollingCall"), r.EpisodeID(), r.Attempt, t.Owner, t.Fence)
		} else {
			_, err = c.lite.ExecContext(ctx, rollingLite("InsertRollingCall"), r.EpisodeID(), r.Attempt, t.Owner, t.Fence)
		}
		if err == nil || ctx.Err() != nil || !c.ledger.transient(err) {
			return err
		}
		if err := pause(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
