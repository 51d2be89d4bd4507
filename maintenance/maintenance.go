package maintenance

import (
	"context"
	"time"
)

// Plan is what one maintenance run does; see Config for defaults and
// limits. Every duration is subtracted from the database clock inside the
// statement it bounds.
type Plan struct {
	// Retention: terminal episodes that finished longer ago are archived
	// (their dedupe keys freed), and archived episodes' journals deleted.
	Retention time.Duration
	// ClaimHorizon: finished claim rows (done, failed, released) whose
	// lease ended longer ago are deleted. Far beyond any lease, so no
	// zombie of the old grant can be writing when its fence is forgotten.
	ClaimHorizon time.Duration
	// RequestTTL: available episodes (deferred, delayed, retried,
	// recovered work no node took) due longer ago than this expire, every
	// env: they end canceled, class trigger_expired. Zero: nothing
	// expires (the step is skipped).
	RequestTTL time.Duration
	// NodeStaleAfter: membership rows not heartbeated for this long are
	// deleted.
	NodeStaleAfter time.Duration
	// Batch bounds the rows ArchiveEpisodes, PurgeArchivedSteps,
	// MarkJournalsPurged and DeleteSpentClaims each touch in one run.
	// ExpireAvailable (shared with the pollers), DeleteStaleNodes and
	// the waiting-for-node findings are not bounded: their backlogs are
	// small by nature.
	Batch int
	// WaitingForNodeAfter: work no live node can run that has been due
	// for longer raises a waiting-for-node finding (see Config). Zero:
	// any such work does.
	WaitingForNodeAfter time.Duration
}

// Result is what one run did.
type Result struct {
	// Ran is false when another node held the maintenance lock: this run
	// did nothing and the counts are zero.
	Ran             bool
	Archived        int64 // episodes archived
	StepsPurged     int64 // journal rows deleted
	JournalsMarked  int64 // archived episodes whose journal is now empty
	EpisodesExpired int64 // available episodes expired (RequestTTL): canceled, class trigger_expired
	ClaimsDeleted   int64 // spent claim rows deleted
	NodesDeleted    int64 // stale membership rows deleted
	WaitingRaised   int64 // waiting-for-node findings raised or refreshed
	WaitingCleared  int64 // waiting-for-node findings cleared
}

// Store is what maintenance needs from a dialect adapter: one run, in one
// transaction that first takes the per-database maintenance lock without
// waiting (pg_try_advisory_xact_lock / sp_getapplock with
// @LockOwner='Transaction', @LockTimeout=0).
//
// Maintain rejects a Plan that fails Plan.Validate. When the lock is held
// elsewhere it rolls back and returns Result{} (Ran false) and no error.
// Otherwise it runs ArchiveEpisodes, PurgeArchivedSteps, MarkJournalsPurged,
// ExpireAvailable (every env), DeleteSpentClaims, DeleteStaleNodes,
// then the waiting-for-node findings (ListWaitingForNode with
// membership.DefaultSilentAfter and WaitingForNodeAfter;
// RaiseWaitingForNodeFinding for each overdue pair, WaitingFindings' rows;
// ClearWaitingForNodeFindings), in that order, and commits; on error
// nothing is committed. The scenarios of conformance.RunMaintenance and
// conformance.RunWaitingForNode check all of this.
type Store interface {
	Maintain(ctx context.Context, p Plan) (Result, error)
}
