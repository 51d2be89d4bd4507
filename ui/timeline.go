package ui

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// The timeline of an episode's attempts is derived, because the schema
// keeps no history of grants: the claim row holds only its current grant
// (owner, fence, how it was granted, its lease), and each journal step
// records the fence of the grant that wrote it. Fences only grow, by one
// per grant, so
//
//   - each fence that journaled a step is one grant, from its first step
//     to its last;
//   - a fence missing between two journaled ones, or between the last
//     journaled one and the claim's current fence, is a grant that wrote
//     nothing: recovery's fence-out (RequeueOrphan), a cancel's fence-out
//     (CancelEpisode), or a run that ended before its first step;
//   - a journaled grant followed directly by the next fence was ended by
//     its own holder (a failed attempt retried, an operator's retry); one
//     followed by a grant that wrote nothing was fenced out: its holder
//     died, lost its lease or released it on drain, and the schema does
//     not record which;
//   - the current grant's owner, kind, lease and end are the claim row's;
//     an earlier grant's owner is not recorded anywhere.
//
// Under a dedupe key, the fences before the episode's first journaled one
// may belong to earlier (archived) episodes of the same trigger, so the
// timeline starts at the first fence this episode journaled.

// Outcome kinds of a grant (CSS classes and test hooks).
const (
	outLive     = "live"     // holds a live lease
	outDone     = "done"     // ended done
	outFailed   = "failed"   // ended failed
	outCanceled = "canceled" // ended canceled by its holder
	outExpired  = "expired"  // its lease expired: nobody renews it
	outReleased = "released" // released by its holder, not taken over yet
	outRetry    = "retry"    // ended by its holder; the next grant followed
	outTakeover = "takeover" // fenced out by another node
	outFenceOut = "fenceout" // a grant that wrote nothing
)

// grantView is one grant on the episode page.
type grantView struct {
	Fence       int64
	Owner       string // "" when not recorded
	OwnerRole   string // what Owner did: "holder", "fenced out by", ...
	Current     bool   // the claim row's current grant
	Grant       claims.GrantKind
	Journaled   bool
	Steps       int64
	FirstStepNo int32
	LastStepNo  int32
	Start, End  time.Time // zero when unknown
	StartWhat   string    // what Start is: "granted", "first step"
	EndWhat     string    // what End is: "last step", "finished", "lease until"
	Outcome     string    // one of the out* kinds
	Label       string    // a few words
	Why         string    // one sentence
	Detail      json.RawMessage
	Shown       []inspect.Step // the loaded steps of this fence
	Hidden      int64          // steps of this fence not loaded
	// Bar is the grant's place on the timeline strip, in percent of its
	// width; Ticks are its loaded steps.
	Bar   span
	Ticks []float64
	// tookOver: another node made this grant to end the one before it
	// (a fence-out, recovery's takeover to fail the work).
	tookOver bool
}

type span struct {
	X, W float64 // percent
	Open bool    // still running: the bar ends at now
	None bool    // no time known: no bar
	Mark float64 // for a grant without times: where it sits
}

// maxInferred bounds the grants listed one by one in a gap of fences.
const maxInferred = 8

