package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// EpisodeStore is the episode, journal and recovery surface of an adapter.
type EpisodeStore interface {
	claims.Store
	CreateEpisode(ctx context.Context, n episodes.New) (episodes.Created, error)
	StartEpisode(ctx context.Context, id int64, t claims.Token) (int32, error)
	AppendStep(ctx context.Context, id int64, t claims.Token, stepNo int32, data json.RawMessage, lease time.Duration) error
	FinishEpisode(ctx context.Context, id int64, t claims.Token, f episodes.Finish) error
	GetEpisode(ctx context.Context, id int64) (episodes.Episode, error)
	ListSteps(ctx context.Context, episodeID int64) ([]episodes.Step, error)
	ListOrphans(ctx context.Context, q episodes.OrphanQuery) ([]episodes.Orphan, error)
	ClaimForRecovery(ctx context.Context, id int64, owner string, lease, staleAfter time.Duration) (episodes.Episode, claims.Claim, error)
	// The recovery policies nodes record for their expectations, which a
	// sweeper without an actor's code applies to its orphans.
	PutAgentDefinition(ctx context.Context, d episodes.Definition) error
	AgentRecoveryPolicy(ctx context.Context, actorID, expectationID string) (policy string, found bool, err error)
}

// EpisodesBackend is what the episode scenarios need from one isolated backend.
type EpisodesBackend struct {
	Store EpisodeStore
	// ExpireClaim makes key's lease past on the database clock.
	ExpireClaim func(t testing.TB, key string)
	// Archive sets the episode's archived_at.
	Archive func(t testing.TB, id int64)
	// Age moves the episode's created_at, started_at and last_step_at back
	// by d on the database clock.
	Age func(t testing.TB, id int64, d time.Duration)
}

