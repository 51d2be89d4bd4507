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
// with its own pool; they differ in who submits which unit, how, and when
// the members work.
const (
	// wlBroadcast: every unique unit is submitted on every member, one call
	// per unit, while the members run (the duplicates are the point).
	wlBroadcast = "broadcast"
	// wlSingle: every unit is submitted once, one call per unit, on a member
	// drawn at random, while the members run.
	wlSingle = "single"
	// wlBulk: a burn-down. A loader inserts every unit in transactions of
	// cfg.bulkBatch units while no member runs; then the members start and
	// work them all off, as `river bench -n` measures River.
	wlBulk = "bulk"
)

var allWorkloads = []string{wlBroadcast, wlSingle, wlBulk}

// defaultBulkUnits is bulk's default size: what keeps `make bench-compare`
// (three workloads, three rounds each, both systems) near 5 minutes on 2
// cores. The README's figures name the size they were taken with.
const defaultBulkUnits = 20_000

// workload is one workload's shape, the same for both systems.
type workload struct {
	name    string
	units   int // unique units per round
	workers int // per member: leasehold actor MaxConcurrent, River queue MaxWorkers
	batch   int // bulk: units per insert transaction
	timeout time.Duration
}

func (w workload) bulk() bool { return w.name == wlBulk }

// submitters returns, for each member, the units it submits in round: all of
// them on every member (broadcast), each on one member drawn at random
// (single; the draw depends on the round only, so both systems of a round
// get the same one), or none (bulk: the loader submits).
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
	case wlSingle:
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
	default:
		return fmt.Sprintf("burn-down of %d unique units per round: a loader (its own pool) inserts them in transactions of %d "+
			"from %d goroutines while no member runs, then %d members start and work them off; %d workers/member, %d conns/member; "+
			"units/s counts from the members' start to the last completion (as river bench -n does), insert/s the load before it",
			w.units, w.batch, cfg.producers, cfg.nodes, w.workers, cfg.conns)
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
		case wlBroadcast, wlSingle, wlBulk:
		default:
			return nil, fmt.Errorf("-workload: unknown workload %q (want broadcast, single, bulk, a comma-separated list, or all)", name)
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
	if name == wlBulk {
		w.units, w.workers, w.batch = cfg.bulkUnits, cfg.bulkWorkers, cfg.bulkBatch
	}
	if w.timeout == 0 {
		w.timeout = time.Minute + time.Duration(cfg.triggers/cfg.producers+1)*250*time.Millisecond
		if name == wlBulk {
			w.timeout = time.Minute + time.Duration(w.units)*3*time.Millisecond
		}
	}
	return w
}
