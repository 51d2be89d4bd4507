package conformance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/findings"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/membership"
)

// MaintenanceStore is the maintenance surface of an adapter, with the
// episode, claim, available-work and membership statements its scenarios
// set the database up with.
type MaintenanceStore interface {
	DeferredStore
	membership.Store
	maintenance.Store
	// The waiting-for-node read and the findings it raises (waiting.go).
	membership.WaitingReader
	ActiveFindings(ctx context.Context, q findings.Query) ([]findings.Finding, error)
}

// MaintenanceBackend is what the maintenance scenarios need from one
// isolated backend. The Age hooks move timestamps back on the database
// clock (never sleeping), so rows look as old as a scenario needs.
type MaintenanceBackend struct {
	Store MaintenanceStore
	// AgeEpisode moves every timestamp of episode id back by d: created,
	// queued, started, last step and finished (those that are set).
	AgeEpisode func(t testing.TB, id int64, d time.Duration)
	// AgeClaim moves key's claimed_at, last_heartbeat_at, lease_until and
	// finished_at (when set) back by d.
	AgeClaim func(t testing.TB, key string, d time.Duration)
	// AgeAvailable moves available episode id's run_after and created_at
	// back by d (it fell due d earlier).
	AgeAvailable func(t testing.TB, id int64, d time.Duration)
	// AgeNode moves node id's started_at and heartbeat_at back by d.
	AgeNode func(t testing.TB, id string, d time.Duration)
	// HoldLock takes the maintenance lock in a transaction of another
	// session, as another node's run would, failing t if it cannot; release
	// ends that transaction.
	HoldLock func(t testing.TB) (release func())
	// ClaimExists reports whether key has a claim row.
	ClaimExists func(t testing.TB, key string) bool
}

