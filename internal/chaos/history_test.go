//go:build unix

package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/claimhistory"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
)

// The claims history: every worker records each claims operation it issues
// (claimhistory), to <history dir>/<worker id>.jsonl, and after the run the
// driver checks all of them together for linearizability with porcupine.

// envHistory names the file a worker records its claims history in.
const envHistory = "LEASEHOLD_CHAOS_HISTORY"

// nodeStore is what the worker's node and sweeper need of the adapter.
type nodeStore interface {
	runner.Store
	recovery.Store
	runner.SchemaChecker
}

// recordingStore records every statement of the node and the sweeper that
// grants, changes or requires a claim, and passes everything else through:
// it embeds the interface, so a method added to the stores later compiles
// (and is not recorded until it is added here).
type recordingStore struct {
	nodeStore
	rec    *claimhistory.Recorder
	claims claimhistory.Store // the claims.Store statements
}

func newRecordingStore(s nodeStore, rec *claimhistory.Recorder) recordingStore {
	return recordingStore{nodeStore: s, rec: rec, claims: claimhistory.Store{Store: s, Rec: rec}}
}

func (s recordingStore) Acquire(ctx context.Context, p claims.AcquireParams) (claims.Claim, error) {
	return s.claims.Acquire(ctx, p)
}

func (s recordingStore) Renew(ctx context.Context, t claims.Token, lease time.Duration) (time.Time, error) {
	return s.claims.Renew(ctx, t, lease)
}

func (s recordingStore) RenewMany(ctx context.Context, owner string, held []claims.Held, lease time.Duration) ([]claims.Renewed, error) {
	return s.claims.RenewMany(ctx, owner, held, lease)
}

func (s recordingStore) Complete(ctx context.Context, t claims.Token) error {
	return s.claims.Complete(ctx, t)
}

func (s recordingStore) Fail(ctx context.Context, t claims.Token, detail json.RawMessage) error {
	return s.claims.Fail(ctx, t, detail)
}

func (s recordingStore) Release(ctx context.Context, t claims.Token) error {
	return s.claims.Release(ctx, t)
}

func (s recordingStore) ReleaseMany(ctx context.Context, owner string, held []claims.Held) ([]claims.Held, error) {
	return s.claims.ReleaseMany(ctx, owner, held)
}

// CreateEpisode with an owner grants the new episode's claim in the same
// statement: an acquire. A duplicate granted nothing (refused); a created
// episode without a grant met a live lease (busy).
func (s recordingStore) CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error) {
	if n.Owner == "" {
		return s.nodeStore.CreateEpisode(ctx, n) // created available: no claim
	}
	call := s.rec.Call(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "CreateEpisode", Key: n.DedupeKey, Owner: n.Owner, Lease: n.Lease})
	res, err := s.nodeStore.CreateEpisode(ctx, n)
	switch {
	case err == nil && !res.Created:
		call.Return(claimhistory.Response{Outcome: claimhistory.Refused})
	case err == nil && res.Claim.Fence == 0:
		call.Return(claimhistory.Response{Key: res.Episode.ClaimKey(), Outcome: claimhistory.Busy})
	default:
		call.ReturnGrant(res.Claim, err)
	}
	return res, err
}

// StartEpisode requires the run's grant to hold a live lease: a check. Its
// refusal also reads the episode, so it proves nothing about the claim.
func (s recordingStore) StartEpisode(ctx context.Context, id int64, t claims.Token) (int32, error) {
	call := s.rec.Call(claimhistory.Op{Kind: claimhistory.KindCheck, Source: "StartEpisode", Key: t.Key, Episode: id, Owner: t.Owner, Fence: t.Fence})
	next, err := s.nodeStore.StartEpisode(ctx, id, t)
	call.ReturnErr(err)
	return next, err
}

// AppendStep extends the lease with the journal write.
func (s recordingStore) AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error {
	call := s.rec.Call(claimhistory.Op{Kind: claimhistory.KindExtend, Source: "AppendStep", Key: t.Key, Episode: id, Owner: t.Owner, Fence: t.Fence, Lease: lease})
	err := s.nodeStore.AppendStep(ctx, id, t, stepNo, data, lease)
	call.ReturnErr(err)
	return err
}

// FinishEpisode ends the claim done or failed with the episode (the
// sweeper's fail policy; runs finish in their own transaction, Run.CompleteTx).
func (s recordingStore) FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error {
	call := s.rec.Call(finishOp("FinishEpisode", id, t, f))
	err := s.nodeStore.FinishEpisode(ctx, id, t, f)
	call.ReturnErr(err)
	return err
}

