package episodes_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/episodes"
)

// TestRequeueEach: every item is requeued once, its outcome at its index,
// and never more than atOnce at a time; atOnce 4 does run several at once.
func TestRequeueEach(t *testing.T) {
	t.Parallel()
	for _, atOnce := range []int{0, 1, 4} {
		items := make([]episodes.RequeueItem, 12)
		for i := range items {
			items[i] = episodes.RequeueItem{ID: int64(i + 1), Attempts: int32(i)}
		}
		var now, most atomic.Int32
		var mu sync.Mutex
		seen := map[int64]int{}
		release := make(chan struct{})
		go func() {
			for now.Load() < int32(max(1, atOnce)) {
			}
			close(release)
		}()
		busy := errors.New("busy")
		got := episodes.RequeueEach(items, atOnce, func(it episodes.RequeueItem) (episodes.Requeued, error) {
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			now.Add(-1)
			mu.Lock()
			seen[it.ID]++
			mu.Unlock()
			if it.ID%3 == 0 {
				return episodes.Requeued{}, busy
			}
			return episodes.Requeued{Attempts: it.Attempts + 1}, nil
		})
		require.Len(t, got, len(items))
		for i, r := range got {
			require.Equal(t, 1, seen[items[i].ID], "atOnce %d: item %d requeued once", atOnce, i)
			if items[i].ID%3 == 0 {
				require.ErrorIs(t, r.Err, busy)
			} else {
				require.NoError(t, r.Err)
				require.Equal(t, items[i].Attempts+1, r.Attempts, "atOnce %d: outcome %d at its index", atOnce, i)
			}
		}
		require.EqualValues(t, max(1, atOnce), most.Load(), "atOnce %d: at most, and up to, that many at once", atOnce)
	}
}
