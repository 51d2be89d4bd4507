package claimhistory

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/claims"
)

// never is the end of time: an unbounded instant, and the response of an
// operation whose effect may land at any time after its invocation.
const never = math.MaxInt64

// lease is the model's state of one claim: the claim row as far as the
// history shows it. lo and hi bound lease_until (Unix ns, database clock)
// while claimed; they are 0 otherwise, since no decision reads them then.
type lease struct {
	fence  int64 // 0: no claim row yet
	state  claims.State
	owner  string
	lo, hi int64
}

func (s lease) claimed() bool { return s.fence > 0 && s.state == claims.StateClaimed }

// holds reports whether the grant (owner, fence) holds the claim: what
// every fenced statement's WHERE asks of the row.
func (s lease) holds(owner string, fence int64) bool {
	return s.claimed() && s.owner == owner && s.fence == fence
}

// input is one operation as the model reads it. [w0, w1] bounds the
// instant, on the database clock, at which the statement executed: its
// call and response widened by the clock skew, w1 = never when the
// statement may land after its answer.
type input struct {
	op     *Op
	w0, w1 int64
	lease  int64
}

type output struct {
	outcome Outcome
	fence   int64 // Granted
	until   int64 // Granted, renew OK, expire OK: lease_until as returned
}

// step is the sequential specification of one claim: the states the claim
// may be in after op, given what op answered, from st. No state means op
// could not have answered so from st. It mirrors the WHERE clauses of
// sql/queries/postgres/claims.sql (see the package documentation).
func step(st lease, in *input, out output) []lease {
	op := in.op
	holds := st.holds(op.Owner, op.Fence)
	same := []lease{st}
	switch op.Kind {
	case KindAcquire:
		switch out.outcome {
		case Granted:
			// The statement set lease_until = now() + lease: it executed at
			// s. It may grant only the next fence, and a claimed row only
			// once its lease ended by s.
			s := out.until - in.lease
			if out.fence != st.fence+1 || (st.claimed() && st.lo > s) {
				return nil
			}
			return []lease{{fence: out.fence, state: claims.StateClaimed, owner: op.Owner, lo: out.until, hi: out.until}}
		case Busy:
			if st.claimed() && st.hi > in.w0 {
				return same
			}
			return nil
		case Unknown:
			// Granted or not; if granted, at some s in [w0, w1] by which
			// the old lease had ended.
			from := in.w0
			if st.claimed() {
				from = max(from, st.lo)
			}
			if from > in.w1 {
				return same
			}
			return []lease{st, {fence: st.fence + 1, state: claims.StateClaimed, owner: op.Owner,
				lo: add(from, in.lease), hi: add(in.w1, in.lease)}}
		}
		return same // Refused, NoEffect: nothing changed
	case KindRenew, KindRenewBatch:
		switch out.outcome {
		case OK:
			if !holds {
				return nil
			}
			n := st
			n.lo, n.hi = out.until, out.until
			return []lease{n}
		case NotOwner:
			if holds {
				return nil
			}
			return same
		case Unknown, LeaseLost:
			if !holds {
				return same
			}
			// One state covering both: renewed to s + lease for some s in
			// [w0, w1], or unchanged.
			n := st
			n.lo, n.hi = min(st.lo, add(in.w0, in.lease)), max(st.hi, add(in.w1, in.lease))
			return []lease{n}
		}
		return same
	case KindExtend:
		switch out.outcome {
		case OK:
			if !holds {
				return nil
			}
			n := st
			n.lo, n.hi = max(st.lo, add(in.w0, in.lease)), max(st.hi, add(in.w1, in.lease))
			return []lease{n}
		case NotOwner:
			if holds {
				return nil
			}
			return same
		case Unknown, LeaseLost:
			if !holds {
				return same
			}
			n := st // extended or not: never shortened
			n.hi = max(st.hi, add(in.w1, in.lease))
			return []lease{n}
		}
		return same
	case KindCheck:
		switch out.outcome {
		case OK: // held, and lease_until > now() at s
			if holds && st.hi > in.w0 {
				return same
			}
			return nil
		case NotOwner: // not held, or lease_until <= now() at s
			if holds && st.lo > in.w1 {
				return nil
			}
			return same
		}
		return same // a check changes nothing, whatever it answered
	case KindHold:
		switch out.outcome {
		case OK:
			if holds {
				return same
			}
			return nil
		case NotOwner, LeaseLost:
			if holds && out.outcome == NotOwner {
				return nil
			}
			return same
		}
		return same
	case KindComplete, KindFail, KindRelease:
		end := lease{fence: st.fence, state: endState(op.Kind), owner: st.owner}
		switch out.outcome {
		case OK:
			if !holds {
				return nil
			}
			return []lease{end}
		case NotOwner:
			if holds {
				return nil
			}
			return same
		case Unknown, LeaseLost:
			if !holds {
				return same
			}
			return []lease{st, end}
		}
		return same
	case KindFenceOut:
		// Where an acquire at some s in [w0, w1] could grant.
		takes := st.fence > 0 && (!st.claimed() || st.lo <= in.w1)
		out2 := lease{fence: st.fence + 1, state: claims.StateReleased, owner: op.Owner}
		switch out.outcome {
		case OK:
			switch {
			case st.fence == 0:
				return same
			case !takes:
				return nil
			}
			return []lease{out2}
		case Unknown:
			if !takes {
				return same
			}
			return []lease{st, out2}
		}
		return same // Refused (not an orphan, or a live lease), NoEffect
	case KindExpire:
		switch out.outcome {
		case OK:
			if !st.claimed() {
				return nil
			}
			n := st
			n.lo, n.hi = out.until, out.until
			return []lease{n}
		case Unknown:
			if !st.claimed() {
				return same
			}
			n := st // backdated to before some s <= w1, or unchanged
			n.lo, n.hi = math.MinInt64, max(st.hi, in.w1)
			return []lease{n}
		}
		return same
	}
	return nil // a kind this model does not know: reject, never guess
}