func finishOp(source string, id int64, t claims.Token, f episodes.Finish) claimhistory.Op {
	kind := claimhistory.KindFail
	if f.ClaimState() == string(claims.StateDone) {
		kind = claimhistory.KindComplete
	}
	return claimhistory.Op{Kind: kind, Source: source, Key: t.Key, Episode: id, Owner: t.Owner, Fence: t.Fence}
}

// RetryEpisode releases the claim with the failed attempt.
func (s recordingStore) RetryEpisode(ctx context.Context, id int64, t claims.Token, r episodes.Retry) (episodes.Retried, error) {
	call := s.rec.Call(claimhistory.Op{Kind: claimhistory.KindRelease, Source: "RetryEpisode", Key: t.Key, Episode: id, Owner: t.Owner, Fence: t.Fence})
	res, err := s.nodeStore.RetryEpisode(ctx, id, t, r)
	call.ReturnErr(err)
	return res, err
}

// ClaimAvailable grants the claims of the episodes the poll picks, which
// its answer alone names: an acquire of any key (AnyKey) invoked before the
// statement is sent; with the answer, one acquire per picked episode on its
// own key, invoked at the same instant, granted or refused (fence 0), and
// the any-key acquire refused. Left without an answer it may have granted
// any key (see claimhistory.Op.AnyKey).
func (s recordingStore) ClaimAvailable(ctx context.Context, q episodes.AvailableQuery) ([]episodes.Dispatched, error) {
	poll := s.rec.Call(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "ClaimAvailable", AnyKey: true, Owner: q.Owner, Lease: q.Lease})
	ds, err := s.nodeStore.ClaimAvailable(ctx, q)
	for _, d := range ds {
		c := s.rec.CallAt(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "ClaimAvailable", Key: d.Claim.Key,
			Episode: d.EpisodeID, Owner: q.Owner, Lease: q.Lease}, poll)
		if d.Claim.Fence == 0 {
			c.Return(claimhistory.Response{Outcome: claimhistory.Refused})
			continue
		}
		c.ReturnGrant(d.Claim, nil)
	}
	if err != nil {
		// What it took before the error is recorded above; the rest may
		// have been granted or not.
		poll.ReturnErr(err)
	} else {
		poll.Return(claimhistory.Response{Outcome: claimhistory.Refused})
	}
	return ds, err
}

// ClaimForRecovery grants an orphan's claim: an acquire. Its ErrBusy also
// means "not an orphan": refused, not busy.
func (s recordingStore) ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error) {
	call := s.rec.Call(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "ClaimForRecovery", Episode: id, Owner: owner, Lease: lease})
	ep, c, err := s.nodeStore.ClaimForRecovery(ctx, id, owner, lease, staleAfter)
	if errors.Is(err, claims.ErrBusy) {
		call.Return(claimhistory.Response{Outcome: claimhistory.Refused, Err: err})
	} else {
		call.ReturnGrant(c, err)
	}
	return ep, c, err
}

// RequeueOrphan fences an orphan's claim out (fence + 1, released) and
// makes the episode available again. Its ErrBusy also means "not an
// orphan": refused.
func (s recordingStore) RequeueOrphan(ctx context.Context, id int64, attempts int32, owner string, staleAfter time.Duration) (episodes.Requeued, error) {
	call := s.rec.Call(claimhistory.Op{Kind: claimhistory.KindFenceOut, Source: "RequeueOrphan", Episode: id, Owner: owner})
	res, err := s.nodeStore.RequeueOrphan(ctx, id, attempts, owner, staleAfter)
	if errors.Is(err, claims.ErrBusy) {
		call.Return(claimhistory.Response{Outcome: claimhistory.Refused, Err: err})
	} else {
		call.ReturnErr(err)
	}
	return res, err
}

