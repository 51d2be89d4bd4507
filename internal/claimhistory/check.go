package claimhistory

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Errors Check returns, wrapped with what was found.
var (
	// ErrNotLinearizable: some key's history has no linearization under the
	// model; Report.Illegal names the keys, Report.Visualization the file.
	ErrNotLinearizable = errors.New("claimhistory: history is not linearizable")
	// ErrUnjudged: the history cannot be judged soundly (the checker timed
	// out, an operation has no key, or a database instant lies outside its
	// call by more than the skew: the clocks disagree).
	ErrUnjudged = errors.New("claimhistory: history cannot be judged")
)

// Options tunes Check.
type Options struct {
	// Skew bounds the difference between the recorders' wall clocks and
	// the database clock. Default 1ms (same machine: timestamp truncation
	// only). Every bound the model takes from a call's instants is widened
	// by it.
	Skew time.Duration
	// Timeout bounds porcupine's search. Default 2 minutes.
	Timeout time.Duration
	// Dir is where the visualization of a failure is written. Default
	// os.TempDir().
	Dir string
	// MaxShown bounds the keys put in the visualization. Default 8.
	MaxShown int
}

// Report is what Check found.
type Report struct {
	Ops       int // operations checked
	Keys      int // claims (partitions)
	Unknown   int // of Ops, with outcome Unknown (no answer, or an error that is not a definite refusal)
	LeaseLost int // of Ops, refused for a reason that may lie outside the claim (LeaseLost)
	NoEffect  int // of Ops, failed certainly without effect
	Unplaced  int // operations without a key, not checked
	Took      time.Duration
	Result    porcupine.CheckResult
	// Illegal lists the keys whose history has no linearization: once the
	// whole history failed, the first MaxShown found, in key order.
	Illegal []string
	// Visualization is the path of porcupine's HTML rendering of the
	// illegal keys' histories, written when Result is Illegal.
	Visualization string
}

func (r Report) String() string {
	verdict := "linearizable"
	switch r.Result {
	case porcupine.Illegal:
		verdict = "NOT linearizable"
	case porcupine.Unknown:
		verdict = "not judged (checker timed out)"
	case "":
		verdict = "not checked"
	}
	s := fmt.Sprintf("%s: %d operations across %d keys (%d unknown, %d lease-lost, %d certainly without effect); checker time %v",
		verdict, r.Ops, r.Keys, r.Unknown, r.LeaseLost, r.NoEffect, roundDuration(r.Took))
	if r.Unplaced > 0 {
		s += fmt.Sprintf("; %d operations without a key not checked", r.Unplaced)
	}
	if len(r.Illegal) > 0 {
		s += fmt.Sprintf("; illegal keys: %s", strings.Join(r.Illegal, ", "))
	}
	if r.Visualization != "" {
		s += "; visualization: " + r.Visualization
	}
	return s
}

