package claimhistory

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/leasehold/leasehold/claims"
)

// Kind is what a recorded statement does, or asks, of one claim.
type Kind string

const (
	// KindAcquire grants a lease or is refused: AcquireClaim, and the
	// statements that grant a claim with their own work (CreateEpisode,
	// ClaimForRecovery, ClaimAvailable).
	KindAcquire Kind = "acquire"
	// KindRenew extends one lease: RenewClaim.
	KindRenew Kind = "renew"
	// KindRenewBatch is one lease of a batched renewal (RenewClaims, the
	// heartbeat): the statement is recorded as one operation per lease.
	KindRenewBatch Kind = "renew-batch"
	// KindExtend is a fenced write that also extends the lease, never
	// shortening it: AppendStep.
	KindExtend Kind = "extend"
	// KindCheck is a fenced statement that changes nothing in the claim but
	// requires a live lease: StartEpisode, a test's own write conditioned on
	// the claim.
	KindCheck Kind = "check"
	// KindHold is a fence check that changes nothing and reads no clock:
	// HoldClaim (leasehold_hold, Run.Hold), legal while the grant holds the
	// claim (owner, fence, claimed), whatever its lease_until.
	KindHold Kind = "hold"
	// KindComplete ends the lease as done: CompleteClaim, FinishEpisode of a
	// done episode.
	KindComplete Kind = "complete"
	// KindFail ends the lease as failed: FailClaim, FinishEpisode otherwise.
	KindFail Kind = "fail"
	// KindRelease ends the lease without finishing: ReleaseClaim, one lease
	// of ReleaseClaims, RetryEpisode.
	KindRelease Kind = "release"
	// KindFenceOut takes a claim over without granting a lease: where an
	// acquire could grant, the fence moves on (+1) and the claim is left
	// released, owned by the taker (RequeueOrphan, which makes an orphan
	// available work again). Without a claim row it changes nothing.
	KindFenceOut Kind = "fence-out"
	// KindExpire is a test backdating a claimed lease instead of sleeping.
	KindExpire Kind = "expire"
)

// Outcome is what the caller learnt from a statement.
type Outcome string

const (
	// Granted: an acquire's grant, with the Fence and LeaseUntil the
	// statement returned.
	Granted Outcome = "granted"
	// OK: the statement matched; a renewal carries the LeaseUntil it
	// returned, an expire the backdated one.
	OK Outcome = "ok"
	// Busy: an acquire refused because the key holds a live lease. Definite:
	// only the claim row decided.
	Busy Outcome = "busy"
	// NotOwner: a fenced statement matched nothing and only the claim row
	// decided: (key, owner, fence) did not hold the claim (for a check: or
	// its lease had ended). Definite.
	NotOwner Outcome = "not-owner"
	// LeaseLost: a fenced statement matched nothing, but its condition also
	// reads rows other than the claim (the episode's status): it says
	// nothing definite about the claim, and a write may still have changed
	// the claim before the answer came.
	LeaseLost Outcome = "lease-lost"
	// Refused: no grant was made, for a reason the statement does not tell
	// apart from the claim's (not an orphan, a lapsed request, a duplicate
	// episode). Definite that nothing changed; nothing else is learnt.
	Refused Outcome = "refused"
	// NoEffect: an error after which the statement certainly did not take
	// effect (claims.ErrRetryable).
	NoEffect Outcome = "no-effect"
	// Unknown: an error that is not a definite refusal (a lost connection, a
	// timeout, a cancelled context), or no answer at all (the process died).
	// The statement may or may not have taken effect, at any time after its
	// invocation, even after the error was returned.
	Unknown Outcome = "unknown"
)