// timeline builds the grants of episode d, oldest first.
func timeline(d inspect.EpisodeDetail, grants []inspect.Grant, steps []inspect.Step, now time.Time) []grantView {
	cur := d.Claim
	if cur != nil && laterRun(d, cur) {
		cur = nil
	}
	byFence := map[int64]inspect.Grant{}
	for _, g := range grants {
		byFence[g.Fence] = g
	}
	var lo, hi int64
	switch {
	case len(grants) > 0:
		lo, hi = grants[0].Fence, grants[len(grants)-1].Fence
		if cur != nil && cur.Fence > hi {
			hi = cur.Fence
		}
	case cur != nil:
		lo, hi = cur.Fence, cur.Fence
	default:
		return nil
	}
	var out []grantView
	if lo > 1 {
		out = append(out, earlierGrants(d, lo))
	}
	for f := lo; f <= hi; f++ {
		g, journaled := byFence[f]
		isCur := cur != nil && f == cur.Fence
		if !journaled && !isCur {
			// A gap: list a few, fold the rest into one entry.
			end := f
			for end+1 <= hi && !(cur != nil && end+1 == cur.Fence) {
				if _, ok := byFence[end+1]; ok {
					break
				}
				end++
			}
			if n := end - f + 1; n > maxInferred {
				out = append(out, grantView{Fence: f, Outcome: outFenceOut, Label: fmt.Sprintf("fences %d–%d: %d grants wrote nothing", f, end, n),
					Why: "Grants that journaled no step: fence-outs by recovery or cancels, or runs that ended before their first step."})
				f = end
				continue
			}
		}
		v := grantView{Fence: f, Journaled: journaled, Current: isCur}
		if journaled {
			v.Steps, v.FirstStepNo, v.LastStepNo = g.Steps, g.FirstStepNo, g.LastStepNo
			v.Start, v.StartWhat, v.End, v.EndWhat = g.FirstAt, "first step", g.LastAt, "last step"
		}
		if isCur {
			v.Owner, v.OwnerRole, v.Grant = cur.Owner, "holder", cur.Grant
			v.Start, v.StartWhat = cur.ClaimedAt, "granted"
			switch {
			case cur.State == claims.StateClaimed:
				v.End, v.EndWhat = cur.LeaseUntil, "lease until"
			case d.ClaimFinishedAt != nil:
				v.End, v.EndWhat = *d.ClaimFinishedAt, "ended"
			}
		}
		out = append(out, v)
	}
	for i := range out {
		v := &out[i]
		if v.Current {
			currentOutcome(v, d, cur, now)
		} else if !v.Journaled && v.Label == "" {
			v.Outcome, v.Label = outFenceOut, "wrote nothing"
			v.Why = "A grant that journaled no step: recovery's fence-out (RequeueOrphan, which makes the work available again), " +
				"a cancel's fence-out (CancelEpisode), or a run that ended before its first step. Its owner is not recorded."
		}
	}
	for i := range out {
		v := &out[i]
		if v.Current || !v.Journaled {
			continue
		}
		if i+1 == len(out) {
			lastOutcome(v, d)
			continue
		}
		if next := out[i+1]; next.Outcome == outFenceOut || next.tookOver {
			v.Outcome, v.Label = outTakeover, "taken over"
			v.Why = "Another node fenced this grant out before the next run: its holder died, lost its lease or released it on drain " +
				"(the schema does not record which), and recovery took the work over."
		} else {
			v.Outcome, v.Label = outRetry, "ended by its holder, run again"
			v.Why = "The next grant followed this one directly (fence + 1): its holder ended the attempt itself " +
				"(a failed attempt retried, an operator's retry) and the work ran again."
		}
	}
	placeSteps(out, steps)
	place(out, d, now)
	return out
}

// earlierGrants is the entry for the fences below the first one the
// episode journaled: grants that wrote nothing here.
func earlierGrants(d inspect.EpisodeDetail, lo int64) grantView {
	v := grantView{Fence: 1, Outcome: outFenceOut, Label: fmt.Sprintf("fences 1–%d: wrote nothing here", lo-1)}
	if lo == 2 {
		v.Label = "fence 1: wrote nothing here"
	}
	if d.DedupeKey == "" {
		v.Why = "Grants of this episode's claim that journaled no step: a run that ended before its first step " +
			"(its node died or lost its lease), and recovery's fence-out before the next run."
	} else {
		v.Why = "Grants of this dedupe key that journaled no step for this episode: its own earlier grants " +
			"(a run that ended before its first step, recovery's fence-out), or the grants of earlier, archived runs of the same trigger."
	}
	if a := d.Attempt(); a > 1 {
		v.Why += fmt.Sprintf(" The episode is on attempt %d.", a)
	}
	return v
}

