package memory_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims/memory"
	"github.com/leasehold/leasehold/conformance"
)

func TestConformanceClaims(t *testing.T) {
	t.Parallel()
	conformance.RunClaims(t, func(t *testing.T) conformance.ClaimsBackend {
		s := memory.New()
		return conformance.ClaimsBackend{
			Store:  s,
			Expire: func(_ testing.TB, key string) { s.Expire(key) },
			Row: func(t testing.TB, key string) (conformance.ClaimRow, bool) {
				r, ok := s.Row(key)
				if !ok {
					return conformance.ClaimRow{}, false
				}
				row := conformance.ClaimRow{Key: r.Key, State: r.State, Owner: r.Owner, Attempt: r.Attempt,
					Fence: r.Fence, LeaseUntil: r.LeaseUntil, Finished: r.FinishedAt != nil}
				if r.ErrorDetail != nil {
					require.NoError(t, json.Unmarshal(r.ErrorDetail, &row.ErrorDetail))
				}
				return row, true
			},
			Count: func(testing.TB) int { return s.Len() },
		}
	})
}