// Op is one recorded statement on one claim: its invocation and response
// instants on the recording process's wall clock, its arguments, and its
// outcome. A batched statement is one Op per lease, sharing Batch.
type Op struct {
	Process string `json:"process"` // the recording process (a node identity)
	ID      int64  `json:"id"`      // unique within Process
	Batch   int64  `json:"batch,omitempty"`
	Kind    Kind   `json:"kind"`
	Source  string `json:"source"` // the statement, e.g. AcquireClaim, CreateEpisode
	// Key is the claim's key. A statement that names an episode rather than
	// a key (ClaimForRecovery) may leave it empty when it failed; Episode
	// then says whose claim it is (ResolveKeys).
	Key string `json:"key,omitempty"`
	// AnyKey marks an acquire whose keys are known only from its answer
	// (ClaimAvailable, a poll: the statement picks the episodes). It is
	// recorded before the statement is sent, with no key; once answered,
	// each grant is recorded as an operation of its own key with the same
	// call instant (CallAt) and this one ends refused. Left without an
	// answer (the process died, or an error that proves nothing), it may
	// have granted any key: the check adds it to every key's history as an
	// acquire of unknown outcome.
	AnyKey  bool   `json:"any_key,omitempty"`
	Episode int64  `json:"episode,omitempty"`
	Owner   string `json:"owner"`
	// Fence is the grant a fenced statement acts for (0 for an acquire).
	Fence int64 `json:"fence,omitempty"`
	// Lease is the duration sent with a grant, renewal or extension, in the
	// whole milliseconds the adapters send: the database computed
	// lease_until = now() + Lease.
	Lease time.Duration `json:"lease,omitempty"`

	Call   time.Time `json:"call"`
	Return time.Time `json:"return,omitzero"` // zero: no answer recorded

	Outcome    Outcome   `json:"outcome,omitempty"` // "" with Return zero: no answer
	Granted    int64     `json:"granted,omitempty"` // Granted: the new grant's fence
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	Err        string    `json:"err,omitempty"`
}

// answered reports whether op's response was recorded.
func (op Op) answered() bool { return !op.Return.IsZero() && op.Outcome != "" }

// outcome is op's outcome, Unknown when no answer was recorded.
func (op Op) outcome() Outcome {
	if !op.answered() {
		return Unknown
	}
	return op.Outcome
}

func (op Op) String() string {
	s := fmt.Sprintf("%s %s %s", op.Kind, op.Source, op.Owner)
	if op.Fence > 0 {
		s += fmt.Sprintf(" fence %d", op.Fence)
	}
	s += " -> " + string(op.outcome())
	if op.Granted > 0 {
		s += fmt.Sprintf(" fence %d", op.Granted)
	}
	if !op.LeaseUntil.IsZero() {
		s += " until " + op.LeaseUntil.UTC().Format("15:04:05.000000")
	}
	return s
}

// Classify maps a statement's error to the outcome it proves: OK for nil,
// Busy, NotOwner and LeaseLost for the claims sentinels, NoEffect for
// claims.ErrRetryable, Unknown for anything else. Callers whose statement
// gives a sentinel a weaker meaning (ClaimForRecovery's ErrBusy) override it.
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, claims.ErrBusy):
		return Busy
	case errors.Is(err, claims.ErrNotOwner):
		return NotOwner
	case errors.Is(err, claims.ErrLeaseLost):
		return LeaseLost
	case errors.Is(err, claims.ErrRetryable):
		return NoEffect
	default:
		return Unknown
	}
}

// Response is what a statement answered, as recorded by Call.Return.
type Response struct {
	// Key is the claim's key when the call did not know it (a grant that
	// names an episode): it fills the Op's Key if that is empty.
	Key        string
	Outcome    Outcome
	Fence      int64     // Granted: the new grant's fence
	LeaseUntil time.Time // Granted, a renewal's OK, an expire's OK
	Err        error
}

// Recorder records operations, concurrency-safe. Each invocation and each
// response is one JSON line written to w with one Write call before Call
// returns (so before the statement is sent) and before Return returns: a
// process killed meanwhile leaves its invocation behind, an operation with
// no answer, which the checker treats as unknown. Every operation is also
// kept in memory (Ops).
type Recorder struct {
	process string

	mu    sync.Mutex
	w     io.Writer
	ops   []Op
	batch int64
	err   error
}

// NewRecorder returns a Recorder for the operations of process (its node
// identity), writing JSON lines to w; w nil keeps them in memory only.
func NewRecorder(process string, w io.Writer) *Recorder {
	return &Recorder{process: process, w: w}
}

// Call is one recorded invocation, waiting for its response.
type Call struct {
	r   *Recorder
	idx int
}

// Call records op's invocation now. Process, ID and Call are stamped;
// Lease is truncated to whole milliseconds, as the adapters send it.
func (r *Recorder) Call(op Op) *Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.callLocked([]Op{op}, wallNow())[0]
}

// CallAt records op's invocation as made at the instant of call's
// invocation: a grant an AnyKey acquire (call) made, known once its answer
// came.
func (r *Recorder) CallAt(op Op, call *Call) *Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.callLocked([]Op{op}, r.ops[call.idx].Call)[0]
}

// CallBatch records one invocation of a batched statement: one operation
// per lease in held (Key and Fence from it, the rest from op), sharing one
// Batch and one instant, written in one Write.
func (r *Recorder) CallBatch(op Op, held []claims.Held) []*Call {
	if len(held) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batch++
	op.Batch = r.batch
	ops := make([]Op, len(held))
	for i, h := range held {
		ops[i] = op
		ops[i].Key, ops[i].Fence = h.Key, h.Fence
	}
	return r.callLocked(ops, wallNow())
}

