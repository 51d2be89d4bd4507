package runner_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/runner"
)

// A rolling move to dedupe key version 2 under live nodes that read
// version 1: a trigger fired before the switch is a duplicate after it,
// re-sent as it was, through every way of firing (Fire, FireBatch, FireTx,
// on nodes that have not seen the switch yet); after it every way of
// writing one payload is one key; a payload whose forms agree was never
// affected.
func TestFireAcrossTheKeyVersionSwitch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	done := nodetest.Strategy{StepFunc: func(context.Context, *runner.Run) (runner.StepResult, error) {
		return runner.StepResult{Done: true}, nil
	}}
	c := nodetest.Start(t, 2, nil, eventActor(done, 4))
	pgExec(t, c, `UPDATE leasehold_key_version SET version = 1`) // a database that held work before 00014
	fire := func(node *runner.Node, payload string) runner.Outcome {
		t.Helper()
		out, err := node.Fire(ctx, "monitor", "resource.updated", json.RawMessage(payload), runner.FireOptions{})
		require.NoError(t, err)
		require.Len(t, out, 1)
		return out[0]
	}

	// Version 1: numbers as written, so 1.0 and 1 are two triggers.
	e1 := fire(c.Nodes[0], `{"amount":1.0}`)
	require.False(t, e1.Duplicate)
	plain := fire(c.Nodes[0], `{"amount":7}`) // a payload both versions key alike
	require.Equal(t, 1, c.Count(t, "id = $1 AND key_version = 1", e1.EpisodeID), "a version 1 key of a payload whose forms differ")
	require.Equal(t, 1, c.Count(t, "id = $1 AND key_version = 2", plain.EpisodeID), "a key every version shares")
	batched, err := c.Nodes[1].FireBatch(ctx, "monitor", "resource.updated",
		[]runner.BatchEvent{{Payload: json.RawMessage(`{"amount":2.50}`)}}, runner.FireOptions{})
	require.NoError(t, err)
	var caller int64
	inTx(t, c.Pool, true, func(tx pgx.Tx) {
		out, err := c.Nodes[1].FireTx(ctx, postgres.New(tx), "monitor", "resource.updated", json.RawMessage(`{"amount":3e0}`), runner.FireOptions{})
		require.NoError(t, err)
		caller = out[0].EpisodeID
	})
	before := c.Count(t, "true")

	// The switch, while both nodes still hash under version 1.
	v, laggards, err := postgres.New(c.Pool).SwitchKeyVersion(ctx, episodes.KeySwitch{})
	require.NoError(t, err)
	require.Empty(t, laggards, "both nodes compute version 2")
	require.EqualValues(t, 2, v)

	// Each trigger re-sent as it was is a duplicate, whichever node and
	// path: the first insert under version 1 is refused, the node reads
	// version 2 and finds the trigger under its version 1 key (node-0 by
	// Fire, node-1 by FireBatch, each the first thing it does after the
	// switch).
	again := fire(c.Nodes[0], `{"amount":1.0}`)
	require.True(t, again.Duplicate)
	require.Equal(t, e1.EpisodeID, again.EpisodeID)
	out, err := c.Nodes[1].FireBatch(ctx, "monitor", "resource.updated",
		[]runner.BatchEvent{{Payload: json.RawMessage(`{"amount":2.50}`)}, {Payload: json.RawMessage(`{"amount":1.0}`)}}, runner.FireOptions{})
	require.NoError(t, err)
	require.Equal(t, []runner.Outcome{
		{ExpectationID: "check", EpisodeID: batched[0].EpisodeID, Duplicate: true},
		{ExpectationID: "check", EpisodeID: e1.EpisodeID, Duplicate: true},
	}, out)
	again = fire(c.Nodes[1], `{"amount":1.0}`)
	require.Equal(t, e1.EpisodeID, again.EpisodeID)
	inTx(t, c.Pool, true, func(tx pgx.Tx) {
		out, err := c.Nodes[1].FireTx(ctx, postgres.New(tx), "monitor", "resource.updated", json.RawMessage(`{"amount":3e0}`), runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Duplicate)
		require.Equal(t, caller, out[0].EpisodeID)
	})
	require.Equal(t, plain.EpisodeID, fire(c.Nodes[1], `{"amount":7}`).EpisodeID)
	require.Equal(t, before, c.Count(t, "true"), "no trigger fired before the switch ran twice")

	// Version 2: 1 and 1e0 are one key (1.0 stays its version 1
	// episode's), a new payload's key is a version 2 key.
	one := fire(c.Nodes[0], `{"amount":1}`)
	require.False(t, one.Duplicate)
	require.Equal(t, 1, c.Count(t, "id = $1 AND key_version = 2", one.EpisodeID))
	require.Equal(t, one.EpisodeID, fire(c.Nodes[1], `{"amount":1e0}`).EpisodeID)
	require.Equal(t, one.EpisodeID, fire(c.Nodes[1], `{"amount":10E-1}`).EpisodeID)
	require.Equal(t, e1.EpisodeID, fire(c.Nodes[1], `{"amount":1.0}`).EpisodeID, "its own writing finds the version 1 episode first")
	require.Zero(t, c.Count(t, "key_version = 1 AND created_at > (SELECT switched_at FROM leasehold_key_version)"),
		"no version 1 key written after the switch")
}

// FireTx under a version the database has left: the caller's transaction
// fails ErrKeyVersion (Postgres aborts it) and writes nothing; run again,
// it creates the episode under the new version.
func TestFireTxFailsWhenTheKeyVersionMovedUnderIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := nodetest.Start(t, 1, nil, eventActor(nodetest.Strategy{}, 1))
	pgExec(t, c, `UPDATE leasehold_key_version SET version = 1`)
	node := c.Nodes[0]
	_, err := node.Fire(ctx, "monitor", "resource.updated", json.RawMessage(`{"n":1.5e0}`), runner.FireOptions{}) // reads version 1
	require.NoError(t, err)
	_, _, err = postgres.New(c.Pool).SwitchKeyVersion(ctx, episodes.KeySwitch{})
	require.NoError(t, err)

	inTx(t, c.Pool, false, func(tx pgx.Tx) {
		_, err := node.FireTx(ctx, postgres.New(tx), "monitor", "resource.updated", json.RawMessage(`{"n":2.0}`), runner.FireOptions{})
		require.ErrorIs(t, err, runner.ErrKeyVersion)
	})
	require.Zero(t, c.Count(t, `payload @> '{"n":2.0}'`))
	inTx(t, c.Pool, true, func(tx pgx.Tx) {
		out, err := node.FireTx(ctx, postgres.New(tx), "monitor", "resource.updated", json.RawMessage(`{"n":2.0}`), runner.FireOptions{})
		require.NoError(t, err)
		require.True(t, out[0].Deferred)
	})
	require.Equal(t, 1, c.Count(t, `payload @> '{"n":2.0}' AND key_version = 2`))
}
