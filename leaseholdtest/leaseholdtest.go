// Package leaseholdtest helps an application test its actors against a
// real database, without a cluster and without sleeping: a throwaway
// migrated schema, one strategy run through a real node, assertions on
// the episodes a trigger created, and database time moved forward (a
// lease expired, a delayed or retrying episode made due) instead of
// waited for. It works on Postgres (Schema) and on an SQLite file
// (SQLite), which needs no server: every helper takes either database. The
// statements that move time are in testkit.sql and testkit_sqlite.sql.
//
// It is for tests: import it from _test.go files only.
package leaseholdtest

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/telemetry"
)

//go:embed testkit.sql testkit_sqlite.sql
var kit embed.FS

// Database is what the kit's helpers take: the pool Schema returns, or the
// *sql.DB SQLite returns.
type Database interface {
	*pgxpool.Pool | *sql.DB
}

// store is what the kit needs of the adapter of its database.
type store interface {
	runner.Store
	GetEpisode(ctx context.Context, id int64) (episodes.Episode, error)
	InspectEpisodes(ctx context.Context, q inspect.EpisodeQuery) ([]episodes.Episode, error)
}

// storeOf returns db's adapter; db is a Database.
func storeOf(db any) store {
	if d, ok := db.(*sql.DB); ok {
		return sqlite.New(d)
	}
	return postgres.New(db.(*pgxpool.Pool))
}

// TB is the part of testing.TB the kit uses; a *testing.T or *testing.B
// is one.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

var _ TB = testing.TB(nil)

// Schema returns a pool on a fresh schema of the Postgres at url, with
// leasehold's migrations applied, dropped when the test ends. url "" is
// TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres.
func Schema(t TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, drop, err := pgtest.NewSchema(context.Background(), pgtest.Options{URL: url})
	if err != nil {
		t.Fatalf("leaseholdtest: a migrated schema on %s: %v", orDefault(url), err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("leaseholdtest: %v", err)
		}
	})
	return pool
}