// RunEpisodes runs the episode, journal and recovery scenarios.
func RunEpisodes(t *testing.T, newBackend func(t *testing.T) EpisodesBackend) {
	t.Run("CreateDeduplicates", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		first, created := create(t, b, "event:a:e:1")
		require.True(t, created)
		require.Equal(t, episodes.StatusQueued, first.Status)
		_, created = create(t, b, "event:a:e:1")
		require.False(t, created, "a live episode holds the key")
		_, created = create(t, b, "event:a:e:2")
		require.True(t, created)
		n1, created := create(t, b, "")
		require.True(t, created)
		n2, created := create(t, b, "")
		require.True(t, created, "episodes without a key never collide")
		require.NotEqual(t, n1.ID, n2.ID)

		b.Archive(t, first.ID)
		again, created := create(t, b, "event:a:e:1")
		require.True(t, created, "archived episodes do not block the trigger")
		require.NotEqual(t, first.ID, again.ID)
	})

	t.Run("ConcurrentCreateMakesOneEpisode", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			won     int
			errs    []error
			startCh = make(chan struct{})
		)
		var (
			winner   claims.Claim
			winnerID int64
		)
		for i := range 16 {
			wg.Go(func() {
				<-startCh
				n := newEpisode("schedule:a:e:2026-06-05T05:00:00Z")
				n.Owner, n.Lease = fmt.Sprintf("node-%d", i), time.Minute
				res, err := b.Store.CreateEpisode(context.Background(), n)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case res.Created:
					won++
					winner, winnerID = res.Claim, res.Episode.ID
				}
			})
		}
		close(startCh)
		wg.Wait()
		require.Empty(t, errs, "a duplicate is not an error")
		require.Equal(t, 1, won)
		// The winner's episode was born claimed, by the same statement.
		require.EqualValues(t, 1, winner.Fence)
		require.Equal(t, "schedule:a:e:2026-06-05T05:00:00Z", winner.Key)
		_, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: winner.Key, Owner: "late", Lease: time.Minute})
		require.ErrorIs(t, err, claims.ErrBusy)
		next, err := b.Store.StartEpisode(ctx(t), winnerID, winner.Token)
		require.NoError(t, err)
		require.EqualValues(t, 1, next)
	})

	t.Run("CreateWithOwnerGrantsTheClaim", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := newEpisode("")
		n.Owner, n.Lease = "node-a", 90*time.Second
		res, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.True(t, res.Created)
		require.Equal(t, claims.Token{Key: res.Episode.ClaimKey(), Owner: "node-a", Fence: 1}, res.Claim.Token)
		require.Equal(t, 90*time.Second, res.Claim.LeaseUntil.Sub(res.Claim.ClaimedAt))
		require.Equal(t, claims.GrantFresh, res.Claim.Grant)

		// A previous claim under the same key (its episode archived) is
		// re-claimed with the usual rules.
		keyed := newEpisode("event:a:e:again")
		keyed.Owner, keyed.Lease = "node-a", time.Minute
		first, err := b.Store.CreateEpisode(ctx(t), keyed)
		require.NoError(t, err)
		_, err = b.Store.StartEpisode(ctx(t), first.Episode.ID, first.Claim.Token)
		require.NoError(t, err)
		require.NoError(t, b.Store.FinishEpisode(ctx(t), first.Episode.ID, first.Claim.Token, episodes.Finish{Status: episodes.StatusDone}))
		b.Archive(t, first.Episode.ID)
		keyed.Owner = "node-b"
		again, err := b.Store.CreateEpisode(ctx(t), keyed)
		require.NoError(t, err)
		require.True(t, again.Created)
		require.Equal(t, claims.Token{Key: "event:a:e:again", Owner: "node-b", Fence: 2}, again.Claim.Token)
		require.Equal(t, claims.GrantReclaim, again.Claim.Grant)
	})

	t.Run("StartIsFenced", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, _ := create(t, b, "k")
		c := acquire(t, b, "k", "node-a")
		_, err := b.Store.StartEpisode(ctx(t), ep.ID, claims.Token{Key: "k", Owner: "node-a", Fence: c.Fence + 1})
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		_, err = b.Store.StartEpisode(ctx(t), ep.ID, claims.Token{Key: "k", Owner: "node-b", Fence: c.Fence})
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		// Nor an owner whose name sorts before node-a's: the owner is
		// compared for equality, not order.
		_, err = b.Store.StartEpisode(ctx(t), ep.ID, claims.Token{Key: "k", Owner: "a-node", Fence: c.Fence})
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		require.Equal(t, episodes.StatusQueued, get(t, b, ep.ID).Status)

		next, err := b.Store.StartEpisode(ctx(t), ep.ID, c.Token)
		require.NoError(t, err)
		require.EqualValues(t, 1, next)
		got := get(t, b, ep.ID)
		require.Equal(t, episodes.StatusRunning, got.Status)
		require.Equal(t, "node-a", got.OwnerNode)
		require.NotNil(t, got.StartedAt)

		// Finished, it is never started again, even under a new grant of
		// its key; archived, neither.
		require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{Status: episodes.StatusDone}))
		again := acquire(t, b, "k", "node-a")
		_, err = b.Store.StartEpisode(ctx(t), ep.ID, again.Token)
		require.Error(t, err, "a finished episode is never started again")
		require.Equal(t, episodes.StatusDone, get(t, b, ep.ID).Status)
		b.Archive(t, ep.ID)
		_, err = b.Store.StartEpisode(ctx(t), ep.ID, again.Token)
		require.Error(t, err, "nor an archived one")
		require.Equal(t, episodes.StatusDone, get(t, b, ep.ID).Status)
	})

	t.Run("FinishIsFencedOnTheOwnerAndTheEpisodeItNames", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		first, a := running(t, b, "k", "node-a")
		// An owner whose name sorts before the holder's, presenting its
		// fence, journals and finishes nothing: the owner is compared for
		// equality.
		sorted := claims.Token{Key: "k", Owner: "a-node", Fence: a.Fence}
		require.ErrorIs(t, b.Store.AppendStep(ctx(t), first.ID, sorted, 1, json.RawMessage(`"a-node"`), time.Minute), claims.ErrLeaseLost)
		err := b.Store.FinishEpisode(ctx(t), first.ID, sorted, episodes.Finish{Status: episodes.StatusFailed})
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		require.Equal(t, episodes.StatusRunning, get(t, b, first.ID).Status)
		steps, err := b.Store.ListSteps(ctx(t), first.ID)
		require.NoError(t, err)
		require.Empty(t, steps)
		require.NoError(t, b.Store.FinishEpisode(ctx(t), first.ID, a.Token, episodes.Finish{Status: episodes.StatusDone}))
		b.Archive(t, first.ID)

		// The key's next grant runs a later episode. That grant, presented
		// with the finished episode's id, is not a grant of that episode:
		// it finishes neither the finished one nor, through it, its own.
		second, bb := running(t, b, "k", "node-b")
		require.Greater(t, second.ID, first.ID)
		err = b.Store.FinishEpisode(ctx(t), first.ID, bb.Token, episodes.Finish{Status: episodes.StatusFailed})
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		require.Equal(t, episodes.StatusDone, get(t, b, first.ID).Status)
		require.Equal(t, episodes.StatusRunning, get(t, b, second.ID).Status)
		_, err = b.Store.Renew(ctx(t), bb.Token, time.Minute)
		require.NoError(t, err, "the later episode's grant is still live")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), second.ID, bb.Token, episodes.Finish{Status: episodes.StatusDone}))
	})

	t.Run("ZombieJournalIsRejectedAfterSteal", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, a := running(t, b, "k", "node-a")
		require.NoError(t, b.Store.AppendStep(ctx(t), ep.ID, a.Token, 1, json.RawMessage(`"a1"`), time.Minute))

		b.ExpireClaim(t, "k")
		bb := acquire(t, b, "k", "node-b")
		next, err := b.Store.StartEpisode(ctx(t), ep.ID, bb.Token)
		require.NoError(t, err)
		require.EqualValues(t, 2, next, "a re-run appends after the old journal")

		require.ErrorIs(t, b.Store.AppendStep(ctx(t), ep.ID, a.Token, 2, json.RawMessage(`"a2"`), time.Minute), claims.ErrLeaseLost)
		require.ErrorIs(t, b.Store.FinishEpisode(ctx(t), ep.ID, a.Token, episodes.Finish{Status: episodes.StatusDone}), claims.ErrLeaseLost)
		require.NoError(t, b.Store.AppendStep(ctx(t), ep.ID, bb.Token, 2, json.RawMessage(`"b2"`), time.Minute))
		require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, bb.Token, episodes.Finish{Status: episodes.StatusDone, Result: json.RawMessage(`{"by":"b"}`)}))
		require.ErrorIs(t, b.Store.FinishEpisode(ctx(t), ep.ID, bb.Token, episodes.Finish{Status: episodes.StatusFailed}), claims.ErrLeaseLost, "a duplicate finish changes nothing")

		steps, err := b.Store.ListSteps(ctx(t), ep.ID)
		require.NoError(t, err)
		require.Len(t, steps, 2)
		require.Equal(t, [][2]any{{int64(1), `"a1"`}, {int64(2), `"b2"`}},
			[][2]any{{steps[0].Fence, string(steps[0].Data)}, {steps[1].Fence, string(steps[1].Data)}})
		got := get(t, b, ep.ID)
		require.Equal(t, episodes.StatusDone, got.Status)
		require.JSONEq(t, `{"by":"b"}`, string(got.Result))
		require.NotNil(t, got.FinishedAt)
		_, err = b.Store.Renew(ctx(t), bb.Token, time.Minute)
		require.ErrorIs(t, err, claims.ErrNotOwner, "the finish ended the claim too")
	})

	t.Run("ZombieOfTheSameNodeIsRejectedByItsFence", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// A -> A: the same node's earlier grant differs from its current one
		// only in the fence, which alone must refuse it.
		ep, old := running(t, b, "k", "node-a")
		b.ExpireClaim(t, "k")
		cur := acquire(t, b, "k", "node-a")
		require.Equal(t, old.Fence+1, cur.Fence)
		next, err := b.Store.StartEpisode(ctx(t), ep.ID, cur.Token)
		require.NoError(t, err)
		_, err = b.Store.StartEpisode(ctx(t), ep.ID, old.Token)
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		require.ErrorIs(t, b.Store.AppendStep(ctx(t), ep.ID, old.Token, next, json.RawMessage(`"old"`), time.Minute), claims.ErrLeaseLost)
		require.ErrorIs(t, b.Store.FinishEpisode(ctx(t), ep.ID, old.Token, episodes.Finish{Status: episodes.StatusFailed}), claims.ErrLeaseLost)
		require.Equal(t, episodes.StatusRunning, get(t, b, ep.ID).Status, "the refused finish changed nothing")
		require.NoError(t, b.Store.AppendStep(ctx(t), ep.ID, cur.Token, next, json.RawMessage(`"cur"`), time.Minute))
		require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, cur.Token, episodes.Finish{Status: episodes.StatusDone}))
		steps, err := b.Store.ListSteps(ctx(t), ep.ID)
		require.NoError(t, err)
		require.Len(t, steps, 1)
		require.Equal(t, cur.Fence, steps[0].Fence)
	})

	t.Run("FinishJournalsTheLastStepUnderTheFence", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, a := running(t, b, "k", "node-a")
		require.NoError(t, b.Store.AppendStep(ctx(t), ep.ID, a.Token, 1, json.RawMessage(`"a1"`), time.Minute))
		b.ExpireClaim(t, "k")
		bb := acquire(t, b, "k", "node-b")
		_, err := b.Store.StartEpisode(ctx(t), ep.ID, bb.Token)
		require.NoError(t, err)

		zombie := episodes.Finish{Status: episodes.StatusDone, StepNo: 2, StepData: json.RawMessage(`"a2"`)}
		require.ErrorIs(t, b.Store.FinishEpisode(ctx(t), ep.ID, a.Token, zombie), claims.ErrLeaseLost)
		require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, bb.Token, episodes.Finish{
			Status: episodes.StatusDone, StepNo: 2, StepData: json.RawMessage(`"b2"`)}))
		steps, err := b.Store.ListSteps(ctx(t), ep.ID)
		require.NoError(t, err)
		require.Len(t, steps, 2, "the zombie's last step was not journaled")
		require.Equal(t, [2]any{int64(2), `"b2"`}, [2]any{steps[1].Fence, string(steps[1].Data)})
		got := get(t, b, ep.ID)
		require.Equal(t, episodes.StatusDone, got.Status)
		require.NotNil(t, got.LastStepAt)
	})

	// AppendStep is fenced on every part of the grant it names (key, owner,
	// fence, claimed) and on the episode it names running under that owner:
	// a write that fails any of them journals nothing and leaves the claim's
	// lease as it was (a refused append never revives or extends a lease).
	t.Run("ARefusedAppendWritesNothing", func(t *testing.T) {
		t.Parallel()
		t.Run("another owner at the same fence", func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			ep, held := running(t, b, "k", "node-b")
			b.ExpireClaim(t, "k")
			forged := claims.Token{Key: "k", Owner: "node-a", Fence: held.Fence}
			require.ErrorIs(t, b.Store.AppendStep(ctx(t), ep.ID, forged, 1, nil, time.Hour), claims.ErrLeaseLost)
			_, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "k", Owner: "thief", Lease: time.Minute, WorkType: "episode"})
			require.NoError(t, err, "the refused append revived the expired lease")
			requireNoSteps(t, b, ep.ID)
		})
		t.Run("an ended grant", func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			ep, c := running(t, b, "k", "node-a")
			require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{Status: episodes.StatusDone}))
			require.ErrorIs(t, b.Store.AppendStep(ctx(t), ep.ID, c.Token, 1, nil, time.Hour), claims.ErrLeaseLost)
			lease := leaseOf(t, b.Store, "k")
			require.True(t, lease.Before(time.Now().Add(30*time.Minute)), "the refused append extended a finished claim's lease to %v", lease)
			requireNoSteps(t, b, ep.ID)
		})
		t.Run("an episode not started", func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			// Recovery's grant leaves the episode queued under the
			// recoverer's name until it starts the run.
			ep, _ := running(t, b, "k", "node-a")
			b.ExpireClaim(t, "k")
			_, c, err := b.Store.ClaimForRecovery(ctx(t), ep.ID, "sweeper", time.Minute, time.Millisecond)
			require.NoError(t, err)
			require.ErrorIs(t, b.Store.AppendStep(ctx(t), ep.ID, c.Token, 1, nil, time.Minute), claims.ErrLeaseLost,
				"a run journals only after StartEpisode")
			requireNoSteps(t, b, ep.ID)
			require.Equal(t, episodes.StatusQueued, get(t, b, ep.ID).Status)
		})
		t.Run("another owner's episode", func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			_, mine := running(t, b, "mine", "node-a")
			theirs, _ := running(t, b, "theirs", "node-b")
			require.ErrorIs(t, b.Store.AppendStep(ctx(t), theirs.ID, mine.Token, 1, nil, time.Minute), claims.ErrLeaseLost)
			requireNoSteps(t, b, theirs.ID)
		})
	})

	// A sweeper reads the policy of the orphan's own (actor, expectation)
	// and nothing else: a pair nobody recorded has none (the orphan is left
	// for a node that knows it), however near its names are to a recorded
	// pair's.
	t.Run("RecoveryPolicyIsReadForItsOwnPair", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		for _, d := range []episodes.Definition{
			{ActorID: "billing", ExpectationID: "charge", RecoveryPolicy: "restart", MaxAttempts: 3},
			{ActorID: "billing", ExpectationID: "refund", RecoveryPolicy: "fail"},
			{ActorID: "zeta", ExpectationID: "audit", RecoveryPolicy: "fail"},
		} {
			require.NoError(t, b.Store.PutAgentDefinition(ctx(t), d))
		}
		policy := func(actor, expectation string) string {
			t.Helper()
			p, found, err := b.Store.AgentRecoveryPolicy(ctx(t), actor, expectation)
			require.NoError(t, err)
			if !found {
				return "(none)"
			}
			return p
		}
		require.Equal(t, "restart", policy("billing", "charge"))
		require.Equal(t, "fail", policy("billing", "refund"))
		require.Equal(t, "(none)", policy("billing", "audit"), "another actor's expectation of that name")
		require.Equal(t, "(none)", policy("alpha", "charge"), "another actor's, of an expectation billing has")
		require.Equal(t, "(none)", policy("billing", "archive"), "an expectation billing never recorded")

		// The workflow engine reads the max attempts the same way.
		if r, ok := b.Store.(interface {
			GetAgentMaxAttempts(ctx context.Context, actorID, expectationID string) (int32, bool, error)
		}); ok {
			n, found, err := r.GetAgentMaxAttempts(ctx(t), "billing", "charge")
			require.NoError(t, err)
			require.True(t, found)
			require.EqualValues(t, 3, n)
			for _, p := range [][2]string{{"billing", "audit"}, {"alpha", "charge"}, {"billing", "archive"}, {"billing", "refund"}} {
				_, found, err := r.GetAgentMaxAttempts(ctx(t), p[0], p[1])
				require.NoError(t, err)
				require.False(t, found, "%s/%s recorded no max attempts", p[0], p[1])
			}
		}

		require.NoError(t, b.Store.PutAgentDefinition(ctx(t),
			episodes.Definition{ActorID: "billing", ExpectationID: "charge", RecoveryPolicy: "fail"}))
		require.Equal(t, "fail", policy("billing", "charge"), "the last start wins")
	})

	t.Run("StepNumbersAreUnique", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, c := running(t, b, "k", "node-a")
		require.NoError(t, b.Store.AppendStep(ctx(t), ep.ID, c.Token, 1, nil, time.Minute))
		require.Error(t, b.Store.AppendStep(ctx(t), ep.ID, c.Token, 1, nil, time.Minute))
	})

	t.Run("FailureIsRecorded", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, c := running(t, b, "k", "node-a")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), ep.ID, c.Token, episodes.Finish{
			Status: episodes.StatusFailed, ErrorClass: episodes.ClassPanic, ErrorDetail: json.RawMessage(`{"panic":"boom"}`)}))
		got := get(t, b, ep.ID)
		require.Equal(t, episodes.StatusFailed, got.Status)
		require.Equal(t, episodes.ClassPanic, got.ErrorClass)
		require.JSONEq(t, `{"panic":"boom"}`, string(got.ErrorDetail))
		// The claim failed with it: a re-claim counts a further attempt.
		again := acquire(t, b, "k", "node-b")
		require.EqualValues(t, 2, again.Attempt)
	})

	t.Run("RecoveryClaimsEachOrphanOnce", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, c := running(t, b, "k", "node-a")
		orphans(t, b, 0)

		b.ExpireClaim(t, "k")
		require.Equal(t, []int64{ep.ID}, orphans(t, b, 1))
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []claims.Claim
			startCh = make(chan struct{})
		)
		for i := range 8 {
			wg.Go(func() {
				<-startCh
				_, won, err := b.Store.ClaimForRecovery(context.Background(), ep.ID, fmt.Sprintf("sweeper-%d", i), time.Minute, time.Minute)
				if errors.Is(err, claims.ErrBusy) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				require.NoError(t, err)
				winners = append(winners, won)
			})
		}
		close(startCh)
		wg.Wait()
		require.Len(t, winners, 1)
		require.EqualValues(t, 2, winners[0].Fence)
		got := get(t, b, ep.ID)
		require.Equal(t, episodes.StatusQueued, got.Status)
		require.EqualValues(t, 1, got.Attempts)
		require.Equal(t, winners[0].Owner, got.OwnerNode)
		orphans(t, b, 0)

		// The old owner is fenced out; the sweeper's grant starts the re-run.
		require.ErrorIs(t, b.Store.AppendStep(ctx(t), ep.ID, c.Token, 1, nil, time.Minute), claims.ErrLeaseLost)
		_, err := b.Store.StartEpisode(ctx(t), ep.ID, winners[0].Token)
		require.NoError(t, err)
	})

	t.Run("RecoveryLeavesLiveAndFinishedWorkAlone", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		live, lc := running(t, b, "live", "node-a")
		b.Age(t, live.ID, time.Hour) // old last step, but a live lease

		waiting, _ := create(t, b, "waiting")
		acquire(t, b, "waiting", "node-a")
		b.Age(t, waiting.ID, time.Hour) // queued for a slot, claim live

		done, dc := running(t, b, "done", "node-a")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), done.ID, dc.Token, episodes.Finish{Status: episodes.StatusDone}))
		b.ExpireClaim(t, "done")

		orphans(t, b, 0)
		for _, id := range []int64{live.ID, waiting.ID, done.ID} {
			_, _, err := b.Store.ClaimForRecovery(ctx(t), id, "sweeper", time.Minute, time.Millisecond)
			require.ErrorIs(t, err, claims.ErrBusy, "episode %d", id)
		}
		// Nor was the finished episode's claim granted on the way: it is
		// free to take, at the fence after its finish's.
		again := acquire(t, b, "done", "node-b")
		require.Equal(t, dc.Fence+1, again.Fence, "recovery granted a finished episode's claim")

		// A journaled step extends the lease: listed, then alive again.
		b.ExpireClaim(t, "live")
		require.Equal(t, []int64{live.ID}, orphans(t, b, 1))
		require.NoError(t, b.Store.AppendStep(ctx(t), live.ID, lc.Token, 1, nil, time.Minute))
		_, _, err := b.Store.ClaimForRecovery(ctx(t), live.ID, "sweeper", time.Minute, time.Millisecond)
		require.ErrorIs(t, err, claims.ErrBusy)
	})

	t.Run("StartRefusesAnExpiredGrant", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		n := newEpisode("slow-answer")
		n.Owner, n.Lease = "node-a", time.Minute
		res, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		require.True(t, res.Created)
		// The grant's answer came back after its lease ran out: another node
		// may steal it now, so no run may start on it.
		b.ExpireClaim(t, "slow-answer")
		_, err = b.Store.StartEpisode(ctx(t), res.Episode.ID, res.Claim.Token)
		require.ErrorIs(t, err, claims.ErrLeaseLost)
		require.Equal(t, episodes.StatusQueued, get(t, b, res.Episode.ID).Status)
	})

	t.Run("GrantsCarryTheInstantBeforeTheirStatement", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		within := func(what string, c claims.Claim, before, after time.Time) {
			t.Helper()
			require.False(t, c.LocalStart().IsZero(), "%s: the adapter did not stamp its grant's local start", what)
			require.False(t, c.LocalStart().Before(before), "%s: local start before the call", what)
			require.False(t, c.LocalStart().After(after), "%s: local start after the answer", what)
		}
		before := time.Now()
		c, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: "stamp-acquire", Owner: "node-a", Lease: time.Minute})
		require.NoError(t, err)
		within("Acquire", c, before, time.Now())

		n := newEpisode("stamp-create")
		n.Owner, n.Lease = "node-a", time.Minute
		before = time.Now()
		res, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		within("CreateEpisode", res.Claim, before, time.Now())

		_, err = b.Store.StartEpisode(ctx(t), res.Episode.ID, res.Claim.Token)
		require.NoError(t, err)
		b.ExpireClaim(t, "stamp-create")
		before = time.Now()
		_, rc, err := b.Store.ClaimForRecovery(ctx(t), res.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.NoError(t, err)
		within("ClaimForRecovery", rc, before, time.Now())
	})

	t.Run("RecoveryReturnsTheGrantItMade", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// The key ran an episode to the end before: its next grant starts
		// the attempt count again (attempt 1) while the fence goes on (2),
		// so that a grant returned with one in the other's place is seen.
		first, a := running(t, b, "k", "node-a")
		require.NoError(t, b.Store.FinishEpisode(ctx(t), first.ID, a.Token, episodes.Finish{Status: episodes.StatusDone}))
		b.Archive(t, first.ID)
		second, c := running(t, b, "k", "node-a")
		require.Equal(t, [2]int64{2, 1}, [2]int64{c.Fence, int64(c.Attempt)})
		b.ExpireClaim(t, "k")

		lease := 90 * time.Second
		got, g, err := b.Store.ClaimForRecovery(ctx(t), second.ID, "sweeper", lease, time.Minute)
		require.NoError(t, err)
		require.Equal(t, second.ID, got.ID)
		require.Equal(t, claims.Token{Key: "k", Owner: "sweeper", Fence: 3}, g.Token)
		require.EqualValues(t, 2, g.Attempt)
		require.Equal(t, claims.GrantSteal, g.Grant)
		require.Equal(t, lease, g.LeaseUntil.Sub(g.ClaimedAt), "lease_until is the grant's instant plus the lease")
		_, err = b.Store.StartEpisode(ctx(t), second.ID, g.Token)
		require.NoError(t, err, "the returned token is the grant's")
	})

	t.Run("RecoveredEpisodeKeepsEveryField", func(t *testing.T) {
		// The episode ClaimForRecovery hands the restarted run is the one
		// CreateEpisode handed the first run, field by field, except what
		// recovery changes on purpose; and it is the row as stored.
		t.Parallel()
		b := newBackend(t)
		n := newEpisode("workflow:7:extract:1")
		n.TriggerType, n.TriggerRef = episodes.TriggerWorkflow, json.RawMessage(`{"workflow":"w","instance":7,"step":"extract","attempt":1}`)
		n.SourceStack, n.SourceEnv, n.MaxAttempts = "hatch", "rc", 7
		n.Owner, n.Lease = "node-a", time.Minute
		res, err := b.Store.CreateEpisode(ctx(t), n)
		require.NoError(t, err)
		_, err = b.Store.StartEpisode(ctx(t), res.Episode.ID, res.Claim.Token)
		require.NoError(t, err)
		b.ExpireClaim(t, n.DedupeKey)
		got, _, err := b.Store.ClaimForRecovery(ctx(t), res.Episode.ID, "sweeper", time.Minute, time.Minute)
		require.NoError(t, err)

		want := res.Episode
		want.Phase, want.Attempts, want.OwnerNode = "recovering", want.Attempts+1, "sweeper" // recovery's own changes
		requireSameEpisode(t, want, got)
		stored := get(t, b, got.ID)
		// The run history the row keeps (started, last step) is not handed
		// to a run by any grant, the first one included.
		stored.StartedAt, stored.LastStepAt = nil, nil
		requireSameEpisode(t, stored, got)
	})

	t.Run("EpisodeWhoseClaimAnotherGrantFinishedIsOrphaned", func(t *testing.T) {
		t.Parallel()
		for _, finish := range []string{"complete", "fail"} {
			t.Run(finish, func(t *testing.T) {
				b := newBackend(t)
				key := "shared-" + finish
				// A direct claims user holds the key when the episode is
				// created: the episode gets no claim and waits for it.
				direct := acquire(t, b, key, "direct")
				n := newEpisode(key)
				n.Owner, n.Lease = "node-a", time.Minute
				res, err := b.Store.CreateEpisode(ctx(t), n)
				require.NoError(t, err)
				require.True(t, res.Created)
				require.Zero(t, res.Claim.Fence, "busy: the key's claim is held live elsewhere")
				orphans(t, b, 0) // waiting behind a live lease is not orphaned

				// The holder finishes its claim instead of releasing it:
				// nobody will ever finish this episode unless recovery does.
				if finish == "complete" {
					require.NoError(t, b.Store.Complete(ctx(t), direct.Token))
				} else {
					require.NoError(t, b.Store.Fail(ctx(t), direct.Token, nil))
				}
				require.Equal(t, []int64{res.Episode.ID}, orphans(t, b, 1))
				ep, rc, err := b.Store.ClaimForRecovery(ctx(t), res.Episode.ID, "sweeper", time.Minute, time.Minute)
				require.NoError(t, err)
				require.Equal(t, claims.Token{Key: key, Owner: "sweeper", Fence: direct.Fence + 1}, rc.Token)
				require.Equal(t, claims.GrantReclaim, rc.Grant)
				require.EqualValues(t, 1, ep.Attempts)
				orphans(t, b, 0)
				_, _, err = b.Store.ClaimForRecovery(ctx(t), res.Episode.ID, "late", time.Minute, time.Minute)
				require.ErrorIs(t, err, claims.ErrBusy, "recovered once")
				_, err = b.Store.StartEpisode(ctx(t), res.Episode.ID, rc.Token)
				require.NoError(t, err)
				require.NoError(t, b.Store.FinishEpisode(ctx(t), res.Episode.ID, rc.Token, episodes.Finish{Status: episodes.StatusDone}))
				orphans(t, b, 0)
			})
		}
	})

	t.Run("ClaimlessEpisodesAreOrphanedAfterStaleAfter", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		ep, _ := create(t, b, "")
		c := acquire(t, b, ep.ClaimKey(), "node-a")
		_, err := b.Store.StartEpisode(ctx(t), ep.ID, c.Token)
		require.NoError(t, err)
		b.ExpireClaim(t, ep.ClaimKey())
		require.Equal(t, []int64{ep.ID}, orphans(t, b, 1), "episode:{id} keys are claims like any other")
	})

	t.Run("AQueuedEpisodeNobodyGrantedIsNoOrphanHoweverOld", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		// Queued, no claim and no request: staleness is for a running
		// episode whose claim is gone; nothing ran here, so there is
		// nothing to recover, whatever its age (the listing and the
		// recovery grant agree).
		ep, _ := create(t, b, "never-granted")
		b.Age(t, ep.ID, time.Hour)
		orphans(t, b, 0)
		_, _, err := b.Store.ClaimForRecovery(ctx(t), ep.ID, "sweeper", time.Minute, time.Minute)
		require.ErrorIs(t, err, claims.ErrBusy, "a queued episode nobody granted was taken over")
		require.Equal(t, episodes.StatusQueued, get(t, b, ep.ID).Status)
	})
}