func endState(k Kind) claims.State {
	switch k {
	case KindComplete:
		return claims.StateDone
	case KindFail:
		return claims.StateFailed
	default:
		return claims.StateReleased
	}
}

// add is a + b, saturated: never stays never.
func add(a, b int64) int64 {
	switch {
	case a == never || b == never:
		return never
	case b > 0 && a > math.MaxInt64-b:
		return never
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// model is the porcupine model of one claim per key. With partition false
// it checks one key's history (Check uses it to find the failing keys).
func model(partition bool) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []any { return []any{lease{}} },
		Step: func(state, in, out any) []any {
			next := step(state.(lease), in.(*input), out.(output))
			states := make([]any, len(next))
			for i, n := range next {
				states[i] = n
			}
			return states
		},
		Hash: func(state any) uint64 {
			s := state.(lease)
			h := fnv.New64a()
			var b []byte
			b = strconv.AppendInt(b, s.fence, 10)
			b = append(append(b, s.state...), 0)
			b = append(append(b, s.owner...), 0)
			b = strconv.AppendInt(b, s.lo, 10)
			b = strconv.AppendInt(append(b, ':'), s.hi, 10)
			_, _ = h.Write(b)
			return h.Sum64()
		},
		DescribeOperation: func(in, out any) string { return describeOp(in.(*input), out.(output)) },
		DescribeState:     func(state any) string { return describeState(state.(lease)) },
		DescribeOperationMetadata: func(info any) string {
			if s, ok := info.(string); ok {
				return s
			}
			return ""
		},
	}
	if partition {
		m.Partition = partitionByKey
	}
	return m.ToModel()
}

// partitionByKey: claims are independent, so the history is linearizable
// if and only if each key's is.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, o := range history {
		k := o.Input.(*input).op.Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], o)
	}
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}

func describeOp(in *input, out output) string {
	op := in.op
	s := fmt.Sprintf("%s %s", op.Kind, op.Owner)
	if op.Fence > 0 {
		s += fmt.Sprintf(" f%d", op.Fence)
	}
	s += " → " + string(out.outcome)
	if out.fence > 0 {
		s += fmt.Sprintf(" f%d", out.fence)
	}
	if out.until != 0 {
		s += " until " + instant(out.until)
	}
	return s
}

func describeState(s lease) string {
	switch {
	case s.fence == 0:
		return "no claim"
	case !s.claimed():
		return fmt.Sprintf("%s (f%d by %s)", s.state, s.fence, s.owner)
	case s.lo == s.hi:
		return fmt.Sprintf("claimed by %s f%d until %s", s.owner, s.fence, instant(s.lo))
	}
	return fmt.Sprintf("claimed by %s f%d until [%s, %s]", s.owner, s.fence, instant(s.lo), instant(s.hi))
}

func instant(ns int64) string {
	switch ns {
	case never:
		return "∞"
	case math.MinInt64:
		return "-∞"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000000")
}
