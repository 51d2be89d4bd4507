package health_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/health"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/runner"
)

func probe(t *testing.T, h http.Handler) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code
}

func TestReadinessFollowsTheNodeLifecycle(t *testing.T) {
	node, err := runner.NewNode(runner.Config{Store: postgres.New(pgtest.Schema(t)), Identity: "node-a", NoJitter: true})
	require.NoError(t, err)
	ready := health.Readiness(node)
	require.Equal(t, http.StatusServiceUnavailable, probe(t, ready), "not ready before Start")
	require.NoError(t, node.Start(t.Context()))
	require.Equal(t, http.StatusOK, probe(t, ready))
	require.NoError(t, node.Stop(context.Background()))
	require.Equal(t, http.StatusServiceUnavailable, probe(t, ready), "not ready once stopping")
	require.Equal(t, http.StatusOK, probe(t, health.Liveness()))
}
