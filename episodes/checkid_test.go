package episodes_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/episodes"
)

func TestCheckID(t *testing.T) {
	for _, ok := range []string{"a", "resource_monitor", "é", strings.Repeat("x", 255), "a.b-c/d e"} {
		require.NoError(t, episodes.CheckID("actor", ok), ok)
	}
	for id, want := range map[string]string{
		"":                       "actor has no ID",
		"a:b":                    "contains ':'",
		"a\x00b":                 "contains NUL",
		"\x00":                   "contains NUL",
		"a\xffb":                 "not valid text",
		strings.Repeat("x", 256): "at most 255 characters",
	} {
		err := episodes.CheckID("actor", id)
		require.Error(t, err, "%q", id)
		require.ErrorContains(t, err, want, "%q", id)
		require.True(t, strings.HasPrefix(err.Error(), "actor "), err.Error())
	}
}
