package main

// mutation is one plausible mistake: the N-th (0: the only) occurrence of
// Old in File becomes New. Breaks: on a real server it would break a
// guarantee (a lost or duplicated run, a stolen live lease, a zombie
// write, a dropped trigger, lost data). Harmless: for a mutation the checks
// are not expected to catch, why it does no harm.
type mutation struct {
	ID, Class, File, Old, New, What string
	N                               int
	Breaks                          bool
	Harmless                        string
}

const (
	qc = "sql/queries/sqlserver/claims.sql"
	qe = "sql/queries/sqlserver/episodes.sql"
	qr = "sql/queries/sqlserver/recovery.sql"
	qt = "sql/queries/sqlserver/trigger_requests.sql"
	qf = "sql/queries/sqlserver/findings.sql"
	qn = "sql/queries/sqlserver/nodes.sql"
	qm = "sql/queries/sqlserver/maintenance.sql"
	qw = "sql/queries/sqlserver/workflows.sql"
	qb = "sql/queries/sqlserver/bounds.sql"
	qi = "sql/queries/sqlserver/inspect.sql"
	s1 = "sql/schema/sqlserver/00001_leasehold_init.sql"
	s2 = "sql/schema/sqlserver/00002_leasehold_deferred_findings.sql"
	s3 = "sql/schema/sqlserver/00003_leasehold_membership_maintenance.sql"
	s4 = "sql/schema/sqlserver/00004_leasehold_workflows.sql"
	s5 = "sql/schema/sqlserver/00005_leasehold_definitions.sql"
)

