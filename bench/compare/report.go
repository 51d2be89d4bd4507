package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
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
		extra = fmt.Sprintf("  (load %v: %.0f units/s inserted)", r.insert.Round(time.Millisecond), r.insertRate())
	}
	fmt.Fprintf(out, "  round %d %-27s %6.0f units/s  p50 %-8v p99 %-8v wall %v  (Start calls %v, before the span)%s\n", r.round,
		r.system, r.throughput(), ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), r.wall.Round(time.Millisecond),
		ms(r.startUp), extra)
}

// section is one workload's rounds: one []result per leasehold variant and
// per River variant, each in the order systems lists them.
type section struct {
	w     workload
	lh    [][]result
	river [][]result
}

// likeForLikeIndex is the River variant the detailed ratios compare with:
// likeForLike when it ran, else the first that did.
func (sec section) likeForLikeIndex() int {
	for i, rs := range sec.river {
		if rs[0].system == likeForLike.name() {
			return i
		}
	}
	return 0
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
		for k, v := range r.byName {
			p.byName[k] += v
		}
		p.duplicates += r.duplicates
		p.wantDups += r.wantDups
		p.dupRuns += r.dupRuns
		p.db.add(r.db)
		p.again += r.again
		p.unknown += r.unknown
		p.dbXacts = addKnown(p.dbXacts, r.dbXacts)
		p.wal = addKnown(p.wal, r.wal)
	}
	slices.Sort(p.lat)
	return p
}

// addKnown adds counters where -1 means unread: one unread round makes the
// sum unread.
func addKnown(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}

// shares is each member's part of the done units, from the database.
func shares(r result) string {
	var parts []string
	for m := range r.members {
		parts = append(parts, fmt.Sprintf("%.0f", 100*float64(r.db.byMember[m])/float64(max(r.db.done, 1))))
	}
	return strings.Join(parts, "/")
}

// perUnitText is n per unit of r, or n/a when n is unread (-1).
func perUnitText(n int64, r result, format string) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprintf(format, perUnit(n, r))
}