// SQLite returns a *sql.DB (sqlite.Open: WAL, busy_timeout, BEGIN
// IMMEDIATE) on a new, migrated SQLite file in a temporary directory,
// closed and removed when the test ends: no database server needed.
func SQLite(t TB) *sql.DB {
	t.Helper()
	dir, err := os.MkdirTemp("", "leaseholdtest-*")
	if err != nil {
		t.Fatalf("leaseholdtest: %v", err)
	}
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "leasehold.db"))
	if err == nil {
		if err = sqlite.Migrate(ctx, db); err != nil {
			_ = db.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("leaseholdtest: a migrated SQLite file: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Logf("leaseholdtest: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	return db
}

func orDefault(url string) string {
	if url == "" {
		return pgtest.URL()
	}
	return url
}

// Run runs one episode of strategy s with payload on a node of its own
// against db (no cluster, no schedule), waits until it ends
// (a minute at most) and returns the episode as the database left it:
// its status, error class, result and attempts. exp may set Recovery,
// MaxAttempts, Budget and Retry; its ID and Trigger are the kit's.
func Run[D Database](t TB, db D, s runner.Strategy, payload any, exp runner.Expectation) episodes.Episode {
	t.Helper()
	ended := make(chan struct{}, 1)
	obs := observer(func(e telemetry.Event) {
		switch e.Name {
		case runner.EventCompleted, runner.EventFailed, runner.EventCanceled, runner.EventLeaseLost:
			select {
			case ended <- struct{}{}:
			default:
			}
		}
	})
	st := storeOf(db)
	node, err := runner.NewNode(runner.Config{Store: st, Identity: "leaseholdtest",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: obs})
	if err != nil {
		t.Fatalf("leaseholdtest: node: %v", err)
	}
	exp.ID, exp.Trigger, exp.Strategy = "run", runner.Manual{}, s
	if err := node.Register(runner.Actor{ID: "leaseholdtest", Expectations: []runner.Expectation{exp}}); err != nil {
		t.Fatalf("leaseholdtest: register: %v", err)
	}
	ctx := context.Background()
	if err := node.Start(ctx); err != nil {
		t.Fatalf("leaseholdtest: start: %v", err)
	}
	defer func() { _ = node.Stop(ctx) }()
	out, err := node.RunManual(ctx, "leaseholdtest", "run", payload)
	if err != nil {
		t.Fatalf("leaseholdtest: run: %v", err)
	}
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatalf("leaseholdtest: episode %d did not end within a minute", out.EpisodeID)
	}
	ep, err := st.GetEpisode(ctx, out.EpisodeID)
	if err != nil {
		t.Fatalf("leaseholdtest: read episode %d: %v", out.EpisodeID, err)
	}
	return ep
}

type observer func(telemetry.Event)

func (o observer) Observe(_ context.Context, e telemetry.Event) { o(e) }

// Want selects the episodes Fired looks for: Actor is required; an empty
// Expectation or DedupeKey, or a nil Payload, matches any. Payload matches
// when its JSON equals the episode's (as values, whatever the key order).
type Want struct {
	Actor, Expectation, DedupeKey string
	Payload                       any
}

// Fired requires that a trigger created at least one live episode that
// matches w, and returns them, newest first.
func Fired[D Database](t TB, db D, w Want) []episodes.Episode {
	t.Helper()
	got, err := fired(storeOf(db), w)
	if err != nil {
		t.Fatalf("leaseholdtest: %v", err)
	}
	if len(got) == 0 {
		t.Fatalf("leaseholdtest: no episode of %s/%s matches %+v", w.Actor, w.Expectation, w)
	}
	return got
}

func fired(store store, w Want) ([]episodes.Episode, error) {
	if w.Actor == "" {
		return nil, fmt.Errorf("Want.Actor is required")
	}
	ctx := context.Background()
	list, err := store.InspectEpisodes(ctx, inspect.EpisodeQuery{ActorID: w.Actor, DedupeKey: w.DedupeKey, Limit: 1000})
	if err != nil {
		return nil, err
	}
	var want any
	if w.Payload != nil {
		raw, err := json.Marshal(w.Payload)
		if err != nil {
			return nil, fmt.Errorf("Want.Payload: %w", err)
		}
		_ = json.Unmarshal(raw, &want)
	}
	var out []episodes.Episode
	for _, e := range list {
		if w.Expectation != "" && e.ExpectationID != w.Expectation {
			continue
		}
		if want != nil {
			full, err := store.GetEpisode(ctx, e.ID)
			if err != nil {
				return nil, err
			}
			var have any
			_ = json.Unmarshal(full.Payload, &have)
			if !reflect.DeepEqual(want, have) {
				continue
			}
			e = full
		}
		out = append(out, e)
	}
	return out, nil
}

// ExpireLease makes the lease on claim key (an episode's dedupe key, or
// episode:{id}) past on the database clock, as if its holder died a second
// ago: recovery treats it as an orphan at once.
func ExpireLease[D Database](t TB, db D, key string) {
	t.Helper()
	if n := exec(t, db, "ExpireLease", key); n == 0 {
		t.Fatalf("leaseholdtest: no claimed lease on %q to expire", key)
	}
}

// MakeDue makes available episode id due now: a delayed run, or a retry
// waiting out its backoff, is taken by the next poll (call node.PollNow to
// poll at once).
func MakeDue[D Database](t TB, db D, id int64) {
	t.Helper()
	if n := exec(t, db, "MakeDue", id); n == 0 {
		t.Fatalf("leaseholdtest: episode %d is not available work to make due", id)
	}
}

// kitSQL holds the kit's statements by dialect and name, each file parsed
// on first use (queries.Statement).
var kitSQL = map[string]map[string]func() (string, error){
	"postgres": {
		"ExpireLease": queries.Statement(kit, "testkit.sql", "ExpireLease"),
		"MakeDue":     queries.Statement(kit, "testkit.sql", "MakeDue"),
	},
	"sqlite": {
		"ExpireLease": queries.Statement(kit, "testkit_sqlite.sql", "ExpireLease"),
		"MakeDue":     queries.Statement(kit, "testkit_sqlite.sql", "MakeDue"),
	},
}

func exec(t TB, db any, name string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	var (
		n   int64
		err error
		q   string
	)
	switch d := db.(type) {
	case *sql.DB:
		if q, err = kitSQL["sqlite"][name](); err == nil {
			var res sql.Result
			if res, err = d.ExecContext(ctx, q, args...); err == nil {
				n, err = res.RowsAffected()
			}
		}
	case *pgxpool.Pool:
		if q, err = kitSQL["postgres"][name](); err == nil {
			tag, terr := d.Exec(ctx, q, args...)
			n, err = tag.RowsAffected(), terr
		}
	}
	if err != nil {
		t.Fatalf("leaseholdtest: %s: %v", name, err)
	}
	return n
}
