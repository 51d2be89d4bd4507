package runner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/episodes"
)

// Cancel cancels episode episodeID wherever it is in the cluster, through
// the database (CancelEpisode): an episode nobody holds a live lease on
// (available, waiting for its delay or backoff, or orphaned) ends canceled
// at once; one that runs, or waits in a node's slot queue, is asked to
// stop, and its holder (this node or another) cancels the run's context
// within one heartbeat interval and ends it canceled with its own fenced
// finish. The result says which happened. episodes.ErrNotFound when there
// is no such episode, episodes.ErrNotLive when it is terminal or archived.
//
// When this node holds the episode the run is cancelled at once, without
// waiting for the next read of the cancel requests.
func (n *Node) Cancel(ctx context.Context, episodeID int64) (episodes.Canceled, error) {
	var res episodes.Canceled
	detail := mustJSON(map[string]string{"reason": "canceled", "by": n.id})
	err := n.retryingUntil(ctx, func(wctx context.Context) (err error) {
		res, err = n.store.CancelEpisode(wctx, episodeID, detail)
		return err
	})
	if err != nil {
		return episodes.Canceled{}, fmt.Errorf("runner: cancel episode %d: %w", episodeID, err)
	}
	if !res.Ended {
		n.cancelLocal(episodeID, 0)
	}
	return res, nil
}

// Retry runs a failed or canceled episode again, through the database
// (RequeueEpisode): it becomes available as its next attempt, due at once,
// and whichever full node has a free slot for its actor runs it (this
// node's poller is woken). episodes.ErrNotFound when there is no such
// episode, episodes.ErrNotRetryable when it is not failed or canceled, or
// is archived.
func (n *Node) Retry(ctx context.Context, episodeID int64) (episodes.Retried, error) {
	var res episodes.Retried
	err := n.retryingUntil(ctx, func(wctx context.Context) (err error) {
		res, err = n.store.RequeueEpisode(wctx, episodeID, n.id)
		return err
	})
	if err != nil {
		return episodes.Retried{}, fmt.Errorf("runner: retry episode %d: %w", episodeID, err)
	}
	n.pollWake()
	return res, nil
}

// watchCancels reads, once per heartbeat interval while this node holds
// episodes, which of them have a cancel request (ListCancelRequests), and
// cancels those runs: a cancel asked on any node reaches the holder within
// one interval.
func (n *Node) watchCancels(ctx context.Context) {
	t := time.NewTicker(n.hb.Interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.jobs.Load() == 0 {
			continue
		}
		var reqs []episodes.CancelRequest
		err := n.retryingUntil(ctx, func(wctx context.Context) (err error) {
			reqs, err = n.store.ListCancelRequests(wctx, n.id)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				n.log.WarnContext(ctx, "leasehold: reading cancel requests failed; next interval", slog.Any("error", err))
			}
			continue
		}
		for _, r := range reqs {
			n.cancelLocal(r.EpisodeID, r.Fence)
		}
	}
}

// cancelLocal cancels this node's run of episodeID under fence (any fence
// when 0) with cause ErrCanceled, so it ends canceled by its fenced
// FinishEpisode; a job still waiting for a slot is taken out of the queue
// and finished canceled at once.
func (n *Node) cancelLocal(episodeID, fence int64) {
	n.mu.Lock()
	for j, cancel := range n.running {
		if j.ep.ID == episodeID && (fence == 0 || j.claim.Fence == fence) {
			cancel(ErrCanceled)
		}
	}
	n.mu.Unlock()
	for _, as := range n.actors {
		j := as.exec.remove(episodeID, fence)
		if j == nil {
			continue
		}
		n.runs.Go(func() {
			defer n.jobs.Add(-1)
			defer j.unhold()
			n.finish(context.Background(), j, canceled())
		})
	}
}

func canceled() episodes.Finish {
	return episodes.Finish{Status: episodes.StatusCanceled, ErrorClass: episodes.ClassCanceled,
		ErrorDetail: mustJSON(map[string]string{"reason": "canceled"})}
}
