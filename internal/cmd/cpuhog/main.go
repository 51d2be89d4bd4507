// Command cpuhog keeps one CPU busy until it is stopped: the load that
// `make test-loaded` runs beside `make test` (scripts/with-cpu-load.sh
// starts two, one per core of the 2-core machine the suite must pass on).
// It needs nothing but Go, where stress-ng would need an install.
//
// It stops on SIGTERM or SIGINT, and by itself within 100 ms of its
// parent's end (its parent is no longer -parent): the script execs the
// command it loads, so the hogs end with the command, however it ends.
//
// With -probe D it measures instead of loading: for D it sleeps for
// -probe.every in a loop and reports how late each wake-up came (p50, p99,
// max), which is the scheduling delay a timer of a test sees on this host
// at that moment; run it beside the hogs (and a race-enabled test binary)
// to see what a timing bound must allow for.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	probe := flag.Duration("probe", 0, "measure timer wake-up lateness for this long instead of burning a CPU")
	every := flag.Duration("probe.every", 10*time.Millisecond, "the sleep each probe measures")
	parent := flag.Int("parent", 0, "stop once this process is no longer the parent (default: the parent at start)")
	flag.Parse()
	if *probe > 0 {
		runProbe(*probe, *every)
		return
	}
	runtime.GOMAXPROCS(1) // one hog, one core
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if *parent == 0 {
		*parent = os.Getppid()
	}
	orphaned := make(chan struct{})
	go func() {
		// Checked at once too: the parent may have ended before we started.
		for ; ; time.Sleep(100 * time.Millisecond) {
			if os.Getppid() != *parent {
				close(orphaned)
				return
			}
		}
	}()
	go burn()
	select {
	case <-stop:
	case <-orphaned:
	}
}

// burn spins for ever, counting, so that the loop is not optimised away.
func burn() {
	for {
		spins.Add(1)
	}
}

var spins atomic.Uint64

// runProbe sleeps for every, again and again for d, and prints how late the
// wake-ups were.
func runProbe(d, every time.Duration) {
	var late []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		t0 := time.Now()
		time.Sleep(every)
		late = append(late, time.Since(t0)-every)
	}
	slices.Sort(late)
	q := func(p float64) time.Duration { return late[min(len(late)-1, int(p*float64(len(late))))] }
	fmt.Printf("cpuhog probe: %d sleeps of %v over %v; late by p50 %v, p99 %v, p99.9 %v, max %v\n",
		len(late), every, d, q(0.50).Round(time.Microsecond), q(0.99).Round(time.Microsecond),
		q(0.999).Round(time.Microsecond), late[len(late)-1].Round(time.Microsecond))
}