// RequeueOrphans records each item as RequeueOrphan does: every call
// begins before the batch is sent and returns once it has answered. A
// store that is no recovery.BatchRequeuer gets RequeueOrphan per item.
func (s recordingStore) RequeueOrphans(ctx context.Context, items []episodes.RequeueItem, owner string, staleAfter time.Duration) []episodes.RequeueResult {
	calls := make([]*claimhistory.Call, len(items))
	for i, it := range items {
		calls[i] = s.rec.Call(claimhistory.Op{Kind: claimhistory.KindFenceOut, Source: "RequeueOrphan", Episode: it.ID, Owner: owner})
	}
	var out []episodes.RequeueResult
	if b, ok := s.nodeStore.(recovery.BatchRequeuer); ok {
		out = b.RequeueOrphans(ctx, items, owner, staleAfter)
	} else {
		out = make([]episodes.RequeueResult, len(items))
		for i, it := range items {
			out[i].Requeued, out[i].Err = s.nodeStore.RequeueOrphan(ctx, it.ID, it.Attempts, owner, staleAfter)
		}
	}
	for i, r := range out {
		if errors.Is(r.Err, claims.ErrBusy) {
			calls[i].Return(claimhistory.Response{Outcome: claimhistory.Refused, Err: r.Err})
		} else {
			calls[i].ReturnErr(r.Err)
		}
	}
	return out
}

// historyFile is a worker's history file. Each record is one write(2), so
// a SIGKILL loses at most the record being written (claimhistory.Read
// ignores a cut last line). A failed write is reported once on stdout: the
// history is then incomplete and the driver fails the check.
type historyFile struct {
	f      *os.File
	out    *lines
	failed atomic.Bool
}

func openHistory(path string, out *lines) (*historyFile, error) {
	if path == "" {
		return nil, fmt.Errorf("%s is not set", envHistory)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &historyFile{f: f, out: out}, nil
}

func (h *historyFile) Write(b []byte) (int, error) {
	n, err := h.f.Write(b)
	if err != nil && h.failed.CompareAndSwap(false, true) {
		h.out.printf("event history_failed %s", strings.Join(strings.Fields(err.Error()), "_"))
	}
	return n, err
}

// historyDir is where t's workers write their claims histories: removed
// when t passes, kept (and named in the log) when it fails, to be studied
// with claimhistory.ReadFiles.
func historyDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "chaos-histories-*")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the workers' claims histories are kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// checkHistory checks the workers' claims history (checkHistories) and
// returns the counts for the report and what is wrong.
func (r *chaosRun) checkHistory() (counts string, bad []string) {
	if n := r.cl.historyFailed.Load(); n > 0 {
		bad = append(bad, fmt.Sprintf("%d workers failed to write their history: it is incomplete", n))
	}
	rep, files, grants, err := checkHistories(r.ctx, r.db, r.histDir)
	r.say("claims history of %d worker processes, %v", files, rep)
	r.say("grants by statement: %s", grants)
	if err != nil {
		bad = append(bad, err.Error())
	}
	return fmt.Sprintf("%d operations across %d keys by %d processes, %d unknown, %d lease-lost, checked in %v",
		rep.Ops, rep.Keys, files, rep.Unknown, rep.LeaseLost, rep.Took.Round(time.Millisecond)), bad
}

// checkHistories reads every worker's history in dir (the dead ones' too),
// resolves the keys of the operations that name only their episode
// (ClaimKeys), and checks the whole for linearizability. A failed check
// keeps the whole history in a file beside porcupine's visualization.
func checkHistories(ctx context.Context, db reads, dir string) (rep claimhistory.Report, files int, grants string, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err == nil && len(paths) == 0 {
		err = fmt.Errorf("no worker history in %s", dir)
	}
	if err != nil {
		return claimhistory.Report{}, 0, "", err
	}
	ops, err := claimhistory.ReadFiles(paths...)
	if err != nil {
		return claimhistory.Report{}, len(paths), "", err
	}
	keyOf := map[int64]string{}
	rows, err := db.Query(ctx, "ClaimKeys")
	if err != nil {
		return claimhistory.Report{}, len(paths), "", err
	}
	for rows.Next() {
		var id int64
		var key string
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return claimhistory.Report{}, len(paths), "", err
		}
		keyOf[id] = key
	}
	if err := rows.Err(); err != nil {
		return claimhistory.Report{}, len(paths), "", err
	}
	claimhistory.ResolveKeys(ops, keyOf)
	grants = grantsBySource(ops)

	rep, err = claimhistory.Check(ops, claimhistory.Options{})
	return rep, len(paths), grants, err
}

// grantsBySource counts the grants in ops by the statement that made them,
// for the report: which grant paths the run exercised.
func grantsBySource(ops []claimhistory.Op) string {
	n := map[string]int{}
	for _, op := range ops {
		if op.Kind == claimhistory.KindAcquire && op.Outcome == claimhistory.Granted {
			n[op.Source]++
		}
	}
	names := slices.Sorted(maps.Keys(n))
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %d", name, n[name])
	}
	return strings.Join(parts, ", ")
}
