package sqlite_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/sqlite"
	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/sqlitetest"
)

// claimsBackend is the conformance suite's claims backend over db.
func claimsBackend(db *sql.DB) conformance.ClaimsBackend {
	return conformance.ClaimsBackend{
		Store:  sqlite.New(db),
		Expire: func(t testing.TB, key string) { sqlitetest.ExpireClaim(t, db, key) },
		Row: func(t testing.TB, key string) (conformance.ClaimRow, bool) {
			t.Helper()
			var (
				r      conformance.ClaimRow
				state  string
				until  int64
				fin    *int64
				detail *string
			)
			err := db.QueryRow(`SELECT dedupe_key, state, owner_node, attempt, fence,
				lease_until, finished_at, error_detail FROM leasehold_work_claims WHERE dedupe_key = ?`, key).
				Scan(&r.Key, &state, &r.Owner, &r.Attempt, &r.Fence, &until, &fin, &detail)
			if errors.Is(err, sql.ErrNoRows) {
				return r, false
			}
			require.NoError(t, err)
			r.State, r.Finished, r.LeaseUntil = claims.State(state), fin != nil, sqlitetest.Time(until)
			if detail != nil {
				require.NoError(t, json.Unmarshal([]byte(*detail), &r.ErrorDetail))
			}
			return r, true
		},
		Count: func(t testing.TB) int {
			var n int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM leasehold_work_claims`).Scan(&n))
			return n
		},
	}
}

func TestConformanceClaims(t *testing.T) {
	t.Parallel()
	conformance.RunClaims(t, func(t *testing.T) conformance.ClaimsBackend {
		return claimsBackend(sqlitetest.DB(t))
	})
}
