package runner_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/health"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/testbound"
	"github.com/leasehold/leasehold/recovery"
	"github.com/leasehold/leasehold/runner"
	"github.com/leasehold/leasehold/sql/schema"
	"github.com/leasehold/leasehold/telemetry"
)

// Start refuses a database whose leasehold schema is missing or older than
// the binary, with one sentinel for every dialect, instead of starting and
// failing the first trigger with "relation does not exist"; the health
// package serves the same check as a probe.
func TestStartRefusesAMissingOrOlderSchema(t *testing.T) {
	t.Parallel()
	for name, breakIt := range map[string]string{
		"missing": `DROP TABLE leasehold_schema_version`,
		"older":   `DELETE FROM leasehold_schema_version WHERE version_id = (SELECT max(version_id) FROM leasehold_schema_version)`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Schema(t)
			store := postgres.New(pool)
			probe := httptest.NewRecorder()
			health.Schema(store).ServeHTTP(probe, httptest.NewRequest(http.MethodGet, "/startupz", nil))
			require.Equal(t, http.StatusOK, probe.Code, "current schema")

			pgtest.Exec(t, pool, breakIt)
			node, err := runner.NewNode(runner.Config{Store: store, Identity: "n", Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.NoError(t, node.Register(eventActor(oneStep, 1)))
			err = node.Start(context.Background())
			require.ErrorIs(t, err, runner.ErrSchema)
			require.ErrorIs(t, err, schema.ErrSchema)
			require.ErrorIs(t, node.CheckSchema(context.Background()), runner.ErrSchema)

			probe = httptest.NewRecorder()
			health.Schema(node).ServeHTTP(probe, httptest.NewRequest(http.MethodGet, "/startupz", nil))
			require.Equal(t, http.StatusServiceUnavailable, probe.Code)
			require.Contains(t, probe.Body.String(), "migrate")
			_, err = node.Fire(context.Background(), "monitor", "resource.updated", nil, runner.FireOptions{})
			require.ErrorIs(t, err, runner.ErrStopped, "the node never started")
		})
	}
}

// Every node records its expectations' recovery policy and max attempts
// when it starts, so a sweeper on a node that lacks the actor (a rolling
// deploy that adds it) applies the policy the actor's nodes would: it
// hands a restartable orphan back at once instead of failing it for good.
func TestNodesRecordDefinitionsForSweepersWithoutTheActor(t *testing.T) {
	t.Parallel()
	billing := runner.Actor{ID: "billing", Expectations: []runner.Expectation{{ID: "charge", Trigger: runner.Manual{},
		Strategy: oneStep, Recovery: runner.RecoveryRestart, MaxAttempts: 7}}}
	pool := pgtest.Schema(t)
	newRelease := nodetest.StartOn(t, pool, 1, nil, nil, billing) // a node of the new release
	var policy string
	var maxAttempts int32
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT recovery_policy, max_attempts
		FROM leasehold_agent_definitions WHERE actor_id = 'billing' AND expectation_id = 'charge'`).Scan(&policy, &maxAttempts))
	require.Equal(t, "restart", policy)
	require.EqualValues(t, 7, maxAttempts)

	// A node of the old release, without billing, sweeps billing's orphan.
	old := nodetest.StartOn(t, pool, 1, func(_ int, cfg *runner.Config) { cfg.Identity = "old-node" }, nil, eventActor(oneStep, 1))
	store := postgres.New(pool)
	c, err := store.CreateEpisode(context.Background(), episodes.New{ActorID: "billing", ExpectationID: "charge",
		TriggerType: episodes.TriggerManual, DedupeKey: "charge:42", MaxAttempts: 7, Owner: "dead", Lease: time.Minute})
	require.NoError(t, err)
	_, err = store.StartEpisode(context.Background(), c.Episode.ID, c.Claim.Token)
	require.NoError(t, err)
	pgtest.ExpireClaim(t, pool, "charge:42")
	rcv, err := recovery.New(store, old.Nodes[0], slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	rep, err := rcv.Sweep(context.Background(), recovery.Options{})
	require.NoError(t, err)
	require.Equal(t, 0, rep.Failed, "restartable work is never failed by a node that lacks its code")
	require.Equal(t, 1, rep.Restarted, "made available, for a node that runs billing")
	require.Equal(t, recovery.SourceTable, rep.Decisions[0].PolicySource)
	var ended telemetry.Event
	require.Eventually(t, func() bool {
		for _, e := range newRelease.Sigs[0].Events() {
			if e.Name == runner.EventCompleted && e.Key == "charge:42" {
				ended = e
				return true
			}
		}
		return false
	}, time.Minute, 10*time.Millisecond, "the node that runs billing takes it")
	require.Equal(t, "node-0", ended.Owner)
	got, err := store.GetEpisode(context.Background(), c.Episode.ID)
	require.NoError(t, err)
	require.Equal(t, episodes.StatusDone, got.Status)
	require.Equal(t, int32(2), got.Attempt())
}

// Start honours its ctx for every database call it makes, and reports a
// database it could not reach instead of starting: against a port that
// refuses connections and against a server that accepts and never
// answers, a Start with a 1 s ctx returns an error naming the call within
// that second (plus the scheduling margin), and the node is not started.
// Before, the first returned nil after the ctx and the second after 32 s
// (the membership and definition writes ran detached from ctx).
func TestStartHonoursItsContext(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	var held sync.WaitGroup
	t.Cleanup(held.Wait)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held.Go(func() { // keep it open, answer nothing, until the test ends
				<-t.Context().Done()
				_ = c.Close()
			})
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusedAddr := refused.Addr().String()
	require.NoError(t, refused.Close()) // nothing listens there now

	for name, addr := range map[string]string{"refused": refusedAddr, "silent": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/leasehold?sslmode=disable")
			require.NoError(t, err) // lazy: nothing is dialled yet
			t.Cleanup(pool.Close)
			node, err := runner.NewNode(runner.Config{Store: postgres.New(pool), Identity: "n", Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.NoError(t, node.Register(eventActor(oneStep, 1)))

			const bound = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			began := time.Now()
			err = node.Start(ctx)
			took := time.Since(began)
			require.Error(t, err, "Start reported success against a database it never reached")
			require.Contains(t, err.Error(), "check the schema", "the error names the call that failed")
			require.Less(t, took, bound+testbound.Margin, "Start outlived its ctx: %v", err)
			require.Equal(t, runner.StateStarting, node.Readiness().State, "the node did not start")
			_, err = node.Fire(context.Background(), "monitor", "resource.updated", nil, runner.FireOptions{})
			require.ErrorIs(t, err, runner.ErrStopped, "the node never started")
		})
	}
}
