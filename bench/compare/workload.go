package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The workloads. Every one runs on cfg.nodes members per system, each member
// with its own pool; they differ in who submits which unit, how, when the
// members work, and how long a unit holds its lease.
const (
	// wlBroadcast: every unique unit is submitted on every member, one call
	// per unit, while the members run (the duplicates are the point).
	wlBroadcast = "broadcast"
	// wlSingle: every unit is submitted once, one call per unit, on a member
	// drawn at random, while the members run.
	wlSingle = "single"
	// wlBulk: a burn-down. A loader inserts every unit in transactions of
	// cfg.bulkBatch units while the members are started but gated; then
	// the gate opens and they work them all off, as `river bench -n`
	// measures River.
	wlBulk = "bulk"
	// wlLong: submitted as in single, but every unit holds its lease (a
	// leasehold run, a running River job) for cfg.longHold before it ends,
	// so what a held unit costs (heartbeats, renewals, their WAL) shows.
	wlLong = "long"
)

var allWorkloads = []string{wlBroadcast, wlSingle, wlBulk, wlLong}

// defaultBulkUnits is bulk's default size: what keeps `make bench-compare`
// within minutes on 2 cores. The README's figures name the size they were
// taken with.
const defaultBulkUnits = 20_000

// workload is one workload's shape, the same for both systems.
type workload struct {
	name    string
	units   int           // unique units per round
	workers int           // per member: leasehold actor MaxConcurrent, River queue MaxWorkers
	batch   int           // bulk: units per insert transaction
	hold    time.Duration // long: how long each unit runs
	timeout time.Duration
}

func (w workload) bulk() bool { return w.name == wlBulk }

// submitters returns, for each member, the units it submits in round: all of
// them on every member (broadcast), each on one member drawn at random
// (single and long; the draw depends on the round only, so every system of
// a round gets the same one), or none (bulk: the loader submits).
func (w workload) submitters(nodes, round int) [][]int {
	out := make([][]int, nodes)
	switch w.name {
	case wlBroadcast:
		all := make([]int, w.units)
		for i := range all {
			all[i] = i
		}
		for m := range out {
			out[m] = all
		}
	case wlSingle, wlLong:
		r := rand.New(rand.NewPCG(uint64(round), 0x6c68))
		for i := range w.units {
			m := r.IntN(nodes)
			out[m] = append(out[m], i)
		}
	}
	return out
}

// duplicates is how many submissions per round each system must report as
// duplicates: every member but the first to insert, per unit, in broadcast;
// none otherwise.
func (w workload) duplicates(nodes int) int {
	if w.name == wlBroadcast {
		return (nodes - 1) * w.units
	}
	return 0
}

// describe is the workload's line in the output header.
func (w workload) describe(cfg config) string {
	switch w.name {
	case wlBroadcast:
		return fmt.Sprintf("%d members × %d unique units per round, every unit submitted on every member (%d submissions), "+
			"%d producers/member, %d workers/member, %d conns/member", cfg.nodes, w.units, cfg.nodes*w.units,
			cfg.producers, w.workers, cfg.conns)
	case wlSingle:
		return fmt.Sprintf("%d members, %d unique units per round, each submitted once on a member drawn at random, "+
			"%d producers/member, %d workers/member, %d conns/member", cfg.nodes, w.units, cfg.producers, w.workers, cfg.conns)
	case wlLong:
		return fmt.Sprintf("%d members, %d unique units per round, each submitted once on a member drawn at random and "+
			"holding its lease %v (a wait that honours its context) before it ends; %d producers/member, %d workers/member, "+
			"%d conns/member", cfg.nodes, w.units, w.hold, cfg.producers, w.workers, cfg.conns)
	default:
		return fmt.Sprintf("burn-down of %d unique units per round: %d members start gated (leasehold: mode trigger_only; "+
			"River: its queue paused), a loader (its own pool) inserts the units in transactions of %d from %d goroutines, "+
			"then the gate opens and the members work them off; %d workers/member, %d conns/member; units/s counts from the "+
			"gate's opening to the last completion (as river bench -n does), insert/s the load before it",
			w.units, cfg.nodes, w.batch, cfg.producers, w.workers, cfg.conns)
	}
}

// parseWorkloads reads -workload: one name, a comma-separated list, or all.
func parseWorkloads(s string) ([]string, error) {
	if s == "all" {
		return allWorkloads, nil
	}
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case wlBroadcast, wlSingle, wlBulk, wlLong:
		default:
			return nil, fmt.Errorf("-workload: unknown workload %q (want broadcast, single, bulk, long, a comma-separated list, or all)", name)
		}
		for _, seen := range out {
			if seen == name {
				return nil, fmt.Errorf("-workload: %q named twice", name)
			}
		}
		out = append(out, name)
	}
	return out, nil
}

// River's client configurations (-river-config). Both keep every other
// Config field at River's default (the batch completer among them);
// MaxWorkers is the workload's worker count, the same as leasehold's
// MaxConcurrent, in both.
const (
	riverDefault = "default"
	riverTuned   = "tuned"

	// River's own benchmark (cmd/river/riverbench, `river bench`) sets
	// these two on its client; its other choice, MaxWorkers 2,000 on one
	// client, is replaced by the workload's worker count.
	riverTunedFetchCooldown     = 2 * time.Millisecond
	riverTunedFetchPollInterval = 20 * time.Millisecond
)

