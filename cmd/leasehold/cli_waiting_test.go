package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/membership"
)

// TestCLIEpisodesWaitingForNode: a queued episode whose actor and
// expectation no live node runs is marked by ls (after the table) and show
// (a "waiting" line), with the node that last listed the pair, and
// canceling it ends it at once.
func TestCLIEpisodesWaitingForNode(t *testing.T) {
	pool := pgtest.Schema(t)
	store := postgres.New(pool)
	url := schemaURL(pool.Config().ConnConfig.RuntimeParams["search_path"])
	ctx := context.Background()
	deferred := func(expectation string) int64 {
		d, err := store.CreateDeferredEpisode(ctx, episodes.Deferred{
			New: episodes.New{ActorID: "billing", ExpectationID: expectation, TriggerType: episodes.TriggerEvent, MaxAttempts: 3},
		})
		require.NoError(t, err)
		return d.Episode.ID
	}
	charge := []episodes.Runnable{{ActorID: "billing", ExpectationID: "charge"}}
	refund := []episodes.Runnable{{ActorID: "billing", ExpectationID: "refund"}}
	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-7", Mode: "full", Runnable: refund}))
	// node-7 went silent a minute ago (moved back on the database clock).
	pgtest.Exec(t, pool, `UPDATE leasehold_nodes SET heartbeat_at = heartbeat_at - interval '1 minute' WHERE node_id = 'node-7'`)
	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-8", Mode: "full", Runnable: charge}))
	waiting := deferred("refund")
	runnable := deferred("charge")
	ids, other := strconv.FormatInt(waiting, 10), strconv.FormatInt(runnable, 10)
	var seen time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT heartbeat_at FROM leasehold_nodes WHERE node_id = 'node-7'`).Scan(&seen))
	lastSeen := regexp.QuoteMeta("(last seen on node-7 at " + seen.UTC().Format(time.RFC3339) + ")")

	code, out, errOut := runCLI(t, episodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^episode `+ids+`: waiting for a node that runs billing/refund `+lastSeen+`$`, out)
	require.NotContains(t, out, "episode "+other+":", "node-8 runs billing/charge")
	require.Equal(t, "2 episode(s)\n", errOut)

	code, out, errOut = runCLI(t, episodesCmd, "show", ids, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^  available +due .*\n  waiting +for a node that runs billing/refund `+lastSeen+`$`, out)
	code, out, errOut = runCLI(t, episodesCmd, "show", other, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "waiting")

	code, out, errOut = runCLI(t, episodesCmd, "show", ids, "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var shown episodeShowJSON
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.NotNil(t, shown.WaitingForNode)
	require.Equal(t, "refund", shown.WaitingForNode.ExpectationID)
	require.Equal(t, "node-7", shown.WaitingForNode.LastNode)
	require.Equal(t, seen.UTC().Format(time.RFC3339), shown.WaitingForNode.LastHeartbeatAt)

	// node-7's row is gone: no node that runs refund has been seen.
	require.NoError(t, store.DeregisterNode(ctx, "node-7"))
	code, out, errOut = runCLI(t, episodesCmd, "ls", "-json", "-url", url)
	require.Equal(t, 0, code, errOut)
	var listed []episodeJSON
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 2)
	for _, e := range listed {
		if e.ID == waiting {
			require.NotNil(t, e.WaitingForNode)
			require.Equal(t, "waiting for a node that runs billing/refund (no node that runs it has been seen)", e.WaitingForNode.Reason)
			require.Empty(t, e.WaitingForNode.LastNode)
		} else {
			require.Nil(t, e.WaitingForNode)
		}
	}

	// An operator cancels it: nobody holds it, so it ends at once.
	code, out, errOut = runCLI(t, episodesCmd, "cancel", ids, "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "episode "+ids+" canceled (nobody held a live lease on it)\n", out)
	code, out, errOut = runCLI(t, episodesCmd, "ls", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "waiting for a node")
}
