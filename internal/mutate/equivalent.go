package main

import "strings"

// equivalents lists the generated mutants that survive the tests because
// they cannot change an outcome, each with the reason. A mutant listed here
// is not counted as guarantee-breaking; every other survivor is, and must be
// killed by a test. Keys are generated IDs (<dialect>:<statement>:<op>#<n>),
// which count a statement's mutants in order and so move when the statement
// changes: each entry also holds the mutant's description (what), and a run
// refuses an entry whose ID now names another mutant or none, so a reason
// written for one mutant can never excuse another.
// archivedIsTerminal is why a removed "archived_at IS NULL" beside a status
// condition on queued or running episodes cannot change an outcome
// (conformance RequeueRefusesAnArchivedEpisode holds the premise).
const archivedIsTerminal = "archived_at IS NULL is implied by the status condition in the same statement " +
	"(status queued or running): only ArchiveEpisodes sets archived_at, and only on terminal episodes, and " +
	"RequeueEpisode, the one way back from a terminal status, refuses archived ones, so an archived episode is " +
	"terminal for good and the statement matches nothing either way"

var equivalents = map[string]equivalent{
	"sqlite:ListKeyVersionLaggards:cmp-strict#1": {
		what: `ListKeyVersionLaggards: ">" -> ">=" in "WHERE n.heartbeat_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  liveNodeAtTheBound,
	},
	"sqlite:SwitchKeyVersion:cmp-strict#2": {
		what: `SwitchKeyVersion: ">" -> ">=" in "WHERE n.heartbeat_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  liveNodeAtTheBound,
	},
	"sqlite:RetryEpisodeClaim:drop#2": {
		what: `RetryEpisodeClaim: predicate removed: "AND fence = CAST(?4 AS INTEGER)"`,
		why: "RetryEpisode's third statement, in the same BEGIN IMMEDIATE transaction, " +
			"re-checks the claim's owner and fence (EXISTS ... c.fence = @fence) and rolls the whole retry back when " +
			"they do not match, so a stale token's release of the live claim never commits",
	},
	"sqlite:ClaimForRecoveryGrant:drop#1": {
		what: `ClaimForRecoveryGrant: predicate removed: "AND e.archived_at IS NULL"`,
		why: "archived_at IS NULL is implied by the status condition beside it in " +
			"the same statement (status IN ('running', 'queued')): only ArchiveEpisodes sets archived_at, and only on " +
			"terminal episodes, and RequeueEpisode, the one way back from a terminal status, refuses archived ones, so " +
			"an archived episode is terminal for good and the grant matches nothing either way",
	},
	"sqlite:ListNodes:drop#1": {
		what: `ListNodes: predicate removed: "AND c.state = 'claimed'"`,
		why: "an operator read (leasehold nodes ls, the dashboard): it counts the leases each node " +
			"holds for display; no grant, finish or recovery decision reads it",
	},
	"postgres:ClaimForRecovery:lock#1": {
		what: `ClaimForRecovery: lock clause removed: "FOR UPDATE OF x"`,
		why: "the claim row's FOR UPDATE orders the locks (claim row, then episode row, " +
			"as FinishEpisode takes them); without it the grant's ON CONFLICT DO UPDATE still waits for that row and " +
			"re-checks its WHERE on the committed version (TestClaimForRecoveryWaitsForTheOwnersFinish passes), so " +
			"only the order changes: a deadlock the database breaks (40P01, retried by the next sweep), never a wrong grant",
	},
	"sqlite:WriteGate:lock#1": {
		what: `WriteGate: a gated statement's own transaction BEGIN IMMEDIATE -> BEGIN (deferred)`,
		why: "SQLite transactions are serializable whatever their BEGIN: a deferred transaction whose " +
			"snapshot is older than the file's last commit cannot take the write lock (SQLITE_BUSY_SNAPSHOT) and fails instead of " +
			"writing on a stale read, so dropping IMMEDIATE can turn a wait into an error, never into a wrong outcome; and the " +
			"adapter's write gate (one queue per process and file, a turn across processes) already serializes its writes, so the " +
			"lock is not contended between them at all (the mutant passes every adapters/sqlite test)",
	},
	"sqlite:BeginTx:lock#1": {
		what: `BeginTx: the DSN's _txlock=immediate -> deferred (transactions take the write lock at their first write)`,
		why: "as sqlite:WriteGate:lock#1: a BeginTx transaction runs under the write gate, and a deferred " +
			"one that would write on a stale snapshot fails SQLITE_BUSY_SNAPSHOT rather than writing",
	},
	"postgres:RequeueOrphan:lock#1": {
		what: `RequeueOrphan: lock clause removed: "FOR UPDATE OF x"`,
		why: "RequeueOrphanLock, sent first in the same implicit transaction, already holds " +
			"the orphan's claim row FOR UPDATE until it ends, so this second lock on the same row changes nothing " +
			"(TestRequeueOrphanSkipsAnOrphanAnotherRequeueHolds, TestRequeueOrphanGivesWayToTheOwnersFinish)",
	},
	"sqlite:CreateEpisode:cmp-neg#3": {
		what: `CreateEpisode: "=" -> "<>" in "CASE WHEN s.status = 'running' THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END"`,
		why: "it swaps which new episodes get a creation-time timestamp (started_at or " +
			"last_step_at, set to the statement's 'now', which SQLite keeps fixed within one statement, as created_at " +
			"is): every decision that reads them reads coalesce(last_step_at, started_at, created_at), which is that " +
			"same instant either way; only what the dashboard shows as started changes",
	},
	"postgres:ArchiveEpisodes:lock#2": {
		what: `ArchiveEpisodes: lock clause removed: "SKIP LOCKED"`,
		why: "SKIP LOCKED only makes maintenance pass over rows a writer holds instead of " +
			"waiting for them; without it maintenance waits and re-checks the archivable condition on the committed row",
	},
	"postgres:FinishEpisodes:cmp-strict#6": {
		what: `FinishEpisodes: "=" -> ">=" in "JOIN claim ON claim.dedupe_key = f.claim_key AND claim.fence = f.fence"`,
		why: "the join already pairs each finish row with its own claim row by key alone: claim returns at most one " +
			"row per key (the claims table's primary key) and episodes.FinishRows refuses a group that names a claim " +
			"or an episode twice before anything is sent (TestFinishRowsRefusesAClaimOrEpisodeNamedTwice), so the " +
			"fence comparison beside it, loosened or not, can only repeat a match the key made",
	},
	"sqlserver:AppendStep:cmp-strict#1": {
		what: `AppendStep: ">" -> ">=" in "WHEN lease_until > DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME())"`,
		why: "the CASE keeps the later of two instants; where they are equal both branches give the same value " +
			"(SYSUTCDATETIME() is evaluated once per statement), so > and >= write the same lease_until",
	},
	"postgres:AcquireClaim:cmp-strict#1": {
		what: `AcquireClaim: "<=" -> "<" in "WHERE c.state <> 'claimed' OR c.lease_until <= now()"`,
		why: "the mutant only refuses a steal at the one instant a lease ends (lease_until = now() to the microsecond) " +
			"and allows it a microsecond later: more conservative, never a second holder (the holder's local deadline is " +
			"before lease_until, and StartEpisode and every fenced write need lease_until > now() or the fence, " +
			"TestStartEpisodeTreatsALeaseEndingNowAsOver)",
	},
	"postgres:StartEpisode:drop#6": {
		what: `StartEpisode: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:CancelEpisode:drop#2": {
		what: `CancelEpisode: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:CancelEpisode:drop#4": {
		what: `CancelEpisode: predicate removed: "AND c.lease_until <= now()"`,
		why: "the fencing UPDATE also requires NOT target.held and c.state = 'claimed'; held is the same locked " +
			"row's (state = 'claimed' AND lease_until > now()), read by the same statement at the same now(), so a " +
			"claimed row that is not held has lease_until <= now() already (TestCancelDecidesOnTheClaimsStateAndTheDatabaseClock " +
			"holds the boundary)",
	},
	"postgres:ListOrphanedEpisodes:drop#1": {
		what: `ListOrphanedEpisodes: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:RequeueOrphan:drop#2": {
		what: `RequeueOrphan: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:ClaimForRecovery:drop#1": {
		what: `ClaimForRecovery: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:ClaimForRecovery:cmp-strict#1": {
		what: `ClaimForRecovery: "=" -> ">=" in "OR (e.status = 'running'"`,
		why: "the orphan CTE already requires status IN ('running', 'queued'), and of those two only " +
			"'running' sorts at or after 'running', so >= 'running' picks exactly the rows = 'running' picks",
	},
	// given_back's state = 'released' made state >= 'released': 'released'
	// sorts after every other state the claims table's CHECK admits.
	"sqlite:ListOrphanedEpisodes:cmp-strict#1": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "CAST(coalesce(c.state = 'released' AND c.attempt <= e.attempts + e.max_attempts, 0) AS BOOLEAN) AS given_back"`,
		why:  releasedIsTheLastState,
	},
	"sqlite:RequeueOrphanTarget:cmp-strict#1": {
		what: `RequeueOrphanTarget: "=" -> ">=" in "CAST(coalesce((SELECT (x.state = 'released' OR e.status = 'queued')"`,
		why:  releasedIsTheLastState,
	},
	"sqlite:RequeueOrphanTarget:cmp-strict#5": {
		what: `RequeueOrphanTarget: "=" -> ">=" in "AND e.attempts + CASE WHEN coalesce((SELECT (x.state = 'released' OR e.status = 'queued')"`,
		why:  releasedIsTheLastState,
	},
	"postgres:ListOrphanedEpisodes:cmp-strict#1": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "coalesce(c.state = 'released' AND c.attempt <= e.attempts + e.max_attempts, false)::boolean AS given_back"`,
		why:  releasedIsTheLastState,
	},
	"postgres:RequeueOrphan:cmp-strict#1": {
		what: `RequeueOrphan: "=" -> ">=" in "SELECT coalesce((SELECT (cr.state = 'released' OR e.status = 'queued')"`,
		why:  releasedIsTheLastState,
	},
	"postgres:ListOrphanedEpisodes:cmp-strict#3": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "WHERE e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"postgres:RequeueOrphan:cmp-strict#6": {
		what: `RequeueOrphan: "=" -> ">=" in "OR (e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"postgres:ListOrphanedEpisodes:cmp-strict#4": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "ELSE (c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed')"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"postgres:ListOrphanedEpisodes:cmp-strict#5": {
		what: `ListOrphanedEpisodes: "<=" -> "<" in "ELSE (c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed')"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:AppendStepLease:cmp-strict#1": {
		what: `AppendStepLease: "=" -> ">=" in "AND owner_node = CAST(?3 AS TEXT)"`,
		why:  appendStepRechecked,
	},
	"sqlite:AppendStepLease:drop#1": {
		what: `AppendStepLease: predicate removed: "AND owner_node = CAST(?3 AS TEXT)"`,
		why:  appendStepRechecked,
	},
	"sqlite:AppendStepLease:cmp-strict#2": {
		what: `AppendStepLease: "=" -> ">=" in "AND fence = CAST(?4 AS INTEGER)"`,
		why:  appendStepRechecked,
	},
	"sqlite:AppendStepLease:drop#2": {
		what: `AppendStepLease: predicate removed: "AND fence = CAST(?4 AS INTEGER)"`,
		why:  appendStepRechecked,
	},
	"sqlite:AppendStepLease:cmp-strict#3": {
		what: `AppendStepLease: "=" -> ">=" in "AND state = 'claimed'"`,
		why:  appendStepRechecked,
	},
	"sqlite:AppendStepLease:drop#3": {
		what: `AppendStepLease: predicate removed: "AND state = 'claimed'"`,
		why:  appendStepRechecked,
	},
	"sqlite:FinishEpisodeStep:cmp-strict#1": {
		what: `FinishEpisodeStep: "=" -> ">=" in "AND c.owner_node = CAST(?6 AS TEXT)"`,
		why:  finishStepAfterItsClaim,
	},
	"sqlite:FinishEpisodeStep:drop#1": {
		what: `FinishEpisodeStep: predicate removed: "AND c.owner_node = CAST(?6 AS TEXT)"`,
		why:  finishStepAfterItsClaim,
	},
	"sqlite:FinishEpisodeStep:cmp-strict#2": {
		what: `FinishEpisodeStep: "=" -> ">=" in "AND c.fence = CAST(?3 AS INTEGER))"`,
		why:  finishStepAfterItsClaim,
	},
	"sqlite:DeleteSpentClaims:drop#1": {
		what: `DeleteSpentClaims: predicate removed: "AND max(x.lease_until, coalesce(x.finished_at, x.lease_until))"`,
		why:  spentClaimRechecked,
	},
	"sqlite:DeleteSpentClaims:cmp-strict#1": {
		what: `DeleteSpentClaims: "<" -> "<=" in "< CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  spentClaimRechecked,
	},
	"sqlite:DeleteSpentClaims:drop#2": {
		what: `DeleteSpentClaims: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsNotLive,
	},
	"sqlite:DeleteSpentClaims:drop#3": {
		what: `DeleteSpentClaims: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsNotLive,
	},
	"sqlite:MaintenanceDue:cmp-strict#4": {
		what: `MaintenanceDue: "<" -> "<=" in "WHERE n.heartbeat_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?4 AS INTEGER))"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:RequeueOrphanTarget:drop#3": {
		what: `RequeueOrphanTarget: predicate removed: "AND e.status IN ('running', 'queued')"`,
		why:  requeueOrphanRechecked,
	},
	"sqlite:MaintenanceDue:drop#2": {
		what: `MaintenanceDue: predicate removed: "AND e.finished_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:cmp-strict#1": {
		what: `MaintenanceDue: "<" -> "<=" in "AND e.finished_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:drop#3": {
		what: `MaintenanceDue: predicate removed: "AND max(x.lease_until, coalesce(x.finished_at, x.lease_until))"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:cmp-strict#3": {
		what: `MaintenanceDue: "<" -> "<=" in "< CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?3 AS INTEGER)"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:drop#4": {
		what: `MaintenanceDue: predicate removed: "AND e.archived_at IS NULL"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:not#5": {
		what: `MaintenanceDue: predicate negated: "AND e.archived_at IS NULL"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:cmp-strict#6": {
		what: `MaintenanceDue: "=" -> ">=" in "WHERE f.status = 'active'"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:drop#1": {
		what: `MaintenanceDue: predicate removed: "AND e.finished_at IS NOT NULL"`,
		why:  finishedAtIsImplied,
	},
	"sqlite:MaintenanceDue:drop#5": {
		what: `MaintenanceDue: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsNotLive,
	},
	"sqlite:DeleteSpentClaims:cmp-strict#2": {
		what: `DeleteSpentClaims: "<" -> "<=" in "< CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  spentClaimCandidatesDecide,
	},
	"sqlite:CancelEpisodeTarget:drop#2": {
		what: `CancelEpisodeTarget: predicate removed: "AND e.status IN ('queued', 'running')"`,
		why:  cancelTargetIsARead,
	},
	"sqlite:FinishEpisode:drop#1": {
		what: `FinishEpisode: predicate removed: "AND status IN ('queued', 'running')"`,
		why:  finishClaimCheckedTheEpisode,
	},
	"sqlite:FinishEpisodeClaim:cmp-strict#4": {
		what: `FinishEpisodeClaim: "=" -> ">=" in "WHERE r.id = CAST(?6 AS INTEGER) AND r.status IN ('queued', 'running'))"`,
		why:  finishEpisodeNamesItsOwn,
	},
	"sqlite:EndWorkflowStep:cmp-strict#2": {
		what: `EndWorkflowStep: "=" -> ">=" in "AND status = 'running'"`,
		why:  skippedStepHasNoEpisode,
	},
	"sqlite:FinishEpisode:cmp-strict#1": {
		what: `FinishEpisode: "=" -> ">=" in "AND c.owner_node = CAST(?8 AS TEXT)"`,
		why:  rechecksWhatItsClaimMatched,
	},
	"sqlite:FinishEpisode:drop#2": {
		what: `FinishEpisode: predicate removed: "AND c.owner_node = CAST(?8 AS TEXT)"`,
		why:  rechecksWhatItsClaimMatched,
	},
	"sqlite:FinishEpisode:cmp-strict#2": {
		what: `FinishEpisode: "=" -> ">=" in "AND c.fence = CAST(?9 AS INTEGER))"`,
		why:  rechecksWhatItsClaimMatched,
	},
	"sqlite:FinishEpisodeClaim:cmp-strict#1": {
		what: `FinishEpisodeClaim: "=" -> ">=" in "AND owner_node = CAST(?4 AS TEXT)"`,
		why:  claimWriteRecheckedByTheEpisodeWrite,
	},
	"sqlite:FinishEpisodeClaim:drop#1": {
		what: `FinishEpisodeClaim: predicate removed: "AND owner_node = CAST(?4 AS TEXT)"`,
		why:  claimWriteRecheckedByTheEpisodeWrite,
	},
	"sqlite:FinishEpisodeClaim:cmp-strict#2": {
		what: `FinishEpisodeClaim: "=" -> ">=" in "AND fence = CAST(?5 AS INTEGER)"`,
		why:  claimWriteRecheckedByTheEpisodeWrite,
	},
	"sqlite:FinishEpisodeClaim:drop#2": {
		what: `FinishEpisodeClaim: predicate removed: "AND fence = CAST(?5 AS INTEGER)"`,
		why:  claimWriteRecheckedByTheEpisodeWrite,
	},
	"sqlite:RetryEpisodeClaim:cmp-strict#1": {
		what: `RetryEpisodeClaim: "=" -> ">=" in "AND owner_node = CAST(?3 AS TEXT)"`,
		why:  claimWriteRecheckedByTheEpisodeWrite,
	},
	"sqlite:RetryEpisodeClaim:drop#1": {
		what: `RetryEpisodeClaim: predicate removed: "AND owner_node = CAST(?3 AS TEXT)"`,
		why:  claimWriteRecheckedByTheEpisodeWrite,
	},
	"sqlite:RetryEpisodeClaim:cmp-strict#2": {
		what: `RetryEpisodeClaim: "=" -> ">=" in "AND fence = CAST(?4 AS INTEGER)"`,
		why:  claimWriteRecheckedByTheEpisodeWrite,
	},
	"sqlite:RetryEpisodeClaim:cmp-strict#4": {
		what: `RetryEpisodeClaim: "=" -> ">=" in "WHERE r.id = CAST(?5 AS INTEGER) AND r.status IN ('queued', 'running'))"`,
		why:  finishEpisodeNamesItsOwn,
	},
	"sqlite:RetryEpisode:drop#1": {
		what: `RetryEpisode: predicate removed: "AND status IN ('queued', 'running')"`,
		why:  retryClaimCheckedTheEpisode,
	},
	"sqlite:FinishEpisodes:drop#1": {
		what: `FinishEpisodes: predicate removed: "AND status IN ('queued', 'running')"`,
		why:  groupFinishRechecked,
	},
	"sqlite:FinishEpisodes:cmp-strict#2": {
		what: `FinishEpisodes: "=" -> ">=" in "ON c.dedupe_key = f.value ->> '$.claim_key' AND c.fence = f.value ->> '$.fence'"`,
		why:  groupFinishRechecked,
	},
	"sqlite:FinishEpisodes:cmp-strict#3": {
		what: `FinishEpisodes: "=" -> ">=" in "ON c.dedupe_key = f.value ->> '$.claim_key' AND c.fence = f.value ->> '$.fence'"`,
		why:  groupFinishRechecked,
	},
	"sqlite:FinishEpisodes:cmp-strict#4": {
		what: `FinishEpisodes: "=" -> ">=" in "AND c.owner_node = CAST(?2 AS TEXT))"`,
		why:  groupFinishRechecked,
	},
	"sqlite:FinishEpisodesSteps:cmp-strict#1": {
		what: `FinishEpisodesSteps: "=" -> ">=" in "AND c.owner_node = CAST(?2 AS TEXT)"`,
		why:  groupFinishRechecked,
	},
	"sqlite:FinishEpisodesSteps:drop#1": {
		what: `FinishEpisodesSteps: predicate removed: "AND c.owner_node = CAST(?2 AS TEXT)"`,
		why:  groupFinishRechecked,
	},
	"sqlite:FinishEpisodesSteps:cmp-strict#2": {
		what: `FinishEpisodesSteps: "=" -> ">=" in "AND c.fence = f.value ->> '$.fence')"`,
		why:  groupFinishRechecked,
	},
	"sqlite:FinishEpisodesClaims:cmp-strict#1": {
		what: `FinishEpisodesClaims: "=" -> ">=" in "AND f.value ->> '$.fence' = leasehold_work_claims.fence),"`,
		why:  groupRowsNameDistinctClaims,
	},
	"sqlite:FinishEpisodesClaims:cmp-strict#4": {
		what: `FinishEpisodesClaims: "=" -> ">=" in "AND f.value ->> '$.fence' = leasehold_work_claims.fence)"`,
		why:  groupRowsNameDistinctClaims,
	},
	"sqlite:FinishEpisodesClaims:cmp-neg#4": {
		what: `FinishEpisodesClaims: "=" -> "<>" in "AND f.value ->> '$.fence' = leasehold_work_claims.fence)"`,
		why:  claimErrorDetailIsForOperators,
	},
	"sqlite:AppendStep:cmp-strict#1": {
		what: `AppendStep: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:drop#1": {
		what: `AppendStep: predicate removed: "AND e.status = 'running'"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:cmp-strict#2": {
		what: `AppendStep: "=" -> ">=" in "AND e.owner_node = CAST(?5 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:drop#2": {
		what: `AppendStep: predicate removed: "AND e.owner_node = CAST(?5 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:cmp-strict#3": {
		what: `AppendStep: "=" -> ">=" in "AND c.owner_node = CAST(?5 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:drop#3": {
		what: `AppendStep: predicate removed: "AND c.owner_node = CAST(?5 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:cmp-strict#4": {
		what: `AppendStep: "=" -> ">=" in "AND c.fence = CAST(?2 AS INTEGER)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:drop#4": {
		what: `AppendStep: predicate removed: "AND c.fence = CAST(?2 AS INTEGER)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStep:cmp-strict#5": {
		what: `AppendStep: "=" -> ">=" in "AND c.state = 'claimed')"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:cmp-strict#1": {
		what: `AppendStepEpisode: "=" -> ">=" in "AND status = 'running'"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:drop#1": {
		what: `AppendStepEpisode: predicate removed: "AND status = 'running'"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:cmp-strict#2": {
		what: `AppendStepEpisode: "=" -> ">=" in "AND owner_node = CAST(?2 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:drop#2": {
		what: `AppendStepEpisode: predicate removed: "AND owner_node = CAST(?2 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:cmp-strict#3": {
		what: `AppendStepEpisode: "=" -> ">=" in "AND c.owner_node = CAST(?2 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:drop#3": {
		what: `AppendStepEpisode: predicate removed: "AND c.owner_node = CAST(?2 AS TEXT)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:cmp-strict#4": {
		what: `AppendStepEpisode: "=" -> ">=" in "AND c.fence = CAST(?4 AS INTEGER)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:drop#4": {
		what: `AppendStepEpisode: predicate removed: "AND c.fence = CAST(?4 AS INTEGER)"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:AppendStepEpisode:cmp-strict#5": {
		what: `AppendStepEpisode: "=" -> ">=" in "AND c.state = 'claimed')"`,
		why:  appendStepCheckedTwice,
	},
	"sqlite:CancelEpisode:drop#1": {
		what: `CancelEpisode: predicate removed: "AND status IN ('queued', 'running')"`,
		why:  cancelTargetChecked,
	},
	"sqlite:CancelEpisode:drop#2": {
		what: `CancelEpisode: predicate removed: "AND archived_at IS NULL"`,
		why:  cancelTargetChecked,
	},
	"sqlite:CancelEpisodeFence:cmp-strict#2": {
		what: `CancelEpisodeFence: "<=" -> "<" in "AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  cancelHeldWasRead,
	},
	"sqlite:CancelEpisodeFence:drop#2": {
		what: `CancelEpisodeFence: predicate removed: "AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  cancelHeldWasRead,
	},
	"sqlite:CancelEpisodeTarget:cmp-strict#1": {
		what: `CancelEpisodeTarget: "=" -> ">=" in "AND x.state = 'claimed'"`,
		why:  endedClaimEndedItsLease,
	},
	"sqlite:CancelEpisodeTarget:drop#1": {
		what: `CancelEpisodeTarget: predicate removed: "AND x.state = 'claimed'"`,
		why:  endedClaimEndedItsLease,
	},
	"sqlite:StartEpisode:cmp-strict#3": {
		what: `StartEpisode: "=" -> ">=" in "AND c.state = 'claimed'"`,
		why:  endedClaimEndedItsLease,
	},
	"sqlite:CancelEpisodeTarget:cmp-strict#2": {
		what: `CancelEpisodeTarget: ">" -> ">=" in "AND x.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) AS held"`,
		why:  cancelAtTheLeasesLastInstant,
	},
	"sqlite:CancelEpisodeTarget:drop#3": {
		what: `CancelEpisodeTarget: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:StartEpisode:drop#2": {
		what: `StartEpisode: predicate removed: "AND archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:CreateEpisode:cmp-strict#1": {
		what: `CreateEpisode: "=" -> ">=" in "CASE WHEN s.status = 'running' THEN CAST(?13 AS TEXT) END,"`,
		why:  startStatusIsQueuedOrRunning,
	},
	"sqlite:CreateEpisode:cmp-strict#2": {
		what: `CreateEpisode: "=" -> ">=" in "CASE WHEN s.status = 'running' THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END,"`,
		why:  startStatusIsQueuedOrRunning,
	},
	"sqlite:CreateEpisode:cmp-strict#3": {
		what: `CreateEpisode: "=" -> ">=" in "CASE WHEN s.status = 'running' THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END"`,
		why:  startStatusIsQueuedOrRunning,
	},
	"sqlite:CreateEpisode:cmp-strict#5": {
		what: `CreateEpisode: ">" -> ">=" in "AND x.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  createStartsUnderItsGrant,
	},
	"sqlite:AcquireClaim:cmp-strict#1": {
		what: `AcquireClaim: "<=" -> "<" in "WHERE c.state <> 'claimed' OR c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:CreateEpisodeGrant:cmp-strict#1": {
		what: `CreateEpisodeGrant: "<=" -> "<" in "WHERE c.state <> 'claimed' OR c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:ListExpiredClaims:cmp-strict#2": {
		what: `ListExpiredClaims: "<" -> "<=" in "AND lease_until < CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  expiredListIsCandidates,
	},
	"postgres:ListExpiredClaims:cmp-strict#2": {
		what: `ListExpiredClaims: "<" -> "<=" in "AND lease_until < now()"`,
		why:  expiredListIsCandidates,
	},
	"sqlite:ListClaims:cmp-strict#4": {
		what: `ListClaims: "<=" -> "<" in "OR (state = 'claimed' AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)))"`,
		why:  operatorReadAtAnInstant,
	},
	"postgres:ListClaims:cmp-strict#4": {
		what: `ListClaims: "<=" -> "<" in "OR (state = 'claimed' AND lease_until <= now()))"`,
		why:  operatorReadAtAnInstant,
	},
	"sqlite:RequeueEpisode:drop#2": {
		what: `RequeueEpisode: predicate removed: "AND archived_at IS NULL"`,
		why:  reopenAfterItsEpisodeWrite,
	},
	"postgres:CreateEpisode:cmp-strict#1": {
		what: `CreateEpisode: "=" -> ">=" in "CASE WHEN s.status = 'running' THEN $13::text END,"`,
		why:  startStatusIsQueuedOrRunning,
	},
	"postgres:CreateEpisode:cmp-strict#2": {
		what: `CreateEpisode: "=" -> ">=" in "CASE WHEN s.status = 'running' THEN now() END,"`,
		why:  startStatusIsQueuedOrRunning,
	},
	"postgres:CreateEpisode:cmp-strict#3": {
		what: `CreateEpisode: "=" -> ">=" in "CASE WHEN s.status = 'running' THEN now() END"`,
		why:  startStatusIsQueuedOrRunning,
	},
	"postgres:AppendStep:cmp-strict#4": {
		what: `AppendStep: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:FindLiveEpisode:cmp-strict#1": {
		what: `FindLiveEpisode: "=" -> ">=" in "WHERE dedupe_key = CAST(?1 AS TEXT) AND archived_at IS NULL"`,
		why:  exactKeyComesFirst,
	},
	"sqlite:StartEpisode:drop#5": {
		what: `StartEpisode: predicate removed: "AND c.state = 'claimed'"`,
		why:  endedClaimEndedItsLease,
	},
	"sqlite:ClearFinding:cmp-strict#3": {
		what: `ClearFinding: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:FindingLeaseHeld:cmp-strict#1": {
		what: `FindingLeaseHeld: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:RaiseFinding:cmp-strict#1": {
		what: `RaiseFinding: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:UpdateFinding:cmp-strict#3": {
		what: `UpdateFinding: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:ClearFinding:drop#3": {
		what: `ClearFinding: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:FindingLeaseHeld:drop#2": {
		what: `FindingLeaseHeld: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:RaiseFinding:drop#2": {
		what: `RaiseFinding: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:UpdateFinding:drop#3": {
		what: `UpdateFinding: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:ArchiveEpisodes:drop#1": {
		what: `ArchiveEpisodes: predicate removed: "AND e.finished_at IS NOT NULL"`,
		why:  finishedAtIsImplied,
	},
	"sqlite:ArchiveEpisodes:cmp-strict#1": {
		what: `ArchiveEpisodes: "<" -> "<=" in "AND e.finished_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  retentionInstant,
	},
	"sqlite:DeleteStaleNodes:cmp-strict#1": {
		what: `DeleteStaleNodes: "<" -> "<=" in "WHERE heartbeat_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  retentionInstant,
	},
	"sqlite:ArchiveEpisodes:drop#3": {
		what: `ArchiveEpisodes: predicate removed: "AND e.status IN ('done', 'failed', 'partially_failed', 'canceled')"`,
		why:  onlyTerminalEpisodesFinish,
	},
	"sqlite:DeleteSpentClaims:drop#4": {
		what: `DeleteSpentClaims: predicate removed: "AND state IN ('done', 'failed', 'released')"`,
		why:  spentClaimCandidatesOnly,
	},
	"sqlite:DeleteSpentClaims:drop#5": {
		what: `DeleteSpentClaims: predicate removed: "AND max(lease_until, coalesce(finished_at, lease_until))"`,
		why:  spentClaimCandidatesOnly,
	},
	"sqlite:MaintenanceDue:not#4": {
		what: `MaintenanceDue: predicate negated: "AND e.archived_at IS NULL"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:ListNodes:cmp-strict#2": {
		what: `ListNodes: "=" -> ">=" in "AND c.state = 'claimed'"`,
		why:  endedClaimEndedItsLease,
	},
	"sqlite:ListNodes:cmp-strict#3": {
		what: `ListNodes: ">" -> ">=" in "AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) AS INTEGER) AS live_leases"`,
		why:  operatorCountAtAnInstant,
	},
	"sqlite:ClaimForRecovery:drop#1": {
		what: `ClaimForRecovery: predicate removed: "AND status IN ('running', 'queued')"`,
		why:  claimForRecoveryGrantChecked,
	},
	"sqlite:ClaimForRecovery:drop#2": {
		what: `ClaimForRecovery: predicate removed: "AND archived_at IS NULL"`,
		why:  claimForRecoveryGrantChecked,
	},
	"sqlite:ClaimForRecovery:cmp-strict#1": {
		what: `ClaimForRecovery: "=" -> ">=" in "AND c.owner_node = CAST(?1 AS TEXT)"`,
		why:  recoveryWriteUnderItsOwnGrant,
	},
	"sqlite:ClaimForRecovery:drop#3": {
		what: `ClaimForRecovery: predicate removed: "AND c.owner_node = CAST(?1 AS TEXT)"`,
		why:  recoveryWriteUnderItsOwnGrant,
	},
	"sqlite:ClaimForRecovery:cmp-strict#2": {
		what: `ClaimForRecovery: "=" -> ">=" in "AND c.fence = CAST(?4 AS INTEGER)"`,
		why:  recoveryWriteUnderItsOwnGrant,
	},
	"sqlite:ClaimForRecovery:drop#4": {
		what: `ClaimForRecovery: predicate removed: "AND c.fence = CAST(?4 AS INTEGER)"`,
		why:  recoveryWriteUnderItsOwnGrant,
	},
	"sqlite:ClaimForRecovery:cmp-strict#3": {
		what: `ClaimForRecovery: "=" -> ">=" in "AND c.state = 'claimed')"`,
		why:  recoveryWriteUnderItsOwnGrant,
	},
	"sqlite:ClaimForRecoveryGrant:drop#2": {
		what: `ClaimForRecoveryGrant: predicate removed: "AND e.status IN ('running', 'queued')"`,
		why:  recoveryGrantBackedByItsEpisodeWrite,
	},
	"sqlite:ClaimForRecoveryGrant:cmp-strict#1": {
		what: `ClaimForRecoveryGrant: "=" -> ">=" in "OR (e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:ListOrphanedEpisodes:cmp-strict#3": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "WHERE e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:RequeueOrphanTarget:cmp-strict#9": {
		what: `RequeueOrphanTarget: "=" -> ">=" in "OR (e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"sqlite:ClaimForRecoveryGrant:cmp-strict#2": {
		what: `ClaimForRecoveryGrant: "<" -> "<=" in "< CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?4 AS INTEGER))"`,
		why:  staleInstant,
	},
	"sqlite:ListOrphanedEpisodes:cmp-strict#4": {
		what: `ListOrphanedEpisodes: "<" -> "<=" in "< CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?4 AS INTEGER)"`,
		why:  staleInstant,
	},
	"sqlite:RequeueOrphanTarget:cmp-strict#10": {
		what: `RequeueOrphanTarget: "<" -> "<=" in "< CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?3 AS INTEGER))"`,
		why:  staleInstant,
	},
	"sqlite:ListOrphanedEpisodes:cmp-strict#5": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "ELSE (c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"sqlite:RequeueOrphanFence:cmp-strict#1": {
		what: `RequeueOrphanFence: "=" -> ">=" in "AND ((state = 'claimed' AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"sqlite:ListOrphanedEpisodes:cmp-strict#6": {
		what: `ListOrphanedEpisodes: "<=" -> "<" in "ELSE (c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:RequeueOrphanFence:cmp-strict#2": {
		what: `RequeueOrphanFence: "<=" -> "<" in "AND ((state = 'claimed' AND lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:ListOrphanedEpisodes:drop#1": {
		what: `ListOrphanedEpisodes: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:RequeueOrphanTarget:drop#2": {
		what: `RequeueOrphanTarget: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:RequeueOrphan:cmp-strict#1": {
		what: `RequeueOrphan: "=" -> ">=" in "AND attempts = CAST(?3 AS INTEGER)"`,
		why:  requeueOrphanTargetChecked,
	},
	"sqlite:RequeueOrphan:drop#1": {
		what: `RequeueOrphan: predicate removed: "AND attempts = CAST(?3 AS INTEGER)"`,
		why:  requeueOrphanTargetChecked,
	},
	"sqlite:RequeueOrphan:drop#2": {
		what: `RequeueOrphan: predicate removed: "AND status IN ('running', 'queued')"`,
		why:  requeueOrphanTargetChecked,
	},
	"sqlite:RequeueOrphan:drop#3": {
		what: `RequeueOrphan: predicate removed: "AND archived_at IS NULL"`,
		why:  requeueOrphanTargetChecked,
	},
	"sqlite:RequeueOrphanTarget:cmp-strict#4": {
		what: `RequeueOrphanTarget: "=" -> ">=" in "AND e.attempts = CAST(?2 AS INTEGER)"`,
		why:  requeueOrphanRechecked,
	},
	"sqlite:RequeueOrphanTarget:drop#4": {
		what: `RequeueOrphanTarget: predicate removed: "AND e.attempts = CAST(?2 AS INTEGER)"`,
		why:  requeueOrphanRechecked,
	},
	"postgres:CreateEpisode:cmp-strict#5": {
		what: `CreateEpisode: ">" -> ">=" in "AND x.state = 'claimed' AND x.lease_until > now())"`,
		why:  createStartsUnderItsGrant,
	},
	"postgres:CreateEpisode:cmp-strict#6": {
		what: `CreateEpisode: "<=" -> "<" in "WHERE c.state <> 'claimed' OR c.lease_until <= now()"`,
		why:  leaseEndingNowIsConservative,
	},
	"postgres:FindLiveEpisode:cmp-strict#1": {
		what: `FindLiveEpisode: "=" -> ">=" in "WHERE dedupe_key = $1::text AND archived_at IS NULL"`,
		why:  raceWinnerIsTheLeastKey,
	},
	"postgres:ClearFinding:cmp-strict#4": {
		what: `ClearFinding: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"postgres:ClearFinding:drop#5": {
		what: `ClearFinding: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:RaiseFinding:cmp-strict#4": {
		what: `RaiseFinding: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"postgres:RaiseFinding:drop#5": {
		what: `RaiseFinding: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:UpdateFinding:cmp-strict#4": {
		what: `UpdateFinding: "=" -> ">=" in "AND e.status = 'running'"`,
		why:  runningIsTheLastStatus,
	},
	"postgres:UpdateFinding:drop#5": {
		what: `UpdateFinding: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:ArchiveEpisodes:drop#1": {
		what: `ArchiveEpisodes: predicate removed: "AND e.finished_at IS NOT NULL"`,
		why:  finishedAtIsImplied,
	},
	"postgres:ArchiveEpisodes:cmp-strict#1": {
		what: `ArchiveEpisodes: "<" -> "<=" in "AND e.finished_at < now() - ($1::bigint * interval '1 millisecond')"`,
		why:  retentionInstant,
	},
	"sqlite:FinishWorkflowInstance:cmp-strict#1": {
		what: `FinishWorkflowInstance: "=" -> ">=" in "AND status = 'running'"`,
		why:  instanceRunningIsTheLastStatus,
	},
	"sqlite:GetRunningWorkflowInstance:cmp-strict#1": {
		what: `GetRunningWorkflowInstance: "=" -> ">=" in "AND status = 'running'"`,
		why:  instanceRunningIsTheLastStatus,
	},
	"sqlite:ListStalledWorkflowSteps:cmp-strict#1": {
		what: `ListStalledWorkflowSteps: "=" -> ">=" in "WHERE i.status = 'running'"`,
		why:  instanceRunningIsTheLastStatus,
	},
	"sqlite:ParkWorkflowInstance:cmp-strict#1": {
		what: `ParkWorkflowInstance: "=" -> ">=" in "AND status = 'running'"`,
		why:  instanceRunningIsTheLastStatus,
	},
	"sqlite:SetWorkflowDefinitionVersion:cmp-strict#1": {
		what: `SetWorkflowDefinitionVersion: "=" -> ">=" in "AND status = 'running'"`,
		why:  instanceRunningIsTheLastStatus,
	},
	"sqlite:ListStalledWorkflowSteps:cmp-strict#2": {
		what: `ListStalledWorkflowSteps: "=" -> ">=" in "AND s.status = 'running'"`,
		why:  skippedStepHasNoEpisode,
	},
	"postgres:ArchiveEpisodes:drop#3": {
		what: `ArchiveEpisodes: predicate removed: "AND e.status IN ('done', 'failed', 'partially_failed', 'canceled')"`,
		why:  onlyTerminalEpisodesFinish,
	},
	"postgres:DeleteSpentClaims:drop#2": {
		what: `DeleteSpentClaims: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsNotLive,
	},
	"postgres:DeleteSpentClaims:drop#3": {
		what: `DeleteSpentClaims: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsNotLive,
	},
	"postgres:DeleteSpentClaims:drop#4": {
		what: `DeleteSpentClaims: predicate removed: "AND c.state IN ('done', 'failed', 'released')"`,
		why:  regrantMovesTheHorizon,
	},
	"postgres:ListNodes:cmp-strict#2": {
		what: `ListNodes: "=" -> ">=" in "AND c.state = 'claimed'"`,
		why:  endedClaimEndedItsLease,
	},
	"postgres:ListNodes:drop#1": {
		what: `ListNodes: predicate removed: "AND c.state = 'claimed'"`,
		why:  endedClaimEndedItsLease,
	},
	"postgres:ListNodes:cmp-strict#3": {
		what: `ListNodes: ">" -> ">=" in "AND c.lease_until > now())::bigint AS live_leases"`,
		why:  operatorCountAtAnInstant,
	},
	"postgres:FinishWorkflowInstance:cmp-strict#1":       {what: `FinishWorkflowInstance: "=" -> ">=" in "AND status = 'running'"`, why: instanceRunningIsTheLastStatus},
	"postgres:GetRunningWorkflowInstance:cmp-strict#1":   {what: `GetRunningWorkflowInstance: "=" -> ">=" in "AND status = 'running'"`, why: instanceRunningIsTheLastStatus},
	"postgres:ListStalledWorkflowSteps:cmp-strict#1":     {what: `ListStalledWorkflowSteps: "=" -> ">=" in "WHERE i.status = 'running'"`, why: instanceRunningIsTheLastStatus},
	"postgres:ParkWorkflowInstance:cmp-strict#1":         {what: `ParkWorkflowInstance: "=" -> ">=" in "AND status = 'running'"`, why: instanceRunningIsTheLastStatus},
	"postgres:SetWorkflowDefinitionVersion:cmp-strict#1": {what: `SetWorkflowDefinitionVersion: "=" -> ">=" in "AND status = 'running'"`, why: instanceRunningIsTheLastStatus},
	"postgres:EndWorkflowStep:cmp-strict#1":              {what: `EndWorkflowStep: "=" -> ">=" in "AND status = 'running'"`, why: skippedStepHasNoEpisode},
	"postgres:ListStalledWorkflowSteps:cmp-strict#2":     {what: `ListStalledWorkflowSteps: "=" -> ">=" in "AND s.status = 'running'"`, why: skippedStepHasNoEpisode},
	"sqlite:ClaimAvailable:cmp-strict#1": {
		what: `ClaimAvailable: "<=" -> "<" in "AND e.run_after <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:ClaimAvailableGrant:cmp-strict#1": {
		what: `ClaimAvailableGrant: "=" -> ">=" in "AND e.status = 'queued'"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableGrant:drop#1": {
		what: `ClaimAvailableGrant: predicate removed: "AND e.status = 'queued'"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableGrant:drop#2": {
		what: `ClaimAvailableGrant: predicate removed: "AND e.archived_at IS NULL"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableGrant:cmp-strict#2": {
		what: `ClaimAvailableGrant: "<=" -> "<" in "WHERE c.state <> 'claimed' OR c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:ClaimAvailableStart:cmp-strict#1": {
		what: `ClaimAvailableStart: "=" -> ">=" in "AND status = 'queued'"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableStart:drop#1": {
		what: `ClaimAvailableStart: predicate removed: "AND status = 'queued'"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableStart:drop#2": {
		what: `ClaimAvailableStart: predicate removed: "AND archived_at IS NULL"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableStart:cmp-strict#2": {
		what: `ClaimAvailableStart: "=" -> ">=" in "ON c.dedupe_key = g.value ->> '$.claim_key' AND c.fence = g.value ->> '$.fence'"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableStart:cmp-strict#3": {
		what: `ClaimAvailableStart: "=" -> ">=" in "ON c.dedupe_key = g.value ->> '$.claim_key' AND c.fence = g.value ->> '$.fence'"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableStart:cmp-strict#4": {
		what: `ClaimAvailableStart: "=" -> ">=" in "AND c.owner_node = CAST(?1 AS TEXT)"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableStart:drop#3": {
		what: `ClaimAvailableStart: predicate removed: "AND c.owner_node = CAST(?1 AS TEXT)"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ClaimAvailableStart:cmp-strict#5": {
		what: `ClaimAvailableStart: "=" -> ">=" in "AND c.state = 'claimed')"`,
		why:  pollRecheckedInItsTransaction,
	},
	"sqlite:ExpireAvailable:cmp-strict#1": {
		what: `ExpireAvailable: "<" -> "<=" in "WHERE run_after < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  expiryInstant,
	},
	"sqlite:ExpireAvailable:cmp-strict#4": {
		what: `ExpireAvailable: ">" -> ">=" in "AND c.lease_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  liveAtItsLastInstant,
	},
	"sqlite:NextAvailableDue:cmp-strict#1": {
		what: `NextAvailableDue: ">" -> ">=" in "AND e.run_after > CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  sleepHintInstant,
	},
	"sqlite:RetryEpisode:cmp-strict#1": {
		what: `RetryEpisode: "=" -> ">=" in "AND c.owner_node = CAST(?6 AS TEXT)"`,
		why:  retryAfterItsClaim,
	},
	"sqlite:RetryEpisode:drop#2": {
		what: `RetryEpisode: predicate removed: "AND c.owner_node = CAST(?6 AS TEXT)"`,
		why:  retryAfterItsClaim,
	},
	"sqlite:RetryEpisode:cmp-strict#2": {
		what: `RetryEpisode: "=" -> ">=" in "AND c.fence = CAST(?7 AS INTEGER))"`,
		why:  retryAfterItsClaim,
	},
	"sqlite:MaintenanceDue:cmp-strict#2": {
		what: `MaintenanceDue: "<" -> "<=" in "WHERE r.run_after < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?2 AS INTEGER)))"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:MaintenanceDue:cmp-strict#5": {
		what: `MaintenanceDue: "<" -> "<=" in "WHERE r.run_after < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?5 AS INTEGER))"`,
		why:  maintenanceDueIsWider,
	},
	"sqlite:ListWaitingForNode:cmp-strict#1": {
		what: `ListWaitingForNode: "<=" -> "<" in "WHERE r.run_after <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:ListWaitingForNode:cmp-strict#2": {
		what: `ListWaitingForNode: "=" -> ">=" in "AND r.status = 'queued'"`,
		why:  availableIsQueuedAndLive,
	},
	"sqlite:ListWaitingForNode:drop#1": {
		what: `ListWaitingForNode: predicate removed: "AND r.status = 'queued'"`,
		why:  availableIsQueuedAndLive,
	},
	"sqlite:ListWaitingForNode:drop#2": {
		what: `ListWaitingForNode: predicate removed: "AND r.archived_at IS NULL"`,
		why:  availableIsQueuedAndLive,
	},
	"sqlite:ListWaitingForNode:cmp-strict#3": {
		what: `ListWaitingForNode: ">" -> ">=" in "AND n.heartbeat_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?2 AS INTEGER)"`,
		why:  readBoundInstant,
	},
	"sqlite:ListWaitingForNode:cmp-strict#6": {
		what: `ListWaitingForNode: "<" -> "<=" in "CAST(p.waiting_since < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - CAST(?1 AS INTEGER)"`,
		why:  readBoundInstant,
	},
	"sqlite:ClaimForRecoveryGrant:cmp-strict#3": {
		what: `ClaimForRecoveryGrant: "=" -> ">=" in "WHERE (c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"sqlite:ClaimForRecoveryGrant:cmp-strict#4": {
		what: `ClaimForRecoveryGrant: "<=" -> "<" in "WHERE (c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:ListOrphanedEpisodes:drop#3": {
		what: `ListOrphanedEpisodes: predicate removed: "AND e.run_after IS NULL"`,
		why:  runningIsNeverAvailable,
	},
	"sqlite:ListOrphanedEpisodes:drop#4": {
		what: `ListOrphanedEpisodes: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"sqlite:ListOrphanedEpisodes:cmp-strict#9": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "AND ((c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"sqlite:ListOrphanedEpisodes:cmp-strict#10": {
		what: `ListOrphanedEpisodes: "<=" -> "<" in "AND ((c.state = 'claimed' AND c.lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))"`,
		why:  leaseEndingNowIsConservative,
	},
	"sqlite:RequeueOrphan:drop#4": {
		what: `RequeueOrphan: predicate removed: "AND run_after IS NULL"`,
		why:  requeueOrphanTargetChecked,
	},
	"sqlite:RequeueOrphanTarget:drop#6": {
		what: `RequeueOrphanTarget: predicate removed: "AND e.run_after IS NULL"`,
		why:  requeueOrphanRechecked,
	},
	"postgres:ClaimAvailable:cmp-strict#1": {
		what: `ClaimAvailable: "<=" -> "<" in "AND e.run_after <= now()"`,
		why:  leaseEndingNowIsConservative,
	},
	"postgres:ClaimAvailable:cmp-strict#4": {
		what: `ClaimAvailable: "<=" -> "<" in "WHERE c.state <> 'claimed' OR c.lease_until <= now()"`,
		why:  leaseEndingNowIsConservative,
	},
	"postgres:ExpireAvailable:cmp-strict#1": {
		what: `ExpireAvailable: "<" -> "<=" in "WHERE e.run_after < now() - ($1::bigint * interval '1 millisecond')"`,
		why:  expiryInstant,
	},
	"postgres:ExpireAvailable:cmp-strict#4": {
		what: `ExpireAvailable: ">" -> ">=" in "AND c.lease_until > now())"`,
		why:  liveAtItsLastInstant,
	},
	"postgres:NextAvailableDue:cmp-strict#1": {
		what: `NextAvailableDue: ">" -> ">=" in "AND e.run_after > now()"`,
		why:  sleepHintInstant,
	},
	"postgres:ListWaitingForNode:cmp-strict#1": {
		what: `ListWaitingForNode: "<=" -> "<" in "WHERE r.run_after <= now()"`,
		why:  leaseEndingNowIsConservative,
	},
	"postgres:ListWaitingForNode:cmp-strict#2": {
		what: `ListWaitingForNode: "=" -> ">=" in "AND r.status = 'queued'"`,
		why:  availableIsQueuedAndLive,
	},
	"postgres:ListWaitingForNode:drop#1": {
		what: `ListWaitingForNode: predicate removed: "AND r.status = 'queued'"`,
		why:  availableIsQueuedAndLive,
	},
	"postgres:ListWaitingForNode:drop#2": {
		what: `ListWaitingForNode: predicate removed: "AND r.archived_at IS NULL"`,
		why:  availableIsQueuedAndLive,
	},
	"postgres:ClaimForRecovery:cmp-strict#2": {
		what: `ClaimForRecovery: "=" -> ">=" in "WHERE (c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed')"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"postgres:ClaimForRecovery:cmp-strict#3": {
		what: `ClaimForRecovery: "<=" -> "<" in "WHERE (c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed')"`,
		why:  leaseEndingNowIsConservative,
	},
	"postgres:ClaimForRecovery:drop#4": {
		what: `ClaimForRecovery: predicate removed: "AND e.status IN ('running', 'queued')"`,
		why:  claimForRecoveryRechecked,
	},
	"postgres:ClaimForRecovery:drop#5": {
		what: `ClaimForRecovery: predicate removed: "AND e.archived_at IS NULL"`,
		why:  claimForRecoveryRechecked,
	},
	"postgres:ListOrphanedEpisodes:drop#2": {
		what: `ListOrphanedEpisodes: predicate removed: "AND e.run_after IS NULL"`,
		why:  runningIsNeverAvailable,
	},
	"postgres:ListOrphanedEpisodes:drop#3": {
		what: `ListOrphanedEpisodes: predicate removed: "AND e.archived_at IS NULL"`,
		why:  archivedIsTerminal,
	},
	"postgres:ListOrphanedEpisodes:cmp-strict#8": {
		what: `ListOrphanedEpisodes: "=" -> ">=" in "AND ((c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed'))"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"postgres:ListOrphanedEpisodes:cmp-strict#9": {
		what: `ListOrphanedEpisodes: "<=" -> "<" in "AND ((c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed'))"`,
		why:  leaseEndingNowIsConservative,
	},
	"postgres:RequeueOrphan:cmp-strict#7": {
		what: `RequeueOrphan: "=" -> ">=" in "AND ((c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed'))"`,
		why:  endedStatesAlreadyAdmitted,
	},
	"postgres:RequeueOrphan:cmp-strict#8": {
		what: `RequeueOrphan: "<=" -> "<" in "AND ((c.state = 'claimed' AND c.lease_until <= now()) OR c.state IN ('released', 'done', 'failed'))"`,
		why:  leaseEndingNowIsConservative,
	},
}

// equivalent is one listed survivor: its description as the generator
// prints it, and why it cannot change an outcome.
type equivalent struct{ what, why string }

// classEquivalent is a kind of mutant that cannot change an outcome
// wherever it is generated: every mutant of dialect whose description
// ends with what.
type classEquivalent struct{ dialect, what, why string }

// classEquivalents are the kinds.
var classEquivalents = []classEquivalent{
	{"sqlserver", `lock clause removed: "ROWLOCK"`, "a granularity hint only: the statement's UPDLOCK (and HOLDLOCK where " +
		"it has one) and its WHERE decide, so without ROWLOCK the engine may take a page or table lock instead, which " +
		"blocks more writers, never fewer, and no outcome changes"},
}

// equivalentOf is g's entry in equivalents, or its kind's in
// classEquivalents.
func equivalentOf(g generated) (equivalent, bool) {
	if eq, ok := equivalents[g.ID]; ok {
		return eq, true
	}
	for _, c := range classEquivalents {
		if strings.HasPrefix(g.ID, c.dialect+":") && strings.HasSuffix(g.What, c.what) {
			return equivalent{what: g.What, why: c.why}, true
		}
	}
	return equivalent{}, false
}

// releasedIsTheLastState: a claim's state is one of 'claimed', 'done',
// 'failed' and 'released' (the CHECK of leasehold_work_claims.state in
// every dialect's schema), so state >= 'released' holds exactly when
// state = 'released', under any collation that orders ASCII letters.
const releasedIsTheLastState = "state >= 'released' is state = 'released': 'released' sorts after every " +
	"other value the claims table's CHECK admits ('claimed', 'done', 'failed')"

// runningIsTheLastStatus: an episode's status is one of 'queued',
// 'running', 'blocked', 'done', 'failed', 'partially_failed' and
// 'canceled' (the CHECK of leasehold_episodes.status), and 'running' sorts
// after every other one.
const runningIsTheLastStatus = "status >= 'running' is status = 'running': 'running' sorts after every other " +
	"value the episodes table's CHECK admits ('queued', 'blocked', 'done', 'failed', 'partially_failed', 'canceled')"

// endedStatesAlreadyAdmitted: (state >= 'claimed' AND lease ended) OR
// state IN ('released', 'done', 'failed').
const endedStatesAlreadyAdmitted = "'claimed' sorts before every other state the claims table's CHECK admits, so " +
	"state >= 'claimed' admits the ended states ('done', 'failed', 'released') besides 'claimed', and the predicate's " +
	"other disjunct already admits exactly those: the whole condition is unchanged"

// leaseEndingNowIsConservative: a '<=' against now() made '<'.
const leaseEndingNowIsConservative = "the mutant differs only when the stored time equals the statement's now() to " +
	"the clock's resolution (the microsecond on Postgres, the millisecond on SQLite), and then it waits one tick longer: a lease, a poller's claim or a due time counts as " +
	"ended (or due) no earlier than before, so nothing is taken, listed or expired early and nothing that was " +
	"taken is lost (the next sweep or poll takes it); the boundary is held where it matters, a lease ending at the " +
	"statement's now() is over for every fenced write (TestStartEpisodeTreatsALeaseEndingNowAsOver)"

// appendStepRechecked: SQLite's AppendStep is three statements in one
// transaction.
const appendStepRechecked = "AppendStepLease runs in one BEGIN IMMEDIATE transaction with AppendStepEpisode and " +
	"AppendStep, each of which checks the claim's key, owner, fence and state 'claimed' exactly (and the episode " +
	"running under that owner); the adapter rolls the whole append back when either matches nothing, and no other " +
	"writer runs in between (the transaction holds the file's write lock), so a lease extended for a grant that is not " +
	"the caller's never commits"

// finishStepAfterItsClaim: SQLite's FinishEpisode is three statements in
// one transaction, the claim's first.
const finishStepAfterItsClaim = "FinishEpisodeStep runs only after FinishEpisodeClaim, in the same BEGIN IMMEDIATE " +
	"transaction, matched the claim's key, owner and fence exactly (no row: ErrLeaseLost and a rollback before this " +
	"statement runs); that write keeps the claim's owner and fence, so this statement's owner and fence conditions " +
	"re-read values already proven equal to the caller's"

// spentClaimRechecked: DeleteSpentClaims' DELETE re-checks its candidates.
const spentClaimRechecked = "the DELETE re-checks state and the horizon (max(lease_until, finished_at) < now - " +
	"horizon, strict) on every row it deletes, in the same statement and so under the same unixepoch('subsec'); the " +
	"candidate list's copy only chooses which rows are looked at, so loosening or removing it deletes nothing more"

// archivedIsNotLive: DeleteSpentClaims keeps the claim of a live episode.
const archivedIsNotLive = "archived_at IS NULL is implied by the status condition beside it (status queued, " +
	"running or blocked): ArchiveEpisodes archives only terminal episodes and RequeueEpisode, the one way back from " +
	"a terminal status, refuses archived ones, so an archived episode is never live and the condition keeps the same " +
	"claims either way"

// maintenanceDueIsWider: SQLite's MaintenanceDue read.
const maintenanceDueIsWider = "MaintenanceDue decides nothing itself: it only lets a maintenance run skip the " +
	"write lock when no statement would change a row, and each of its tests must be its statement's predicate or " +
	"wider; this mutant only widens one (a '<' made '<=', a bound or an archived_at condition removed, 'active' made " +
	">= 'active', which adds cleared findings), so at worst a run takes the lock and finds nothing, and the " +
	"statements under the lock decide again; every narrowing of a test is killed by EachKindOfWorkAloneIsDone and " +
	"DeletesStaleNodeRows (each kind of work alone in its database)"

// requeueOrphanRechecked: SQLite's RequeueOrphan is several statements in
// one transaction, its last one conditioned again.
const requeueOrphanRechecked = "RequeueOrphanTarget's status condition is checked again by RequeueOrphan, in " +
	"the same BEGIN IMMEDIATE transaction (status IN ('running', 'queued') with the attempts and archived_at), and " +
	"the adapter returns ErrBusy and rolls back everything, the fence included, when that matches nothing " +
	"(conformance RequeueOrphanLeavesFinishedWorkAlone)"

// finishedAtIsImplied: MaintenanceDue's finished_at IS NOT NULL beside a
// comparison of finished_at.
const finishedAtIsImplied = "finished_at IS NOT NULL is implied by the comparison beside it (finished_at < now - " +
	"retention), which is NULL, not true, for a NULL finished_at"

// spentClaimCandidatesDecide: DeleteSpentClaims' DELETE re-check made
// wider than its candidate list.
const spentClaimCandidatesDecide = "the candidate list (the IN subquery) keeps the strict horizon, in the same " +
	"statement and under the same unixepoch('subsec'), and the DELETE only takes rows from it: its own re-check made " +
	"'<=' admits nothing the candidates did not"

// cancelTargetIsARead: SQLite's CancelEpisode reads its target first.
const cancelTargetIsARead = "CancelEpisodeTarget writes nothing; CancelEpisode, next in the same BEGIN " +
	"IMMEDIATE transaction, re-checks status IN ('queued', 'running') and archived_at on the row it writes, and the " +
	"adapter returns ErrNotLive and rolls back when it matches nothing, so a terminal episode the read let through " +
	"is never written"

// finishClaimCheckedTheEpisode: SQLite's FinishEpisode, claim first.
const finishClaimCheckedTheEpisode = "FinishEpisodeClaim, first in the same BEGIN IMMEDIATE transaction, matched " +
	"only if this episode (r.id = @id) is queued or running, and the adapter stops with ErrLeaseLost when it did " +
	"not; no other writer runs in between, so the episode statement's own status check re-reads a status already proven"

// finishEpisodeNamesItsOwn: SQLite's FinishEpisode, episode last.
const finishEpisodeNamesItsOwn = "the episode statement that follows in the same BEGIN IMMEDIATE transaction " +
	"requires id = @id with status queued or running: when the mutant lets the claim statement match because " +
	"another, higher-numbered episode is open, the episode statement matches nothing and the adapter returns " +
	"ErrLeaseLost and rolls the claim write back (FinishIsFencedOnTheOwnerAndTheEpisodeItNames holds the outcome)"

// skippedStepHasNoEpisode: EndWorkflowStep's status = 'running' made
// >= 'running' admits 'skipped' too.
const skippedStepHasNoEpisode = "status >= 'running' admits 'skipped' besides 'running' (the steps' CHECK: " +
	"'pending', 'running', 'done', 'failed', 'skipped'), and a skipped step has no episode: only pending steps are " +
	"skipped (SkipPendingWorkflowSteps), a step is pending only as inserted, with no episode, and StartWorkflowStep " +
	"makes it running; so episode_id = @episode_id matches no skipped step"

// appendStepCheckedTwice: SQLite's AppendStep is three statements in one
// transaction, the last two with the same conditions.
const appendStepCheckedTwice = "AppendStepEpisode and AppendStep, second and third in AppendStep's BEGIN IMMEDIATE " +
	"transaction, check the same conditions: the episode running under the caller's owner, and the claim's key, " +
	"owner, fence and state 'claimed' (which AppendStepLease, first, checks too); the adapter rolls the whole append " +
	"back with ErrLeaseLost when any of them matches nothing, no other writer runs between them (the transaction " +
	"holds the file's write lock), and neither earlier statement writes a column these conditions read (only " +
	"lease_until, last_heartbeat_at and last_step_at), so a mutant that weakens one copy is decided by the other, unchanged"

// cancelTargetChecked: SQLite's CancelEpisode reads its target under the
// write lock first.
const cancelTargetChecked = "CancelEpisodeTarget, first in the same BEGIN IMMEDIATE transaction, returned the " +
	"episode only if it is queued or running and unarchived (no row: ErrNotLive before this statement runs), and no " +
	"other writer runs in between, so this statement's own copy of those conditions re-reads values already proven"

// cancelHeldWasRead: SQLite's cancel fence-out after the target's read.
const cancelHeldWasRead = "CancelEpisodeFence runs only for an episode the cancel ended, that is with held = 0 " +
	"as CancelEpisodeTarget read it earlier in the same BEGIN IMMEDIATE transaction: a claimed row then had " +
	"lease_until <= that statement's now, which is no later than this one's, so the lease condition is implied " +
	"(removed) or differs only when both statements ran in the very millisecond the lease ends ('<'); the grant is " +
	"then left claimed, but its episode is already canceled, and every fenced write of its holder is conditioned on " +
	"the episode being open (AppendStepEpisode, FinishEpisodeClaim), so none lands"

// endedClaimEndedItsLease: a claim out of state 'claimed' has no live
// lease.
const endedClaimEndedItsLease = "every statement that moves a claim out of state 'claimed' (done, failed or " +
	"released) sets its lease_until to that statement's now, so such a row's lease_until is at or before any later " +
	"now and never passes lease_until > now: the state condition beside the live-lease test is implied by it"

// cancelAtTheLeasesLastInstant: CancelEpisodeTarget's live-lease test
// made '>='.
const cancelAtTheLeasesLastInstant = "the mutant differs only when the claim's lease ends exactly at the cancel's " +
	"now (the millisecond), and then counts it held for that instant: the cancel is recorded (cancel_requested_at) " +
	"instead of ending the episode at once; the lease has ended, so recovery lists the episode and RequeueOrphan, " +
	"which honours cancel_requested_at, ends it canceled: it ends canceled either way and never runs again"

// startStatusIsQueuedOrRunning: CreateEpisode's s.status is one of two.
const startStatusIsQueuedOrRunning = "s.status is the subquery's CASE, 'running' or 'queued', and 'queued' sorts " +
	"before 'running', so s.status >= 'running' holds exactly when s.status = 'running'"

// createStartsUnderItsGrant: CreateEpisode's live-claim test made '>='.
const createStartsUnderItsGrant = "the mutant differs only when the key's claim lease ends exactly at this " +
	"statement's now (to the clock's resolution): the episode is then created queued rather than running, the grant " +
	"(the granted CTE on Postgres, CreateEpisodeGrant next in the transaction on SQLite) still grants the claim (its " +
	"lease is over), and the caller starts the queued episode " +
	"under that grant with StartEpisode, the path the statement's comment names for a lease that ends between the " +
	"two statements: it runs once, under the grant"

// expiredListIsCandidates: ListExpiredClaims made '<='.
const expiredListIsCandidates = "ListExpiredClaims only lists candidates and writes nothing; the mutant lists a " +
	"lease ending exactly at the listing's now one instant early, and taking it over is AcquireClaim's decision, which " +
	"re-checks the lease under its own statement and clock (state <> 'claimed' OR lease_until <= now)"

// operatorReadAtAnInstant: ListClaims' expired test made '<'.
const operatorReadAtAnInstant = "ListClaims is an operator read (leasehold claims ls) that no decision reads; the " +
	"mutant leaves out of -expired only a lease ending exactly at the listing's now, which the next listing shows " +
	"(ListClaimsFiltersByOwnerAndExpiry holds every other row of the filter)"

// rechecksWhatItsClaimMatched: SQLite's FinishEpisode and RetryEpisode,
// the episode write after the claim's.
const rechecksWhatItsClaimMatched = "the episode statement runs only after the same BEGIN IMMEDIATE transaction's " +
	"claim statement (FinishEpisodeClaim or RetryEpisodeClaim) matched the claim's key, owner, fence and state " +
	"'claimed' exactly (no row: ErrLeaseLost and a rollback before this statement runs); that write keeps owner and " +
	"fence, and no other writer runs in between, so this statement's owner and fence conditions re-read values " +
	"already proven equal to the caller's"

// claimWriteRecheckedByTheEpisodeWrite: SQLite's FinishEpisodeClaim and
// RetryEpisodeClaim, whose owner and fence the episode write re-checks.
const claimWriteRecheckedByTheEpisodeWrite = "the episode statement last in the same BEGIN IMMEDIATE transaction " +
	"(FinishEpisode, RetryEpisode) requires a claim with the caller's key, owner and fence exactly (its EXISTS), and " +
	"the claim statement keeps owner and fence: when the weakened claim statement ends or releases another grant " +
	"(another owner's at the same fence, or the same owner's later fence), that EXISTS matches nothing, and the " +
	"adapter returns ErrLeaseLost and rolls the claim write back, so it never commits (conformance " +
	"ZombieOfTheSameNodeIsRejectedByItsFence holds the outcome)"

// retryClaimCheckedTheEpisode: SQLite's RetryEpisode, claim first.
const retryClaimCheckedTheEpisode = "RetryEpisodeClaim, first in the same BEGIN IMMEDIATE transaction, matched only " +
	"if this episode (r.id = @id) is queued or running, and the adapter stops with ErrLeaseLost when it did not; no " +
	"other writer runs in between, so the episode statement's own status check re-reads a status already proven"

// groupFinishRechecked: SQLite's FinishEpisodes, the steps and episodes
// after the claims.
const groupFinishRechecked = "FinishEpisodesSteps and FinishEpisodes are sent, in the same BEGIN IMMEDIATE " +
	"transaction, with only the rows whose claim FinishEpisodesClaims ended, matched by the adapter on the exact " +
	"(key, fence) it returned; that statement required each row's claim owned by the sender, in state 'claimed', " +
	"and its episode (r.id = the row's id) queued or running, and wrote neither owner nor fence; no other writer runs " +
	"in between, so each row's claim with its exact key, owner and fence exists and its episode is open: a re-check " +
	"removed or made '>=' still admits exactly that row and its own claim, which a row already has"

// groupRowsNameDistinctClaims: FinishEpisodesClaims' SET subqueries.
const groupRowsNameDistinctClaims = "the subquery picks the row of rows naming this claim's key; episodes.FinishRows " +
	"refuses a group that names a claim twice, so there is one such row, and the statement's EXISTS already required " +
	"its fence equal to the claim's: the fence test in the subquery made '>=' picks the same row"

// claimErrorDetailIsForOperators: FinishEpisodesClaims' error_detail.
const claimErrorDetailIsForOperators = "the claim's error_detail is a copy of the run's error for operators (the " +
	"dashboard's episode page shows it); no statement reads it to decide anything, and the episode's own " +
	"error_detail, which FinishEpisodes writes, is unchanged: the mutant only leaves the claim's copy empty"

// reopenAfterItsEpisodeWrite: SQLite's ReopenTriggerRequest, and
// RequeueEpisode's archived test it backs.
const reopenAfterItsEpisodeWrite = "ReopenTriggerRequest is sent only after the episode write of the same BEGIN " +
	"IMMEDIATE transaction returned the episode queued (RetryEpisode not canceled, RequeueEpisode, RequeueOrphan " +
	"with status queued); each of those writes requires the episode unarchived (RequeueEpisode: archived_at IS NULL; " +
	"the other two: status queued or running, which only unarchived episodes have), and no writer runs in between, " +
	"so the request's own status and archived conditions re-read what was just written; and RequeueEpisode's " +
	"archived test is backed by this one: when either matches nothing the adapter rolls the whole requeue back " +
	"(ErrNotRetryable; conformance RequeueRefusesAnArchivedEpisode)"

// exactKeyComesFirst: SQLite's FindLiveEpisode made '>='.
const exactKeyComesFirst = "FindLiveEpisode is sent only after the insert conflicted on the key, in the same " +
	"BEGIN IMMEDIATE transaction, so a live episode with exactly that key exists; the statement searches the " +
	"partial unique index on dedupe_key (archived_at IS NULL), which yields keys in order, and the exact key is the " +
	"least key >= itself, so the row read is the same (DuplicatesNameTheLiveEpisode has live keys on both sides " +
	"of the duplicate's, older than it, and fails if the plan ever reads them first)"

// onlyTerminalEpisodesFinish: ArchiveEpisodes' status test beside an old
// finished_at.
const onlyTerminalEpisodesFinish = "every statement that sets an episode's finished_at also sets a terminal status " +
	"(FinishEpisode(s), CancelEpisode when it ends the episode, RetryEpisode and RequeueOrphan when a cancel was " +
	"asked, ExpireTriggerRequests' cancel), every statement that makes an episode queued or running again clears it " +
	"(RetryEpisode, RequeueEpisode, RequeueOrphan) or leaves it unset (creation, StartEpisode, ClaimForRecovery), and " +
	"none sets 'blocked': an episode whose finished_at is set is terminal, so the status test beside the finished_at " +
	"test is implied (ArchivesTerminalEpisodesPastRetention keeps a long-running episode unarchived)"

// retentionInstant: ArchiveEpisodes' or DeleteStaleNodes' age test made
// '<='.
const retentionInstant = "the mutant differs only when the row's time is exactly now minus the retention to the " +
	"clock's resolution, and then acts on it at that instant rather than a tick later; the retention is how long " +
	"history (a terminal episode, a node row that stopped heartbeating) is kept for operators, far beyond any lease, " +
	"and no coordination decision depends on that millisecond"

// spentClaimCandidatesOnly: DeleteSpentClaims' re-check on the deleted
// row removed.
const spentClaimCandidatesOnly = "the DELETE takes only rows of the candidate list (the IN subquery), which requires " +
	"the same state and horizon in the same statement, under the same unixepoch('subsec') and the write lock: " +
	"removing the DELETE's own copy admits nothing the candidates did not"

// operatorCountAtAnInstant: ListNodes' live-lease count made '>='.
const operatorCountAtAnInstant = "ListNodes is an operator read (leasehold nodes ls) that no decision reads; the " +
	"mutant counts as live a lease ending exactly at the listing's now (to the clock's resolution), which the next listing " +
	"does not (NodesListCountsEachNodesLiveLeases holds every other case)"

// claimForRecoveryGrantChecked: SQLite's ClaimForRecovery episode write
// after its grant.
const claimForRecoveryGrantChecked = "ClaimForRecoveryGrant, first in the same BEGIN IMMEDIATE transaction, granted " +
	"only for an episode running or queued and unarchived (no row: ErrBusy before this statement runs); it writes " +
	"only the claim row and no other writer runs in between, so the episode write's own status and archived " +
	"conditions re-read values already proven"

// recoveryWriteUnderItsOwnGrant: SQLite's ClaimForRecovery episode write,
// conditioned on the grant just made.
const recoveryWriteUnderItsOwnGrant = "the adapter passes the key, owner and fence that ClaimForRecoveryGrant " +
	"returned from the claim it wrote (state 'claimed'), earlier in the same BEGIN IMMEDIATE transaction, and no " +
	"other writer runs in between, so the claim conditions of the episode write re-read values the grant just " +
	"established: loosening one admits no other row"

// recoveryGrantBackedByItsEpisodeWrite: ClaimForRecoveryGrant's status
// test, which the episode write repeats.
const recoveryGrantBackedByItsEpisodeWrite = "ClaimForRecovery (the episode write), next in the same BEGIN " +
	"IMMEDIATE transaction, requires the episode running or queued and unarchived; when the weakened grant matched " +
	"a terminal episode, it matches nothing and the adapter returns ErrBusy and rolls the grant back, so it never " +
	"commits (conformance RecoveryLeavesLiveAndFinishedWorkAlone holds the outcome)"

// requeueOrphanTargetChecked: SQLite's RequeueOrphan episode write after
// its target read.
const requeueOrphanTargetChecked = "RequeueOrphanTarget, first in the same BEGIN IMMEDIATE transaction, matched the " +
	"episode running or queued, unarchived, with the attempts the sweeper listed (no row: ErrBusy before this " +
	"statement runs); RequeueOrphanFence, between them, writes only the claim row, and no other writer runs, so the " +
	"episode write's own copy of those conditions re-reads values already proven"

// staleInstant: the claim-less staleness test made '<='.
const staleInstant = "the mutant differs only when a claim-less running episode's last sign of life is exactly " +
	"now minus StaleAfter to the millisecond, and then takes it an instant early; StaleAfter is the operator's " +
	"margin over any run's silence, and a claim-less episode has no lease and no holder whose grant could be " +
	"overlapped (a holder would have a claim row); the next sweep takes it either way " +
	"(AClaimlessEpisodeIsAnOrphanOnlyOnceStale holds the bound on both sides)"

// raceWinnerIsTheLeastKey: Postgres's FindLiveEpisode made '>='.
const raceWinnerIsTheLeastKey = "FindLiveEpisode is sent only after the creating statement conflicted on the key " +
	"with an episode that committed meanwhile (TestCreateNamesTheWinnerOfARace), so a live episode with exactly that " +
	"key exists; the read searches the partial unique index on dedupe_key (archived_at IS NULL), which yields keys in " +
	"order, and the exact key is the least key >= itself (the test has live keys on both sides of the raced one)"

// instanceRunningIsTheLastStatus: a workflow instance's status >= 'running'.
const instanceRunningIsTheLastStatus = "status >= 'running' is status = 'running': 'running' sorts after every other " +
	"value the workflow instances table's CHECK admits ('done', 'failed', 'canceled')"

// regrantMovesTheHorizon: Postgres's DeleteSpentClaims without its state
// re-check on the locked row.
const regrantMovesTheHorizon = "the candidate list already required the state; a row that changed between the " +
	"snapshot and the DELETE's row lock went back to 'claimed' only by a grant, which set its lease_until to that " +
	"grant's now plus a lease, so the horizon re-check beside this one (greatest(lease_until, finished_at) < now - " +
	"horizon, re-evaluated on the locked row version) excludes it: removing the state re-check admits nothing"

// liveNodeAtTheBound: the dedupe key switch's (and its laggards listing's)
// liveness bound made '>='.
const liveNodeAtTheBound = "the mutant differs only when a node's last heartbeat is exactly live_ms old, to the " +
	"millisecond: that node counts as live, holding the switch back (and listed as why), one millisecond longer. " +
	"Membership only spares a live old node's inserts from being refused; what keeps a version 1 key out after the " +
	"switch is the insert trigger, whatever membership says, so no trigger can make a second episode either way"

// pollRecheckedInItsTransaction: SQLite's ClaimAvailable is three
// statements in one transaction.
const pollRecheckedInItsTransaction = "ClaimAvailableGrant and ClaimAvailableStart run in the same BEGIN IMMEDIATE " +
	"transaction as ClaimAvailable's pick, which chose only due, queued, unarchived episodes of the poller's scope and " +
	"cleared their run_after; the write lock keeps every other writer out until COMMIT, so the re-checks of status, " +
	"archived_at and of the grant the transaction just made (key, fence, owner, claimed) re-read what the " +
	"transaction itself proved or wrote"

// expiryInstant: ExpireAvailable's run_after < now - ttl made <=.
const expiryInstant = "the mutant differs only when run_after is exactly now - ttl to the clock's resolution; now is " +
	"the expiring statement's, which no caller knows or controls, and the TTL bounds how long available work may " +
	"wait, which expiring at that instant rather than a tick later does not change"

// liveAtItsLastInstant: ExpireAvailable's live-claim test made >=.
const liveAtItsLastInstant = "the mutant differs only when the claim's lease ends exactly at the expiry's now to the " +
	"clock's resolution, and then treats it as held for that instant: the episode is left to the next expiry (and, " +
	"its claim over, is recovery's or the pollers'), so nothing is canceled early and nothing is left behind"

// sleepHintInstant: NextAvailableDue's future test made '>='.
const sleepHintInstant = "NextAvailableDue only tells an idle poller how long to sleep; the mutant counts an " +
	"episode due exactly at the statement's now (to the clock's resolution) as due in 0 ms rather than leaving it to " +
	"the poll that follows: the poller polls at once either way, and ClaimAvailable decides"

// readBoundInstant: a bound of ListWaitingForNode, a read, made '>=' or
// '<='.
const readBoundInstant = "the mutant differs only when a time equals the read's bound exactly, to the " +
	"millisecond; ListWaitingForNode decides nothing (the pollers' claim decides who runs the work), and a read a " +
	"millisecond later sees it the other way: a silent node's row, or a waiting pair's overdue flag, one tick early"

// retryAfterItsClaim: SQLite's RetryEpisode, claim first.
const retryAfterItsClaim = "RetryEpisodeClaim, first in the same BEGIN IMMEDIATE transaction, released the claim " +
	"only if its key, owner, fence and state 'claimed' matched exactly (no row: ErrLeaseLost, nothing written); the " +
	"release keeps owner and fence, so the episode statement's owner condition re-reads a value already proven"

// availableIsQueuedAndLive: ListWaitingForNode's status and archived
// tests on an available episode.
const availableIsQueuedAndLive = "the read takes episodes with run_after set, and run_after is set only on a queued, " +
	"unarchived episode (available.sql's invariant: every write that starts, ends or archives an episode clears it " +
	"or takes only terminal ones), so the status and archived tests re-state it; the read decides nothing"

// runningIsNeverAvailable: ListOrphanedEpisodes' running branch's
// run_after test.
const runningIsNeverAvailable = "a running episode never has run_after set in this release: every write that starts " +
	"an episode clears it (StartEpisode, ClaimAvailable), so the running branch's test re-states the invariant " +
	"(an episode an older binary started after migration 00016 keeps it set; that deployment order is refused by " +
	"the README and noted as work for the next release)"

// claimForRecoveryRechecked: Postgres's ClaimForRecovery episode UPDATE
// after its orphan step.
const claimForRecoveryRechecked = "the orphan step of the same statement locked the episode row (FOR UPDATE OF e) " +
	"and checked it running or queued, unarchived and not available on its latest version; the lock holds until " +
	"the statement's transaction ends, so the final UPDATE's own status and archived tests re-read what that lock " +
	"already proved"