// RunMaintenance runs the maintenance scenarios: what each statement of a
// run changes and what it must leave alone, bounded batches, one run at a
// time per database, and live work untouched under load. They call
// Store.Maintain with Plans directly, some far below what Config.Validate
// accepts, to show that the statements themselves never touch live work.
func RunMaintenance(t *testing.T, newBackend func(t *testing.T) MaintenanceBackend) {
	t.Run("WaitingForNode", func(t *testing.T) { RunWaitingForNode(t, newBackend) })
	const day = 24 * time.Hour
	// The default Plan: Retention 7 days, ClaimHorizon 30 days, no
	// RequestTTL (available work never expires), NodeStaleAfter 24 hours.
	base := maintenance.DefaultConfig().Plan()
	retention, horizon := base.Retention, base.ClaimHorizon
	t.Run("ArchivesTerminalEpisodesPastRetention", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		old, oc := f.running(t, "event:a:e:old")
		f.steps(t, old, oc, 1, 2)
		f.finish(t, old, oc, episodes.StatusDone)
		oldFailed, fc := f.running(t, "event:a:e:failed")
		f.finish(t, oldFailed, fc, episodes.StatusFailed)
		recent, rc := f.running(t, "event:a:e:recent")
		f.finish(t, recent, rc, episodes.StatusDone)
		live, lc := f.running(t, "event:a:e:live")
		f.steps(t, live, lc, 1, 1)
		f.b.AgeEpisode(t, old.ID, retention+day)
		f.b.AgeEpisode(t, oldFailed.ID, retention+day)
		f.b.AgeEpisode(t, recent.ID, time.Hour)
		f.b.AgeEpisode(t, live.ID, 4*retention) // old, but running

		require.Equal(t, maintenance.Result{Ran: true, Archived: 2, StepsPurged: 2, JournalsMarked: 2}, f.maintain(t, f.plan))
		for _, id := range []int64{old.ID, oldFailed.ID} {
			require.NotNil(t, get(t, f.eb, id).ArchivedAt, "episode %d", id)
		}
		require.Equal(t, episodes.StatusDone, get(t, f.eb, old.ID).Status, "archiving changes nothing else")
		require.Nil(t, get(t, f.eb, recent.ID).ArchivedAt, "finished inside the retention")
		got := get(t, f.eb, live.ID)
		require.Nil(t, got.ArchivedAt, "running work is never archived")
		require.Equal(t, episodes.StatusRunning, got.Status)
		require.Len(t, f.listSteps(t, live.ID), 1)

		// Archiving freed the old key (the trigger runs again, re-claiming the
		// old claim row); the recent episode still holds its own.
		n := newEpisode("event:a:e:old")
		n.Owner, n.Lease = "node-b", time.Minute
		again, err := f.b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.True(t, again.Created)
		require.NotEqual(t, old.ID, again.Episode.ID)
		require.Equal(t, claims.Token{Key: "event:a:e:old", Owner: "node-b", Fence: 2}, again.Claim.Token)
		_, created := create(t, f.eb, "event:a:e:recent")
		require.False(t, created)

		require.Equal(t, maintenance.Result{Ran: true}, f.maintain(t, f.plan), "a second run finds nothing")
	})

	t.Run("PurgesJournalsInBoundedBatches", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		ep, c := f.running(t, "event:a:e:long")
		f.steps(t, ep, c, 1, 25)
		f.finish(t, ep, c, episodes.StatusDone)
		f.b.AgeEpisode(t, ep.ID, retention+day)
		live, lc := f.running(t, "")
		f.steps(t, live, lc, 1, 5)
		f.b.AgeEpisode(t, live.ID, 4*retention)

		p := f.plan
		p.Batch = 10
		require.Equal(t, maintenance.Result{Ran: true, Archived: 1, StepsPurged: 10}, f.maintain(t, p))
		require.Len(t, f.listSteps(t, ep.ID), 15)
		require.Equal(t, maintenance.Result{Ran: true, StepsPurged: 10}, f.maintain(t, p))
		require.Len(t, f.listSteps(t, ep.ID), 5)
		require.Equal(t, maintenance.Result{Ran: true, StepsPurged: 5, JournalsMarked: 1}, f.maintain(t, p),
			"the run that empties the journal marks it purged")
		require.Empty(t, f.listSteps(t, ep.ID))
		require.Equal(t, maintenance.Result{Ran: true}, f.maintain(t, p), "a purged journal is marked once")
		require.Len(t, f.listSteps(t, live.ID), 5, "a live episode's journal is never purged")
	})

	t.Run("DeletesOnlySpentClaimsPastTheHorizon", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		past, inside := horizon+day, horizon-day
		ended := func(key string, end func(claims.Token) error, age time.Duration) {
			c := acquire(t, f.eb, key, "node-a")
			require.NoError(t, end(c.Token))
			f.b.AgeClaim(t, key, age)
		}
		s := f.b.Store
		complete := func(tk claims.Token) error { return s.Complete(ctx(t), tk) }
		fail := func(tk claims.Token) error { return s.Fail(ctx(t), tk, nil) }
		release := func(tk claims.Token) error { return s.Release(ctx(t), tk) }

		// Deleted: finished past the horizon, no live episode under the key.
		ended("work:done-old", complete, past)
		ended("work:failed-old", fail, past)
		ended("work:released-old", release, past)
		ended("episode:not-a-number", complete, past)
		ended("episode:123456789012345678901234", complete, past)
		finished, fc := f.running(t, "event:a:e:finished")
		f.finish(t, finished, fc, episodes.StatusDone)
		f.b.AgeClaim(t, "event:a:e:finished", past)
		// Kept: inside the horizon; claimed (however long expired); released
		// while its episode is still running or queued.
		ended("work:done-inside", complete, inside)
		acquire(t, f.eb, "work:claimed-expired", "node-a")
		f.b.AgeClaim(t, "work:claimed-expired", 10*horizon)
		handover, hc := f.running(t, "event:a:e:handover")
		require.NoError(t, s.Release(ctx(t), hc.Token))
		f.b.AgeClaim(t, hc.Key, past)
		keyless, kc := f.running(t, "")
		require.NoError(t, s.Release(ctx(t), kc.Token))
		f.b.AgeClaim(t, kc.Key, past)
		n := newEpisode("event:a:e:waiting")
		n.Owner, n.Lease = "node-a", time.Minute
		waiting, err := s.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx(t), waiting.Claim.Token))
		f.b.AgeClaim(t, waiting.Claim.Key, past)

		require.Equal(t, maintenance.Result{Ran: true, ClaimsDeleted: 6}, f.maintain(t, f.plan))
		for _, key := range []string{"work:done-old", "work:failed-old", "work:released-old",
			"episode:not-a-number", "episode:123456789012345678901234", "event:a:e:finished"} {
			require.False(t, f.b.ClaimExists(t, key), "%s is spent", key)
		}
		for _, key := range []string{"work:done-inside", "work:claimed-expired", hc.Key, kc.Key, waiting.Claim.Key} {
			require.True(t, f.b.ClaimExists(t, key), "%s must be kept", key)
		}

		// A deleted row's fence restarts; a kept one continues.
		fresh := acquire(t, f.eb, "work:done-old", "node-b")
		require.EqualValues(t, 1, fresh.Fence)
		require.Equal(t, claims.GrantFresh, fresh.Grant)
		require.EqualValues(t, 2, acquire(t, f.eb, "work:done-inside", "node-b").Fence)
		// The kept released claims are how recovery finds the episodes.
		for _, ep := range []episodes.Episode{handover, keyless} {
			_, won, err := s.ClaimForRecovery(ctx(t), ep.ID, "sweeper", time.Minute, time.Minute)
			require.NoError(t, err, "episode %d", ep.ID)
			require.EqualValues(t, 2, won.Fence)
		}
	})

	t.Run("ExpiresStaleAvailableWorkOfEveryEnv", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		d := DeferredBackend{Store: f.b.Store}
		taken := deferEpisode(t, d, "event:a:e:taken", "", "")
		require.Equal(t, taken.Episode.ID, takeOne(t, d, "poller").EpisodeID)
		def := deferEpisode(t, d, "event:a:e:default", "", "")
		rc := deferEpisode(t, d, "env:rc:event:a:e:rc", "", "rc")
		staging := deferEpisode(t, d, "env:staging:event:a:e:s", "stack-b", "staging")
		held := deferEpisode(t, d, "event:a:e:held", "", "")
		acquire(t, f.eb, "event:a:e:held", "recoverer")
		fresh := deferEpisode(t, d, "event:a:e:fresh", "", "")
		for _, r := range []episodes.DeferredCreated{taken, def, rc, staging, held} {
			f.b.AgeAvailable(t, r.Episode.ID, 30*day)
		}
		// No node runs a/e here, so this work also waits for a node; those
		// findings are RunWaitingForNode's subject, kept out of these counts.
		f.plan.WaitingForNodeAfter = 365 * day
		require.Equal(t, maintenance.Result{Ran: true}, f.maintain(t, f.plan), "no RequestTTL: nothing expires, however old")
		require.Equal(t, episodes.StatusQueued, get(t, f.eb, def.Episode.ID).Status)

		withTTL := f.plan
		withTTL.RequestTTL = time.Hour
		require.Equal(t, maintenance.Result{Ran: true, EpisodesExpired: 3}, f.maintain(t, withTTL))
		for _, r := range []episodes.DeferredCreated{def, rc, staging} {
			got := get(t, f.eb, r.Episode.ID)
			require.Equal(t, episodes.StatusCanceled, got.Status, r.Episode.DedupeKey)
			require.Equal(t, episodes.ClassTriggerExpired, got.ErrorClass)
			require.NotNil(t, got.FinishedAt)
		}
		require.Equal(t, episodes.StatusQueued, get(t, f.eb, held.Episode.ID).Status, "its work claim is live: left to its holder")
		require.Equal(t, episodes.StatusQueued, get(t, f.eb, fresh.Episode.ID).Status, "due less than the TTL ago")
		require.Equal(t, episodes.StatusRunning, get(t, f.eb, taken.Episode.ID).Status, "a started episode is never expired")
		require.Equal(t, maintenance.Result{Ran: true}, f.maintain(t, withTTL), "each expires once")
		// Still available: fresh, and held, which a poll leaves to its holder.
		granted := map[int64]int64{}
		for _, x := range claimAvailable(t, d, "poller", "", "", 10) {
			granted[x.EpisodeID] = x.Claim.Fence
		}
		require.Equal(t, map[int64]int64{fresh.Episode.ID: 1, held.Episode.ID: 0}, granted)
	})

	t.Run("DeletesStaleNodeRows", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		s := f.b.Store
		registerFull(t, f.b, "node-gone", "node-up", "node-slow")
		f.b.AgeNode(t, "node-gone", f.plan.NodeStaleAfter+time.Hour)
		f.b.AgeNode(t, "node-slow", f.plan.NodeStaleAfter-time.Hour)

		require.Equal(t, maintenance.Result{Ran: true, NodesDeleted: 1}, f.maintain(t, f.plan))
		require.Equal(t, []string{"node-slow", "node-up"}, f.nodes(t))

		// Membership is advisory: a node that was only cut off reappears with
		// its next heartbeat.
		require.NoError(t, s.HeartbeatNode(ctx(t), membership.Member{ID: "node-gone", Mode: "full"}))
		require.Equal(t, []string{"node-gone", "node-slow", "node-up"}, f.nodes(t))

		// Every node silent, nothing else to do: still a run's work.
		for _, id := range []string{"node-gone", "node-up", "node-slow"} {
			f.b.AgeNode(t, id, f.plan.NodeStaleAfter+time.Hour)
		}
		require.Equal(t, maintenance.Result{Ran: true, NodesDeleted: 3}, f.maintain(t, f.plan))
		require.Empty(t, f.nodes(t))
	})

	// nodes ls counts the live leases each node holds: its own, claimed,
	// with a lease ahead on the database clock; not another node's, not an
	// expired one, not a finished one.
	t.Run("NodesListCountsEachNodesLiveLeases", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		s := f.b.Store
		registerFull(t, f.b, "node-a", "node-b", "node-c")
		acquire(t, f.eb, "a-live-1", "node-a")
		acquire(t, f.eb, "a-live-2", "node-a")
		acquire(t, f.eb, "a-expired", "node-a")
		f.b.AgeClaim(t, "a-expired", time.Hour)
		done := acquire(t, f.eb, "a-done", "node-a")
		require.NoError(t, s.Complete(ctx(t), done.Token))
		acquire(t, f.eb, "b-live", "node-b")
		rows, err := s.ListNodes(ctx(t))
		require.NoError(t, err)
		live := map[string]int64{}
		for _, r := range rows {
			live[r.ID] = r.LiveLeases
		}
		require.Equal(t, map[string]int64{"node-a": 2, "node-b": 1, "node-c": 0}, live)
	})

	// Each kind of work alone in its database, nothing else due: a run
	// does it. An adapter that first asks whether anything is due (SQLite's
	// MaintenanceDue, which spares the write lock) must see each kind by
	// itself, not only beside another.
	t.Run("EachKindOfWorkAloneIsDone", func(t *testing.T) {
		t.Parallel()
		t.Run("a terminal episode past the retention", func(t *testing.T) {
			t.Parallel()
			f := newMaintenanceFixture(t, newBackend)
			ep, c := f.running(t, "event:a:e:old")
			f.finish(t, ep, c, episodes.StatusDone)
			f.b.AgeEpisode(t, ep.ID, retention+day)
			require.EqualValues(t, 1, f.maintain(t, f.plan).Archived)
		})
		t.Run("a spent claim past the horizon", func(t *testing.T) {
			t.Parallel()
			f := newMaintenanceFixture(t, newBackend)
			c := acquire(t, f.eb, "work:old", "node-a")
			require.NoError(t, f.b.Store.Complete(ctx(t), c.Token))
			f.b.AgeClaim(t, "work:old", horizon+day)
			require.Equal(t, maintenance.Result{Ran: true, ClaimsDeleted: 1}, f.maintain(t, f.plan))
		})
		t.Run("an available episode past its TTL", func(t *testing.T) {
			t.Parallel()
			f := newMaintenanceFixture(t, newBackend)
			d := deferEpisode(t, DeferredBackend{Store: f.b.Store}, "event:a:e:stale", "", "")
			f.b.AgeAvailable(t, d.Episode.ID, 2*time.Hour)
			p := f.plan
			p.RequestTTL, p.WaitingForNodeAfter = time.Hour, 365*day
			require.Equal(t, maintenance.Result{Ran: true, EpisodesExpired: 1}, f.maintain(t, p))
		})
	})

	t.Run("OneRunAtATime", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		ep := f.eligible(t, 1)[0]

		release := f.b.HoldLock(t)
		res, err := f.b.Store.Maintain(ctx(t), f.plan)
		require.NoError(t, err, "a held lock is not an error")
		require.Equal(t, maintenance.Result{}, res)
		require.Nil(t, get(t, f.eb, ep.ID).ArchivedAt, "a skipped run changes nothing")
		release()
		require.Equal(t, maintenance.Result{Ran: true, Archived: 1, JournalsMarked: 1}, f.maintain(t, f.plan))

		// Two nodes at the same moment: one does the work, the other skips
		// (or, if the first committed before the second began, finds none).
		const rounds, eligible = 3, 20
		for round := range rounds {
			f.eligible(t, eligible)
			var (
				start    = make(chan struct{})
				wg       sync.WaitGroup
				mu       sync.Mutex
				results  []maintenance.Result
				errs     []error
				archived int64
			)
			for range 2 {
				wg.Go(func() {
					<-start
					res, err := f.b.Store.Maintain(ctx(t), f.plan)
					mu.Lock()
					defer mu.Unlock()
					results, errs = append(results, res), append(errs, err)
					archived += res.Archived
				})
			}
			close(start)
			wg.Wait()
			require.Equal(t, []error{nil, nil}, errs, "round %d", round)
			ran := 0
			for _, res := range results {
				if res.Ran {
					ran++
				} else {
					require.Equal(t, maintenance.Result{}, res, "a skipped run reports nothing")
				}
			}
			require.GreaterOrEqual(t, ran, 1, "round %d: somebody ran", round)
			require.EqualValues(t, eligible, archived, "round %d: each episode archived once: %+v", round, results)
		}
	})

	t.Run("LiveWorkSurvivesMaintenanceUnderLoad", func(t *testing.T) {
		t.Parallel()
		f := newMaintenanceFixture(t, newBackend)
		// Every cut-off at a millisecond: everything that may go, goes.
		tiny := maintenance.Plan{Retention: time.Millisecond, ClaimHorizon: time.Millisecond,
			RequestTTL: time.Millisecond, NodeStaleAfter: time.Millisecond, Batch: 1000}
		const live, waiting = 50, 10
		type run struct {
			ep episodes.Episode
			c  claims.Claim
		}
		// Old-looking but live: created, started and claimed 40 days ago,
		// lease renewed just now.
		oldButLive := func(ep episodes.Episode, c claims.Claim) {
			f.b.AgeEpisode(t, ep.ID, 40*day)
			f.b.AgeClaim(t, c.Key, 40*day)
			_, err := f.b.Store.Renew(ctx(t), c.Token, time.Minute)
			require.NoError(t, err)
		}
		runs := make([]run, live)
		for i := range runs {
			key := fmt.Sprintf("event:a:e:live-%d", i)
			if i%5 == 0 {
				key = "" // claimed as episode:{id}
			}
			ep, c := f.running(t, key)
			f.steps(t, ep, c, 1, 1)
			oldButLive(ep, c)
			runs[i] = run{ep, c}
		}
		queued := make([]run, waiting)
		for i := range queued {
			n := newEpisode(fmt.Sprintf("event:a:e:waiting-%d", i))
			n.Owner, n.Lease = "node-a", time.Minute
			res, err := f.b.Store.CreateEpisode(ctx(t), n)
			require.NoError(t, err)
			oldButLive(res.Episode, res.Claim)
			queued[i] = run{res.Episode, res.Claim}
		}
		done := f.eligible(t, 20) // work for maintenance to do meanwhile

		var (
			workers, maintainers sync.WaitGroup
			stop                 = make(chan struct{})
			archived, runsDone   atomic.Int64
			mu                   sync.Mutex
			errs                 []error
		)
		fail := func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		for range 2 {
			maintainers.Go(func() {
				for {
					res, err := f.b.Store.Maintain(ctx(t), tiny)
					if err != nil {
						fail(err)
						return
					}
					archived.Add(res.Archived)
					runsDone.Add(1)
					select {
					case <-stop:
						return
					default:
					}
				}
			})
		}
		for w := range 5 {
			workers.Go(func() {
				for i := w; i < live; i += 5 {
					r := runs[i]
					for step := int32(2); step <= 3; step++ {
						if err := f.b.Store.AppendStep(ctx(t), r.ep.ID, r.c.Token, step, nil, time.Minute); err != nil {
							fail(fmt.Errorf("episode %d step %d: %w", r.ep.ID, step, err))
						}
					}
					if _, err := f.b.Store.Renew(ctx(t), r.c.Token, time.Minute); err != nil {
						fail(fmt.Errorf("renew %s: %w", r.c.Token, err))
					}
				}
			})
		}
		workers.Wait()
		close(stop)
		maintainers.Wait()
		require.Empty(t, errs)
		res := f.maintain(t, tiny)
		archived.Add(res.Archived)
		require.Positive(t, runsDone.Load())
		require.EqualValues(t, len(done), archived.Load(), "the finished episodes, each archived once")

		for _, r := range runs {
			got := get(t, f.eb, r.ep.ID)
			require.Equal(t, episodes.StatusRunning, got.Status, "episode %d", r.ep.ID)
			require.Nil(t, got.ArchivedAt)
			require.Len(t, f.listSteps(t, r.ep.ID), 3, "episode %d: its journal is whole", r.ep.ID)
			_, err := f.b.Store.Renew(ctx(t), r.c.Token, time.Minute)
			require.NoError(t, err, "episode %d still holds its grant", r.ep.ID)
		}
		for _, r := range queued {
			got := get(t, f.eb, r.ep.ID)
			require.Equal(t, episodes.StatusQueued, got.Status, "episode %d", r.ep.ID)
			require.Nil(t, got.ArchivedAt)
			_, err := f.b.Store.Renew(ctx(t), r.c.Token, time.Minute)
			require.NoError(t, err, "episode %d still holds its grant", r.ep.ID)
		}
		for _, ep := range done {
			require.NotNil(t, get(t, f.eb, ep.ID).ArchivedAt)
		}
	})
}