// Check checks ops for linearizability against the model of one lease per
// key (see the package documentation), with porcupine. It returns
// ErrNotLinearizable, after writing porcupine's visualization of the
// failing keys, or ErrUnjudged; the Report is filled either way.
func Check(ops []Op, o Options) (Report, error) {
	if o.Skew <= 0 {
		o.Skew = time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.MaxShown <= 0 {
		o.MaxShown = 8
	}
	var rep Report
	history, byKey := operations(ops, o.Skew, &rep)
	if rep.Unplaced > 0 {
		return rep, fmt.Errorf("%w: %d operations have no key", ErrUnjudged, rep.Unplaced)
	}
	if bad := clockViolations(history, o.Skew); len(bad) > 0 {
		return rep, fmt.Errorf("%w: %d operations executed on the database outside their call by more than the skew %v (the clocks disagree): %s",
			ErrUnjudged, len(bad), o.Skew, strings.Join(bad[:min(len(bad), 5)], "; "))
	}

	start := time.Now()
	rep.Result = porcupine.CheckOperationsTimeout(model(true), history, o.Timeout)
	rep.Took = time.Since(start)
	switch rep.Result {
	case porcupine.Ok:
		return rep, nil
	case porcupine.Unknown:
		return rep, fmt.Errorf("%w: porcupine found no answer within %v", ErrUnjudged, o.Timeout)
	}

	single := model(false)
	keys := slices.Sorted(maps.Keys(byKey))
	var shown []porcupine.Operation
	for _, k := range keys {
		if porcupine.CheckOperationsTimeout(single, byKey[k], o.Timeout) != porcupine.Illegal {
			continue
		}
		rep.Illegal = append(rep.Illegal, k)
		shown = append(shown, byKey[k]...)
		if len(rep.Illegal) == o.MaxShown {
			break
		}
	}
	path, err := visualize(shown, o)
	rep.Visualization = path
	if err != nil {
		return rep, fmt.Errorf("%w (keys %s); writing the visualization failed: %v", ErrNotLinearizable, strings.Join(rep.Illegal, ", "), err)
	}
	return rep, fmt.Errorf("%w: keys %s; visualization %s", ErrNotLinearizable, strings.Join(rep.Illegal, ", "), path)
}

// operations converts ops to porcupine's form, by key, and counts them.
func operations(ops []Op, skew time.Duration, rep *Report) ([]porcupine.Operation, map[string][]porcupine.Operation) {
	byKey := map[string][]porcupine.Operation{}
	var (
		keyOrder []string
		anyKey   []*Op // unanswered acquires that may have granted any key
	)
	for i := range ops {
		op := &ops[i]
		if op.AnyKey {
			// Answered, its grants are operations of their own keys.
			if op.outcome() == Unknown {
				anyKey = append(anyKey, op)
				rep.Unknown++
			}
			continue
		}
		if op.Key == "" {
			rep.Unplaced++
			continue
		}
		rep.Ops++
		switch op.outcome() {
		case Unknown:
			rep.Unknown++
		case LeaseLost:
			rep.LeaseLost++
		case NoEffect:
			rep.NoEffect++
		}
		call, ret := op.Call.UnixNano(), int64(never)
		w1 := int64(never)
		if op.outcome() != Unknown {
			// The statement executed before its answer came back.
			ret = op.Return.UnixNano()
			w1 = add(ret, int64(skew))
		}
		out := output{outcome: op.outcome(), fence: op.Granted}
		if !op.LeaseUntil.IsZero() {
			out.until = op.LeaseUntil.UnixNano()
		}
		if _, ok := byKey[op.Key]; !ok {
			keyOrder = append(keyOrder, op.Key)
		}
		byKey[op.Key] = append(byKey[op.Key], porcupine.Operation{
			Input:    &input{op: op, w0: add(call, -int64(skew)), w1: w1, lease: int64(op.Lease)},
			Call:     call,
			Output:   out,
			Return:   ret,
			Metadata: metadata(op),
		})
	}
	rep.Keys = len(keyOrder)
	for _, k := range keyOrder {
		for _, op := range anyKey {
			on := *op
			on.Key = k
			byKey[k] = append(byKey[k], porcupine.Operation{
				Input:    &input{op: &on, w0: add(on.Call.UnixNano(), -int64(skew)), w1: int64(never), lease: int64(on.Lease)},
				Call:     on.Call.UnixNano(),
				Output:   output{outcome: Unknown},
				Return:   int64(never),
				Metadata: metadata(&on),
			})
		}
	}
	var history []porcupine.Operation
	for _, k := range keyOrder {
		lanes(byKey[k])
		history = append(history, byKey[k]...)
	}
	return history, byKey
}

// lanes gives each operation of one key a ClientId (a row of the
// visualization) that no overlapping operation shares.
func lanes(part []porcupine.Operation) {
	idx := make([]int, len(part))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(part[a].Call, part[b].Call) })
	var busyUntil []int64
	for _, i := range idx {
		lane := -1
		for l, until := range busyUntil {
			if until < part[i].Call {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(busyUntil)
			busyUntil = append(busyUntil, 0)
		}
		busyUntil[lane] = part[i].Return
		part[i].ClientId = lane
	}
}

// clockViolations lists the operations whose database instant, known from
// the lease_until they returned, lies outside their call widened by skew:
// then the recorders' clocks and the database's disagree and no bound the
// model draws from a call's instants can be trusted.
func clockViolations(history []porcupine.Operation, skew time.Duration) []string {
	var bad []string
	for _, o := range history {
		in, out := o.Input.(*input), o.Output.(output)
		exact := out.outcome == Granted || (out.outcome == OK && (in.op.Kind == KindRenew || in.op.Kind == KindRenewBatch))
		if !exact {
			continue
		}
		s := out.until - in.lease
		if s < in.w0 || s > in.w1 {
			bad = append(bad, fmt.Sprintf("%s %s: executed at %s, called %s, answered %s",
				in.op.Key, in.op, instant(s), instant(o.Call), instant(o.Return)))
		}
	}
	return bad
}

func visualize(history []porcupine.Operation, o Options) (string, error) {
	_, info := porcupine.CheckOperationsVerbose(model(true), history, o.Timeout)
	f, err := os.CreateTemp(o.Dir, "claims-history-*.html")
	if err != nil {
		return "", err
	}
	err = porcupine.Visualize(model(true), info, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}

func metadata(op *Op) string {
	s := fmt.Sprintf("%s#%d %s %s", op.Process, op.ID, op.Source, op.Key)
	if op.Batch > 0 {
		s += fmt.Sprintf(" (batch %d)", op.Batch)
	}
	if op.Lease > 0 {
		s += fmt.Sprintf(" lease %v", op.Lease)
	}
	if op.Err != "" {
		s += ": " + op.Err
	}
	return s
}

// roundDuration keeps three significant digits or so: 135ms, 412µs.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
