package ui

import (
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// chartWindow is a window the overview's charts can show, with its bucket.
type chartWindow struct {
	Key    string
	Window time.Duration
	Bucket time.Duration
}

var chartWindows = []chartWindow{
	{"15m", 15 * time.Minute, 30 * time.Second},
	{"1h", time.Hour, 2 * time.Minute},
	{"6h", 6 * time.Hour, 15 * time.Minute},
	{"24h", 24 * time.Hour, time.Hour},
	{"7d", 7 * 24 * time.Hour, 6 * time.Hour},
}

const defaultWindow = "24h"

func windowByKey(key string) (chartWindow, bool) {
	for _, w := range chartWindows {
		if w.Key == key {
			return w, true
		}
	}
	return chartWindow{}, false
}

// chart is one server-rendered SVG bar chart: a value per bucket.
type chart struct {
	ID       string // test hook and anchor
	Title    string
	Reads    string // what it reads, in words
	Class    string // colour
	Total    string
	MaxLabel string
	From, To string
	Bars     []bar
	Overlay  []bar // drawn over Bars (the latency chart's average)
	Empty    bool
	Legend   []legend
}

type legend struct{ Class, Text string }

// bar is one bucket's bar, in percent of the plot area.
type bar struct {
	X, W, Y, H float64
	Tip        string
}

// buckets are the starts of the buckets of w ending at now.
func buckets(w chartWindow, now time.Time) []time.Time {
	b := w.Bucket.Milliseconds()
	first := (now.Add(-w.Window).UnixMilli() / b) * b
	var out []time.Time
	for t := first; t <= now.UnixMilli(); t += b {
		out = append(out, time.UnixMilli(t).UTC())
	}
	return out
}

// barChart lays values (one per bucket start) out as bars.
func barChart(id, title, reads, class string, starts []time.Time, bucket time.Duration, values map[int64]float64, format func(float64) string) chart {
	c := chart{ID: id, Title: title, Reads: reads, Class: class, Empty: true}
	if len(starts) == 0 {
		return c
	}
	var peak, total float64
	for _, s := range starts {
		v := values[s.UnixMilli()]
		peak, total = max(peak, v), total+v
	}
	c.From, c.To = stamp(starts[0]), stamp(starts[len(starts)-1].Add(bucket))
	c.Total = format(total)
	if peak == 0 {
		c.MaxLabel = format(0)
		return c
	}
	c.Empty = false
	c.MaxLabel = format(peak)
	w := 100 / float64(len(starts))
	for i, s := range starts {
		v := values[s.UnixMilli()]
		if v == 0 {
			continue
		}
		h := max(v/peak*100, 1.5)
		c.Bars = append(c.Bars, bar{X: float64(i) * w, W: w * 0.8, Y: 100 - h, H: h,
			Tip: fmt.Sprintf("%s – %s: %s", stamp(s), stamp(s.Add(bucket)), format(v))})
	}
	return c
}

func count(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func millis(v float64) string { return short(time.Duration(v) * time.Millisecond) }

// overviewCharts builds the overview's charts from the two series reads.
func overviewCharts(w chartWindow, now time.Time, outcomes []inspect.Outcome, handovers []inspect.Handover) []chart {
	starts := buckets(w, now)
	done, failed := map[int64]float64{}, map[int64]float64{}
	retried, taken := map[int64]float64{}, map[int64]float64{}
	avgLat, maxLat := map[int64]float64{}, map[int64]float64{}
	for _, o := range outcomes {
		k := o.Start.UnixMilli()
		switch o.Status {
		case episodes.StatusDone:
			done[k] += float64(o.Episodes)
		case episodes.StatusFailed, episodes.StatusPartiallyFailed:
			failed[k] += float64(o.Episodes)
		}
	}
	for _, h := range handovers {
		k := h.Start.UnixMilli()
		switch h.Kind {
		case inspect.HandoverRetry:
			retried[k] += float64(h.Handovers)
		case inspect.HandoverTakeover:
			taken[k] += float64(h.Handovers)
			avgLat[k] = float64(h.AvgLatency.Milliseconds())
			maxLat[k] = float64(h.MaxLatency.Milliseconds())
		}
	}
	per := bucket(w.Bucket)
	latency := barChart("chart-latency", "Takeover latency",
		"Per "+per+", the slowest (light) and the average (dark) of those takeovers: from the last step journaled "+
			"under the old grant to the first under the new one.",
		"lat", starts, w.Bucket, maxLat, millis)
	if !latency.Empty {
		peak := 0.0
		for _, v := range maxLat {
			peak = max(peak, v)
		}
		width := 100 / float64(len(starts))
		for i, s := range starts {
			if v := avgLat[s.UnixMilli()]; v > 0 {
				h := max(v/peak*100, 1.5)
				latency.Overlay = append(latency.Overlay, bar{X: float64(i) * width, W: width * 0.8, Y: 100 - h, H: h,
					Tip: fmt.Sprintf("%s: average %s", stamp(s), millis(v))})
			}
		}
		latency.Legend = []legend{{"lat", "slowest"}, {"lat-avg", "average"}}
	}
	latency.Total = ""
	return []chart{
		barChart("chart-completed", "Completed", "Episodes that ended done, per "+per+" of their finished_at.", "done", starts, w.Bucket, done, count),
		barChart("chart-failed", "Failed", "Episodes that ended failed or partially_failed, per "+per+" of their finished_at.", "failed", starts, w.Bucket, failed, count),
		barChart("chart-retried", "Retried",
			"Attempts run again after their holder ended the previous one (a retry after an error, an operator's retry), per "+per+
				": in an episode's journal, a grant one fence above the previous journaled grant, counted at its first step.",
			"retry", starts, w.Bucket, retried, count),
		barChart("chart-recovered", "Taken over",
			"Work another node took over after its holder died, lost its lease or released it on drain, per "+per+
				": a journaled grant two or more fences above the previous one (recovery's fence-out in between), counted at its first step.",
			"takeover", starts, w.Bucket, taken, count),
		latency,
	}
}
