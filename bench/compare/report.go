package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// acquirePair is one leasehold acquire run and the pgbench run after it.
type acquirePair struct {
	round      int
	leasehold  float64
	pgbench    float64
	pgbenchErr error
}

func (p acquirePair) pgbenchText() string {
	if p.pgbenchErr != nil {
		return "skipped: " + p.pgbenchErr.Error()
	}
	return fmt.Sprintf("%.0f/s", p.pgbench)
}

func printProgress(out io.Writer, r result) {
	fmt.Fprintf(out, "  round %d %-18s %6.0f units/s  p50 %-8v p99 %-8v wall %v\n", r.round, r.system,
		r.throughput(), ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), r.wall.Round(time.Millisecond))
}

// pooled merges a system's rounds: units over summed wall time, percentiles
// over every unit's latency, counters over every unit.
func pooled(rs []result) result {
	p := result{system: rs[0].system}
	for _, r := range rs {
		p.units += r.units
		p.wall += r.wall
		p.lat = append(p.lat, r.lat...)
		p.stmts += r.stmts
		p.xacts += r.xacts
		if p.byName == nil {
			p.byName = map[string]int64{}
		}
		for k, v := range r.byName {
			p.byName[k] += v
		}
		p.duplicates += r.duplicates
		p.dbDone += r.dbDone
		p.again += r.again
		p.unknown += r.unknown
		if r.srv < 0 || p.srv < 0 {
			p.srv = -1
		} else {
			p.srv += r.srv
		}
	}
	slices.Sort(p.lat)
	return p
}

// report prints the tables and reports whether every system ran every unit
// exactly once.
func report(out io.Writer, cfg config, srv *serverStats, lh [][]result, rv []result, acq []acquirePair) bool {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "round\tsystem\tunits/s\tp50\tp99\tstmts/unit\txacts/unit\t%s\tduplicates\tdone in db\t\n", srv.what())
	row := func(label string, r result) {
		srvText := "n/a"
		if r.srv >= 0 {
			srvText = fmt.Sprintf("%.2f", float64(r.srv)/float64(r.units))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%v\t%v\t%.2f\t%.2f\t%s\t%d\t%d/%d\t\n", label, r.system, r.throughput(),
			ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), perUnit(r.stmts, r), perUnit(r.xacts, r), srvText,
			r.duplicates, r.dbDone, r.units)
	}
	for i := range rv {
		for _, v := range lh {
			row(fmt.Sprint(v[i].round), v[i])
		}
		row(fmt.Sprint(rv[i].round), rv[i])
	}
	pr := pooled(rv)
	var pls []result
	for _, v := range lh {
		pls = append(pls, pooled(v))
		row("all", pls[len(pls)-1])
	}
	row("all", pr)
	_ = tw.Flush()

	tput := func(l, r result) float64 { return l.throughput() / r.throughput() }
	p50 := func(l, r result) float64 { return dur(percentile(l.lat, 50)) / dur(percentile(r.lat, 50)) }
	p99 := func(l, r result) float64 { return dur(percentile(l.lat, 99)) / dur(percentile(r.lat, 99)) }
	stm := func(l, r result) float64 { return perUnit(l.stmts, l) / perUnit(r.stmts, r) }
	xac := func(l, r result) float64 { return perUnit(l.xacts, l) / perUnit(r.xacts, r) }
	for vi, v := range lh {
		perRound := func(f func(l, r result) float64) string {
			var parts []string
			for i := range rv {
				parts = append(parts, fmt.Sprintf("%.2f", f(v[i], rv[i])))
			}
			return strings.Join(parts, " ")
		}
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "ratio %s / River\tall rounds\tper round\tbetter for leasehold when\n", v[0].system)
		fmt.Fprintf(tw, "throughput\t%.2f\t%s\t> 1\n", tput(pls[vi], pr), perRound(tput))
		fmt.Fprintf(tw, "p50 latency\t%.2f\t%s\t< 1\n", p50(pls[vi], pr), perRound(p50))
		fmt.Fprintf(tw, "p99 latency\t%.2f\t%s\t< 1\n", p99(pls[vi], pr), perRound(p99))
		fmt.Fprintf(tw, "stmts/unit\t%.2f\t%s\t< 1\n", stm(pls[vi], pr), perRound(stm))
		fmt.Fprintf(tw, "xacts/unit\t%.2f\t%s\t< 1\n", xac(pls[vi], pr), perRound(xac))
		_ = tw.Flush()
	}

	expected := (cfg.nodes - 1) * cfg.triggers * len(rv)
	fmt.Fprintf(out, "\nexactly-once check (every unit done once in the database; %d submissions per round reported duplicate):\n",
		(cfg.nodes-1)*cfg.triggers)
	allOK := true
	for _, r := range append(pls, pr) {
		verdict := "ok"
		if r.dbDone != r.units || r.again != 0 || r.unknown != 0 || r.duplicates != expected {
			verdict = "MISMATCH"
			allOK = false
		}
		fmt.Fprintf(out, "  %-18s %s: done %d/%d, duplicates %d/%d, repeated completions %d, unknown completions %d\n",
			r.system, verdict, r.dbDone, r.units, r.duplicates, expected, r.again, r.unknown)
	}

	fmt.Fprintln(out, "\nstatements per unit by name, all rounds (sqlc name, else first keyword; under 0.005 left out):")
	for _, r := range append(pls, pr) {
		fmt.Fprintf(out, "  %-18s %s\n", r.system, breakdown(r))
	}

	fmt.Fprintf(out, "\nclaim acquire, %d callers, %v per run, fresh random keys, the same AcquireClaim statement:\n",
		cfg.acquireClients, cfg.acquireTime)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "round\tleasehold Store.Acquire/s\tpgbench tps\tleasehold / pgbench\t\n")
	var sumL, sumP float64
	complete := len(acq) > 0
	for _, p := range acq {
		ratio := "n/a"
		if p.pgbenchErr == nil && p.pgbench > 0 {
			ratio = fmt.Sprintf("%.2f", p.leasehold/p.pgbench)
			sumP += p.pgbench
		} else {
			complete = false
		}
		sumL += p.leasehold
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t\n", p.round, p.leasehold, strings.TrimSuffix(p.pgbenchText(), "/s"), ratio)
	}
	if complete {
		fmt.Fprintf(tw, "all\t%.0f\t%.0f\t%.2f\t\n", sumL/float64(len(acq)), sumP/float64(len(acq)), sumL/sumP)
	}
	_ = tw.Flush()
	return allOK
}

func perUnit(n int64, r result) float64 { return float64(n) / float64(r.units) }

// breakdown lists r's statements by name, most frequent first, per unit.
func breakdown(r result) string {
	names := make([]string, 0, len(r.byName))
	for k := range r.byName {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(r.byName[b], r.byName[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range names {
		if v := perUnit(r.byName[k], r); v >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
		}
	}
	return strings.Join(parts, ", ")
}

// ms rounds a latency for display.
func ms(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}

func dur(d time.Duration) float64 { return float64(d) }
