package sqlserver_test

// The reverse half of TestStaticPredicateParity: every predicate a T-SQL
// statement decides is one its Postgres twin decides too (CTE columns
// included: a CTE column compares as the column it names, as a table
// variable's does), apart from tsqlOnly, the reviewed list of predicates
// only the T-SQL has. With both halves, the T-SQL decides exactly what the
// Postgres decides, up to the two reviewed lists; and since the Postgres
// statements are exercised against a real server by every test (and their
// own mutation run), a changed T-SQL predicate (negated, its comparison
// turned or loosened, dropped) fails here even where no server runs the
// T-SQL: it becomes a predicate neither the twin nor the list has, or it
// leaves a listed one stale. This is what covers predicates on table
// variables and CTE columns, which the forward half leaves to the
// dependency checks.

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// onlyInTSQL is one reviewed group of predicates that a T-SQL statement
// decides and its Postgres twin does not (in that form, or that many
// times), with why. Atoms are in the canonical form of static_expr_test.go;
// a repeated atom is listed as often as it is extra.
type onlyInTSQL struct {
	statement string
	reason    string
	atoms     []string
}

// Reasons shared by many statements.
const (
	whyNested = "the caller's-transaction bookkeeping: @nested = 1 when the batch runs inside the caller's transaction " +
		"(@@TRANCOUNT > 0), so it opens and commits its own only when not nested; Postgres runs in whatever transaction the caller gave"
	whyDuplicate = "a duplicate key is caught in CATCH (ERROR_NUMBER() 2601/2627, anything else rethrown; XACT_STATE() says whether " +
		"a transaction must be rolled back) and answered through @duplicate; Postgres says ON CONFLICT DO NOTHING"
	whyUpsert = "the upsert without MERGE: an UPDATE of the key WITH (UPDLOCK, HOLDLOCK), then the INSERT under IF @@ROWCOUNT = 0 " +
		"(or WHERE NOT EXISTS of the key); Postgres's ON CONFLICT names the key in its arbiter, not in a predicate"
	whyRecheck = "checked twice: once by the lock-free read that finds the orphan, once on the locked row by the write " +
		"(Postgres checks it once, under the orphan CTE's FOR UPDATE)"
	whyIndexFilter = "the filtered index's predicate (leasehold_episodes_available_idx: run_after IS NOT NULL), spelled out so the " +
		"optimizer may use it; the comparison beside it already implies it"
	whyHeld = "the calling run's grant (fenced) and its episode are read into variables first (@held, @ep_id, @ep_env) and the finding's " +
		"writes run under IF on them; Postgres reads them in CTEs joined into the writes"
)

