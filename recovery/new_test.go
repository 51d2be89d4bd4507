package recovery_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/recovery"
)

func TestNewRefusesMissingDependencies(t *testing.T) {
	t.Parallel()
	_, err := recovery.New(nil, nil, nil, nil)
	require.ErrorIs(t, err, recovery.ErrInvalid)
	_, err = recovery.New(postgres.New(nil), nil, nil, nil)
	require.ErrorIs(t, err, recovery.ErrInvalid)
	require.ErrorContains(t, err, "store and node are required")
}

func TestBadSweepOptionsAreErrInvalid(t *testing.T) {
	t.Parallel()
	_, err := recovery.NewSweeper(nil, recovery.SweeperConfig{})
	require.ErrorIs(t, err, recovery.ErrInvalid)
}