// requireSameEpisode compares two episodes field by field, JSON fields as
// JSON (a dialect may re-encode them) and times to the microsecond.
func requireSameEpisode(t testing.TB, want, got episodes.Episode) {
	t.Helper()
	for name, pair := range map[string][2]json.RawMessage{
		"TriggerRef": {want.TriggerRef, got.TriggerRef}, "Payload": {want.Payload, got.Payload},
		"Result": {want.Result, got.Result}, "ErrorDetail": {want.ErrorDetail, got.ErrorDetail},
	} {
		if len(pair[0]) == 0 || len(pair[1]) == 0 {
			require.Equal(t, len(pair[0]) == 0, len(pair[1]) == 0, "%s: want %s, got %s", name, pair[0], pair[1])
			continue
		}
		require.JSONEq(t, string(pair[0]), string(pair[1]), name)
	}
	require.WithinDuration(t, want.CreatedAt, got.CreatedAt, time.Microsecond, "CreatedAt")
	want.TriggerRef, want.Payload, want.Result, want.ErrorDetail, want.CreatedAt = nil, nil, nil, nil, time.Time{}
	got.TriggerRef, got.Payload, got.Result, got.ErrorDetail, got.CreatedAt = nil, nil, nil, nil, time.Time{}
	require.Equal(t, want, got)
}

