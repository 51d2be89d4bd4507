package sqlserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/workflows"
)

var _ conformance.WorkflowStore = (*sqlserver.Store)(nil)

// TestConformanceWorkflows runs the workflow statement suite, with
// READ_COMMITTED_SNAPSHOT off and on: the instance lock and the existence
// checks under UPDLOCK, HOLDLOCK are where that setting matters.
func TestConformanceWorkflows(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	for _, rcsi := range []bool{false, true} {
		t.Run(fmt.Sprintf("RCSI=%v", rcsi), func(t *testing.T) {
			t.Parallel()
			conformance.RunWorkflows(t, func(t *testing.T) conformance.WorkflowsBackend {
				b, _ := workflowsBackend(t, admin, dsn, rcsi)
				return b
			})
		})
	}
}

// TestConformanceWorkflowsInTx: what only SQL Server can get wrong about
// the statements the engine sends inside InTx, RCSI off and on. Under
// XACT_ABORT ON any error dooms the caller's transaction and a bare ROLLBACK
// in a batch ends it, so a lost race must be an empty answer, a fenced
// finish that matched nothing must roll the caller's whole transaction
// back (its THROW), so that nothing of it commits, and the instance lock
// must hold until the transaction ends.
func TestConformanceWorkflowsInTx(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	for _, rcsi := range []bool{false, true} {
		t.Run(fmt.Sprintf("RCSI=%v", rcsi), func(t *testing.T) {
			t.Parallel()

			t.Run("DuplicatesKeepTheTransaction", func(t *testing.T) {
				t.Parallel()
				_, s := workflowsBackend(t, admin, dsn, rcsi)
				ctx := t.Context()
				n := workflows.NewInstance{WorkflowID: "w", Subject: "s"}
				var id int64
				require.NoError(t, s.InTx(ctx, func(tx workflows.Tx) error {
					var created bool
					var err error
					id, created, err = tx.CreateWorkflowInstance(ctx, n)
					require.NoError(t, err)
					require.True(t, created)
					_, created, err = tx.CreateWorkflowInstance(ctx, n)
					require.NoError(t, err, "a running instance is an empty answer, not an error")
					require.False(t, created)
					got, err := tx.GetRunningWorkflowInstance(ctx, "w", "s", "")
					require.NoError(t, err, "the transaction goes on")
					require.Equal(t, id, got.ID)

					d := episodes.Deferred{New: workflowEpisode("workflow:1:a:1")}
					res, err := tx.CreateDeferredEpisode(ctx, d)
					require.NoError(t, err)
					require.True(t, res.Created)
					res, err = tx.CreateDeferredEpisode(ctx, d)
					require.NoError(t, err, "a live episode is an empty answer, not an error")
					require.False(t, res.Created)
					return tx.InsertWorkflowStep(ctx, id, "a", 1)
				}))
				got, err := s.GetRunningWorkflowInstance(ctx, "w", "s", "")
				require.NoError(t, err, "committed")
				require.Equal(t, id, got.ID)
				steps, err := s.ListWorkflowSteps(ctx, id)
				require.NoError(t, err)
				require.Len(t, steps, 1)
				res, err := s.CreateEpisode(ctx, workflowEpisode("workflow:1:a:1"))
				require.NoError(t, err)
				require.False(t, res.Created, "the deferred episode committed with the transaction")
			})

			t.Run("FinishEpisodeNests", func(t *testing.T) {
				t.Parallel()
				_, s := workflowsBackend(t, admin, dsn, rcsi)
				ctx := t.Context()
				n := workflowEpisode("workflow:2:a:1")
				n.Owner, n.Lease = "node-a", time.Minute
				ep, err := s.CreateEpisode(ctx, n)
				require.NoError(t, err)
				require.True(t, ep.Created)
				tk := ep.Claim.Token
				stale := tk
				stale.Fence++
				done := episodes.Finish{Status: episodes.StatusDone}

				boom := errors.New("boom")
				err = s.InTx(ctx, func(tx workflows.Tx) error {
					require.NoError(t, tx.FinishEpisode(ctx, ep.Episode.ID, tk, done))
					return boom
				})
				require.ErrorIs(t, err, boom)
				got, err := s.GetEpisode(ctx, ep.Episode.ID)
				require.NoError(t, err)
				require.Equal(t, episodes.StatusQueued, got.Status, "the finish rolled back with the caller's transaction")

				var id int64
				err = s.InTx(ctx, func(tx workflows.Tx) error {
					var err error
					id, _, err = tx.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
					require.NoError(t, err)
					require.ErrorIs(t, tx.FinishEpisode(ctx, ep.Episode.ID, stale, done), episodes.ErrLeaseLost)
					// The THROW rolled the whole transaction back: its
					// later batches are refused, not run in autocommit.
					_, err = tx.LockWorkflowInstance(ctx, id)
					require.Error(t, err)
					return nil // the caller ignores both errors and commits
				})
				require.Error(t, err, "the commit of a transaction whose finish matched nothing fails")
				_, err = s.GetWorkflowInstance(ctx, id)
				require.ErrorIs(t, err, workflows.ErrNoInstance, "nothing written before the failed finish committed")
				got, err = s.GetEpisode(ctx, ep.Episode.ID)
				require.NoError(t, err)
				require.Equal(t, episodes.StatusQueued, got.Status)

				require.NoError(t, s.InTx(ctx, func(tx workflows.Tx) error {
					return tx.FinishEpisode(ctx, ep.Episode.ID, tk, done)
				}))
				got, err = s.GetEpisode(ctx, ep.Episode.ID)
				require.NoError(t, err)
				require.Equal(t, episodes.StatusDone, got.Status, "the current grant was untouched")
			})

			t.Run("ConcurrentStartersMakeOneInstance", func(t *testing.T) {
				t.Parallel()
				_, s := workflowsBackend(t, admin, dsn, rcsi)
				ctx := t.Context()
				const starters = 16
				var (
					wg      sync.WaitGroup
					mu      sync.Mutex
					ids     = map[int64]int{}
					created int
					errs    []error
				)
				for range starters {
					wg.Go(func() {
						var (
							id int64
							ok bool
						)
						err := s.InTx(ctx, func(tx workflows.Tx) error {
							var err error
							if id, ok, err = tx.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"}); err != nil || ok {
								return err
							}
							inst, err := tx.GetRunningWorkflowInstance(ctx, "w", "s", "")
							id = inst.ID
							return err
						})
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							errs = append(errs, err)
							return
						}
						ids[id]++
						if ok {
							created++
						}
					})
				}
				wg.Wait()
				require.Empty(t, errs, "no 2601 and no 1205: the starters queue on the key-range lock")
				require.Equal(t, 1, created)
				require.Len(t, ids, 1, "every starter sees the one instance")
			})

			t.Run("LockWorkflowInstanceHoldsUntilTheTransactionEnds", func(t *testing.T) {
				t.Parallel()
				_, s := workflowsBackend(t, admin, dsn, rcsi)
				ctx := t.Context()
				id, created, err := s.CreateWorkflowInstance(ctx, workflows.NewInstance{WorkflowID: "w", Subject: "s"})
				require.NoError(t, err)
				require.True(t, created)

				locked, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
				go func() {
					held <- s.InTx(ctx, func(tx workflows.Tx) error {
						if _, err := tx.LockWorkflowInstance(ctx, id); err != nil {
							return err
						}
						close(locked)
						select {
						case <-release:
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					})
				}()
				<-locked

				// A second advancer waits (here until its deadline) ...
				short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
				err = s.InTx(short, func(tx workflows.Tx) error {
					_, err := tx.LockWorkflowInstance(short, id)
					return err
				})
				require.Error(t, err)
				require.ErrorIs(t, short.Err(), context.DeadlineExceeded,
					"it failed by waiting until its deadline: the row is update-locked by the first transaction")
				// ... while a plain reader does not, as with FOR UPDATE.
				inst, err := s.GetWorkflowInstance(ctx, id)
				require.NoError(t, err)
				require.Equal(t, id, inst.ID)

				close(release)
				require.NoError(t, <-held)
				require.NoError(t, s.InTx(ctx, func(tx workflows.Tx) error {
					_, err := tx.LockWorkflowInstance(ctx, id)
					return err
				}), "free once the first transaction committed")
			})
		})
	}
}

// workflowsBackend returns a backend on a fresh database and its Store.
func workflowsBackend(t *testing.T, admin *sql.DB, dsn string, rcsi bool) (conformance.WorkflowsBackend, *sqlserver.Store) {
	t.Helper()
	db := freshDatabase(t, admin, dsn, rcsi)
	store, err := sqlserver.New(db)
	require.NoError(t, err)
	return conformance.WorkflowsBackend{
		Store: store,
		SetEpisodeStatus: func(t testing.TB, id int64, status episodes.Status) {
			updateOne(t, db, fmt.Sprintf("episode %d", id),
				`UPDATE leasehold_episodes SET status = @status OUTPUT inserted.id WHERE id = @id;`,
				sql.Named("status", string(status)), sql.Named("id", id))
		},
	}, store
}

func workflowEpisode(key string) episodes.New {
	return episodes.New{ActorID: "actor", ExpectationID: "exp", TriggerType: episodes.TriggerWorkflow, DedupeKey: key, MaxAttempts: 3}
}