// lastOutcome says how the episode's last journaled grant ended when the
// claim row no longer shows it (no claim row, or one a later run of the
// same dedupe key holds): by the episode's status.
func lastOutcome(v *grantView, d inspect.EpisodeDetail) {
	switch d.Status {
	case episodes.StatusDone:
		v.Outcome, v.Label, v.Why = outDone, "done", "The episode ended done."
	case episodes.StatusFailed, episodes.StatusPartiallyFailed:
		v.Outcome, v.Label, v.Why, v.Detail = outFailed, "failed", "The episode ended "+string(d.Status)+".", d.ErrorDetail
		if d.ErrorClass != "" {
			v.Label = "failed: " + visible(d.ErrorClass)
		}
	case episodes.StatusCanceled:
		v.Outcome, v.Label, v.Why = outCanceled, "canceled", "The episode ended canceled."
	default:
		v.Outcome, v.Label = outReleased, "no claim row"
		v.Why = "The claim row that would show how this grant stands is gone or belongs to a later run of the same dedupe key."
	}
}

// laterRun reports whether claim c is a grant made after the episode
// ended: under a dedupe key, a later run of the same trigger.
func laterRun(d inspect.EpisodeDetail, c *inspect.Claim) bool {
	end := d.FinishedAt
	if end == nil {
		end = d.ArchivedAt
	}
	return end != nil && c.ClaimedAt.After(*end)
}

// currentOutcome says how the claim row's current grant stands or ended.
func currentOutcome(v *grantView, d inspect.EpisodeDetail, c *inspect.Claim, now time.Time) {
	left := c.LeaseUntil.Sub(now)
	if d.ClaimLeaseLeft != 0 {
		left = d.ClaimLeaseLeft
	}
	switch c.State {
	case claims.StateClaimed:
		if c.Live {
			v.Outcome, v.Label = outLive, "holds a live lease"
			v.Why = fmt.Sprintf("The lease runs until %s on the database clock (%s left).", stamp(c.LeaseUntil), short(left))
			if d.Status == episodes.StatusQueued {
				v.Why += " The episode waits for a free slot on its holder."
			}
			if d.CancelRequestedAt != nil {
				v.Why += " A cancel was requested: the holder ends it canceled within one heartbeat interval."
			}
			return
		}
		v.Outcome, v.Label = outExpired, "lease expired"
		v.Why = fmt.Sprintf("The lease ran out at %s on the database clock (%s ago) and nobody renews it: its holder died, "+
			"froze or lost the database. Recovery takes the work over at its next sweep.", stamp(c.LeaseUntil), short(-left))
	case claims.StateDone:
		v.Outcome, v.Label, v.Why = outDone, "done", "The holder finished the episode done, in the same statement as this grant's end."
	case claims.StateFailed:
		switch {
		case d.Status == episodes.StatusCanceled && !v.Journaled:
			v.Outcome, v.Label = outFenceOut, "fenced out by a cancel"
			v.Owner, v.OwnerRole = "", ""
			v.Why = "CancelEpisode fenced out an expired grant (fence + 1) when it canceled the episode, so no zombie writes after the cancel."
		case d.Status == episodes.StatusCanceled:
			v.Outcome, v.Label, v.Why = outCanceled, "canceled", "The holder ended the episode canceled after a cancel request."
		case d.ErrorClass == episodes.ClassOrphaned || !v.Journaled:
			v.Outcome, v.Label, v.OwnerRole, v.tookOver = outFailed, "failed by recovery", "failed by", true
			v.Why = "Recovery took the orphan over (ClaimForRecovery) to fail it: its recovery policy is fail, or it had no attempt left."
			v.Detail = d.ErrorDetail
		default:
			v.Outcome, v.Label = outFailed, "failed"
			if d.ErrorClass != "" {
				v.Label = "failed: " + visible(d.ErrorClass)
			}
			v.Why, v.Detail = "The holder finished the episode failed.", d.ErrorDetail
		}
	case claims.StateReleased:
		switch {
		case !v.Journaled && d.Status == episodes.StatusQueued && d.Phase == "recovering":
			v.Outcome, v.Label, v.OwnerRole = outFenceOut, "fenced out by recovery", "fenced out by"
			v.Why = "Recovery (RequeueOrphan) fenced the dead grant out (fence + 1) and made the work available again, to whichever full node has a free slot."
		case d.Status == episodes.StatusQueued && d.Phase == "retrying":
			v.Outcome, v.Label = outRetry, "attempt failed, retry due"
			due := "when it falls due"
			if d.RunAfter != nil {
				due = fmt.Sprintf("at %s (%s)", stamp(*d.RunAfter), ago(*d.RunAfter, now))
			}
			v.Why, v.Detail = "The holder released the claim and journaled the error (RetryEpisode); the next attempt runs "+due+".", d.ErrorDetail
		case d.Status == episodes.StatusRunning || d.Status == episodes.StatusQueued:
			v.Outcome, v.Label = outReleased, "released by its holder"
			v.Why = "Its holder released the lease without finishing (on drain, or after a journal write the database failed): recovery takes the work over at its next sweep."
		default:
			v.Outcome, v.Label, v.Why = outReleased, "released", "The grant was released."
		}
	}
}

