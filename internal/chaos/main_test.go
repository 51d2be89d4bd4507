//go:build unix

package chaos_test

import (
	"embed"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/sql/queries"
)

// Knobs. CHAOS=1 selects the long version (make chaos) and also prints the
// report on stdout.
var (
	flagDuration = flag.Duration("chaos.duration", 0, "how long faults are injected (default 20s, or 2m with CHAOS=1)")
	flagWorkers  = flag.Int("chaos.workers", 4, "worker processes")
	flagSeed     = flag.Uint64("chaos.seed", 0, "seed of the fault schedule; 0 picks one (it is printed)")
	flagEvery    = flag.Duration("chaos.every", 0, "one new trigger per this (default 15ms, or 100ms on SQLite)")
)

func TestMain(m *testing.M) {
	dumpStacksOnSignal(os.Getenv(envStacks), os.Getenv(envWorker))
	if os.Getenv(envRolling) != "" {
		os.Exit(rollingWorker())
	}
	if os.Getenv(envWorker) != "" {
		os.Exit(worker())
	}
	goleak.VerifyTestMain(m)
}

// config is one chaos run's settings.
type config struct {
	workers   int
	duration  time.Duration // faults and new triggers, then the final phase
	seed      uint64
	lease     time.Duration // workers' work-claim lease
	sweep     time.Duration // workers' recovery sweep: initial delay and interval
	fireEvery time.Duration // one new trigger per tick
	fanout    int           // workers each trigger is sent to
	loud      bool          // CHAOS=1: the report goes to stdout too
	dialect   string        // "" (Postgres, TestChaos) or dialectSQLite (TestChaosSQLite)
}

const (
	shortDuration = 20 * time.Second
	longDuration  = 2 * time.Minute
)

func loadConfig(seed uint64) config {
	c := config{
		workers:   *flagWorkers,
		duration:  shortDuration,
		seed:      seed,
		lease:     2 * time.Second,
		sweep:     500 * time.Millisecond,
		fireEvery: 15 * time.Millisecond,
		fanout:    2,
		loud:      os.Getenv("CHAOS") != "" && os.Getenv("CHAOS") != "0",
	}
	if c.loud {
		c.duration = longDuration
	}
	if *flagDuration > 0 {
		c.duration = *flagDuration
	}
	if *flagSeed != 0 {
		c.seed = *flagSeed
	}
	if *flagEvery > 0 {
		c.fireEvery = *flagEvery
	}
	return c
}

// poll is the workers' trigger-request poll interval (worker_test.go: the
// backend's PollConfig).
func (c config) poll() time.Duration {
	if c.dialect == dialectSQLite {
		return sqlitePoll
	}
	return pgPoll
}

func (c config) String() string {
	return fmt.Sprintf("%d workers, lease %v, sweep every %v, faults for %v, a trigger every %v sent to %d workers, seed %d",
		c.workers, c.lease, c.sweep, c.duration, c.fireEvery, c.fanout, c.seed)
}

//go:embed chaos.sql
var chaosSQL embed.FS

// chaosQueries are the suite's statements, by name, from chaos.sql.
var chaosQueries = func() map[string]queries.Query {
	qs, err := queries.Parse(chaosSQL, "chaos.sql")
	if err != nil {
		panic(fmt.Sprintf("chaos.sql: %v", err)) // embedded at build time; every test run parses it
	}
	return qs
}()

// query returns the named statement of chaos.sql.
func query(name string) string {
	q, ok := chaosQueries[name]
	if !ok {
		panic("chaos.sql has no query " + name) // a programming error, caught by TestChaosQueries
	}
	return q.SQL
}
