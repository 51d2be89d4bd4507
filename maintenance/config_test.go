package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/maintenance"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	r, err := maintenance.NewRunner(&fakeStore{}, maintenance.Config{}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, maintenance.Config{
		Retention:      7 * 24 * time.Hour,
		ClaimHorizon:   30 * 24 * time.Hour,
		NodeStaleAfter: 24 * time.Hour,
		Batch:          1000,
		Interval:       10 * time.Minute,
		Lease:          claims.DefaultLease,

		WaitingForNodeAfter: time.Hour,
	}, r.Config())
	require.Equal(t, maintenance.DefaultConfig(), r.Config())
	require.Equal(t, maintenance.Plan{
		Retention: 7 * 24 * time.Hour, ClaimHorizon: 30 * 24 * time.Hour,
		NodeStaleAfter: 24 * time.Hour, Batch: 1000, WaitingForNodeAfter: time.Hour,
	}, r.Plan())

	// Set fields are kept; only zero ones default.
	r, err = maintenance.NewRunner(&fakeStore{}, maintenance.Config{Retention: time.Hour, Batch: 7}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, time.Hour, r.Plan().Retention)
	require.Equal(t, 7, r.Plan().Batch)
	require.Equal(t, 30*24*time.Hour, r.Plan().ClaimHorizon)
	require.Zero(t, r.Plan().RequestTTL, "deferred work never expires unless a TTL is set")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name string
		cfg  maintenance.Config
		err  string // "" when valid
	}{
		{"defaults", maintenance.Config{}, ""},
		{"negative retention", maintenance.Config{Retention: -time.Second}, "Retention -1s is negative"},
		{"negative horizon", maintenance.Config{ClaimHorizon: -time.Second}, "ClaimHorizon -1s is negative"},
		{"negative request ttl", maintenance.Config{RequestTTL: -time.Second}, "RequestTTL -1s is negative"},
		{"negative node stale after", maintenance.Config{NodeStaleAfter: -time.Second}, "NodeStaleAfter -1s is negative"},
		{"negative interval", maintenance.Config{Interval: -time.Second}, "Interval -1s is negative"},
		{"negative lease", maintenance.Config{Lease: -time.Second}, "Lease -1s is negative"},
		{"negative waiting for node", maintenance.Config{WaitingForNodeAfter: -time.Second}, "WaitingForNodeAfter -1s is negative"},
		{"waiting for node a minute", maintenance.Config{WaitingForNodeAfter: time.Minute}, ""},
		{"negative batch", maintenance.Config{Batch: -1}, "Batch -1 is outside 1..100000"},
		{"batch at most", maintenance.Config{Batch: maintenance.MaxBatch}, ""},
		{"batch over", maintenance.Config{Batch: maintenance.MaxBatch + 1}, "Batch 100001 is outside 1..100000"},
		{"batch of one", maintenance.Config{Batch: 1}, ""},
		{"horizon a day", maintenance.Config{ClaimHorizon: day}, ""},
		{"horizon under a day", maintenance.Config{ClaimHorizon: day - time.Second}, "ClaimHorizon 23h59m59s is under 24h0m0s"},
		{"horizon exactly 100 leases", maintenance.Config{ClaimHorizon: 50 * day, Lease: 12 * time.Hour}, ""},
		{"horizon under 100 leases", maintenance.Config{ClaimHorizon: 50*day - time.Second, Lease: 12 * time.Hour},
			"under 100 x Lease 12h0m0s"},
		{"default horizon, long lease", maintenance.Config{Lease: 8 * time.Hour}, "ClaimHorizon 720h0m0s is under 100 x Lease 8h0m0s"},
		{"node rows outlive a lease", maintenance.Config{NodeStaleAfter: time.Minute}, "NodeStaleAfter 1m0s is under Lease 2m0s"},
		{"tiny but valid", maintenance.Config{Retention: time.Millisecond, RequestTTL: time.Millisecond,
			Interval: time.Millisecond, NodeStaleAfter: time.Second, Lease: time.Second}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			_, nerr := maintenance.NewRunner(&fakeStore{}, tc.cfg, nil, nil)
			if tc.err == "" {
				require.NoError(t, err)
				require.NoError(t, nerr)
				return
			}
			require.ErrorIs(t, err, maintenance.ErrInvalid)
			require.ErrorContains(t, err, tc.err)
			require.ErrorIs(t, nerr, maintenance.ErrInvalid)
			require.ErrorContains(t, nerr, "maintenance.NewRunner")
		})
	}
}

func TestNewRunnerNeedsAStore(t *testing.T) {
	t.Parallel()
	_, err := maintenance.NewRunner(nil, maintenance.Config{}, nil, nil)
	require.ErrorIs(t, err, maintenance.ErrInvalid)
}

func TestPlanValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, maintenance.DefaultConfig().Plan().Validate())
	require.NoError(t, maintenance.Plan{Batch: 1}.Validate(), "zero cut-offs are a Store's to run")
	for _, p := range []maintenance.Plan{
		{},
		{Batch: maintenance.MaxBatch + 1},
		{Batch: 1, Retention: -1},
		{Batch: 1, ClaimHorizon: -1},
		{Batch: 1, RequestTTL: -1},
		{Batch: 1, NodeStaleAfter: -1},
		{Batch: 1, WaitingForNodeAfter: -1},
	} {
		require.ErrorIs(t, p.Validate(), maintenance.ErrInvalid, "%+v", p)
	}
}