type maintenanceFixture struct {
	b    MaintenanceBackend
	eb   EpisodesBackend // the same store, for the episode helpers
	plan maintenance.Plan
}

func newMaintenanceFixture(t *testing.T, newBackend func(t *testing.T) MaintenanceBackend) maintenanceFixture {
	b := newBackend(t)
	return maintenanceFixture{b: b, eb: EpisodesBackend{Store: b.Store}, plan: maintenance.DefaultConfig().Plan()}
}

// maintain runs p and requires that it ran.
func (f maintenanceFixture) maintain(t testing.TB, p maintenance.Plan) maintenance.Result {
	t.Helper()
	res, err := f.b.Store.Maintain(ctx(t), p)
	require.NoError(t, err)
	require.True(t, res.Ran, "nobody else holds the lock")
	return res
}

// running creates an episode under key ("" for none: claimed as
// episode:{id}), claims it for node-a and starts it.
func (f maintenanceFixture) running(t testing.TB, key string) (episodes.Episode, claims.Claim) {
	t.Helper()
	ep, created := create(t, f.eb, key)
	require.True(t, created)
	c := acquire(t, f.eb, ep.ClaimKey(), "node-a")
	_, err := f.b.Store.StartEpisode(ctx(t), ep.ID, c.Token)
	require.NoError(t, err)
	return ep, c
}

