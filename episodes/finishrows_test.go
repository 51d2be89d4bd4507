package episodes_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// A finish group names each claim and each episode once: the statements
// pair rows with claims and episodes by key and id, so a repeated one is
// refused before anything is sent.
func TestFinishRowsRefusesAClaimOrEpisodeNamedTwice(t *testing.T) {
	item := func(id int64, key string, fence int64) episodes.FinishItem {
		return episodes.FinishItem{ID: id, Token: claims.Token{Key: key, Owner: "node-a", Fence: fence},
			Finish: episodes.Finish{Status: episodes.StatusDone}}
	}
	raw, err := episodes.FinishRows("node-a", []episodes.FinishItem{item(1, "k1", 1), item(2, "k2", 3)})
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(raw, &rows))
	require.Len(t, rows, 2)
	require.EqualValues(t, 3, rows[1]["fence"])

	_, err = episodes.FinishRows("node-a", []episodes.FinishItem{item(1, "k1", 1), item(2, "k1", 2)})
	require.ErrorContains(t, err, `claim "k1" twice`)
	_, err = episodes.FinishRows("node-a", []episodes.FinishItem{item(1, "k1", 1), item(1, "k2", 2)})
	require.ErrorContains(t, err, "episode 1")
	_, err = episodes.FinishRows("node-a", []episodes.FinishItem{item(1, "k1", 1), {ID: 2, Token: claims.Token{Key: "k2", Owner: "node-b", Fence: 1}}})
	require.ErrorContains(t, err, "not on the sending node")
}