func newEpisode(key string) episodes.New {
	return episodes.New{ActorID: "actor", ExpectationID: "exp", TriggerType: episodes.TriggerEvent, DedupeKey: key,
		MaxAttempts: 3, Payload: json.RawMessage(`{"n":1}`)}
}

// create creates an unclaimed episode (as a deferring node would).
func create(t testing.TB, b EpisodesBackend, key string) (episodes.Episode, bool) {
	t.Helper()
	res, err := b.Store.CreateEpisode(ctx(t), newEpisode(key))
	require.NoError(t, err)
	require.Zero(t, res.Claim.Fence, "no owner, no claim")
	return res.Episode, res.Created
}

// running creates an episode under key, claims it for owner and starts it.
func running(t testing.TB, b EpisodesBackend, key, owner string) (episodes.Episode, claims.Claim) {
	t.Helper()
	ep, _ := create(t, b, key)
	c := acquire(t, b, key, owner)
	_, err := b.Store.StartEpisode(ctx(t), ep.ID, c.Token)
	require.NoError(t, err)
	return ep, c
}

func acquire(t testing.TB, b EpisodesBackend, key, owner string) claims.Claim {
	t.Helper()
	c, err := b.Store.Acquire(ctx(t), claims.AcquireParams{Key: key, Owner: owner, Lease: time.Minute, WorkType: "episode"})
	require.NoError(t, err)
	return c
}

