package sqlite_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

func TestConformanceFindings(t *testing.T) {
	t.Parallel()
	conformance.RunFindings(t, func(t *testing.T) conformance.FindingsBackend {
		db := sqlitetest.DB(t)
		return conformance.FindingsBackend{
			Store:       sqlite.New(db),
			ExpireClaim: func(t testing.TB, key string) { sqlitetest.ExpireClaim(t, db, key) },
			Rows: func(t testing.TB, env, key string) []conformance.FindingRow {
				t.Helper()
				rows, err := db.Query(`SELECT id, status, class, severity, summary, data,
					raise_count, raised_by_episode, updated_by_episode, coalesce(cleared_by_episode, 0),
					updated_at, cleared_at
					FROM leasehold_findings WHERE env = ? AND finding_key = ? ORDER BY id`, env, key)
				require.NoError(t, err)
				defer func() { _ = rows.Close() }()
				out := []conformance.FindingRow{}
				for rows.Next() {
					var (
						r         conformance.FindingRow
						data      *string
						updatedAt int64
						clearedAt *int64
					)
					require.NoError(t, rows.Scan(&r.ID, &r.Status, &r.Class, &r.Severity, &r.Summary, &data,
						&r.RaiseCount, &r.RaisedByEpisode, &r.UpdatedByEpisode, &r.ClearedByEpisode,
						&updatedAt, &clearedAt))
					if data != nil {
						r.Data = []byte(*data)
					}
					r.UpdatedAt = sqlitetest.Time(updatedAt)
					if clearedAt != nil {
						c := sqlitetest.Time(*clearedAt)
						r.ClearedAt = &c
					}
					out = append(out, r)
				}
				require.NoError(t, rows.Err())
				return out
			},
		}
	})
}
