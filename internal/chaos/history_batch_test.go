//go:build unix

package chaos_test

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/internal/claimhistory"
)

// batchDispatcher is the batch hand-over the runner's poller uses when the
// adapter has it (DispatchTriggerRequests).
type batchDispatcher interface {
	DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error)
}

// DispatchTriggerRequests grants each request's episode's claim: one
// acquire per request, all invoked before the one statement is sent and
// returned after its answer, each resolved as DispatchTriggerRequest's is
// (a request missing from the answer lapsed: refused). An adapter without
// the batch hand-over gets one recorded DispatchTriggerRequest per request.
func (s recordingStore) DispatchTriggerRequests(ctx context.Context, owner string, reqs []episodes.TriggerRequest, lease time.Duration) ([]episodes.Dispatched, error) {
	bd, ok := s.nodeStore.(batchDispatcher)
	if !ok {
		var out []episodes.Dispatched
		for _, r := range reqs {
			d, err := s.DispatchTriggerRequest(ctx, r, lease)
			switch {
			case err == nil:
				out = append(out, d)
			case !errors.Is(err, claims.ErrLeaseLost):
				return out, err
			}
		}
		return out, nil
	}
	calls := make([]*claimhistory.Call, len(reqs))
	for i, r := range reqs {
		calls[i] = s.rec.Call(claimhistory.Op{Kind: claimhistory.KindAcquire, Source: "DispatchTriggerRequests", Episode: r.EpisodeID, Owner: owner, Lease: lease})
	}
	ds, err := bd.DispatchTriggerRequests(ctx, owner, reqs, lease)
	byRequest := make(map[int64]episodes.Dispatched, len(ds))
	for _, d := range ds {
		byRequest[d.RequestID] = d
	}
	for i, r := range reqs {
		d, answered := byRequest[r.ID]
		switch {
		case err != nil:
			calls[i].ReturnGrant(claims.Claim{}, err)
		case !answered:
			calls[i].Return(claimhistory.Response{Outcome: claimhistory.Refused, Err: claims.ErrLeaseLost})
		default:
			calls[i].ReturnGrant(d.Claim, nil)
		}
	}
	return ds, err
}