// report prints, per workload, the rounds, the ratios, the exactly-once
// check and the statements by name; then a summary across workloads and the
// acquire comparison. It reports whether every system ran every unit of
// every workload exactly once.
func report(out io.Writer, cfg config, sections []section, acq []acquirePair) bool {
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
		fmt.Fprintf(tw, "round\tsystem\tunits/s\t%sp50\tp99\tstmts/unit\tBEGIN/unit\txacts/unit\tdb xacts/unit\tWAL B/unit\tduplicates\tdone in db\tledger\tshares %%\t\n",
			loadCol)
		row := func(label string, r result) {
			load := ""
			if sec.w.bulk() {
				load = fmt.Sprintf("%.0f\t", r.insertRate())
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s%v\t%v\t%.2f\t%.2f\t%.2f\t%s\t%s\t%d\t%d/%d\t%d/%d\t%s\t\n", label, r.system, r.throughput(),
				load, ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), perUnit(r.stmts, r), perUnit(r.begins, r),
				perUnit(r.xacts, r), perUnitText(r.dbXacts, r, "%.2f"), perUnitText(r.wal, r, "%.0f"), r.duplicates,
				r.db.done, r.units, r.db.ledger, r.units, shares(r))
		}
		all := append(slices.Clone(sec.lh), sec.river...)
		for i := range cfg.rounds {
			for _, rs := range all {
				row(fmt.Sprint(rs[i].round), rs[i])
			}
		}
		var pls, prs []result
		for _, rs := range sec.lh {
			pls = append(pls, pooled(rs))
			row("all", pls[len(pls)-1])
		}
		for _, rs := range sec.river {
			prs = append(prs, pooled(rs))
			row("all", prs[len(prs)-1])
		}
		_ = tw.Flush()

		lfl := sec.likeForLikeIndex()
		for vi, v := range sec.lh {
			if len(sec.river) == 0 {
				break // every River row left out (see the workload's header)
			}
			fmt.Fprintln(out)
			ratios(out, sec.w, v, pls[vi], sec.river, prs, lfl)
			for ri, rv := range sec.river {
				sums = append(sums, summary{w: sec.w, l: pls[vi], r: prs[ri], lr: v, rr: rv})
			}
		}

		fmt.Fprintf(out, "\nexactly-once check, from the database (a done row per unit, no other row, none attempted twice), "+
			"the ledger (a row per unit, no second run, no other row), one completion event per unit, "+
			"%d submissions per round reported duplicate:\n", sec.w.duplicates(cfg.nodes))
		for _, r := range append(slices.Clone(pls), prs...) {
			verdict := "ok"
			if !r.exactlyOnce() {
				verdict = "MISMATCH"
				allOK = false
			}
			fmt.Fprintf(out, "  %-27s %s: rows %d, done %d/%d, distinct %d, max attempts %d, ledger lost %d, "+
				"ledger duplicated %d, ledger stray %d, duplicates %d/%d, repeated completions %d, unknown completions %d\n",
				r.system, verdict, r.db.rows, r.db.done, r.units, r.db.distinct, r.db.maxAttempts, r.lost(), r.dupRuns,
				r.db.stray, r.duplicates, r.wantDups, r.again, r.unknown)
		}

		fmt.Fprintln(out, "\nstatements per unit by name, all rounds (sqlc name, else first keyword; under 0.005 left out):")
		for _, r := range append(pls, prs...) {
			fmt.Fprintf(out, "  %-27s %s\n", r.system, breakdown(r))
		}
		fmt.Fprintln(out)
	}

	fmt.Fprintf(out, "== summary: leasehold / River (%s), all rounds pooled; * = like-for-like (River deduplicating as leasehold does) ==\n",
		cfg.riverConfig)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\tsystem\tagainst\tunits/s\tRiver units/s\tthroughput\t(per round)\tp50\tp99\tstmts/unit\tdb xacts/unit\tWAL B/unit\t\n")
	for _, s := range sums {
		var per []string
		for i := range s.rr {
			per = append(per, fmt.Sprintf("%.2f", s.lr[i].throughput()/s.rr[i].throughput()))
		}
		against := s.r.system
		if against == likeForLike.name() {
			against += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%.2f×\t%s\t%.2f×\t%.2f×\t%.2f / %.2f\t%s / %s\t%s / %s\t\n", s.w.name, s.l.system,
			against, s.l.throughput(), s.r.throughput(), s.l.throughput()/s.r.throughput(), strings.Join(per, " "),
			dur(percentile(s.l.lat, 50))/dur(percentile(s.r.lat, 50)), dur(percentile(s.l.lat, 99))/dur(percentile(s.r.lat, 99)),
			perUnit(s.l.stmts, s.l), perUnit(s.r.stmts, s.r), perUnitText(s.l.dbXacts, s.l, "%.2f"), perUnitText(s.r.dbXacts, s.r, "%.2f"),
			perUnitText(s.l.wal, s.l, "%.0f"), perUnitText(s.r.wal, s.r, "%.0f"))
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

// ratios prints leasehold variant v (pooled: l) against every River variant
// (rounds rv, pooled rp): all rounds pooled, and per round in parentheses.
// The column of River variant lfl, the like-for-like one, comes first.
func ratios(out io.Writer, w workload, v []result, l result, rv [][]result, rp []result, lfl int) {
	type metric struct {
		name, better string
		f            func(l, r result) float64
	}
	metrics := []metric{
		{"throughput", "> 1", func(l, r result) float64 { return l.throughput() / r.throughput() }},
	}
	if w.bulk() {
		metrics = append(metrics, metric{"insert/s (the load)", "> 1", func(l, r result) float64 { return l.insertRate() / r.insertRate() }})
	}
	metrics = append(metrics,
		metric{"p50 latency", "< 1", func(l, r result) float64 { return dur(percentile(l.lat, 50)) / dur(percentile(r.lat, 50)) }},
		metric{"p99 latency", "< 1", func(l, r result) float64 { return dur(percentile(l.lat, 99)) / dur(percentile(r.lat, 99)) }},
		metric{"stmts/unit", "< 1", func(l, r result) float64 { return perUnit(l.stmts, l) / perUnit(r.stmts, r) }},
		metric{"xacts/unit", "< 1", func(l, r result) float64 { return perUnit(l.xacts, l) / perUnit(r.xacts, r) }},
		metric{"db xacts/unit", "< 1", func(l, r result) float64 { return known(l.dbXacts, r.dbXacts, l, r) }},
		metric{"WAL B/unit", "< 1", func(l, r result) float64 { return known(l.wal, r.wal, l, r) }},
	)
	order := []int{lfl}
	for i := range rv {
		if i != lfl {
			order = append(order, i)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ratio %s / River, %s (per round in parentheses)", v[0].system, w.name)
	for _, i := range order {
		name := rp[i].system
		if i == lfl {
			name += " (like-for-like)"
		}
		fmt.Fprintf(tw, "\t%s", name)
	}
	fmt.Fprintf(tw, "\tbetter for leasehold when\n")
	for _, m := range metrics {
		fmt.Fprint(tw, m.name)
		for _, i := range order {
			var parts []string
			for j := range rv[i] {
				parts = append(parts, fmt.Sprintf("%.2f", m.f(v[j], rv[i][j])))
			}
			fmt.Fprintf(tw, "\t%.2f (%s)", m.f(l, rp[i]), strings.Join(parts, " "))
		}
		fmt.Fprintf(tw, "\t%s\n", m.better)
	}
	_ = tw.Flush()
}

// known is the ratio of two per-unit counters, NaN when either is unread.
func known(a, b int64, l, r result) float64 {
	if a < 0 || b < 0 {
		return nan
	}
	return perUnit(a, l) / perUnit(b, r)
}

var nan = math.NaN()

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
