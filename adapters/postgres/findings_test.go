package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/pgtest"
)

func TestConformanceFindings(t *testing.T) {
	t.Parallel()
	conformance.RunFindings(t, func(t *testing.T) conformance.FindingsBackend {
		pool := pgtest.Schema(t)
		return conformance.FindingsBackend{
			Store:       postgres.New(pool),
			ExpireClaim: func(t testing.TB, key string) { pgtest.ExpireClaim(t, pool, key) },
			Rows: func(t testing.TB, env, key string) []conformance.FindingRow {
				t.Helper()
				rows, err := pool.Query(context.Background(), `SELECT id, status, class, severity, summary, data,
					raise_count, raised_by_episode, updated_by_episode, coalesce(cleared_by_episode, 0),
					updated_at, cleared_at
					FROM leasehold_findings WHERE env = $1 AND finding_key = $2 ORDER BY id`, env, key)
				require.NoError(t, err)
				defer rows.Close()
				out := []conformance.FindingRow{}
				for rows.Next() {
					var r conformance.FindingRow
					require.NoError(t, rows.Scan(&r.ID, &r.Status, &r.Class, &r.Severity, &r.Summary, &r.Data,
						&r.RaiseCount, &r.RaisedByEpisode, &r.UpdatedByEpisode, &r.ClearedByEpisode,
						&r.UpdatedAt, &r.ClearedAt))
					out = append(out, r)
				}
				require.NoError(t, rows.Err())
				return out
			},
		}
	})
}
