package sqlite_test

import (
	"testing"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

func TestConformanceWorkflows(t *testing.T) {
	t.Parallel()
	conformance.RunWorkflows(t, func(t *testing.T) conformance.WorkflowsBackend {
		db := sqlitetest.DB(t)
		return conformance.WorkflowsBackend{
			Store: sqlite.New(db),
			SetEpisodeStatus: func(t testing.TB, id int64, status episodes.Status) {
				sqlitetest.Exec(t, db, `UPDATE leasehold_episodes SET status = ?2 WHERE id = ?1`, id, string(status))
			},
		}
	})
}
