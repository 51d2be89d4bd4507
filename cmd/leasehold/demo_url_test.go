package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// The demo picks its server as the tests do (internal/pgtest.URL), so
// `make demo` uses the server scripts/with-postgres.sh exported as
// TEST_DATABASE_URL even when the developer's own DATABASE_URL is set.
func TestDemoURLPrecedence(t *testing.T) {
	const (
		harness = "postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"
		own     = "postgres://app@db.example.com:5432/app"
	)
	for _, tc := range []struct {
		name           string
		test, database string
		want, from     string
	}{
		{"both set: the harness's server", harness, own, harness, "TEST_DATABASE_URL"},
		{"only TEST_DATABASE_URL", harness, "", harness, "TEST_DATABASE_URL"},
		{"only DATABASE_URL", "", own, own, "DATABASE_URL"},
		{"neither", "", "", fallbackURL, "the default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TEST_DATABASE_URL", tc.test)
			t.Setenv("DATABASE_URL", tc.database)
			got, from := defaultURLFrom()
			require.Equal(t, got, defaultURL())
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.from, from)
			require.Equal(t, pgtest.URL(), got, "the demo and the tests must choose the same server")
		})
	}
}
