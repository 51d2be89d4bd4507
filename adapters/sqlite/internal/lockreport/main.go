// Command lockreport summarizes the write-lock profile of adapters/sqlite
// (LEASEHOLD_SQLITE_LOCK_PROFILE): for each statement or transaction kind,
// how long its writers waited in their process's queue (gate), for SQLite's
// lock (lock), in total (wait), and how long they held the lock (hold):
// p50, p99 and max, and how many failed.
//
//	LEASEHOLD_SQLITE_LOCK_PROFILE=/tmp/prof go test ...
//	go run ./adapters/sqlite/internal/lockreport /tmp/prof
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

type sample struct {
	start                                int64 // unix µs
	name, lane, err                      string
	gate, turn, lock, hold, commit, wait int64 // µs; lock -1: not split from hold
}

type group struct {
	name, lane                           string
	gate, turn, lock, hold, commit, wait []int64
	errs                                 map[string]int
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: lockreport DIR")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "lock-*.tsv"))
	if err != nil || len(files) == 0 {
		fmt.Fprintln(os.Stderr, "lockreport: no lock-*.tsv in", os.Args[1], err)
		os.Exit(1)
	}
	var all []sample
	for _, f := range files {
		s, err := read(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lockreport:", err)
			os.Exit(1)
		}
		all = append(all, s...)
	}
	report(all, len(files))
}

func read(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 9 {
			continue // a line cut short by SIGKILL
		}
		n := make([]int64, 6)
		ok := true
		for i, x := range []string{c[0], c[3], c[4], c[5], c[6], c[7]} {
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				ok = false
			}
			n[i] = v
		}
		if !ok {
			continue
		}
		s := sample{start: n[0], name: c[1], lane: c[2], gate: n[1], turn: n[2], lock: n[3], hold: n[4], commit: n[5], err: c[8]}
		s.wait = s.gate + s.turn + max(s.lock, 0)
		out = append(out, s)
	}
	return out, sc.Err()
}

func report(all []sample, procs int) {
	if len(all) == 0 {
		fmt.Println("no samples")
		return
	}
	first, last := all[0].start, all[0].start
	groups := map[string]*group{}
	var lease, other []int64
	var held int64
	for _, s := range all {
		first, last = min(first, s.start), max(last, s.start+s.wait+s.hold)
		k := s.name + "\x00" + s.lane
		g := groups[k]
		if g == nil {
			g = &group{name: s.name, lane: s.lane, errs: map[string]int{}}
			groups[k] = g
		}
		if s.err != "" {
			g.errs[s.err]++
		}
		g.gate = append(g.gate, s.gate)
		g.turn = append(g.turn, s.turn)
		if s.lock >= 0 {
			g.lock = append(g.lock, s.lock)
		}
		g.wait = append(g.wait, s.wait)
		if s.err == "" {
			g.hold = append(g.hold, s.hold)
			g.commit = append(g.commit, s.commit)
			held += s.hold
		}
		if s.lane == "lease" {
			lease = append(lease, s.wait)
		} else {
			other = append(other, s.wait)
		}
	}
	wall := time.Duration(last-first) * time.Microsecond
	fmt.Printf("%d writes from %d processes over %v; the write lock was held %.0f%% of the time (sum of holds / wall)\n",
		len(all), procs, wall.Round(time.Millisecond), 100*float64(held)/float64(max(last-first, 1)))
	fmt.Printf("wait (gate + turn + lock), lease lane: %s\n", dist(lease))
	fmt.Printf("wait (gate + turn + lock), other lane: %s\n\n", dist(other))
	gs := make([]*group, 0, len(groups))
	for _, g := range groups {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(a, b *group) int { return int(sum(b.hold) - sum(a.hold)) })
	fmt.Printf("%-44s %5s %5s | %-18s | %-18s | %-18s | %-18s | %-18s | %-18s | %s\n", "statement / transaction (ms)", "lane", "n",
		"gate p50/p99/max", "turn p50/p99/max", "lock p50/p99/max", "wait p50/p99/max", "hold p50/p99/max", "commit p50/p99/max", "hold total, failures")
	for _, g := range gs {
		var errs []string
		for k, v := range g.errs {
			errs = append(errs, fmt.Sprintf("%d %s", v, k))
		}
		slices.Sort(errs)
		name := g.name
		if len(name) > 44 {
			name = name[:41] + "..."
		}
		fmt.Printf("%-44s %5s %5d | %-18s | %-18s | %-18s | %-18s | %-18s | %-18s | %v %s\n", name, g.lane, len(g.wait),
			pq(g.gate), pq(g.turn), pq(g.lock), pq(g.wait), pq(g.hold), pq(g.commit), (time.Duration(sum(g.hold)) * time.Microsecond).Round(time.Millisecond), strings.Join(errs, ", "))
	}
}

func sum(v []int64) (t int64) {
	for _, x := range v {
		t += x
	}
	return t
}

func dist(v []int64) string {
	if len(v) == 0 {
		return "none"
	}
	return fmt.Sprintf("n %d, %s", len(v), pq(v))
}

// pq is p50/p99/max in milliseconds.
func pq(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	v = slices.Clone(v)
	slices.Sort(v)
	at := func(p float64) float64 { return float64(v[min(len(v)-1, int(p*float64(len(v))))]) / 1000 }
	return fmt.Sprintf("%s/%s/%s", ms(at(0.5)), ms(at(0.99)), ms(float64(v[len(v)-1])/1000))
}

func ms(x float64) string {
	if x >= 100 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}
