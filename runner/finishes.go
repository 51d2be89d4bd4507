package runner

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
)

// DefaultFinishBatch bounds how many runs' terminal writes one grouped
// FinishEpisodes statement carries.
const DefaultFinishBatch = 64

// finishGroup sends the terminal writes of this node's runs in groups: a
// run's finish joins the queue; when no group is in flight, one is started
// at once with everything queued (at most Config.FinishBatch rows), and
// finishes that arrive while it is in flight wait for the next. The window
// is therefore the previous group's round trip, never a timer: a lone
// finish goes out at once, and under load a commit carries many. Each row
// is fenced on its own grant (FinishEpisodes); a run whose row did not
// match lost its lease. Completion is reported only after the commit.
// When a full group waits behind the one in flight, another sender starts,
// up to finishSenders groups in flight (their rows are disjoint runs).
type finishGroup struct {
	mu      sync.Mutex
	queue   []*finishReq
	senders int
}

// finishSenders bounds the groups in flight at once.
const finishSenders = 4

type finishReq struct {
	j    *job
	f    episodes.Finish
	done chan error // buffered 1
}

// groupFinish writes f for j through the group and returns its outcome:
// nil (finished), claims.ErrLeaseLost, or the error of its own statement
// when the group's failed and its write was sent again alone.
func (n *Node) groupFinish(j *job, f episodes.Finish) error {
	req := &finishReq{j: j, f: f, done: make(chan error, 1)}
	g := &n.finishes
	g.mu.Lock()
	g.queue = append(g.queue, req)
	if g.senders == 0 || (len(g.queue) >= n.cfg.FinishBatch && g.senders < finishSenders) {
		g.senders++
		n.runs.Go(n.sendFinishes) // counted with the runs: Drain waits for it
	}
	g.mu.Unlock()
	return <-req.done
}

// sendFinishes sends queued finishes, a group at a time, until none is
// queued.
func (n *Node) sendFinishes() {
	g := &n.finishes
	for {
		g.mu.Lock()
		k := min(len(g.queue), n.cfg.FinishBatch)
		if k == 0 {
			g.senders--
			g.mu.Unlock()
			return
		}
		batch := slices.Clone(g.queue[:k])
		g.queue = slices.Delete(g.queue, 0, k)
		g.mu.Unlock()
		n.sendGroup(batch)
	}
}

// sendGroup runs one FinishEpisodes for batch. If the statement fails
// (whatever the error: the group's outcome is unknown row by row only when
// it did not commit, and a failed statement did not), each run's finish is
// sent again on its own, with the single write's retries and bounds.
func (n *Node) sendGroup(batch []*finishReq) {
	if len(batch) == 1 {
		n.finishAlone(batch[0])
		return
	}
	items := make([]episodes.FinishItem, len(batch))
	for i, r := range batch {
		items[i] = episodes.FinishItem{ID: r.j.ep.ID, Token: r.j.claim.Token, Finish: r.f}
	}
	// The group's retries are bounded like its most pressed run's: by the
	// least remaining local lease time among them.
	bound := batch[0].j
	least, _ := n.hb.Remaining(bound.claim)
	for _, r := range batch[1:] {
		if left, _ := n.hb.Remaining(r.j.claim); left < least {
			bound, least = r.j, left
		}
	}
	var finished []int64
	err := n.retrying(bound, func(ctx context.Context) (err error) {
		finished, err = n.store.FinishEpisodes(ctx, n.id, items)
		return err
	})
	if err != nil {
		n.log.Warn("leasehold: grouped finish failed; sending each on its own", "runs", len(batch), "error", err)
		for _, r := range batch {
			n.finishAlone(r)
		}
		return
	}
	for _, r := range batch {
		if slices.Contains(finished, r.j.ep.ID) {
			r.done <- nil
		} else {
			r.done <- fmt.Errorf("episode %d: its row of a grouped finish matched nothing: %w", r.j.ep.ID, claims.ErrLeaseLost)
		}
	}
}

// finishAlone sends r's finish on its own (FinishEpisode), with the single
// write's retries and bounds.
func (n *Node) finishAlone(r *finishReq) {
	r.done <- n.retrying(r.j, func(ctx context.Context) error {
		return n.store.FinishEpisode(ctx, r.j.ep.ID, r.j.claim.Token, r.f)
	})
}
