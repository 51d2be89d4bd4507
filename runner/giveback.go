package runner

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/claims"
)

// giveBack releases, fenced, the grant of j's run once the run has stopped
// because its lease passed its local deadline: no renewal landed in time
// (the database, or this host, was too slow), so the database may not have
// handed the grant to anyone yet (claims.ErrLeaseExpired in err or in the
// cause of j's lease context, or the deadline passed before the heartbeat
// noticed). Given back, the episode is recovery's at once instead of after
// the lease, and its run is not counted as an attempt (recovery/doc.go):
// the host was slow, the episode did nothing wrong. A grant taken over or
// finished elsewhere is not released: it is not this run's any more, and
// the fence would refuse it anyway.
func (n *Node) giveBack(j *job, err error) {
	if j.claim.Passthrough {
		return
	}
	expired := errors.Is(err, claims.ErrLeaseExpired)
	if cause := context.Cause(j.ctx); j.ctx.Err() != nil {
		expired = expired || errors.Is(cause, claims.ErrLeaseExpired)
	} else if _, held := n.hb.Remaining(j.claim); !held {
		expired = true // past its deadline, which the heartbeat has yet to act on
	}
	if expired {
		_ = n.release(j) // logged
	}
}
