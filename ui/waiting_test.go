package ui_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/membership"
	"github.com/leasehold/leasehold/ui"
)

// TestWaitingForNode: the episode list and the episode page say that a
// queued episode waits for a node that runs its actor and expectation, and
// stop once a live node of its env and stack registers the pair.
func TestWaitingForNode(t *testing.T) {
	sd := seed(t, 0)
	s := newSite(t, sd, ui.Config{})
	id := strconv.FormatInt(sd.available, 10) // reports/build in env rc, stack blue; no node runs it
	const reason = "waiting for a node that runs reports/build (no node that runs it has been seen)"

	code, body := s.get(t, "/episodes")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `<tr data-id="`+id+`" data-status="queued">[\s\S]*?<span class="waiting-for-node">`+regexp.QuoteMeta(reason)+`</span>`, body)
	require.Equal(t, 1, strings.Count(body, `class="waiting-for-node"`), "only the queued episode no node runs")

	code, body = s.get(t, "/episodes/"+id)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<dd id="waiting-for-node" class="warn">`+reason+`:`)

	require.NoError(t, sd.store.RegisterNode(context.Background(), membership.Member{ID: "node-9", Env: "rc", Mode: "full",
		Runnable: []episodes.Runnable{{ActorID: "reports", ExpectationID: "build"}}}))
	code, body = s.get(t, "/episodes")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "waiting-for-node", "node-9 (no stack: every stack's work) runs it")
	code, body = s.get(t, "/episodes/"+id)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "waiting-for-node")
}
