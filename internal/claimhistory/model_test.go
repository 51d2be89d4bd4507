package claimhistory_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/internal/claimhistory"
)

// t0 is the hand-written histories' origin; every instant is t0 + ms.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// h builds a one-key history by hand: each op is called at call and
// answered at ret (ms after t0); a grant or renewal executed at exec with
// a lease of lease ms (its lease_until is exec + lease).
type h struct{ ops []claimhistory.Op }

const lease = 1000 // ms

func (b *h) add(op claimhistory.Op, call, ret int) *h {
	op.Process, op.ID, op.Key = "p", int64(len(b.ops)+1), "k"
	op.Call = at(call)
	if ret >= 0 {
		op.Return = at(ret)
	}
	b.ops = append(b.ops, op)
	return b
}

func (b *h) grant(owner string, fence int64, call, exec, ret int) *h {
	return b.add(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "AcquireClaim", Owner: owner, Lease: lease * time.Millisecond,
		Outcome: claimhistory.Granted, Granted: fence, LeaseUntil: at(exec + lease)}, call, ret)
}

func (b *h) acquire(owner string, out claimhistory.Outcome, call, ret int) *h {
	return b.add(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "AcquireClaim", Owner: owner, Lease: lease * time.Millisecond, Outcome: out}, call, ret)
}

func (b *h) renew(owner string, fence int64, call, exec, ret int) *h {
	return b.add(claimhistory.Op{Kind: claimhistory.KindRenew, Source: "RenewClaim", Owner: owner, Fence: fence, Lease: lease * time.Millisecond,
		Outcome: claimhistory.OK, LeaseUntil: at(exec + lease)}, call, ret)
}

func (b *h) fenced(kind claimhistory.Kind, owner string, fence int64, out claimhistory.Outcome, call, ret int) *h {
	op := claimhistory.Op{Kind: kind, Source: string(kind), Owner: owner, Fence: fence, Outcome: out}
	if kind == claimhistory.KindRenew || kind == claimhistory.KindExtend {
		op.Lease = lease * time.Millisecond
	}
	return b.add(op, call, ret)
}

func check(t *testing.T, ops []claimhistory.Op) (claimhistory.Report, error) {
	t.Helper()
	return claimhistory.Check(ops, claimhistory.Options{Dir: t.TempDir(), Skew: time.Millisecond})
}

func TestModelAcceptsCorrectHistories(t *testing.T) {
	const (
		A, B, C = "a", "b", "c"
	)
	for _, tc := range []struct {
		name string
		h    *h
	}{
		{"grant, renew, complete, re-claim", new(h).
			grant(A, 1, 0, 1, 2).renew(A, 1, 500, 501, 502).
			fenced(claimhistory.KindComplete, A, 1, claimhistory.OK, 600, 601).
			grant(B, 2, 700, 701, 702)},
		{"busy while live, steal once expired", new(h).
			grant(A, 1, 0, 1, 2).acquire(B, claimhistory.Busy, 500, 501).
			grant(B, 2, 1100, 1101, 1102)},
		{"a renewal of an expired lease nobody took", new(h).
			grant(A, 1, 0, 1, 2).renew(A, 1, 1500, 1501, 1502).acquire(B, claimhistory.Busy, 2000, 2001)},
		{"a fenced-out holder is refused", new(h).
			grant(A, 1, 0, 1, 2).grant(B, 2, 1100, 1101, 1102).
			fenced(claimhistory.KindRenew, A, 1, claimhistory.NotOwner, 1200, 1201).
			fenced(claimhistory.KindComplete, A, 1, claimhistory.NotOwner, 1300, 1301).
			fenced(claimhistory.KindCheck, A, 1, claimhistory.NotOwner, 1400, 1401)},
		{"busy concurrent with the complete that freed the key", new(h).
			grant(A, 1, 0, 1, 2).fenced(claimhistory.KindComplete, A, 1, claimhistory.OK, 100, 110).
			acquire(B, claimhistory.Busy, 105, 106)},
		{"an unknown grant that took effect explains the next fence", new(h).
			grant(A, 1, 0, 1, 2).acquire(B, claimhistory.Unknown, 1100, 1150).
			grant(C, 3, 2300, 2301, 2302)},
		{"an unknown grant that did not take effect", new(h).
			grant(A, 1, 0, 1, 2).acquire(B, claimhistory.Unknown, 1100, -1).
			grant(C, 2, 1300, 1301, 1302)},
		{"an unknown renewal may have kept the lease alive", new(h).
			grant(A, 1, 0, 1, 2).fenced(claimhistory.KindRenew, A, 1, claimhistory.Unknown, 800, 900).
			acquire(B, claimhistory.Busy, 1200, 1201)},
		{"an unknown grant may land after its error (a held network)", new(h).
			grant(A, 1, 0, 1, 2).acquire(B, claimhistory.Unknown, 100, 150).
			fenced(claimhistory.KindComplete, A, 1, claimhistory.OK, 200, 201).
			acquire(C, claimhistory.Busy, 300, 301)},
		{"a lease-lost finish that changed the claim anyway", new(h).
			grant(A, 1, 0, 1, 2).fenced(claimhistory.KindComplete, A, 1, claimhistory.LeaseLost, 100, 110).
			grant(B, 2, 200, 201, 202)},
		{"an extension keeps the lease past its grant's end", new(h).
			grant(A, 1, 0, 1, 2).fenced(claimhistory.KindExtend, A, 1, claimhistory.OK, 800, 801).
			acquire(B, claimhistory.Busy, 1500, 1501).
			fenced(claimhistory.KindCheck, A, 1, claimhistory.OK, 1600, 1601)},
		{"refusals and certain failures say nothing", new(h).
			grant(A, 1, 0, 1, 2).acquire(B, claimhistory.Refused, 10, 11).acquire(B, claimhistory.NoEffect, 12, 13).
			fenced(claimhistory.KindComplete, B, 9, claimhistory.NoEffect, 14, 15).
			fenced(claimhistory.KindCheck, B, 9, claimhistory.LeaseLost, 16, 17)},
		{"an orphan fenced out, then granted again", new(h).
			grant(A, 1, 0, 1, 2).fenced(claimhistory.KindFenceOut, B, 0, claimhistory.OK, 1100, 1101).
			fenced(claimhistory.KindRenew, A, 1, claimhistory.NotOwner, 1200, 1201).
			grant(C, 3, 1300, 1301, 1302)},
		{"a process killed mid-call: an invocation without an answer", new(h).
			grant(A, 1, 0, 1, 2).add(claimhistory.Op{Kind: claimhistory.KindComplete, Source: "CompleteClaim", Owner: A, Fence: 1}, 10, -1).
			grant(B, 2, 100, 101, 102)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := check(t, tc.h.ops)
			require.NoError(t, err, "%v", rep)
			require.Equal(t, porcupine.Ok, rep.Result)
			require.Equal(t, len(tc.h.ops), rep.Ops)
			require.Equal(t, 1, rep.Keys)
		})
	}
}

