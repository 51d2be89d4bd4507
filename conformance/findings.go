package conformance

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/findings"
)

// FindingsStore is the findings surface of an adapter, with the episode
// surface the scenarios use to make the running episodes findings are
// written on behalf of.
type FindingsStore interface {
	EpisodeStore
	findings.Store
}

// FindingRow is a findings row as stored, active or cleared, for checking
// history and that a rejected write left every row untouched.
type FindingRow struct {
	ID               int64
	Status           string
	Class            string
	Severity         string
	Summary          string
	Data             json.RawMessage // as the database returns it; nil for NULL
	RaiseCount       int32
	RaisedByEpisode  int64
	UpdatedByEpisode int64
	ClearedByEpisode int64 // 0 while active
	UpdatedAt        time.Time
	ClearedAt        *time.Time
}

// FindingsBackend is what the findings scenarios need from one isolated
// backend.
type FindingsBackend struct {
	// Store under test, over an empty, migrated database.
	Store FindingsStore
	// ExpireClaim makes key's lease past on the database clock.
	ExpireClaim func(t testing.TB, key string)
	// Rows returns every row of key in env, active and cleared, by id.
	Rows func(t testing.TB, env, key string) []FindingRow
}

// RunFindings runs the findings scenarios: one active finding per key per
// env, history kept across raise and clear, env taken from the episode,
// strict env reads, and every write fenced on the episode's work claim.
func RunFindings(t *testing.T, newBackend func(t *testing.T) FindingsBackend) {
	t.Run("RaiseInsertsThenAbsorbs", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		first := f.start(t, "", "hatch", "monitor", "node-a")
		second := f.start(t, "", "hatch", "monitor", "node-b")

		a := f.raise(t, first, findings.Raise{Key: "disk:/var", Class: "limit", Severity: "warn",
			Summary: "80% used", Data: json.RawMessage(`{"pct": 80}`)})
		require.Equal(t, int32(1), a.RaiseCount)
		require.Equal(t, findings.StatusActive, a.Status)
		require.Equal(t, first.ep.ID, a.RaisedByEpisode)
		require.Equal(t, first.ep.ID, a.UpdatedByEpisode)
		require.True(t, a.RaisedAt.Equal(a.UpdatedAt), "raised %v, updated %v", a.RaisedAt, a.UpdatedAt)

		b := f.raise(t, second, findings.Raise{Key: "disk:/var", Class: "capacity", Severity: "critical",
			Summary: "95% used", Data: json.RawMessage(`{"pct": 95}`)})
		require.Equal(t, a.ID, b.ID, "a raise of an active key is absorbed by it")
		require.Equal(t, int32(2), b.RaiseCount)
		require.Equal(t, []string{"capacity", "critical", "95% used"}, []string{b.Class, b.Severity, b.Summary})
		require.JSONEq(t, `{"pct": 95}`, string(b.Data))
		require.Equal(t, first.ep.ID, b.RaisedByEpisode, "the first raiser stays recorded")
		require.Equal(t, second.ep.ID, b.UpdatedByEpisode)
		require.True(t, a.RaisedAt.Equal(b.RaisedAt))
		require.False(t, b.UpdatedAt.Before(a.UpdatedAt))

		// A raise replaces the details: no data is stored as NULL.
		c := f.raise(t, first, findings.Raise{Key: "disk:/var"})
		require.Equal(t, int32(3), c.RaiseCount)
		require.Nil(t, c.Data)
		require.Empty(t, c.Class)

		active := f.active(t, findings.Query{Env: ""})
		require.Len(t, active, 1)
		require.Equal(t, c.ID, active[0].ID)
		require.Equal(t, int32(3), active[0].RaiseCount)
		require.Len(t, f.Rows(t, "", "disk:/var"), 1)
	})

	t.Run("RaiseClearCyclesKeepHistory", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		run := f.start(t, "", "", "monitor", "node-a")
		var ids []int64
		for i := range 3 {
			fd := f.raise(t, run, findings.Raise{Key: "k", Summary: fmt.Sprintf("round %d", i)})
			require.Equal(t, int32(1), fd.RaiseCount, "a raise after a clear is a new finding")
			require.NotContains(t, ids, fd.ID)
			ids = append(ids, fd.ID)
			if i < 2 {
				require.True(t, f.clear(t, run, "k"))
			}
		}
		rows := f.Rows(t, "", "k")
		require.Len(t, rows, 3, "cleared findings stay as history")
		for i, r := range rows {
			require.Equal(t, ids[i], r.ID)
			require.Equal(t, fmt.Sprintf("round %d", i), r.Summary)
			if i < 2 {
				require.Equal(t, findings.StatusCleared, r.Status)
				require.Equal(t, run.ep.ID, r.ClearedByEpisode)
				require.NotNil(t, r.ClearedAt)
			} else {
				require.Equal(t, findings.StatusActive, r.Status)
				require.Zero(t, r.ClearedByEpisode)
				require.Nil(t, r.ClearedAt)
			}
		}
	})

	t.Run("UpdateChangesDetailsWithoutCounting", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		raiser := f.start(t, "", "", "monitor", "node-a")
		updater := f.start(t, "", "", "monitor", "node-b")
		fd := f.raise(t, raiser, findings.Raise{Key: "k", Class: "limit", Severity: "warn", Summary: "s1",
			Data: json.RawMessage(`{"v":1}`)})

		ok, err := f.Store.UpdateFinding(ctx(t), updater.tok, updater.ep.ID, "k",
			findings.Update{Severity: "critical", Summary: "s2", Data: json.RawMessage(`{"v":2}`)})
		require.NoError(t, err)
		require.True(t, ok)
		got := f.active(t, findings.Query{Key: "k"})
		require.Len(t, got, 1)
		require.Equal(t, fd.ID, got[0].ID)
		require.Equal(t, int32(1), got[0].RaiseCount, "an update is not a raise")
		require.Equal(t, []string{"limit", "critical", "s2"}, []string{got[0].Class, got[0].Severity, got[0].Summary})
		require.JSONEq(t, `{"v":2}`, string(got[0].Data))
		require.Equal(t, raiser.ep.ID, got[0].RaisedByEpisode)
		require.Equal(t, updater.ep.ID, got[0].UpdatedByEpisode)

		ok, err = f.Store.UpdateFinding(ctx(t), updater.tok, updater.ep.ID, "absent", findings.Update{Summary: "x"})
		require.NoError(t, err)
		require.False(t, ok)
		require.Empty(t, f.Rows(t, "", "absent"), "an update creates nothing")

		require.True(t, f.clear(t, raiser, "k"))
		ok, err = f.Store.UpdateFinding(ctx(t), updater.tok, updater.ep.ID, "k", findings.Update{Summary: "late"})
		require.NoError(t, err)
		require.False(t, ok, "a cleared finding is history")
		require.Equal(t, "s2", f.Rows(t, "", "k")[0].Summary)
	})

	t.Run("ClearOfNothing", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		run := f.start(t, "", "", "monitor", "node-a")
		require.False(t, f.clear(t, run, "never-raised"))
		f.raise(t, run, findings.Raise{Key: "k"})
		require.True(t, f.clear(t, run, "k"))
		require.False(t, f.clear(t, run, "k"), "a second clear finds nothing active")
		require.Len(t, f.Rows(t, "", "k"), 1)
	})

	t.Run("EnvsHaveSeparateActiveFindings", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		prod := f.start(t, "", "", "monitor", "node-a")
		rc := f.start(t, "rc", "", "monitor", "node-a")

		p := f.raise(t, prod, findings.Raise{Key: "cpu:high", Summary: "prod"})
		r := f.raise(t, rc, findings.Raise{Key: "cpu:high", Summary: "rc"})
		require.NotEqual(t, p.ID, r.ID)
		require.Equal(t, int32(1), r.RaiseCount, "rc's raise is not absorbed by prod's finding")
		require.Equal(t, []string{"", "rc"}, []string{p.Env, r.Env})

		require.True(t, f.clear(t, rc, "cpu:high"))
		require.Empty(t, f.active(t, findings.Query{Env: "rc"}))
		unset := f.active(t, findings.Query{Env: ""})
		require.Len(t, unset, 1, "clearing rc's finding leaves the unset env's")
		require.Equal(t, p.ID, unset[0].ID)
		require.False(t, f.clear(t, rc, "cpu:high"), "rc cannot clear the unset env's finding")

		ok, err := f.Store.UpdateFinding(ctx(t), rc.tok, rc.ep.ID, "cpu:high", findings.Update{Summary: "from rc"})
		require.NoError(t, err)
		require.False(t, ok, "rc cannot update the unset env's finding")
		require.Equal(t, "prod", f.active(t, findings.Query{Env: ""})[0].Summary)
	})

	t.Run("FindingInheritsEpisodeEnvAndStack", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		run := f.start(t, "demo", "hatch", "resource_monitor", "node-a")
		fd := f.raise(t, run, findings.Raise{Key: "limit:x", Class: "limit_breach"})
		require.Equal(t, "demo", fd.Env)
		require.Equal(t, "hatch", fd.SourceStack)
		require.Equal(t, "resource_monitor", fd.ActorID)

		got := f.active(t, findings.Query{Env: "demo", Class: "limit_breach"})
		require.Len(t, got, 1)
		require.Equal(t, fd, got[0])
		require.Empty(t, f.active(t, findings.Query{Env: ""}), "the raising node's env plays no part")
	})

	t.Run("ZombieWritesNothing", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		a := f.start(t, "", "", "monitor", "node-a")
		f.raise(t, a, findings.Raise{Key: "k", Summary: "by a"})

		b := f.steal(t, a, "node-b")
		fd := f.raise(t, b, findings.Raise{Key: "k", Summary: "by b"})
		require.Equal(t, int32(2), fd.RaiseCount)
		f.requireFenced(t, a, "k")

		// A -> B -> A: node-a wins the claim back under a new fence; its old
		// grant is still a zombie.
		a2 := f.steal(t, b, "node-a")
		require.Greater(t, a2.tok.Fence, b.tok.Fence)
		f.requireFenced(t, a, "k")
		f.requireFenced(t, b, "k")
		fd = f.raise(t, a2, findings.Raise{Key: "k", Summary: "by a again"})
		require.Equal(t, int32(3), fd.RaiseCount)
	})

	t.Run("WritesNeedARunningEpisode", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		run := f.start(t, "", "", "monitor", "node-a")
		f.raise(t, run, findings.Raise{Key: "k"})
		require.NoError(t, f.Store.FinishEpisode(ctx(t), run.ep.ID, run.tok, episodes.Finish{Status: episodes.StatusDone}))
		f.requireFenced(t, run, "k")
		require.Len(t, f.active(t, findings.Query{}), 1, "a finding outlives the episode that raised it")

		// Its key granted again after the finish, to the node that ran it:
		// a live grant under the episode's owner, of an episode that does
		// not run.
		again, err := f.Store.Acquire(ctx(t), claims.AcquireParams{Key: run.tok.Key, Owner: "node-a", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		f.requireFenced(t, findingRun{ep: run.ep, tok: again.Token}, "k")

		// Running, its grant given back (a drain's release): the claim keeps
		// owner and fence but holds nothing.
		given := f.start(t, "", "", "monitor", "node-a")
		require.NoError(t, f.Store.Release(ctx(t), given.tok))
		f.requireFenced(t, given, "k")

		// Created and claimed, not started yet: nothing runs, nothing is written.
		res, err := f.Store.CreateEpisode(ctx(t), findingEpisode("", "", "monitor", "node-a"))
		require.NoError(t, err)
		queued := findingRun{ep: res.Episode, tok: res.Claim.Token}
		f.requireFenced(t, queued, "k")
	})

	t.Run("ATakeoverNotYetStartedWritesNothing", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		a := f.start(t, "", "", "monitor", "node-a")
		f.raise(t, a, findings.Raise{Key: "k", Summary: "by a"})
		// The claim is granted to a node whose name sorts before node-a's,
		// which has not started the episode yet: the episode still names
		// node-a, the claim the new owner. Neither side's name with the
		// new fence writes: the episode's owner and the claim's are each
		// compared for equality.
		f.ExpireClaim(t, a.tok.Key)
		c, err := f.Store.Acquire(ctx(t), claims.AcquireParams{Key: a.tok.Key, Owner: "a-node", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		f.requireFenced(t, findingRun{ep: a.ep, tok: c.Token}, "k")
		f.requireFenced(t, findingRun{ep: a.ep, tok: claims.Token{Key: c.Key, Owner: "node-a", Fence: c.Fence}}, "k")
		f.requireFenced(t, a, "k")
		// Then to one whose name sorts after node-a's: the same, from the
		// other side of the comparison.
		f.ExpireClaim(t, a.tok.Key)
		c, err = f.Store.Acquire(ctx(t), claims.AcquireParams{Key: a.tok.Key, Owner: "node-b", Lease: time.Minute, WorkType: "episode"})
		require.NoError(t, err)
		f.requireFenced(t, findingRun{ep: a.ep, tok: c.Token}, "k")
		f.requireFenced(t, findingRun{ep: a.ep, tok: claims.Token{Key: c.Key, Owner: "node-a", Fence: c.Fence}}, "k")
		_, err = f.Store.StartEpisode(ctx(t), a.ep.ID, c.Token)
		require.NoError(t, err)
		fd := f.raise(t, findingRun{ep: a.ep, tok: c.Token}, findings.Raise{Key: "k", Summary: "by node-b"})
		require.Equal(t, int32(2), fd.RaiseCount)
	})

	t.Run("ForeignClaimGrantsNothing", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		mine := f.start(t, "", "", "monitor", "node-a")
		other := f.start(t, "rc", "", "monitor", "node-a")
		f.raise(t, other, findings.Raise{Key: "k", Summary: "rc's"})

		// A live claim of one episode does not authorize writes on behalf of
		// another, even under the same owner.
		forged := findingRun{ep: other.ep, tok: mine.tok}
		f.requireFenced(t, forged, "k")
		// Nor does an owner whose name sorts before the holder's,
		// presenting the holder's fence.
		sorted := findingRun{ep: other.ep, tok: claims.Token{Key: other.tok.Key, Owner: "a-node", Fence: other.tok.Fence}}
		f.requireFenced(t, sorted, "k")
		require.Equal(t, "rc's", f.active(t, findings.Query{Env: "rc"})[0].Summary)
	})

	t.Run("ActiveFindingsFilters", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		monitor := f.start(t, "", "", "monitor", "node-a")
		auditor := f.start(t, "", "", "auditor", "node-a")
		rc := f.start(t, "rc", "", "monitor", "node-a")
		cpu := f.raise(t, monitor, findings.Raise{Key: "cpu:high", Class: "limit"})
		disk := f.raise(t, monitor, findings.Raise{Key: "disk:full", Class: "capacity"})
		mem := f.raise(t, auditor, findings.Raise{Key: "mem:high", Class: "limit"})
		rcCPU := f.raise(t, rc, findings.Raise{Key: "cpu:high", Class: "limit"})

		for name, tc := range map[string]struct {
			q    findings.Query
			want []int64
		}{
			"all of the unset env":  {findings.Query{}, []int64{cpu.ID, disk.ID, mem.ID}},
			"class":                 {findings.Query{Class: "limit"}, []int64{cpu.ID, mem.ID}},
			"actor":                 {findings.Query{ActorID: "auditor"}, []int64{mem.ID}},
			"key":                   {findings.Query{Key: "disk:full"}, []int64{disk.ID}},
			"class and actor":       {findings.Query{Class: "limit", ActorID: "monitor"}, []int64{cpu.ID}},
			"limit, oldest first":   {findings.Query{Limit: 2}, []int64{cpu.ID, disk.ID}},
			"rc only sees rc":       {findings.Query{Env: "rc"}, []int64{rcCPU.ID}},
			"rc by key":             {findings.Query{Env: "rc", Key: "cpu:high"}, []int64{rcCPU.ID}},
			"an env nobody raised":  {findings.Query{Env: "other"}, []int64{}},
			"no match in the class": {findings.Query{Class: "none"}, []int64{}},
		} {
			got := f.active(t, tc.q)
			ids := make([]int64, 0, len(got))
			for _, g := range got {
				ids = append(ids, g.ID)
				require.Equal(t, tc.q.Env, g.Env, name)
				require.Equal(t, findings.StatusActive, g.Status, name)
			}
			require.Equal(t, tc.want, ids, name)
		}

		require.True(t, f.clear(t, monitor, "disk:full"))
		require.Empty(t, f.active(t, findings.Query{Key: "disk:full"}), "cleared findings are not active")
	})

	t.Run("ConcurrentRaisesMakeOneFinding", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		run := f.start(t, "", "", "monitor", "node-a")
		const n = 8
		var (
			start = make(chan struct{})
			wg    sync.WaitGroup
			mu    sync.Mutex
			ids   = map[int64]bool{}
			errs  []error
		)
		for i := range n {
			wg.Go(func() {
				<-start
				fd, err := f.Store.RaiseFinding(ctx(t), run.tok, run.ep.ID,
					findings.Raise{Key: "k", Summary: fmt.Sprintf("raiser %d", i)})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ids[fd.ID] = true
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs)
		require.Len(t, ids, 1, "every raise returned the same finding")
		rows := f.Rows(t, "", "k")
		require.Len(t, rows, 1)
		require.Equal(t, findings.StatusActive, rows[0].Status)
		require.Equal(t, int32(n), rows[0].RaiseCount, "no raise was lost")
	})

	t.Run("ConcurrentRaiseAndClearNeverCollide", func(t *testing.T) {
		t.Parallel()
		f := findingsFixture{newBackend(t)}
		run := f.start(t, "", "", "monitor", "node-a")
		const n, rounds = 8, 10
		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			mu      sync.Mutex
			cleared int
			errs    []error
		)
		for range n {
			wg.Go(func() {
				<-start
				for range rounds {
					_, err := f.Store.RaiseFinding(ctx(t), run.tok, run.ep.ID, findings.Raise{Key: "k"})
					var ok bool
					if err == nil {
						ok, err = f.Store.ClearFinding(ctx(t), run.tok, run.ep.ID, "k")
					}
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else if ok {
						cleared++
					}
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs, "raise and clear never hit the unique index")

		var raises int32
		active := 0
		rows := f.Rows(t, "", "k")
		for _, r := range rows {
			raises += r.RaiseCount
			if r.Status == findings.StatusActive {
				active++
			}
		}
		require.LessOrEqual(t, active, 1)
		require.Equal(t, int32(n*rounds), raises, "every raise was inserted or absorbed")
		require.Equal(t, len(rows)-active, cleared, "every successful clear ended one finding")
	})
}

// findingRun is a run as the findings statements see it: an episode and the
// grant of its work claim.
type findingRun struct {
	ep  episodes.Episode
	tok claims.Token
}

type findingsFixture struct{ FindingsBackend }

func findingEpisode(env, stack, actor, owner string) episodes.New {
	return episodes.New{ActorID: actor, ExpectationID: "check", TriggerType: episodes.TriggerManual,
		MaxAttempts: 3, SourceStack: stack, SourceEnv: env, Owner: owner, Lease: time.Minute}
}

// start creates an episode in env and stack, owned by owner, and starts it.
func (f findingsFixture) start(t testing.TB, env, stack, actor, owner string) findingRun {
	t.Helper()
	res, err := f.Store.CreateEpisode(ctx(t), findingEpisode(env, stack, actor, owner))
	require.NoError(t, err)
	require.True(t, res.Created)
	require.Positive(t, res.Claim.Fence)
	_, err = f.Store.StartEpisode(ctx(t), res.Episode.ID, res.Claim.Token)
	require.NoError(t, err)
	return findingRun{ep: res.Episode, tok: res.Claim.Token}
}

// steal expires run's lease, grants its claim to owner and re-starts the
// episode under the new grant, as a node taking over would.
func (f findingsFixture) steal(t testing.TB, run findingRun, owner string) findingRun {
	t.Helper()
	f.ExpireClaim(t, run.tok.Key)
	c, err := f.Store.Acquire(ctx(t), claims.AcquireParams{Key: run.tok.Key, Owner: owner, Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	_, err = f.Store.StartEpisode(ctx(t), run.ep.ID, c.Token)
	require.NoError(t, err)
	return findingRun{ep: run.ep, tok: c.Token}
}

func (f findingsFixture) raise(t testing.TB, run findingRun, r findings.Raise) findings.Finding {
	t.Helper()
	fd, err := f.Store.RaiseFinding(ctx(t), run.tok, run.ep.ID, r)
	require.NoError(t, err)
	require.Equal(t, r.Key, fd.Key)
	require.Equal(t, run.ep.SourceEnv, fd.Env)
	return fd
}

func (f findingsFixture) clear(t testing.TB, run findingRun, key string) bool {
	t.Helper()
	ok, err := f.Store.ClearFinding(ctx(t), run.tok, run.ep.ID, key)
	require.NoError(t, err)
	return ok
}

// active reads q; a zero Limit reads up to 100.
func (f findingsFixture) active(t testing.TB, q findings.Query) []findings.Finding {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = 100
	}
	out, err := f.Store.ActiveFindings(ctx(t), q)
	require.NoError(t, err)
	return out
}

// requireFenced checks that run can neither raise (key or a new key),
// update nor clear, and that its attempts changed no row.
func (f findingsFixture) requireFenced(t testing.TB, run findingRun, key string) {
	t.Helper()
	env := run.ep.SourceEnv
	before := f.Rows(t, env, key)
	_, err := f.Store.RaiseFinding(ctx(t), run.tok, run.ep.ID, findings.Raise{Key: key, Summary: "zombie"})
	require.ErrorIs(t, err, findings.ErrLeaseLost, "raise")
	_, err = f.Store.RaiseFinding(ctx(t), run.tok, run.ep.ID, findings.Raise{Key: key + ":new"})
	require.ErrorIs(t, err, findings.ErrLeaseLost, "raise of a new key")
	ok, err := f.Store.UpdateFinding(ctx(t), run.tok, run.ep.ID, key, findings.Update{Summary: "zombie"})
	require.ErrorIs(t, err, findings.ErrLeaseLost, "update")
	require.False(t, ok)
	ok, err = f.Store.ClearFinding(ctx(t), run.tok, run.ep.ID, key)
	require.ErrorIs(t, err, findings.ErrLeaseLost, "clear")
	require.False(t, ok)
	require.Equal(t, before, f.Rows(t, env, key), "a rejected write changes nothing")
	require.Empty(t, f.Rows(t, env, key+":new"), "a rejected raise inserts nothing")
}
