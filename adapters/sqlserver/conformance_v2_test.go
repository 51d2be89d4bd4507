package sqlserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlserver"
	"github.com/leasehold/leasehold/conformance"
)

func utcWall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// TestConformanceDeferred runs the available-work suite, with
// READ_COMMITTED_SNAPSHOT off and on: READPAST and the UPDLOCK reads are
// where that setting matters.
func TestConformanceDeferred(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	for _, rcsi := range []bool{false, true} {
		t.Run(fmt.Sprintf("RCSI=%v", rcsi), func(t *testing.T) {
			t.Parallel()
			conformance.RunDeferred(t, func(t *testing.T) conformance.DeferredBackend {
				db := freshDatabase(t, admin, dsn, rcsi)
				store, err := sqlserver.New(db)
				require.NoError(t, err)
				exec := func(t testing.TB, stmt string, args ...any) {
					t.Helper()
					_, err := db.ExecContext(context.Background(), stmt, args...)
					require.NoError(t, err)
				}
				return conformance.DeferredBackend{
					Store:        store,
					AgeAvailable: func(t testing.TB, id int64, d time.Duration) { ageAvailable(t, db, id, d) },
					Age:          func(t testing.TB, id int64, d time.Duration) { ageEpisode(t, db, id, d) },
					ExpireClaim:  func(t testing.TB, key string) { expireClaim(t, db, key) },
					Archive: func(t testing.TB, id int64) {
						exec(t, `UPDATE leasehold_episodes SET archived_at = SYSUTCDATETIME() WHERE id = @id`, sql.Named("id", id))
					},
					DropClaim: func(t testing.TB, key string) {
						exec(t, `DELETE FROM leasehold_work_claims WHERE dedupe_key = @key`, sql.Named("key", key))
					},
				}
			})
		})
	}
}

// TestConformanceFindings runs the findings suite, RCSI off and on.
func TestConformanceFindings(t *testing.T) {
	admin, dsn := mssqlAdmin(t)
	t.Parallel()
	for _, rcsi := range []bool{false, true} {
		t.Run(fmt.Sprintf("RCSI=%v", rcsi), func(t *testing.T) {
			t.Parallel()
			conformance.RunFindings(t, func(t *testing.T) conformance.FindingsBackend {
				db := freshDatabase(t, admin, dsn, rcsi)
				store, err := sqlserver.New(db)
				require.NoError(t, err)
				return conformance.FindingsBackend{
					Store:       store,
					ExpireClaim: func(t testing.TB, key string) { expireClaim(t, db, key) },
					Rows: func(t testing.TB, env, key string) []conformance.FindingRow {
						t.Helper()
						rows, err := db.QueryContext(context.Background(), `
SELECT id, status, class, severity, summary, data, raise_count, raised_by_episode,
       updated_by_episode, COALESCE(cleared_by_episode, 0), updated_at, cleared_at
FROM leasehold_findings WHERE env = @env AND finding_key = @key ORDER BY id`,
							sql.Named("env", env), sql.Named("key", key))
						require.NoError(t, err)
						defer rows.Close()
						var out []conformance.FindingRow
						for rows.Next() {
							var (
								r       conformance.FindingRow
								data    sql.NullString
								updated time.Time
								cleared sql.NullTime
							)
							require.NoError(t, rows.Scan(&r.ID, &r.Status, &r.Class, &r.Severity, &r.Summary, &data,
								&r.RaiseCount, &r.RaisedByEpisode, &r.UpdatedByEpisode, &r.ClearedByEpisode, &updated, &cleared))
							if data.Valid {
								r.Data = []byte(data.String)
							}
							r.UpdatedAt = utcWall(updated)
							if cleared.Valid {
								c := utcWall(cleared.Time)
								r.ClearedAt = &c
							}
							out = append(out, r)
						}
						require.NoError(t, rows.Err())
						return out
					},
				}
			})
		})
	}
}