// riverConfigText states River's configuration for the output and README.
func riverConfigText(name string) string {
	if name == riverTuned {
		return fmt.Sprintf("tuned as `river bench` tunes its client: FetchCooldown %v, FetchPollInterval %v "+
			"(River's defaults: 100ms, 1s); MaxWorkers = the workload's workers/member (river bench: 2,000 on one client); "+
			"every other Config field at River's default", riverTunedFetchCooldown, riverTunedFetchPollInterval)
	}
	return "default Config (FetchCooldown 100ms, FetchPollInterval 1s); MaxWorkers = the workload's workers/member"
}

// riverVariant is how River's side inserts its jobs: InsertMany (Insert
// when a call carries one job) or InsertManyFast (COPY), with or without
// UniqueOpts{ByArgs: true}.
type riverVariant struct {
	fast, unique bool
}

// likeForLike is the River row the ratios and the summary name first:
// leasehold always deduplicates and reports each duplicate, as InsertMany
// with UniqueOpts does; InsertManyFast with UniqueOpts fails its whole call
// on one duplicate instead.
var likeForLike = riverVariant{unique: true}

func (v riverVariant) name() string {
	s := "River InsertMany"
	if v.fast {
		s = "River InsertManyFast"
	}
	if v.unique {
		s += "+unique"
	}
	return s
}

// riverVariants are the River rows of workload w: -river-insert × -river-unique,
// less those w cannot run. Broadcast needs uniqueness (every unit is
// submitted on every member: without it each would run once per member),
// and InsertManyFast there only one job per call (a COPY that meets a
// duplicate fails whole, so a batch would lose its other jobs).
func riverVariants(cfg config, w workload) (vs []riverVariant, left []string) {
	for _, fast := range []bool{false, true} {
		if (fast && cfg.riverInsert == "many") || (!fast && cfg.riverInsert == "fast") {
			continue
		}
		for _, unique := range []bool{true, false} {
			if (unique && cfg.riverUnique == "off") || (!unique && cfg.riverUnique == "on") {
				continue
			}
			v := riverVariant{fast: fast, unique: unique}
			switch {
			case w.name == wlBroadcast && !unique:
				left = append(left, v.name()+" (without uniqueness every member's submission would run)")
			case w.name == wlBroadcast && fast && cfg.riverBatch > 1:
				left = append(left, v.name()+" (-river-batch > 1: a COPY that meets one duplicate inserts none of its jobs)")
			default:
				vs = append(vs, v)
			}
		}
	}
	return vs, left
}

// system is one row of a round: a leasehold variant or a River variant.
type system struct {
	name        string
	river       bool
	variant     riverVariant // River
	eventJitter bool         // leasehold
}

// systems lists workload w's rows in the order round runs them: leasehold's
// first in odd rounds, River's first in even ones.
func systems(cfg config, w workload, round int) []system {
	var lh, rv []system
	if cfg.jitter != "on" || !jitterApplies(w) {
		lh = append(lh, system{name: sysLeasehold})
	}
	if cfg.jitter != "off" && jitterApplies(w) {
		lh = append(lh, system{name: sysLeaseholdEventJitter, eventJitter: true})
	}
	vs, _ := riverVariants(cfg, w)
	for _, v := range vs {
		rv = append(rv, system{name: v.name(), river: true, variant: v})
	}
	if round%2 == 0 {
		return append(rv, lh...)
	}
	return append(lh, rv...)
}

// jitterApplies: EventJitter waits inside Fire, which broadcast and single
// measure; bulk fires nothing one by one, and long is about holding.
func jitterApplies(w workload) bool { return w.name == wlBroadcast || w.name == wlSingle }

// load calls insert for every batch of w's units (w.batch units each, the
// last one shorter) from goroutines goroutines, until all are in or one fails.
func load(ctx context.Context, goroutines int, w workload, insert func(ctx context.Context, first, n int) error, fail func(error)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for ctx.Err() == nil {
				first := int(next.Add(int64(w.batch))) - w.batch
				if first >= w.units {
					return
				}
				if err := insert(ctx, first, min(w.batch, w.units-first)); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// newWorkload is the workload name with cfg's sizes.
func newWorkload(cfg config, name string) workload {
	w := workload{name: name, units: cfg.triggers, workers: cfg.workers, timeout: cfg.timeout}
	switch name {
	case wlBulk:
		w.units, w.workers, w.batch = cfg.bulkUnits, cfg.bulkWorkers, cfg.bulkBatch
	case wlLong:
		w.units, w.workers, w.hold = cfg.longUnits, cfg.longWorkers, cfg.longHold
	}
	if w.timeout == 0 {
		w.timeout = time.Minute + time.Duration(w.units/cfg.producers+1)*250*time.Millisecond
		switch name {
		case wlBulk:
			w.timeout = time.Minute + time.Duration(w.units)*3*time.Millisecond
		case wlLong:
			// Three times the units' holds back to back on every slot.
			w.timeout += 3 * time.Duration(w.units/(cfg.nodes*w.workers)+1) * w.hold
		}
	}
	return w
}