// Classes: pred (predicate parity), set (written values), fence, batch
// (all-or-nothing), grant, dur (durations), schema, hint, name (names and
// parameters), go (adapter call sites).
var mutations = []mutation{
	// claims.sql
	{ID: "C1", Class: "pred", File: qc, Old: "OR lease_until <= SYSUTCDATETIME());\n\nIF NOT EXISTS", New: "OR lease_until >= SYSUTCDATETIME());\n\nIF NOT EXISTS", Breaks: true, What: "AcquireClaim: lease_until <= now flipped to >= (every live lease re-granted)"},
	{ID: "C2", Class: "pred", File: qc, Old: "AND (state <> N'claimed' OR", New: "AND (state = N'claimed' OR", Breaks: true, What: "AcquireClaim: state <> claimed flipped to ="},
	{ID: "C3", Class: "grant", File: qc, Old: "    fence             = fence + 1,", New: "    fence             = fence,", Breaks: true, What: "AcquireClaim: grant without fence + 1"},
	{ID: "C4", Class: "dur", File: qc, Old: "DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),\n    claimed_at", New: "DATEADD(microsecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),\n    claimed_at", Breaks: true, What: "AcquireClaim: lease in microseconds (1,000x too short)"},
	{ID: "C5", Class: "batch", File: qc, Old: "IF ERROR_NUMBER() NOT IN (2601, 2627) THROW;", New: "IF ERROR_NUMBER() IN (2601, 2627) THROW;", What: "AcquireClaim: CATCH swallows everything but a duplicate (a deadlock reads as busy)"},
	{ID: "C6", Class: "hint", File: qc, Old: "UPDATE leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)\nSET state", New: "UPDATE leasehold_work_claims\nSET state", Breaks: true, What: "AcquireClaim: steal without UPDLOCK, HOLDLOCK"},
	{ID: "C7", Class: "grant", File: qc, Old: "IF NOT EXISTS (SELECT 1 FROM @granted)\nBEGIN", New: "IF EXISTS (SELECT 1 FROM @granted)\nBEGIN", Breaks: true, What: "AcquireClaim: fresh insert only when the steal granted (a new key is never acquirable)"},
	{ID: "C8", Class: "grant", File: qc, Old: "SYSUTCDATETIME(), SYSUTCDATETIME(), 1, 1, N'fresh', @work_type", New: "SYSUTCDATETIME(), SYSUTCDATETIME(), 1, 2, N'fresh', @work_type", What: "AcquireClaim: a fresh claim starts at fence 2"},
	{ID: "C9", Class: "name", File: qc, Old: "  AND fence = @fence\n  AND state = N'claimed';\n\n-- name: RenewClaims", New: "  AND state = N'claimed';\n\n-- name: RenewClaims", Breaks: true, What: "RenewClaim without the fence (A->B->A zombie renews)"},
	{ID: "C10", Class: "fence", File: qc, Old: "    ON c.dedupe_key = held.dedupe_key\n   AND c.fence = held.fence\nWHERE c.owner_node = @owner_node\n  AND c.state = N'claimed';\n\n-- name: CompleteClaim", New: "    ON c.dedupe_key = held.dedupe_key\nWHERE c.owner_node = @owner_node\n  AND c.state = N'claimed';\n\n-- name: CompleteClaim", Breaks: true, What: "RenewClaims: pairs no longer matched on fence"},
	{ID: "C11", Class: "fence", File: qc, Old: "  AND fence = @fence\n  AND state = N'claimed';\n\n-- name: FailClaim", New: "  AND fence = @fence;\n\n-- name: FailClaim", Breaks: true, What: "CompleteClaim without state = claimed"},
	{ID: "C12", Class: "name", File: qc, Old: "  AND owner_node = @owner_node\n  AND fence = @fence\n  AND state = N'claimed';\n\n-- name: ReleaseClaim", New: "  AND fence = @fence\n  AND state = N'claimed';\n\n-- name: ReleaseClaim", N: 1, Breaks: true, What: "FailClaim without the owner"},
	{ID: "C13", Class: "set", File: qc, Old: "SET state       = N'released',\n    lease_until = SYSUTCDATETIME()\nOUTPUT inserted.dedupe_key, inserted.fence", New: "SET state       = N'done',\n    lease_until = SYSUTCDATETIME()\nOUTPUT inserted.dedupe_key, inserted.fence", What: "ReleaseClaims marks the claims done instead of released"},
	{ID: "C14", Class: "pred", File: qc, Old: "  AND lease_until < SYSUTCDATETIME()\nORDER BY lease_until;", New: "  AND lease_until > SYSUTCDATETIME()\nORDER BY lease_until;", What: "ListExpiredClaims lists live leases (read-only; AcquireClaim re-checks)"},
	{ID: "C15", Class: "pred", File: qc, Old: "WHERE (@owner_node = N'' OR owner_node = @owner_node)", New: "WHERE (@owner_node <> N'' OR owner_node = @owner_node)", What: "ListClaims owner filter inverted (operator read)"},
	{ID: "C16", Class: "dur", File: qc, Old: "SET lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),\n    last_heartbeat_at = SYSUTCDATETIME()\nOUTPUT inserted.lease_until", New: "SET lease_until       = DATEADD(second, CAST(@lease_ms AS int), SYSUTCDATETIME()),\n    last_heartbeat_at = SYSUTCDATETIME()\nOUTPUT inserted.lease_until", Breaks: true, What: "RenewClaim extends by seconds (a dead node's lease lasts 1,000x longer)"},
	{ID: "C17", Class: "dur", File: qc, Old: "SET lease_until       = DATEADD(millisecond, CAST(@lease_ms AS int), SYSUTCDATETIME()),\n    last_heartbeat_at = SYSUTCDATETIME()\nOUTPUT inserted.lease_until", New: "SET lease_until       = DATEADD(millisecond, -CAST(@lease_ms AS int), SYSUTCDATETIME()),\n    last_heartbeat_at = SYSUTCDATETIME()\nOUTPUT inserted.lease_until", Breaks: true, What: "RenewClaim sets the lease into the past"},

	// episodes.sql
	{ID: "E1", Class: "batch", File: qe, Old: "IF ERROR_NUMBER() NOT IN (2601, 2627) THROW;", New: "IF ERROR_NUMBER() IN (2601, 2627) THROW;", Breaks: true, What: "CreateEpisode: a deadlock becomes a silent duplicate (trigger dropped)"},
	{ID: "E2", Class: "grant", File: qe, Old: "        IF NOT EXISTS (SELECT 1 FROM @granted)\n            INSERT INTO", New: "            INSERT INTO", Breaks: true, What: "CreateEpisode: claim insert even after the grant UPDATE (2627 -> episode dropped)"},
	{ID: "E3", Class: "grant", File: qe, Old: "            WHERE NOT EXISTS (SELECT 1 FROM leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)\n                              WHERE dedupe_key = @claim_key);", New: "            ;", Breaks: true, What: "CreateEpisode: claim insert without its NOT EXISTS guard"},
	{ID: "E4", Class: "batch", File: qe, Old: "BEGIN TRY\n    BEGIN TRANSACTION;\n", New: "BEGIN TRY\n", Breaks: true, What: "CreateEpisode: episode and claim no longer in one transaction"},
	{ID: "E5", Class: "pred", File: qe, Old: "                AND c.lease_until > SYSUTCDATETIME());", New: "                );", Breaks: true, What: "StartEpisode without lease_until > now"},
	{ID: "E6", Class: "fence", File: qe, Old: "              WHERE c.dedupe_key = @claim_key\n                AND c.owner_node = @owner_node\n", New: "              WHERE c.dedupe_key = @claim_key\n", Breaks: true, What: "StartEpisode's claim check without the owner"},
	{ID: "E7", Class: "pred", File: qe, Old: "  AND status IN (N'queued', N'running')\n  AND archived_at IS NULL\n  AND EXISTS", New: "  AND status IN (N'queued', N'running', N'done')\n  AND archived_at IS NULL\n  AND EXISTS", Breaks: true, What: "StartEpisode restarts a done episode"},
	{ID: "E8", Class: "fence", File: qe, Old: "  AND fence = @fence\n  AND state = N'claimed';\n\nUPDATE leasehold_episodes\nSET last_step_at", New: "  AND state = N'claimed';\n\nUPDATE leasehold_episodes\nSET last_step_at", Breaks: true, What: "AppendStep's claim update without AND fence = @fence (zombie journals after A->B->A)"},
	{ID: "E9", Class: "fence", File: qe, Old: "  AND owner_node = @owner_node\n  AND EXISTS (SELECT 1 FROM @lease);", New: "  AND owner_node = @owner_node;", Breaks: true, What: "AppendStep's episode update no longer conditioned on the lease"},
	{ID: "E10", Class: "batch", File: qe, Old: "IF EXISTS (SELECT 1 FROM @step)\n    COMMIT TRANSACTION;\nELSE\n    ROLLBACK TRANSACTION;", New: "COMMIT TRANSACTION;", What: "AppendStep commits a lease extension whose step matched nothing",
		Harmless: "only the live grant's own lease can have been extended (the claim UPDATE is fenced), and the episode and step writes depend on it; an extension by the valid owner is what a heartbeat does anyway"},
	{ID: "E11", Class: "set", File: qe, Old: "        WHEN lease_until > DATEADD(millisecond", New: "        WHEN lease_until < DATEADD(millisecond", Breaks: true, What: "AppendStep shortens the lease (least instead of greatest)"},
	{ID: "E12", Class: "batch", File: qe, Old: "  AND status IN (N'queued', N'running')\n  AND EXISTS (SELECT 1 FROM @claim);", New: "  AND status IN (N'queued', N'running');", N: 1, Breaks: true, What: "FinishEpisode: the episode write no longer conditioned on the claim write (zombie's terminal write)"},
	{ID: "E13", Class: "pred", File: qe, Old: "  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r\n              WHERE r.id = @id AND r.status IN (N'queued', N'running'));", New: ";", N: 1, What: "FinishEpisode's claim update no longer checks the episode is open (rolled back anyway)"},
	{ID: "E14", Class: "dur", File: qi, Old: "< DATEADD(millisecond, -CAST(@stale_after_ms AS int), SYSUTCDATETIME())))\nORDER BY id DESC;", New: "< DATEADD(millisecond, CAST(@stale_after_ms AS int), SYSUTCDATETIME())))\nORDER BY id DESC;", What: "InspectEpisodes stale cut-off in the future (operator read)"},
	{ID: "E15", Class: "batch", File: qe, Old: "OUTPUT inserted.dedupe_key INTO @claim\n", New: "", N: 1, Breaks: true, What: "FinishEpisode's claim update outputs nothing (no finish ever commits)"},

	{ID: "E16", Class: "fence", File: qe, Old: "  AND fence = @fence\n  AND state = N'claimed'\n  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r", New: "  AND state = N'claimed'\n  AND EXISTS (SELECT 1 FROM leasehold_episodes AS r", N: 2, Breaks: true, What: "RetryEpisode's claim release without the fence (a zombie requeues the live run's episode)"},
	{ID: "E17", Class: "batch", File: qe, Old: "  AND status IN (N'queued', N'running')\n  AND EXISTS (SELECT 1 FROM @claim);", New: "  AND status IN (N'queued', N'running');", N: 2, Breaks: true, What: "RetryEpisode requeues the episode without its claim release (a stolen run requeued)"},
	{ID: "E18", Class: "dur", File: qe, Old: "    run_after   = DATEADD(second, CAST(@backoff_ms / 1000 AS int),", New: "    run_after   = DATEADD(second, -CAST(@backoff_ms / 1000 AS int),", What: "RetryEpisode's backoff in the past (the retry is due at once)"},

	// recovery.sql
	{ID: "R1", Class: "pred", File: qr, Old: "         OR c.state IN (N'released', N'done', N'failed')\n", New: "         OR c.state IN (N'done', N'failed')\n", Breaks: true, What: "ListOrphanedEpisodes (running) no longer lists released claims (drained work never recovered)"},
	{ID: "R2", Class: "pred", File: qr, Old: "SYSUTCDATETIME()) OR c.state IN (N'released', N'done', N'failed'))", New: "SYSUTCDATETIME()) OR c.state IN (N'done', N'failed'))", Breaks: true, What: "ListOrphanedEpisodes (queued) no longer lists released claims"},
	{ID: "R3", Class: "pred", File: qr, Old: "      AND NOT EXISTS (SELECT 1 FROM leasehold_trigger_requests AS r", New: "      AND EXISTS (SELECT 1 FROM leasehold_trigger_requests AS r", N: 1, Breaks: true, What: "ListOrphanedEpisodes lists only episodes with an open request (available work recovered, orphans never)"},
	{ID: "R4", Class: "grant", File: qr, N: 1, Old: "           OR state IN (N'released', N'done', N'failed'));", New: "           OR state IN (N'done', N'failed'));", Breaks: true, What: "ClaimForRecovery no longer takes released claims over"},
	{ID: "R5", Class: "batch", File: qr, Old: "      AND archived_at IS NULL\n      AND EXISTS (SELECT 1 FROM @grant);", New: "      AND archived_at IS NULL;", Breaks: true, What: "ClaimForRecovery re-queues the episode without a grant (a live run re-queued)"},
	{ID: "R6", Class: "hint", File: qr, N: 1, Old: "    UPDATE leasehold_work_claims WITH (UPDLOCK, HOLDLOCK)\n    SET state", New: "    UPDATE leasehold_work_claims\n    SET state", Breaks: true, What: "ClaimForRecovery's grant without UPDLOCK, HOLDLOCK"},
	{ID: "R7", Class: "pred", File: qr, N: 1, Old: "      AND ((state = N'claimed' AND lease_until <= SYSUTCDATETIME())", New: "      AND ((state = N'claimed' AND lease_until < SYSUTCDATETIME())", What: "ClaimForRecovery: <= now becomes < now (one microsecond later)"},
	{ID: "R8", Class: "dur", File: qr, N: 1, Old: "             < DATEADD(millisecond, -CAST(@stale_after_ms AS int), SYSUTCDATETIME()))\n  );", New: "             < DATEADD(millisecond, CAST(@stale_after_ms AS int), SYSUTCDATETIME()))\n  );", Breaks: true, What: "ClaimForRecovery: stale cut-off in the future (live claim-less runs taken over)"},
	{ID: "R9", Class: "grant", File: qr, Old: "        fence             = fence + 1,", New: "        fence             = fence,", Breaks: true, What: "ClaimForRecovery grants without fence + 1"},
	{ID: "R10", Class: "batch", File: qr, Old: "    BEGIN TRANSACTION;\n\n    -- attempt + 1", New: "    -- attempt + 1", Breaks: true, What: "ClaimForRecovery: grant and episode update not in one transaction"},
	{ID: "R11", Class: "batch", File: qr, Old: "BEGIN TRANSACTION;\n\nUPDATE leasehold_agent_definitions", New: "UPDATE leasehold_agent_definitions", What: "PutAgentDefinition's upsert outside a transaction (2627 on a race)"},
	{ID: "R12", Class: "set", File: qr, Old: "    max_attempts    = @max_attempts,\n", New: "", What: "PutAgentDefinition no longer updates max_attempts"},
	{ID: "R13", Class: "batch", File: qr, Old: "IF @@ROWCOUNT = 0\n    INSERT INTO leasehold_agent_definitions", New: "IF @@ROWCOUNT = 1\n    INSERT INTO leasehold_agent_definitions", Breaks: true, What: "PutAgentDefinition inserts when the row exists, never when absent (policies never recorded)"},
	{ID: "R14", Class: "name", File: qr, Old: "WHERE actor_id = @actor_id AND expectation_id = @expectation_id;\n\n-- name: PutAgentDefinition", New: "WHERE actor_id = @actor_id;\n\n-- name: PutAgentDefinition", What: "GetAgentRecoveryPolicy ignores the expectation"},
	{ID: "R15", Class: "pred", File: qr, N: 1, Old: "IF @orphan_key IS NOT NULL AND @open_request = 0", New: "IF @orphan_key IS NOT NULL", Breaks: true, What: "ClaimForRecovery takes over an episode with an open trigger request (a retry's backoff skipped, available work recovered)"},

	// trigger_requests.sql
	{ID: "T1", Class: "grant", File: qt, Old: "        fence             = fence + 1,", New: "        fence             = fence,", Breaks: true, What: "DispatchTriggerRequest grants without fence + 1"},
	{ID: "T2", Class: "name", File: qt, Old: "  AND fence = @fence\n  AND status = N'claimed';", New: "  AND status = N'claimed';", Breaks: true, What: "DispatchTriggerRequest not fenced on the request"},
	{ID: "T3", Class: "fence", File: qt, Old: "  AND claimed_by = @owner_node\n", New: "", Breaks: true, What: "DispatchTriggerRequest not fenced on the poller"},
	{ID: "T4", Class: "hint", File: qt, Old: "WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)", New: "WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)", What: "ClaimTriggerRequests waits instead of skipping locked rows"},
	{ID: "T5", Class: "pred", File: qt, Old: "   OR (status = N'claimed' AND claim_until <= SYSUTCDATETIME());", New: "   OR status = N'claimed';", What: "ClaimTriggerRequests takes live request claims (the hand-over stays fenced)"},
	{ID: "T6", Class: "pred", File: qt, Old: "        AND c.lease_until > SYSUTCDATETIME());", New: "        );", What: "ExpireTriggerRequests keeps episodes whose claim expired (recovery finds them)"},
	{ID: "T7", Class: "pred", File: qt, Old: "  AND NOT EXISTS (\n      SELECT 1 FROM leasehold_work_claims AS c WITH (UPDLOCK, HOLDLOCK)", New: "  AND EXISTS (\n      SELECT 1 FROM leasehold_work_claims AS c WITH (UPDLOCK, HOLDLOCK)", Breaks: true, What: "ExpireTriggerRequests cancels episodes under a live lease"},
	{ID: "T8", Class: "dur", File: qt, Old: "DATEADD(second, -CAST(@ttl_ms / 1000 AS int),", New: "DATEADD(minute, -CAST(@ttl_ms / 1000 AS int),", What: "ExpireTriggerRequests TTL 60x longer"},
	{ID: "T9", Class: "dur", File: qt, Old: "DATEADD(millisecond, -CAST(@ttl_ms % 1000 AS int)", New: "DATEADD(millisecond, CAST(@ttl_ms % 1000 AS int)", What: "ExpireTriggerRequests: the split's millisecond part with the wrong sign (under 2 s off)"},
	{ID: "T10", Class: "pred", File: qt, Old: "              AND archived_at IS NULL\n              AND dedupe_key = @dedupe_key);", New: "              AND dedupe_key = @dedupe_key);", Breaks: true, What: "CreateDeferredEpisode treats archived episodes as duplicates (trigger never runs again)"},
	{ID: "T11", Class: "batch", File: qt, Old: "    IF @nested = 1\n        THROW;\n", New: "", Breaks: true, What: "CreateDeferredEpisode's CATCH no longer re-throws inside a caller's transaction"},
	{ID: "T12", Class: "batch", File: qt, Old: "    FROM @created AS c;", New: "    FROM @created AS c WHERE 1 = 0;", Breaks: true, What: "CreateDeferredEpisode never writes the request (deferred episode never run)"},
	{ID: "T13", Class: "set", File: qt, Old: "SET status      = N'expired',", New: "SET status      = N'completed',", What: "ExpireTriggerRequests marks requests completed instead of expired"},

	// findings.sql
	{ID: "F1", Class: "fence", File: qf, Old: "IF @held = 1\n    SELECT @ep_id = e.id, @ep_actor", New: "    SELECT @ep_id = e.id, @ep_actor", Breaks: true, What: "RaiseFinding reads the episode without the fence check"},
	{ID: "F2", Class: "fence", File: qf, Old: "  AND c.owner_node = @owner_node\n", New: "", N: 2, Breaks: true, What: "UpdateFinding's fence check without the owner"},
	{ID: "F3", Class: "hint", File: qf, Old: "FROM leasehold_work_claims AS c WITH (UPDLOCK, ROWLOCK)", New: "FROM leasehold_work_claims AS c", N: 3, Breaks: true, What: "ClearFinding's fence check without UPDLOCK (a steal slips in)"},
	{ID: "F4", Class: "hint", File: qf, Old: "    UPDATE leasehold_findings WITH (UPDLOCK, HOLDLOCK)", New: "    UPDATE leasehold_findings WITH (UPDLOCK, ROWLOCK)", What: "RaiseFinding's upsert without HOLDLOCK (concurrent raises get 2601, retried)"},
	{ID: "F5", Class: "pred", File: qf, Old: "      AND status = N'active';\n\nCOMMIT TRANSACTION;\n\nSELECT CAST(CASE WHEN @ep_id IS NULL THEN 0 ELSE 1 END AS int) AS lease_held,\n    CAST((SELECT COUNT(*) FROM @updated)", New: ";\n\nCOMMIT TRANSACTION;\n\nSELECT CAST(CASE WHEN @ep_id IS NULL THEN 0 ELSE 1 END AS int) AS lease_held,\n    CAST((SELECT COUNT(*) FROM @updated)", What: "UpdateFinding updates cleared history rows too"},
	{ID: "F6", Class: "pred", File: qf, Old: "      AND e.status = N'running'", New: "      AND e.status = N'queued'", N: 1, What: "RaiseFinding requires a queued episode"},

	// nodes.sql, workflows.sql, maintenance.sql, bounds.sql
	{ID: "N1", Class: "batch", File: qn, Old: "BEGIN TRANSACTION;\n\nUPDATE leasehold_nodes WITH (UPDLOCK, HOLDLOCK)\nSET stack", New: "UPDATE leasehold_nodes WITH (UPDLOCK, HOLDLOCK)\nSET stack", What: "RegisterNode's upsert outside a transaction (advisory rows)"},
	{ID: "N2", Class: "dur", File: qn, Old: "DATEDIFF_BIG(millisecond,", New: "DATEDIFF_BIG(second,", What: "ListNodes heartbeat age in seconds (operator read)"},
	{ID: "N3", Class: "pred", File: qn, Old: "       AND c.lease_until > SYSUTCDATETIME()) AS live_leases", New: "       AND c.lease_until < SYSUTCDATETIME()) AS live_leases", What: "ListNodes counts expired leases (operator read)"},
	{ID: "W1", Class: "hint", File: qw, Old: "    SELECT 1 FROM leasehold_workflow_instances WITH (UPDLOCK, HOLDLOCK)", New: "    SELECT 1 FROM leasehold_workflow_instances", What: "CreateWorkflowInstance's guard without the key-range lock (a race raises 2601)"},
	{ID: "W2", Class: "pred", File: qw, Old: "  AND status = N'running'\n  AND episode_id = @episode_id;", New: "  AND episode_id = @episode_id;", Breaks: true, What: "EndWorkflowStep ends a step that is no longer running (stale end advances twice)"},
	{ID: "W3", Class: "name", File: qw, Old: "  AND COALESCE(episode_id, 0) = @from_episode_id;", New: ";", N: 1, Breaks: true, What: "StartWorkflowStep not conditioned on the episode the caller saw"},
	{ID: "W4", Class: "pred", File: qw, Old: "  AND status = N'running';\n\nSELECT COUNT_BIG(*) AS rows_affected FROM @finished;", New: ";\n\nSELECT COUNT_BIG(*) AS rows_affected FROM @finished;", What: "FinishWorkflowInstance re-finishes ended instances"},
	{ID: "W5", Class: "hint", File: qw, Old: "WITH (UPDLOCK, HOLDLOCK, ROWLOCK)", New: "WITH (HOLDLOCK, ROWLOCK)", Breaks: true, What: "LockWorkflowInstance without UPDLOCK (fan-in misses a join)"},
	{ID: "X1", Class: "pred", File: qm, Old: "      AND e.finished_at < DATEADD(second", New: "      AND e.finished_at > DATEADD(second", Breaks: true, What: "ArchiveEpisodes retention comparison flipped (fresh episodes archived, journals purged early)"},
	{ID: "X2", Class: "pred", File: qm, Old: "    WHERE e.archived_at IS NOT NULL\n      AND e.journal_purged = 0);", New: "    WHERE e.journal_purged = 0);", Breaks: true, What: "PurgeArchivedSteps without archived_at IS NOT NULL (live journals deleted)"},
	{ID: "X3", Class: "pred", File: qm, Old: "      AND e.status IN (N'done', N'failed', N'partially_failed', N'canceled')", New: "      AND e.status IN (N'done', N'running', N'failed', N'partially_failed', N'canceled')", Breaks: true, What: "ArchiveEpisodes archives running episodes"},
	{ID: "X4", Class: "pred", File: qm, Old: "  AND state IN (N'done', N'failed', N'released')\n  AND CASE", New: "  AND CASE", Breaks: true, What: "DeleteSpentClaims without the re-check on the locked row (a re-granted claim deleted, fence reset)"},
	{ID: "X5", Class: "pred", File: qm, Old: "            AND e.status IN (N'queued', N'running', N'blocked'))\n      AND NOT (", New: "            AND e.status IN (N'queued', N'running'))\n      AND NOT (", Breaks: true, What: "DeleteSpentClaims deletes the claim of a blocked episode"},
	{ID: "X6", Class: "dur", File: qm, Old: "DATEADD(second, -CAST(@retention_ms / 1000 AS int),", New: "DATEADD(millisecond, -CAST(@retention_ms / 1000 AS int),", Breaks: true, What: "ArchiveEpisodes retention 1,000x shorter"},
	{ID: "X7", Class: "pred", File: qm, Old: "      AND NOT EXISTS (SELECT 1 FROM leasehold_episode_steps AS s WHERE s.episode_id = x.id));", New: "      AND EXISTS (SELECT 1 FROM leasehold_episode_steps AS s WHERE s.episode_id = x.id));", What: "MarkJournalsPurged marks episodes that still have a journal (kept for ever)"},
	{ID: "X8", Class: "name", File: qm, Old: "    @LockTimeout = 0;", New: "    @LockTimeout = -1;", What: "TryMaintenanceLock waits for the lock instead of answering at once",
		Harmless: "exclusion is unchanged (still one maintenance run at a time, the lock is the transaction's); a second maintainer waits for the first run's commit instead of skipping its turn: slower, never wrong"},
	{ID: "B1", Class: "name", File: qb, Old: "DECLARE @leasehold_lock_timeout_ms int = CAST(@bound_ms AS int);", New: "DECLARE @leasehold_lock_timeout_ms int = -1;", N: 2, What: "BoundLockWait waits for ever (the frozen-holder bound is gone)"},

	// schema
	{ID: "S1", Class: "schema", File: s1, Old: "    WHERE dedupe_key IS NOT NULL AND archived_at IS NULL;", New: "    WHERE dedupe_key IS NOT NULL;", Breaks: true, What: "dedupe index filter without archived_at IS NULL (a trigger never runs again after archive)"},
	{ID: "S2", Class: "schema", File: s1, Old: "CREATE UNIQUE NONCLUSTERED INDEX leasehold_episodes_dedupe_key_idx", New: "CREATE NONCLUSTERED INDEX leasehold_episodes_dedupe_key_idx", Breaks: true, What: "dedupe index not UNIQUE (N nodes make N episodes)"},
	{ID: "S3", Class: "schema", File: s1, Old: "    CONSTRAINT leasehold_work_claims_pkey PRIMARY KEY NONCLUSTERED (dedupe_key)\n        WITH (FILLFACTOR = 80),\n", New: "", Breaks: true, What: "claims primary key dropped (two fresh grants of one key)"},
	{ID: "S4", Class: "schema", File: s1, Old: "    dedupe_key        nvarchar(512) COLLATE Latin1_General_100_BIN2 NOT NULL,", New: "    dedupe_key        nvarchar(512) NOT NULL,", Breaks: true, What: "claims key case-insensitive (two keys share one lease)"},
	{ID: "S5", Class: "schema", File: s1, Old: "    dedupe_key      nvarchar(512) COLLATE Latin1_General_100_BIN2 NULL,", New: "    dedupe_key      nvarchar(512) NULL,", Breaks: true, What: "episode dedupe key case-insensitive (a trigger dropped as a duplicate)"},
	{ID: "S6", Class: "schema", File: s1, Old: "    WHERE dedupe_key IS NOT NULL AND archived_at IS NULL;", New: "    WHERE archived_at IS NULL;", Breaks: true, What: "dedupe index admits one NULL key only (keyless episodes fail)"},
	{ID: "S7", Class: "schema", File: s2, Old: "    ON leasehold_findings (env, finding_key)\n    WHERE status = N'active';", New: "    ON leasehold_findings (env, finding_key);", Breaks: true, What: "active-finding index unfiltered (raise, clear, raise collides)"},
	{ID: "S8", Class: "schema", File: s2, Old: "    CONSTRAINT leasehold_trigger_requests_episode_key UNIQUE (episode_id),\n", New: "", Breaks: true, What: "trigger requests: several per episode (recovery's early read is no longer sound)"},
	{ID: "S9", Class: "schema", File: s4, Old: "    ON leasehold_workflow_instances (workflow_id, subject, env)\n    WHERE status = N'running';", New: "    ON leasehold_workflow_instances (workflow_id, subject)\n    WHERE status = N'running';", Breaks: true, What: "running-instance key without env (envs block each other)"},
	{ID: "S10", Class: "schema", File: s4, Old: "    ON leasehold_workflow_steps (episode_id)\n    WHERE episode_id IS NOT NULL;", New: "    ON leasehold_workflow_steps (episode_id);", Breaks: true, What: "step-episode index unfiltered (only one pending step in the database)"},
	{ID: "S11", Class: "schema", File: s5, Old: "max_attempts >= 0);", New: "max_attempts >= 1);", What: "agent definitions check stricter than Postgres"},
	{ID: "S12", Class: "schema", File: s1, Old: "        REFERENCES leasehold_episodes (id) ON DELETE CASCADE,\n    CONSTRAINT leasehold_episode_steps_step_no_key", New: "        REFERENCES leasehold_episodes (id),\n    CONSTRAINT leasehold_episode_steps_step_no_key", What: "steps foreign key without ON DELETE CASCADE"},
	{ID: "S13", Class: "schema", File: s1, Old: "CHECK (state IN (N'claimed', N'done', N'failed', N'released')),", New: "CHECK (state IN (N'claimed', N'done', N'failed')),", What: "claims state check rejects released"},
	{ID: "S14", Class: "schema", File: s3, Old: "    WHERE archived_at IS NOT NULL AND journal_purged = 0;", New: "    WHERE journal_purged = 0;", What: "unpurged index filter widened (performance)"},
	{ID: "S15", Class: "schema", File: s1, Old: "    CONSTRAINT leasehold_episode_steps_step_no_key UNIQUE (episode_id, step_no)", New: "    CONSTRAINT leasehold_episode_steps_step_no_key UNIQUE (step_no, episode_id)", What: "step journal unique key columns reordered (same uniqueness, other seek order)"},

	// work that flows: the start folded into creation, cancel, retry, recovery's requeue
	{ID: "Q10", Class: "fence", File: qe, Old: "    ON c.dedupe_key = f.dedupe_key\n   AND c.fence = f.fence\nWHERE c.owner_node = @owner_node", New: "    ON c.dedupe_key = f.dedupe_key\nWHERE c.owner_node = @owner_node", Breaks: true, What: "FinishEpisodes' claim update without the row's fence (a zombie in a group finishes the live run's episode)"},
	{ID: "Q11", Class: "batch", File: qe, Old: "JOIN @claim AS m ON m.dedupe_key = f.claim_key AND m.fence = f.fence\nWHERE e.status IN (N'queued', N'running');", New: "WHERE e.status IN (N'queued', N'running');", Breaks: true, What: "FinishEpisodes' episode update no longer joined on the claims that matched (a stolen run's row finishes its episode)"},
	{ID: "Q1", Class: "batch", File: qe, Old: "        IF @start = 1 AND EXISTS (SELECT 1 FROM @granted)", New: "        IF @start = 1", Breaks: true, What: "CreateEpisode starts an episode whose claim it did not grant (a run without a lease)"},
	{ID: "Q2", Class: "pred", File: qe, Old: "    WHERE dedupe_key = @claim_key\n      AND state = N'claimed'\n      AND lease_until <= SYSUTCDATETIME();", New: "    WHERE dedupe_key = @claim_key\n      AND state = N'claimed';", Breaks: true, What: "CancelEpisode fences out a live grant too (the run's journal and finish fail; lease_lost instead of canceled)"},
	{ID: "Q3", Class: "set", File: qe, Old: "SET status       = CASE WHEN cancel_requested_at IS NULL THEN N'queued' ELSE N'canceled' END,", New: "SET status       = N'queued',", Breaks: true, What: "RetryEpisode requeues an episode whose cancel was requested (a canceled payment runs again)"},
	{ID: "Q4", Class: "pred", File: qe, Old: "  AND status IN (N'failed', N'canceled')\n  AND archived_at IS NULL;", New: "  AND status IN (N'failed', N'canceled', N'done')\n  AND archived_at IS NULL;", Breaks: true, What: "RequeueEpisode reopens done work (a second run of a finished episode)"},
	{ID: "Q5", Class: "pred", File: qe, Old: "  AND c.owner_node = @owner_node\n  AND c.state = N'claimed';", New: "  AND c.state = N'claimed';", What: "ListCancelRequests lists other holders' episodes too",
		Harmless: "the holder cancels only runs it holds itself, matched by episode and fence; other nodes' requests are ignored"},
	{ID: "Q6", Class: "pred", File: qr, Old: "  AND e.attempts = @attempts\n", New: "", What: "RequeueOrphan's first read no longer compares the listed attempts",
		Harmless: "the episode UPDATE compares them again on the locked row, which is what decides (Q7); the first read only saves a transaction"},
	{ID: "Q7", Class: "pred", File: qr, Old: "          AND attempts = @attempts\n", New: "", Breaks: true, What: "RequeueOrphan's episode update no longer compares the listed attempts (a second sweeper requeues it again: attempts counted twice)"},
	{ID: "Q8", Class: "pred", File: qr, Old: "    WHERE dedupe_key = @orphan_key\n      AND ((state = N'claimed' AND lease_until <= SYSUTCDATETIME())\n           OR state IN (N'released', N'done', N'failed'));\n\n    -- Given back", New: "    WHERE dedupe_key = @orphan_key\n      AND (state = N'claimed'\n           OR state IN (N'released', N'done', N'failed'));\n\n    -- Given back", Breaks: true, What: "RequeueOrphan fences out a live lease (a second run while the first still holds it)"},
	{ID: "Q9", Class: "set", File: qr, Old: "        SET status      = CASE WHEN cancel_requested_at IS NOT NULL THEN N'canceled' ELSE N'queued' END,", New: "        SET status      = N'queued',", Breaks: true, What: "RequeueOrphan restarts an orphan whose cancel was requested"},

	// the adapter's Go call sites
	{ID: "G1", Class: "go", File: "adapters/sqlserver/claims.go", Old: `sql.Named("lease_ms", p.Lease.Milliseconds()),`, New: `sql.Named("lease_ms", int64(p.Lease.Seconds())),`, Breaks: true, What: "Acquire sends seconds as lease_ms"},
	{ID: "G2", Class: "go", File: "adapters/sqlserver/recovery.go", N: 1, Old: `sql.Named("stale_after_ms", staleAfter.Milliseconds()),`, New: `sql.Named("stale_after_ms", lease.Milliseconds()),`, Breaks: true, What: "ClaimForRecovery sends the lease as the stale window"},
	{ID: "G3", Class: "go", File: "adapters/sqlserver/trigger_requests.go", Old: `sql.Named("lease_ms", lease.Milliseconds()),`, New: `sql.Named("lease_ms", lease.Microseconds()),`, Breaks: true, What: "DispatchTriggerRequest sends microseconds as lease_ms"},
	{ID: "G4", Class: "go", File: "adapters/sqlserver/maintenance.go", Old: `sql.Named("horizon_ms", p.ClaimHorizon.Milliseconds()),`, New: `sql.Named("horizon_ms", p.Retention.Milliseconds()),`, Breaks: true, What: "Maintain sends the retention as the claim horizon (claims deleted early, fences reset)"},
	{ID: "G5", Class: "go", File: "adapters/sqlserver/episodes.go", Old: `sql.Named("lease_ms", lease.Milliseconds()),`, New: `sql.Named("lease_ms", int64(lease/time.Second)),`, Breaks: true, What: "AppendStep sends seconds as lease_ms"},
}