// callLocked records ops as invoked at now, in one Write.
func (r *Recorder) callLocked(ops []Op, now time.Time) []*Call {
	calls := make([]*Call, 0, len(ops))
	var buf []byte
	for _, op := range ops {
		op.Process, op.ID, op.Call = r.process, int64(len(r.ops))+1, now
		op.Lease = op.Lease.Truncate(time.Millisecond)
		op.Return, op.Outcome, op.Granted, op.LeaseUntil, op.Err = time.Time{}, "", 0, time.Time{}, ""
		r.ops = append(r.ops, op)
		calls = append(calls, &Call{r: r, idx: len(r.ops) - 1})
		buf = appendLine(buf, op)
	}
	r.writeLocked(buf)
	return calls
}

// Return records the response now.
func (c *Call) Return(res Response) {
	now := wallNow()
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	op := &r.ops[c.idx]
	op.Return, op.Outcome, op.Granted, op.LeaseUntil = now, res.Outcome, res.Fence, res.LeaseUntil.UTC().Round(0)
	if op.Key == "" {
		op.Key = res.Key
	}
	if res.Err != nil {
		op.Err = res.Err.Error()
	}
	r.writeLocked(appendLine(nil, *op))
}

// ReturnErr records the outcome err proves (Classify).
func (c *Call) ReturnErr(err error) { c.Return(Response{Outcome: Classify(err), Err: err}) }

// ReturnGrant records an acquire's answer: Granted with the claim's fence
// and lease_until when err is nil and the claim has a fence, Refused when
// the statement granted nothing without an error (fence 0), what err proves
// otherwise.
func (c *Call) ReturnGrant(cl claims.Claim, err error) {
	switch {
	case err != nil:
		c.ReturnErr(err)
	case cl.Fence == 0:
		c.Return(Response{Outcome: Refused})
	default:
		c.Return(Response{Key: cl.Key, Outcome: Granted, Fence: cl.Fence, LeaseUntil: cl.LeaseUntil})
	}
}

// wallNow is the wall clock, the one clock every process of a machine
// shares (porcupine orders operations by it), in UTC without a monotonic
// reading, as the history files keep it.
func wallNow() time.Time { return time.Now().UTC().Round(0) }

func appendLine(buf []byte, op Op) []byte {
	b, err := json.Marshal(op)
	if err != nil {
		panic(fmt.Sprintf("claimhistory: encode op: %v", err)) // plain data: cannot fail
	}
	return append(append(buf, b...), '\n')
}

func (r *Recorder) writeLocked(b []byte) {
	if r.w == nil || r.err != nil {
		return
	}
	if _, err := r.w.Write(b); err != nil {
		r.err = err
	}
}

// Err returns the first write error: the history written since is
// incomplete and must not be checked.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Ops returns a copy of every operation recorded so far, answered or not.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Read reads the JSON lines a Recorder wrote and returns one Op per
// operation, its latest line (the response over the invocation). A last
// line cut short (the process was killed while writing it) is ignored.
func Read(rd io.Reader) ([]Op, error) {
	type id struct {
		process string
		id      int64
	}
	idx := map[id]int{}
	var ops []Op
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var bad error
	for sc.Scan() {
		if bad != nil {
			return nil, bad // a bad line that was not the last one
		}
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			bad = fmt.Errorf("claimhistory: bad line %.80q: %w", sc.Text(), err)
			continue
		}
		k := id{op.Process, op.ID}
		if i, ok := idx[k]; ok {
			ops[i] = op
			continue
		}
		idx[k] = len(ops)
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ops, nil
}

// ReadFiles reads the histories in paths (one per process) and returns
// their operations together, in invocation order.
func ReadFiles(paths ...string) ([]Op, error) {
	var all []Op
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		ops, err := Read(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, ops...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Call.Before(all[j].Call) })
	return all, nil
}

// ResolveKeys fills the Key of every operation that names only its episode,
// from keyOf (episode id -> claim key), and returns how many remain
// without a key (Check reports them as unplaced).
func ResolveKeys(ops []Op, keyOf map[int64]string) int {
	left := 0
	for i := range ops {
		if ops[i].Key != "" || ops[i].AnyKey {
			continue
		}
		if k, ok := keyOf[ops[i].Episode]; ok && ops[i].Episode != 0 {
			ops[i].Key = k
			continue
		}
		left++
	}
	return left
}