func TestModelRejectsViolations(t *testing.T) {
	const A, B = "a", "b"
	for _, tc := range []struct {
		name string
		h    *h
	}{
		{"two overlapping grants", new(h).grant(A, 1, 0, 1, 2).grant(B, 2, 500, 501, 502)},
		{"a grant while a returned renewal still ran", new(h).
			grant(A, 1, 0, 1, 2).renew(A, 1, 900, 901, 902).grant(B, 2, 1100, 1101, 1102)},
		{"a reused fence", new(h).grant(A, 1, 0, 1, 2).grant(B, 1, 1100, 1101, 1102)},
		{"a skipped fence", new(h).grant(A, 1, 0, 1, 2).
			fenced(claimhistory.KindComplete, A, 1, claimhistory.OK, 10, 11).grant(B, 3, 20, 21, 22)},
		{"a renewal by a fenced-out holder", new(h).
			grant(A, 1, 0, 1, 2).grant(B, 2, 1100, 1101, 1102).renew(A, 1, 1200, 1201, 1202)},
		{"a complete by a fenced-out holder", new(h).
			grant(A, 1, 0, 1, 2).grant(B, 2, 1100, 1101, 1102).
			fenced(claimhistory.KindComplete, A, 1, claimhistory.OK, 1200, 1201)},
		{"busy on a finished claim", new(h).grant(A, 1, 0, 1, 2).
			fenced(claimhistory.KindRelease, A, 1, claimhistory.OK, 10, 11).acquire(B, claimhistory.Busy, 20, 21)},
		{"busy long after the lease ended", new(h).grant(A, 1, 0, 1, 2).acquire(B, claimhistory.Busy, 1500, 1501)},
		{"not-owner for the holder", new(h).grant(A, 1, 0, 1, 2).
			fenced(claimhistory.KindRenew, A, 1, claimhistory.NotOwner, 10, 11)},
		{"a fence-out of a live lease", new(h).grant(A, 1, 0, 1, 2).
			fenced(claimhistory.KindFenceOut, B, 0, claimhistory.OK, 100, 101)},
		{"a check that passed after the lease ended", new(h).grant(A, 1, 0, 1, 2).
			fenced(claimhistory.KindCheck, A, 1, claimhistory.OK, 1500, 1501)},
		{"a check that failed while the lease surely ran", new(h).grant(A, 1, 0, 1, 2).
			fenced(claimhistory.KindCheck, A, 1, claimhistory.NotOwner, 100, 101)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := check(t, tc.h.ops)
			require.ErrorIs(t, err, claimhistory.ErrNotLinearizable)
			require.Equal(t, porcupine.Illegal, rep.Result)
			require.Equal(t, []string{"k"}, rep.Illegal)
			require.FileExists(t, rep.Visualization)
		})
	}
}