func get(t testing.TB, b EpisodesBackend, id int64) episodes.Episode {
	t.Helper()
	ep, err := b.Store.GetEpisode(ctx(t), id)
	require.NoError(t, err)
	return ep
}

// requireNoSteps requires that episode id's journal is empty.
func requireNoSteps(t testing.TB, b EpisodesBackend, id int64) {
	t.Helper()
	steps, err := b.Store.ListSteps(ctx(t), id)
	require.NoError(t, err)
	require.Empty(t, steps)
}

// leaseOf reads key's lease_until through the operator read ListClaims
// (leasehold claims ls), which every SQL adapter has; a store without it
// skips the calling scenario, loudly.
func leaseOf(t testing.TB, store any, key string) time.Time {
	t.Helper()
	list, err := claimListerOf(t, store).ListClaims(ctx(t), claims.ListQuery{Limit: 1000})
	require.NoError(t, err)
	for _, c := range list {
		if c.Token.Key == key {
			return c.LeaseUntil
		}
	}
	require.FailNow(t, "no claim", "key %q has no claim row", key)
	return time.Time{}
}

// orphans lists the orphans in the default scope and checks their number.
func orphans(t testing.TB, b EpisodesBackend, want int) []int64 {
	t.Helper()
	list, err := b.Store.ListOrphans(ctx(t), episodes.OrphanQuery{StaleAfter: time.Minute, Limit: 100})
	require.NoError(t, err)
	ids := make([]int64, len(list))
	for i, o := range list {
		ids[i] = o.Episode.ID
	}
	require.Len(t, ids, want, "orphans: %v", ids)
	return ids
}