// steps journals steps from..to under c.
func (f maintenanceFixture) steps(t testing.TB, ep episodes.Episode, c claims.Claim, from, to int32) {
	t.Helper()
	for n := from; n <= to; n++ {
		require.NoError(t, f.b.Store.AppendStep(ctx(t), ep.ID, c.Token, n, nil, time.Minute))
	}
}

func (f maintenanceFixture) finish(t testing.TB, ep episodes.Episode, c claims.Claim, status episodes.Status) {
	t.Helper()
	require.NoError(t, f.b.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{Status: status}))
}

// eligible makes n done, keyless episodes that finished past the retention.
func (f maintenanceFixture) eligible(t testing.TB, n int) []episodes.Episode {
	t.Helper()
	out := make([]episodes.Episode, n)
	for i := range out {
		ep, c := f.running(t, "")
		f.finish(t, ep, c, episodes.StatusDone)
		f.b.AgeEpisode(t, ep.ID, f.plan.Retention+24*time.Hour)
		out[i] = ep
	}
	return out
}

func (f maintenanceFixture) listSteps(t testing.TB, id int64) []episodes.Step {
	t.Helper()
	steps, err := f.b.Store.ListSteps(ctx(t), id)
	require.NoError(t, err)
	return steps
}

func (f maintenanceFixture) nodes(t testing.TB) []string {
	t.Helper()
	rows, err := f.b.Store.ListNodes(ctx(t))
	require.NoError(t, err)
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}