// tsqlOnly is the reviewed list. Nothing else may be extra.
var tsqlOnly = []onlyInTSQL{
	{"AcquireClaim", whyUpsert + "; the fresh INSERT's NOT EXISTS and the UPDATE both name the key (Postgres: once, in ON CONFLICT)",
		[]string{"@dedupe_key = dedupe_key", "NOT EXISTS(leasehold_work_claims)", "@dedupe_key = dedupe_key"}},
	{"AcquireClaim", "two fresh INSERTs of one key race past NOT EXISTS; the loser's 2601/2627 is swallowed in CATCH and it answers no grant, " +
		"as Postgres's ON CONFLICT DO NOTHING does", []string{"error_number() NOT IN (2601, 2627)"}},
	{"AppendStep", "GREATEST spelled as CASE WHEN a > b THEN a ELSE b END (read back as greatest in the SET); its WHEN is a predicate here",
		[]string{"lease_until > now+ms(@lease_ms)"}},
	{"ArchiveEpisodes", "the UPDATE through the READPAST-picked CTE re-checks archived_at IS NULL on the row it writes (Postgres: FOR UPDATE SKIP LOCKED in the pick)",
		[]string{"archived_at IS NULL"}},
	{"CancelEpisode", "the claim key is read into @claim_key and the live-grant test into @held (CASE WHEN state = 'claimed' AND lease_until > now) " +
		"under UPDLOCK, HOLDLOCK before the episode UPDATE; each CASE WHEN @held = 1 is Postgres's CASE WHEN target.held; " +
		"the fence-out runs under IF EXISTS (@episode canceled), where Postgres's fenced CTE tests NOT target.held (see dialectDifferences)",
		[]string{"lease_until > now", "$claim_key = dedupe_key", "$held = 1", "$held = 1", "$held = 1", "$held = 1", "$held = 1", "$held = 1",
			"$claim_key = dedupe_key", "'claimed' = state", "'canceled' = status"}},
	{"ClaimAvailable", whyIndexFilter + " (the pick)", []string{"run_after IS NOT NULL"}},
	{"ClaimAvailable", "the set-based grant keys each claim row by its picked row (c.dedupe_key = p.claim_key in the UPDATE's join, then " +
		"the fresh INSERT's NOT EXISTS under UPDLOCK, HOLDLOCK, x.dedupe_key = p.claim_key: the upsert without MERGE), runs the INSERT only " +
		"for picked rows without a grant (IF EXISTS ... NOT EXISTS @granted), starts the granted ones by joining @granted and clears the " +
		"others by NOT EXISTS @granted, each episode reached by e.id = p.id; Postgres's ON CONFLICT names the key in its arbiter and its " +
		"UPDATEs use id arrays and IN (see dialectDifferences); the answer's started is CASE WHEN s.id IS NULL",
		[]string{"claim_key = dedupe_key", "NOT EXISTS(leasehold_work_claims)", "claim_key = dedupe_key", "claim_key = dedupe_key", "id = id",
			"claim_key = dedupe_key", "id = id", "claim_key = dedupe_key", "id IS NULL"}},
	{"ClaimForRecovery", "the orphan is found by a lock-free read into @orphan_key, the takeover runs under IF on it, and the claim row is " +
		"reached by @orphan_key (UPDATE, then the fresh INSERT's NOT EXISTS under UPDLOCK, HOLDLOCK); Postgres names the key once through " +
		"claim_row's subquery",
		[]string{"EXISTS(leasehold_work_claims)", "coalesce(dedupe_key, concat('episode:', id)) = dedupe_key",
			"$orphan_key IS NOT NULL", "$orphan_key = dedupe_key", "NOT EXISTS(leasehold_work_claims)", "$orphan_key = dedupe_key"}},
	{"ClaimForRecovery", whyRecheck + "; here only the available exclusion, which the lock-free read makes so that an available episode's " +
		"claim row is never locked (a poll locks the episode row first)", []string{"run_after IS NULL"}},
	{"ClearFinding", whyHeld, []string{"$held = 1", "$ep_id IS NOT NULL", "$ep_env = env", "$ep_id IS NULL"}},
	{"CreateDeferredEpisode", "the caller's-transaction bookkeeping: @nested = 1 when the batch runs inside the caller's transaction " +
		"(@@TRANCOUNT > 0), where its CATCH can only re-throw (XACT_ABORT has doomed that transaction); Postgres runs in whatever transaction the caller gave",
		[]string{"0 < @@trancount()", "$nested = 1"}},
	{"CreateDeferredEpisode", "a duplicate key is caught in CATCH (ERROR_NUMBER() 2601/2627, anything else rethrown; the one INSERT wrote nothing) " +
		"and answered through @duplicate; Postgres says ON CONFLICT DO NOTHING", []string{"error_number() NOT IN (2601, 2627)", "$duplicate = 0", "$duplicate = 1"}},
	{"CreateDeferredEpisode", "the dedupe: INSERT ... WHERE @dedupe_key IS NULL OR NOT EXISTS (a live episode of the key, UPDLOCK, HOLDLOCK); " +
		"Postgres's ON CONFLICT arbiter", []string{"@dedupe_key IS NULL", "NOT EXISTS(leasehold_episodes)"}},
	{"CreateDeferredEpisodes", "the dedupe as CreateDeferredEpisode's, per item (Postgres's ON CONFLICT arbiter)", []string{"NOT EXISTS(leasehold_episodes)"}},
	{"CreateEpisode", whyDuplicate, []string{"0 <> xact_state()", "error_number() NOT IN (2601, 2627)", "$duplicate = 0", "$duplicate = 1"}},
	{"CreateEpisode", "the start: the grant's key is @claim_key (the UPDATE and the fresh INSERT's NOT EXISTS), and the start UPDATE finds " +
		"the episode by (SELECT id FROM @created)", []string{"$claim_key = dedupe_key", "$claim_key = dedupe_key", "(SELECT FROM ) = id"}},
	{"CreateWorkflowInstance", whyUpsert, []string{"NOT EXISTS(leasehold_workflow_instances)", "@workflow_id = workflow_id", "@subject = subject", "@env = env"}},
	{"DeleteSpentClaims", "GREATEST and the episode-key match without SQL Server 2022 or regular expressions (see dialectDifferences): the CASE's WHEN, " +
		"the LIKE/DATALENGTH/NOT LIKE match and TRY_CAST(SUBSTRING) are the T-SQL spelling of the Postgres predicates, each in the candidate list and the re-check",
		[]string{"greatest(finished_at, lease_until) < now-ms(@horizon_ms)", "greatest(finished_at, lease_until) < now-ms(@horizon_ms)",
			"dedupe_key NOT LIKE 'episode:%'", "NOT datalength(dedupe_key) BETWEEN 18 AND 52", "substring(dedupe_key, 9, 18) LIKE '%[^0-9]%'",
			"finished_at > lease_until", "id = substring(dedupe_key, 9, 18)", "finished_at > lease_until"}},
	{"FinishEpisode", whyNested, []string{"0 < @@trancount()", "$nested = 0", "$nested = 0", "$nested = 1"}},
	{"FinishEpisodes", "the rows are matched to their claims twice, each per row on key and fence: the claim UPDATE joins OPENJSON on " +
		"(dedupe_key, fence), and the step INSERT and episode UPDATE each join @claim on (claim_key, fence); Postgres joins once, into matched",
		[]string{"dedupe_key = dedupe_key", "fence = fence"}},
	{"GetWorkflowStepByEpisode", "the filtered index's predicate (episode_id IS NOT NULL), spelled out so the optimizer may use it", []string{"episode_id IS NOT NULL"}},
	{"HeartbeatNode", whyUpsert, []string{"@node_id = node_id", "0 = @@rowcount()"}},
	{"HoldClaim", "Postgres calls leasehold_hold (its predicates are checked against the procedure by TestStaticHoldMatchesItsProcedure); " +
		"T-SQL inlines it: the fenced, update-locked read of the grant, refused outside a transaction",
		[]string{"0 = @@trancount()", "@claim_key = dedupe_key", "@owner_node = owner_node", "@fence = fence", "'claimed' = state"}},
	{"ListStalledWorkflowSteps", "ORDER BY CASE WHEN parked_reason IS NULL THEN 0 ELSE 1 END, Postgres's ORDER BY (parked_reason IS NOT NULL)", []string{"parked_reason IS NULL"}},
	{"ListWaitingForNode", "the overdue flag is a CASE WHEN in the select list; Postgres casts the comparison to boolean", []string{"now-ms(@overdue_after_ms) > waiting_since"}},
	{"ListWaitingForNode", whyIndexFilter, []string{"run_after IS NOT NULL"}},
	{"ExpireAvailable", whyIndexFilter, []string{"run_after IS NOT NULL"}},
	{"NextAvailableDue", whyIndexFilter, []string{"run_after IS NOT NULL"}},
	{"PutAgentDefinition", whyUpsert, []string{"@actor_id = actor_id", "@expectation_id = expectation_id", "0 = @@rowcount()"}},
	{"PutWorkflowDefinition", whyUpsert, []string{"NOT EXISTS(leasehold_workflow_definitions)", "@workflow_id = workflow_id", "@version = version"}},
	{"RaiseFinding", whyHeld + "; the active finding is updated by key before the INSERT (the upsert without MERGE)",
		[]string{"$held = 1", "$ep_id IS NOT NULL", "$ep_env = env", "@finding_key = finding_key", "$ep_id IS NULL"}},
	{"RaiseWaitingForNodeFinding", whyUpsert, []string{"@env = env", "@finding_key = finding_key"}},
	{"RegisterNode", whyUpsert, []string{"@node_id = node_id", "0 = @@rowcount()"}},
	{"RequeueEpisode", "GREATEST(max_attempts, attempts + 2) as a CASE, whose WHEN is a predicate here",
		[]string{"(attempts + 2) < max_attempts"}},
	{"RequeueOrphan", "the orphan is found by a lock-free read into @orphan_key, and the takeover runs under IF on it, " +
		"as in ClaimForRecovery", []string{"(attempts + 1) <= max_attempts", "EXISTS(leasehold_work_claims)",
		"coalesce(dedupe_key, concat('episode:', id)) = dedupe_key", "$orphan_key IS NOT NULL",
		"$orphan_key = dedupe_key", "NOT EXISTS(leasehold_work_claims)", "$orphan_key = dedupe_key"}},
	{"RequeueOrphan", "given back, read from the fenced claim's OUTPUT deleted.* (@fenced) under the episode's UPDLOCK, HOLDLOCK into @given_back; " +
		"Postgres reads claim_row's state and attempt in the orphan CTE (see dialectDifferences)",
		[]string{"'released' = was_state", "'queued' = status", "(attempts + max_attempts) >= was_attempt",
			"(attempts + case($given_back = 1; 1; 2)) <= max_attempts", "$given_back = 1", "$given_back = 1"}},
	{"RequeueOrphan", whyRecheck, []string{"@id = id", "status IN ('queued', 'running')", "archived_at IS NULL", "@attempts = attempts",
		"run_after IS NULL"}},
	{"StartEpisode", "the grant test is one EXISTS under UPDLOCK in the episode UPDATE; Postgres reads it in the lease CTE (FOR SHARE) and tests EXISTS (SELECT 1 FROM lease)",
		[]string{"EXISTS(leasehold_work_claims)"}},
	{"TryMaintenanceLock", "sp_getapplock's answer (@r >= 0 granted; -999 when refused outside a transaction) where Postgres calls pg_try_advisory_lock",
		[]string{"0 = @@trancount()", "$r = -999", "$r >= 0"}},
	{"UpdateFinding", whyHeld, []string{"$held = 1", "$ep_id IS NOT NULL", "$ep_env = env", "$ep_id IS NULL"}},
}

