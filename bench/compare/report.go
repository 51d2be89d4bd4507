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
	extra := ""
	if r.insert > 0 {
		extra = fmt.Sprintf("  (load %v: %.0f units/s inserted; members' Start calls %v)", r.insert.Round(time.Millisecond),
			r.insertRate(), ms(r.startUp))
	}
	fmt.Fprintf(out, "  round %d %-21s %6.0f units/s  p50 %-8v p99 %-8v wall %v%s\n", r.round, r.system,
		r.throughput(), ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), r.wall.Round(time.Millisecond), extra)
}

// section is one workload's rounds: one []result per leasehold variant, and
// River's.
type section struct {
	w     workload
	lh    [][]result
	river []result
}

// pooled merges a system's rounds: units over summed wall (or burn-down)
// time, percentiles over every unit's latency, counters over every unit.
func pooled(rs []result) result {
	p := result{system: rs[0].system, workload: rs[0].workload, members: rs[0].members, byName: map[string]int64{}}
	for _, r := range rs {
		p.units += r.units
		p.wall += r.wall
		p.burn += r.burn
		p.insert += r.insert
		p.lat = append(p.lat, r.lat...)
		p.stmts += r.stmts
		p.xacts += r.xacts
		p.begins += r.begins
		if r.storeStmts < 0 || p.storeStmts < 0 {
			p.storeStmts = -1
		} else {
			p.storeStmts += r.storeStmts
		}
		for k, v := range r.byName {
			p.byName[k] += v
		}
		p.duplicates += r.duplicates
		p.wantDups += r.wantDups
		p.db.add(r.db)
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

// shares is each member's part of the done units, from the database.
func shares(r result) string {
	var parts []string
	for m := range r.members {
		parts = append(parts, fmt.Sprintf("%.0f", 100*float64(r.db.byMember[m])/float64(max(r.db.done, 1))))
	}
	return strings.Join(parts, "/")
}

// report prints, per workload, the rounds, the ratios, the exactly-once
// check and the statements by name; then a summary across workloads and the
// acquire comparison. It reports whether every system ran every unit of
// every workload exactly once.
func report(out io.Writer, cfg config, srv *serverStats, sections []section, acq []acquirePair) bool {
	allOK := true
	type summary struct {
		w      workload
		l, r   result
		lr, rr []result
	}
	var sums []summary
	for _, sec := range sections {
		fmt.Fprintf(out, "== %s ==\n", sec.w.name)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		loadCol := ""
		if sec.w.bulk() {
			loadCol = "insert/s\t"
		}
		fmt.Fprintf(tw, "round\tsystem\tunits/s\t%sp50\tp99\tstmts/unit\tBEGIN/unit\txacts/unit\tstore stmts/unit\t%s\tduplicates\tdone in db\tshares %%\t\n",
			loadCol, srv.what())
		row := func(label string, r result) {
			srvText := "n/a"
			if r.srv >= 0 {
				srvText = fmt.Sprintf("%.2f", float64(r.srv)/float64(r.units))
			}
			storeText := "-"
			if r.storeStmts >= 0 {
				storeText = fmt.Sprintf("%.2f", perUnit(r.storeStmts, r))
			}
			load := ""
			if sec.w.bulk() {
				load = fmt.Sprintf("%.0f\t", r.insertRate())
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s%v\t%v\t%.2f\t%.2f\t%.2f\t%s\t%s\t%d\t%d/%d\t%s\t\n", label, r.system, r.throughput(),
				load, ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), perUnit(r.stmts, r), perUnit(r.begins, r),
				perUnit(r.xacts, r), storeText, srvText, r.duplicates, r.db.done, r.units, shares(r))
		}
		for i := range sec.river {
			for _, v := range sec.lh {
				row(fmt.Sprint(v[i].round), v[i])
			}
			row(fmt.Sprint(sec.river[i].round), sec.river[i])
		}
		pr := pooled(sec.river)
		var pls []result
		for _, v := range sec.lh {
			pls = append(pls, pooled(v))
			row("all", pls[len(pls)-1])
		}
		row("all", pr)
		_ = tw.Flush()

		for vi, v := range sec.lh {
			fmt.Fprintln(out)
			ratios(out, sec.w, v, sec.river, pls[vi], pr)
			sums = append(sums, summary{w: sec.w, l: pls[vi], r: pr, lr: v, rr: sec.river})
		}

		fmt.Fprintf(out, "\nexactly-once check, from the database (a done row per unit, no other row, none attempted twice), "+
			"one completion event per unit, %d submissions per round reported duplicate:\n", sec.w.duplicates(cfg.nodes))
		for _, r := range append(pls, pr) {
			verdict := "ok"
			if !r.exactlyOnce() {
				verdict = "MISMATCH"
				allOK = false
			}
			fmt.Fprintf(out, "  %-22s %s: rows %d, done %d/%d, distinct %d, max attempts %d, duplicates %d/%d, "+
				"repeated completions %d, unknown completions %d\n", r.system, verdict, r.db.rows, r.db.done, r.units,
				r.db.distinct, r.db.maxAttempts, r.duplicates, r.wantDups, r.again, r.unknown)
		}

		fmt.Fprintln(out, "\nstatements per unit by name, all rounds (sqlc name, else first keyword; under 0.005 left out):")
		for _, r := range append(pls, pr) {
			fmt.Fprintf(out, "  %-22s %s\n", r.system, breakdown(r))
		}
		fmt.Fprintln(out)
	}

	fmt.Fprintf(out, "== summary: leasehold / River (%s), all rounds pooled ==\n", cfg.riverConfig)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\tsystem\tunits/s\tRiver units/s\tthroughput\t(per round)\tp50\tp99\tstmts/unit\txacts/unit\t\n")
	for _, s := range sums {
		var per []string
		for i := range s.rr {
			per = append(per, fmt.Sprintf("%.2f", s.lr[i].throughput()/s.rr[i].throughput()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.2f×\t%s\t%.2f×\t%.2f×\t%.2f / %.2f\t%.2f / %.2f\t\n", s.w.name, s.l.system,
			s.l.throughput(), s.r.throughput(), s.l.throughput()/s.r.throughput(), strings.Join(per, " "),
			dur(percentile(s.l.lat, 50))/dur(percentile(s.r.lat, 50)), dur(percentile(s.l.lat, 99))/dur(percentile(s.r.lat, 99)),
			perUnit(s.l.stmts, s.l), perUnit(s.r.stmts, s.r), perUnit(s.l.xacts, s.l), perUnit(s.r.xacts, s.r))
	}
	_ = tw.Flush()

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

// ratios prints leasehold variant v against River rv, pooled (l, r) and per
// round.
func ratios(out io.Writer, w workload, v, rv []result, l, r result) {
	tput := func(l, r result) float64 { return l.throughput() / r.throughput() }
	p50 := func(l, r result) float64 { return dur(percentile(l.lat, 50)) / dur(percentile(r.lat, 50)) }
	p99 := func(l, r result) float64 { return dur(percentile(l.lat, 99)) / dur(percentile(r.lat, 99)) }
	stm := func(l, r result) float64 { return perUnit(l.stmts, l) / perUnit(r.stmts, r) }
	xac := func(l, r result) float64 { return perUnit(l.xacts, l) / perUnit(r.xacts, r) }
	perRound := func(f func(l, r result) float64) string {
		var parts []string
		for i := range rv {
			parts = append(parts, fmt.Sprintf("%.2f", f(v[i], rv[i])))
		}
		return strings.Join(parts, " ")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ratio %s / River, %s\tall rounds\tper round\tbetter for leasehold when\n", v[0].system, w.name)
	fmt.Fprintf(tw, "throughput\t%.2f\t%s\t> 1\n", tput(l, r), perRound(tput))
	if w.bulk() {
		ins := func(l, r result) float64 { return l.insertRate() / r.insertRate() }
		fmt.Fprintf(tw, "insert/s (the load)\t%.2f\t%s\t> 1\n", ins(l, r), perRound(ins))
	}
	fmt.Fprintf(tw, "p50 latency\t%.2f\t%s\t< 1\n", p50(l, r), perRound(p50))
	fmt.Fprintf(tw, "p99 latency\t%.2f\t%s\t< 1\n", p99(l, r), perRound(p99))
	fmt.Fprintf(tw, "stmts/unit\t%.2f\t%s\t< 1\n", stm(l, r), perRound(stm))
	fmt.Fprintf(tw, "xacts/unit\t%.2f\t%s\t< 1\n", xac(l, r), perRound(xac))
	_ = tw.Flush()
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