// placeSteps hangs the loaded steps under their grants.
func placeSteps(out []grantView, steps []inspect.Step) {
	idx := map[int64]int{}
	for i, v := range out {
		idx[v.Fence] = i
	}
	for _, s := range steps {
		if i, ok := idx[s.Fence]; ok {
			out[i].Shown = append(out[i].Shown, s)
		}
	}
	for i := range out {
		out[i].Hidden = max(out[i].Steps-int64(len(out[i].Shown)), 0)
	}
}

// place lays the grants out on one time axis, from the episode's creation
// to now (a live or unfinished episode) or its last known instant.
func place(out []grantView, d inspect.EpisodeDetail, now time.Time) {
	t0, t1 := d.CreatedAt, d.CreatedAt
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if t.Before(t0) {
			t0 = t
		}
		if t.After(t1) {
			t1 = t
		}
	}
	for _, v := range out {
		see(v.Start)
		if v.EndWhat != "lease until" {
			see(v.End)
		}
		for _, s := range v.Shown {
			see(s.CreatedAt)
		}
	}
	if d.FinishedAt != nil {
		see(*d.FinishedAt)
	} else {
		see(now)
	}
	width := t1.Sub(t0)
	if width <= 0 {
		width = time.Second
	}
	pct := func(t time.Time) float64 {
		p := float64(t.Sub(t0)) / float64(width) * 100
		return min(max(p, 0), 100)
	}
	prevEnd := t0
	for i := range out {
		v := &out[i]
		for _, s := range v.Shown {
			v.Ticks = append(v.Ticks, pct(s.CreatedAt))
		}
		sort.Float64s(v.Ticks)
		start, end := v.Start, v.End
		if v.Outcome == outLive || v.Outcome == outExpired {
			end = now
			if v.Outcome == outExpired && v.End.Before(now) {
				end = v.End
			}
			v.Bar.Open = v.Outcome == outLive
		}
		if start.IsZero() {
			next := t1
			for _, w := range out[i+1:] {
				if !w.Start.IsZero() {
					next = w.Start
					break
				}
			}
			v.Bar = span{None: true, Mark: (pct(prevEnd) + pct(next)) / 2}
			continue
		}
		if end.IsZero() || end.Before(start) {
			end = start
		}
		x, w := pct(start), pct(end)-pct(start)
		v.Bar.X, v.Bar.W = x, max(w, 0.6)
		if v.Bar.X+v.Bar.W > 100 {
			v.Bar.X = 100 - v.Bar.W
		}
		prevEnd = end
	}
}
