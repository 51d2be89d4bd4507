package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A subtest named with a '/' is a unit by its first element, whether or
// not the output prints that element as a test of its own.
func TestSubtestsAreTheirFirstNameElement(t *testing.T) {
	out := `=== RUN   TestX
=== RUN   TestX/plain
=== RUN   TestX/an_ended_grant/released
=== RUN   TestX/an_ended_grant/failed
=== RUN   TestX/Nested
=== RUN   TestX/Nested/inner
=== RUN   TestY/other`
	require.Equal(t, []string{"plain", "an_ended_grant", "Nested"}, subtestsOf(out, "TestX"))
}