// pgAtomsAll returns the atoms of every boolean expression of a Postgres
// statement (see tsqlAtoms), CTE columns kept, each as the column it names.
func pgAtomsAll(sql string) []string {
	return pgAtomsOf(sql, func(e *ex) *ex { return asColumns(e, "cte") })
}

// tsqlAtomsAll is tsqlAtoms with every local variable read as a plain
// column: what Postgres computes in a CTE (cte.col, see pgAtomsAll) T-SQL
// computes into a variable of the same name (@col) or an OUTPUT table, so
// the forward half compares both as columns.
func tsqlAtomsAll(tree any) []string {
	return tsqlAtomsOf(tree, func(e *ex) *ex { return asColumns(e, "var") })
}

// asColumns rewrites every reference of kind op (cte: cte.col; var: a
// T-SQL variable) as a plain column of the same name, comparisons and IN
// lists put back in canonical order.
func asColumns(e *ex, op string) *ex {
	if e == nil {
		return nil
	}
	c := &ex{op: e.op, s: e.s}
	if c.op == op {
		c.op, c.s = "col", c.s[strings.Index(c.s, ".")+1:]
	}
	for _, a := range e.args {
		c.args = append(c.args, asColumns(a, op))
	}
	switch {
	case c.op == "cmp":
		return mkCmp(c.s, c.args[0], c.args[1])
	case c.op == "in" || c.op == "notin":
		return mkIn(c.op == "notin", c.args[0], c.args[1:])
	}
	return c
}

// checkOnlyInTSQL is the reverse half, for one statement.
func checkOnlyInTSQL(t *testing.T, name string, tree any, pgSQL string) {
	t.Helper()
	var listed []string
	for _, o := range tsqlOnly {
		if o.statement == name {
			listed = append(listed, o.atoms...)
		}
	}
	extra := multisetMinus(tsqlAtoms(tree), pgAtomsAll(pgSQL))
	unexplained := multisetMinus(extra, listed)
	require.Empty(t, unexplained, "the T-SQL decides these and the Postgres twin does not "+
		"(canonical form; a changed predicate lands here; add to tsqlOnly only with a reason):\n%s", strings.Join(unexplained, "\n"))
	stale := multisetMinus(listed, extra)
	require.Empty(t, stale, "tsqlOnly lists predicates the T-SQL no longer has beyond its twin (a dropped or changed predicate lands here): "+
		"remove them only if the change is intended:\n%s", strings.Join(stale, "\n"))
}