func TestCheckRefusesHistoriesItCannotJudge(t *testing.T) {
	// A grant that executed before it was called: the clocks disagree.
	ops := new(h).grant("a", 1, 100, 50, 110).ops
	_, err := check(t, ops)
	require.ErrorIs(t, err, claimhistory.ErrUnjudged)

	// An operation whose key was never resolved.
	ops = new(h).grant("a", 1, 0, 1, 2).ops
	ops[0].Key, ops[0].Episode = "", 7
	_, err = check(t, ops)
	require.ErrorIs(t, err, claimhistory.ErrUnjudged)
	require.Zero(t, claimhistory.ResolveKeys(ops, map[int64]string{7: "episode:7"}))
	rep, err := check(t, ops)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Keys)
}

func TestRecorderWritesWhatReadReads(t *testing.T) {
	var buf bytes.Buffer
	rec := claimhistory.NewRecorder("node-a", &buf)
	c := rec.Call(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "AcquireClaim", Key: "k", Owner: "node-a", Lease: 1500*time.Millisecond + 7})
	c.ReturnGrant(claims.Claim{Token: claims.Token{Key: "k", Owner: "node-a", Fence: 1}, LeaseUntil: at(1500)}, nil)
	calls := rec.CallBatch(claimhistory.Op{Kind: claimhistory.KindRenewBatch, Source: "RenewClaims", Owner: "node-a", Lease: time.Second},
		[]claims.Held{{Key: "k", Fence: 1}, {Key: "j", Fence: 4}})
	calls[0].Return(claimhistory.Response{Outcome: claimhistory.OK, LeaseUntil: at(2000)})
	// calls[1] never answers: its process was killed.
	rec.Call(claimhistory.Op{Kind: claimhistory.KindComplete, Source: "CompleteClaim", Key: "k", Owner: "node-a", Fence: 1}).ReturnErr(claims.ErrNotOwner)
	require.NoError(t, rec.Err())
	// A line cut short by a SIGKILL.
	buf.WriteString(`{"process":"node-a","id":9,"kind":"acq`)

	ops, err := claimhistory.Read(strings.NewReader(buf.String()))
	require.NoError(t, err)
	require.Len(t, ops, 4)
	require.Equal(t, rec.Ops(), ops)
	require.Equal(t, 1500*time.Millisecond, ops[0].Lease, "truncated to the milliseconds the adapters send")
	require.Equal(t, claimhistory.Granted, ops[0].Outcome)
	require.EqualValues(t, 1, ops[0].Granted)
	require.Equal(t, ops[1].Batch, ops[2].Batch)
	require.Equal(t, ops[1].Call, ops[2].Call)
	require.Equal(t, "j", ops[2].Key)
	require.True(t, ops[2].Return.IsZero(), "no answer recorded")
	require.Equal(t, claimhistory.NotOwner, ops[3].Outcome)

	path := t.TempDir() + "/h.jsonl"
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	fromFile, err := claimhistory.ReadFiles(path)
	require.NoError(t, err)
	require.Len(t, fromFile, 4)

	_, err = claimhistory.Read(strings.NewReader("{bad\n" + `{"process":"p","id":1}` + "\n"))
	require.Error(t, err, "a bad line that is not the last one")
}

// A poll's acquire (AnyKey) names its keys only in its answer. Unanswered
// (its process died), it may have granted any key, so the check adds it to
// every key's history: a grant it would explain (fence 2 between 1 and 3)
// is legal; answered, its grants were recorded on their keys and it
// explains nothing, so the same gap is not; and no unanswered poll makes
// two overlapping grants legal.
func TestAnUnansweredPollMayHaveGrantedAnyKey(t *testing.T) {
	t.Parallel()
	poll := func(out claimhistory.Outcome, ret int) claimhistory.Op {
		op := claimhistory.Op{Process: "q", ID: 1, Kind: claimhistory.KindAcquire, Source: "ClaimAvailable", AnyKey: true,
			Owner: "poller", Lease: lease * time.Millisecond, Call: at(1500), Outcome: out}
		if ret >= 0 {
			op.Return = at(ret)
		}
		return op
	}
	gap := (&h{}).grant("a", 1, 0, 0, 10).grant("c", 3, 5000, 5000, 5010).ops
	check := func(ops []claimhistory.Op) error {
		_, err := claimhistory.Check(ops, claimhistory.Options{Dir: t.TempDir()})
		return err
	}
	require.ErrorIs(t, check(gap), claimhistory.ErrNotLinearizable, "a fence skipped with nothing to explain it")
	require.NoError(t, check(append(append([]claimhistory.Op{}, gap...), poll("", -1))), "the dead poll may have granted fence 2")
	require.ErrorIs(t, check(append(append([]claimhistory.Op{}, gap...), poll(claimhistory.Refused, 1600))),
		claimhistory.ErrNotLinearizable, "an answered poll's grants are on their own keys")
	overlap := (&h{}).grant("a", 1, 0, 0, 10).grant("c", 2, 100, 100, 110).ops
	require.ErrorIs(t, check(append(append([]claimhistory.Op{}, overlap...), poll("", -1))),
		claimhistory.ErrNotLinearizable, "a dead poll does not end a live lease")
}
