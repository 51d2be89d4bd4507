package postgres_test

import (
	"testing"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/pgtest"
)

func TestConformanceWorkflows(t *testing.T) {
	t.Parallel()
	conformance.RunWorkflows(t, func(t *testing.T) conformance.WorkflowsBackend {
		pool := pgtest.Schema(t)
		return conformance.WorkflowsBackend{
			Store: postgres.New(pool),
			SetEpisodeStatus: func(t testing.TB, id int64, status episodes.Status) {
				pgtest.Exec(t, pool, `UPDATE leasehold_episodes SET status = $2 WHERE id = $1`, id, string(status))
			},
		}
	})
}
