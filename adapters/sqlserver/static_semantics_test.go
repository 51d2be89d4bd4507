package sqlserver_test

// Semantic static checks of the T-SQL: what each statement decides, read
// from the parse tree and compared with the Postgres twin (predicates and
// written values), the fenced-write contract, all-or-nothing batches, the
// shape of a grant, durations, and schema semantics. None is keyed by a
// statement name: each finds what to check from the trees, so a statement
// added later is covered the day it is written. The only per-statement
// knowledge is dialectDifferences, the one reviewed list of intended
// differences, each with its reason; an entry that no longer differs fails.
// The expression model is in static_expr_test.go; docs/sqlserver.md says
// what these checks prove and what only a server can.

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/sql/queries"
	"github.com/leasehold/leasehold/sql/schema"
)

// difference is one intended difference between a Postgres statement and
// its T-SQL twin: a canonical atom ("predicate") or assignment of the
// Postgres statement that the T-SQL does not contain, and why.
type difference struct {
	statement, missing, reason string
}

// dialectDifferences is the reviewed list. Nothing else may differ.
var dialectDifferences = []difference{
	{"AcquireClaim", "0 < @bound_ms", boundInStatement},
	{"ClaimForRecovery", "0 < @bound_ms", boundInStatement},
	{"RequeueOrphan", "0 < @bound_ms", boundInStatement},
	{"ClaimAvailable", "0 < @bound_ms", boundInStatement},
	{"CreateEpisode", "dedupe_key IS NOT NULL",
		"the ON CONFLICT arbiter's predicate: T-SQL inserts and lets the filtered unique index (same filter, TestStaticSchemaSemantics) raise 2601, caught as the duplicate"},
	{"CreateEpisode", "archived_at IS NULL", "as above: the index predicate, not a statement predicate, on SQL Server"},
	{"CreateEpisode", "'' <> @owner_node", "the start pre-check: Postgres picks the status from its snapshot before the grant " +
		"(start, an owner, no live claim of the key); T-SQL starts the episode with an UPDATE after the grant, inside IF @start = 1 AND EXISTS (@granted)"},
	{"CreateEpisode", "'claimed' = state", "the start pre-check's live claim, as above"},
	{"CreateEpisode", "lease_until > now", "the start pre-check's live claim, as above"},
	{"CreateEpisode", "@dedupe_key = dedupe_key", "the start pre-check's key, as above"},
	{"CreateEpisode", "'running' = status", "the CASEs that stamp a started episode's owner, start and last step in the INSERT; T-SQL sets them unconditionally in its start UPDATE"},
	{"CreateEpisode", "'running' = status", "as above"},
	{"CreateEpisode", "'running' = status", "as above"},
	{"CreateEpisode", "leasehold_episodes.status := status", "the INSERT's status from the pre-check; T-SQL inserts queued and its start UPDATE writes running"},
	{"CreateEpisode", "leasehold_episodes.owner_node := case('running' = status; @owner_node)", "written by T-SQL's start UPDATE (owner_node = @owner_node)"},
	{"CreateEpisode", "leasehold_episodes.started_at := case('running' = status; now)", "written by T-SQL's start UPDATE (started_at = now)"},
	{"CreateEpisode", "leasehold_episodes.last_step_at := case('running' = status; now)", "written by T-SQL's start UPDATE (last_step_at = now)"},
	{"CreateEpisode", "@dedupe_key = dedupe_key", "a duplicate's id: Postgres reads it in the statement (existing); T-SQL leaves it to FindLiveEpisode, " +
		"since a read of the episodes table in a batch that inserts into it must be an update-locked guard"},
	{"CreateEpisode", "archived_at IS NULL", "the duplicate's read, as above"},
	{"CreateDeferredEpisode", "archived_at IS NULL", "a duplicate's id, read by FindLiveEpisode on SQL Server (see CreateEpisode); the guard's own archived_at IS NULL is matched"},
	{"CreateDeferredEpisodes", "archived_at IS NULL", "a duplicate's id, read by FindLiveEpisode on SQL Server (see CreateEpisode); the guard's own archived_at IS NULL is matched"},
	{"CancelEpisode", "(SELECT FROM leasehold_episodes) = dedupe_key",
		"the claim key is read into @claim_key by the first SELECT instead of a scalar subquery, as in ClaimForRecovery"},
	{"RequeueOrphan", "(SELECT FROM leasehold_episodes) = dedupe_key", "as in ClaimForRecovery: @orphan_key"},
	{"RequeueOrphan", "(attempts + case(given_back; 1; 2)) <= max_attempts",
		"Postgres reads given_back from the locked claim row in the orphan CTE; T-SQL from the fenced claim's OUTPUT deleted.* into @given_back, " +
			"and its episode UPDATE checks attempts + CASE WHEN @given_back = 1 THEN 1 ELSE 2 END <= max_attempts"},
	{"ClaimForRecovery", "(SELECT FROM leasehold_episodes) = dedupe_key",
		"the claim key is read into @orphan_key by the first SELECT (COALESCE(dedupe_key, CONCAT(N'episode:', id))) instead of a scalar subquery"},
	{"ClaimForRecovery", "@id = id", "Postgres names the episode three times (claim_row, orphan, the UPDATE); T-SQL twice (the first SELECT and the episode UPDATE): the claim row is reached through @orphan_key"},
	{"ClaimAvailable", "any(array((SELECT FROM ))) = id", "Postgres's start UPDATE reaches the picked episodes by primary key through an array " +
		"of the picked CTE's ids (a plan choice: no condition beside the id for a misled planner to scan an index by); T-SQL joins @picked " +
		"(e.id = p.id) under OPTION (LOOP JOIN, FORCE ORDER), one seek per picked row"},
	{"ClaimAvailable", "any(array((SELECT FROM ))) = id", "the held-elsewhere UPDATE, as above"},
	{"ClaimAvailable", "claim_key IN ((SELECT FROM ))", "the granted ones: Postgres's picked.claim_key IN (SELECT granted.dedupe_key); T-SQL's start " +
		"UPDATE inner joins @granted ON g.dedupe_key = p.claim_key (TestStaticStartsUnderAGrant)"},
	{"ClaimAvailable", "claim_key NOT IN ((SELECT FROM ))", "held elsewhere: Postgres's picked.claim_key NOT IN (SELECT granted.dedupe_key); " +
		"T-SQL's NOT EXISTS (SELECT FROM @granted WHERE g.dedupe_key = p.claim_key), a table variable's rows (the dependency checks')"},
	{"DeleteSpentClaims", "greatest(coalesce(finished_at, lease_until), lease_until) < now-ms(@horizon_ms)",
		"GREATEST needs SQL Server 2022: CASE WHEN finished_at > lease_until THEN finished_at ELSE lease_until END is the same value (a NULL finished_at fails the comparison and yields lease_until); listed twice, candidate list and re-check"},
	{"DeleteSpentClaims", "greatest(coalesce(finished_at, lease_until), lease_until) < now-ms(@horizon_ms)", "the re-check on the locked row, as above"},
	{"DeleteSpentClaims", "NOT regex(dedupe_key, '^episode:[0-9]{1,18}$')",
		"no regular expressions: LIKE N'episode:%', DATALENGTH BETWEEN 18 AND 52 and NOT LIKE N'%[^0-9]%' under the binary collation make the same match"},
	{"DeleteSpentClaims", "id = substring(dedupe_key, 9)", "TRY_CAST(SUBSTRING(dedupe_key, 9, 18) AS bigint): SUBSTRING needs a length, TRY_CAST never raises whatever order the optimizer evaluates the tests in"},
	// Joins of a CTE's rows back to a table (read with the CTE's columns
	// as plain columns, as T-SQL's variables are): T-SQL names the row
	// directly, or keeps the value under another name.
	{"ArchiveEpisodes", "id = id", "Postgres updates FROM batch WHERE e.id = batch.id; T-SQL updates its locked TOP batch through the CTE itself " +
		"(UPDATE batch), so there is no join back, and re-checks archived_at IS NULL instead"},
	{"CancelEpisode", "1 = live", "Postgres's held is EXISTS (claim_row WHERE live); T-SQL sets @held from the same CASE on the locked claim row " +
		"(its 'claimed' = state and lease_until > now are matched)"},
	{"CancelEpisode", "0 = held", "the expired claim is fenced only when not held: T-SQL fences inside IF EXISTS (@episode WHERE status = 'canceled'), " +
		"and the episode UPDATE writes canceled exactly when @held = 0"},
	{"CancelEpisode", "id = id", "the episode UPDATE joins target on id; T-SQL's UPDATE names WHERE id = @id"},
	{"ClearFinding", "env = source_env", "the episode's source_env is read into @ep_env (env = @ep_env)"},
	{"UpdateFinding", "env = source_env", "the episode's source_env is read into @ep_env (env = @ep_env)"},
	{"RequeueOrphan", "claim_key = dedupe_key", "the orphan's claim key is @orphan_key in T-SQL ($orphan_key = dedupe_key is matched under that name)"},
	{"RequeueOrphan", "id = id", "the episode UPDATE joins taken on id; T-SQL's names WHERE id = @id"},
}

// TestStaticPredicateParity: every deciding predicate of each Postgres
// statement (comparisons of columns with literals, the clock, the clock ±
// a duration, parameters and columns; IS [NOT] NULL; IN lists; LIKE;
// EXISTS over a table; bare booleans), with the NOT above it, appears in
// its T-SQL twin at least as often, and every value a Postgres INSERT or
// UPDATE writes (ON CONFLICT DO UPDATE included) is written by the twin,
// apart from dialectDifferences. Predicates and values that read a CTE's
// column are left out: T-SQL holds those in variables, and the dependency
// checks (TestStaticAllOrNothing, TestStaticFencedWrites) follow them.
// The reverse half (static_parity_reverse_test.go) keeps them: every T-SQL
// predicate, a table variable's included, is its twin's or in tsqlOnly.
func TestStaticPredicateParity(t *testing.T) {
	t.Parallel()

	pg, ms := postgresQueries(t), sqlServerQueries(t)
	allowed := map[string][]string{}
	for _, d := range dialectDifferences {
		require.Contains(t, ms, d.statement, "dialectDifferences names %s, which is not a statement", d.statement)
		allowed[d.statement] = append(allowed[d.statement], d.missing)
	}
	for _, o := range tsqlOnly {
		require.Contains(t, ms, o.statement, "tsqlOnly names %s, which is not a statement", o.statement)
	}
	for _, q := range byName(ms) {
		p, ok := pg[q.Name]
		if !ok {
			continue // TestStaticSameQueriesAsPostgres
		}
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			missing := multisetMinus(pgAtomsAll(p.SQL), tsqlAtomsAll(tree))
			var want, have []string
			for _, a := range pgAssignments(p.SQL) {
				if !hasRef(a.value, "cte", "excluded") {
					want = append(want, a.String())
				}
			}
			for _, a := range tsqlAssignments(tree) {
				have = append(have, a.String())
			}
			missing = append(missing, multisetMinus(want, have)...)
			for _, a := range tsqlAtoms(tree) { // a constant predicate decides nothing, or always "no"
				require.NotRegexp(t, `^-?[0-9.]+ (<>|<|>|<=|>=|=) -?[0-9.]+$`, a, "a constant comparison in a predicate")
			}
			unexplained := multisetMinus(missing, allowed[q.Name])
			require.Empty(t, unexplained, "the Postgres statement decides or writes these and the T-SQL does not "+
				"(canonical form; add to dialectDifferences only with a reason):\n%s", strings.Join(unexplained, "\n"))
			stale := multisetMinus(allowed[q.Name], missing)
			require.Empty(t, stale, "dialectDifferences lists differences that no longer exist: remove them")
			checkOnlyInTSQL(t, q.Name, tree, p.SQL)
		})
	}
}

func multisetMinus(a, b []string) []string {
	b = slices.Clone(b)
	var out []string
	for _, x := range a {
		if i := slices.Index(b, x); i >= 0 {
			b = slices.Delete(b, i, i+1)
		} else {
			out = append(out, x)
		}
	}
	return out
}

// fenceTables: the tables whose rows are grants, and the columns of a
// grant's identity. A write on behalf of a grant matches all four.
var fenceTables = map[string][3]string{ // key, owner, state column
	claimsTable: {"dedupe_key", "owner_node", "state"},
}

// --- statements in batch order ---

// stmt is one statement of a batch, flattened out of IF, BEGIN...END and
// TRY...CATCH, with the predicates of the IFs it runs under.
type stmt struct {
	n       node
	guards  []any // IF predicates (an ELSE branch's too: it depends on them as well)
	inCatch bool
	inTry   bool
	catch   []any // the CATCH statements of the innermost enclosing TRY
}

func flatten(list []any, guards []any, inTry, inCatch bool, catch []any, out *[]stmt) {
	for _, s := range list {
		n, _ := s.(node)
		switch getString(n, "$type") {
		case "IfStatement":
			g := append(slices.Clip(guards), get(n, "Predicate"))
			*out = append(*out, stmt{n: n, guards: guards, inTry: inTry, inCatch: inCatch, catch: catch})
			for _, k := range []string{"ThenStatement", "ElseStatement"} {
				if c, ok := get(n, k).(node); ok {
					flatten([]any{c}, g, inTry, inCatch, catch, out)
				}
			}
		case "BeginEndBlockStatement":
			flatten(getList(n, "StatementList", "Statements"), guards, inTry, inCatch, catch, out)
		case "TryCatchStatement":
			c := getList(n, "CatchStatements", "Statements")
			flatten(getList(n, "TryStatements", "Statements"), guards, true, inCatch, c, out)
			flatten(c, guards, inTry, true, catch, out)
		default:
			*out = append(*out, stmt{n: n, guards: guards, inTry: inTry, inCatch: inCatch, catch: catch})
		}
	}
}

func batchStmts(tree node) []stmt {
	var out []stmt
	flatten(topStatements(tree), nil, false, false, nil, &out)
	return out
}

// writeTarget is the leasehold_ table a statement writes, resolved through
// aliases and CTEs, or "".
func writeTarget(n node, aliases map[string]string) string {
	typ := getString(n, "$type")
	if typ != "UpdateStatement" && typ != "InsertStatement" && typ != "DeleteStatement" {
		return ""
	}
	spec := get(n, strings.TrimSuffix(typ, "Statement")+"Specification")
	t := strings.ToLower(getString(spec, "Target", "SchemaObject", "BaseIdentifier", "Value"))
	if a, ok := aliases[t]; ok {
		t = a
	}
	if strings.HasPrefix(t, "leasehold_") {
		return t
	}
	return ""
}

func aliasesOf(tree any) map[string]string {
	out := map[string]string{}
	walk(tree, func(n node) {
		switch getString(n, "$type") {
		case "NamedTableReference":
			if a := getString(n, "Alias", "Value"); a != "" {
				out[strings.ToLower(a)] = strings.ToLower(getString(n, "SchemaObject", "BaseIdentifier", "Value"))
			}
		case "CommonTableExpression":
			out[strings.ToLower(getString(n, "ExpressionName", "Value"))] = firstTable(n)
		}
	})
	return out
}

// varsRead returns the variables (lower case, "@x") and table variables
// v reads, and whether it reads @@ROWCOUNT; skip are nodes not to enter.
func varsRead(v any, skip func(node) bool) (vars map[string]bool, rowcount bool) {
	vars = map[string]bool{}
	var visit func(any)
	visit = func(v any) {
		switch x := v.(type) {
		case node:
			if skip != nil && skip(x) {
				return
			}
			switch getString(x, "$type") {
			case "VariableReference":
				vars[strings.ToLower(getString(x, "Name"))] = true
			case "GlobalVariableExpression":
				if strings.EqualFold(getString(x, "Name"), "@@ROWCOUNT") {
					rowcount = true
				}
			}
			for _, c := range x {
				visit(c)
			}
		case []any:
			for _, c := range x {
				visit(c)
			}
		}
	}
	visit(v)
	return vars, rowcount
}

// fencedAccess reports whether a query or UPDATE specification reads or
// writes a fence table under all four conditions of a grant's identity at
// top level (WHERE, and the ON of its joins): key, owner = @owner_node,
// fence and state = 'claimed'. It returns the table and what is missing.
type access struct {
	table   string
	hints   []string
	missing []string
}

func grantAccesses(tree node, sql string) []access {
	r := newTSQLReader(tree)
	var out []access
	walk(tree, func(n node) {
		typ := getString(n, "$type")
		if typ != "UpdateSpecification" && typ != "QuerySpecification" && typ != "DeleteSpecification" {
			return
		}
		var refs []tableRef
		if typ == "UpdateSpecification" {
			refs = updateTargets(n, sql)
			refs = refs[:min(1, len(refs))]
		} else {
			refs = append(refs, tableRefs(get(n, "FromClause"), sql)...)
			// only the spec's own FROM, not its subqueries'
			refs = slices.DeleteFunc(refs, func(ref tableRef) bool { return !ownFrom(n, ref.start) })
		}
		conds := map[string]bool{}
		for _, c := range conjuncts(get(n, "WhereClause", "SearchCondition")) {
			conds[r.boolean(c).String()] = true
		}
		walk(get(n, "FromClause"), func(j node) {
			if getString(j, "$type") == "QualifiedJoin" {
				for _, c := range conjuncts(get(j, "SearchCondition")) {
					conds[r.boolean(c).String()] = true
				}
			}
		})
		for _, ref := range refs {
			cols, ok := fenceTables[strings.ToLower(ref.table)]
			if !ok {
				continue
			}
			fenced := conds["@fence = fence"] || conds["fence = fence"]
			if !fenced {
				continue
			}
			var missing []string
			key := slices.ContainsFunc(slices.Collect(maps.Keys(conds)), func(c string) bool {
				return regexp.MustCompile(`^(@\w+|\$\w+|` + cols[0] + `) = ` + cols[0] + `$`).MatchString(c)
			})
			if !key {
				missing = append(missing, cols[0]+" = <the key>")
			}
			if !conds["@owner_node = "+cols[1]] {
				missing = append(missing, cols[1]+" = @owner_node")
			}
			if !conds["'claimed' = "+cols[2]] {
				missing = append(missing, cols[2]+" = N'claimed'")
			}
			out = append(out, access{table: strings.ToLower(ref.table), hints: ref.hints, missing: missing})
		}
	})
	return out
}

// ownFrom reports whether the table reference at offset start belongs to
// spec's own FROM clause rather than to a subquery inside it.
func ownFrom(spec node, start int) bool {
	own := true
	walk(get(spec, "FromClause"), func(n node) {
		if getString(n, "$type") == "QueryDerivedTable" || getString(n, "$type") == "ScalarSubquery" {
			for _, ref := range tableRefs(n, "") {
				if ref.start == start {
					own = false
				}
			}
		}
	})
	return own
}

// deps computes, for every statement of a batch, the writes and fenced
// accesses its execution depends on: through the table variables earlier
// writes OUTPUT INTO, the variables assigned from them, the IFs it runs
// under, and @@ROWCOUNT right after a write.
type depInfo struct {
	writes   []int          // indexes of statements that write a leasehold_ table
	table    map[int]string // write index -> table
	sources  map[int]map[string]bool
	selfGate map[int]bool // the write carries a fenced access itself
}

func dependencies(tree node, sql string) ([]stmt, depInfo) {
	stmts := batchStmts(tree)
	aliases := aliasesOf(tree)
	info := depInfo{table: map[int]string{}, sources: map[int]map[string]bool{}, selfGate: map[int]bool{}}
	varDeps := map[string]map[string]bool{}
	lastWrite := -1
	for i, s := range stmts {
		typ := getString(s.n, "$type")
		produced := map[string]bool{}
		extra := map[string]bool{}
		skip := func(n node) bool {
			switch getString(n, "$type") {
			case "OutputIntoClause":
				produced[strings.ToLower(getString(n, "IntoTable", "Variable", "Name"))] = true
				return true
			case "SelectSetVariable":
				produced[strings.ToLower(getString(n, "Variable", "Name"))] = true
				walkVars(get(n, "Expression"), func(v string) { extra[v] = true })
				return true
			case "IfStatement":
				return true // its branches are statements of their own
			}
			return false
		}
		var body any = s.n
		if typ == "IfStatement" {
			body = get(s.n, "Predicate")
		}
		if typ == "SetVariableStatement" {
			produced[strings.ToLower(getString(s.n, "Variable", "Name"))] = true
			body = get(s.n, "Expression")
		}
		reads, rowcount := varsRead(body, skip)
		maps.Copy(reads, extra)
		for _, g := range s.guards {
			gv, grc := varsRead(g, nil)
			maps.Copy(reads, gv)
			rowcount = rowcount || grc
		}
		src := map[string]bool{}
		for v := range reads {
			maps.Copy(src, varDeps[v])
		}
		if rowcount && lastWrite >= 0 {
			src[fmt.Sprint("write:", lastWrite)] = true
			src["rowcount"] = true
		}
		if len(grantAccesses(s.n, sql)) > 0 && typ != "IfStatement" {
			src[fmt.Sprint("fence:", i)] = true
			if writeTarget(s.n, aliases) != "" {
				info.selfGate[i] = true
			}
		}
		if w := writeTarget(s.n, aliases); w != "" {
			info.writes = append(info.writes, i)
			info.table[i] = w
			info.sources[i] = maps.Clone(src)
			src[fmt.Sprint("write:", i)] = true
			lastWrite = i
		}
		for v := range produced {
			if varDeps[v] == nil {
				varDeps[v] = map[string]bool{}
			}
			maps.Copy(varDeps[v], src)
		}
	}
	return stmts, info
}

func walkVars(v any, f func(string)) {
	walk(v, func(n node) {
		if getString(n, "$type") == "VariableReference" {
			f(strings.ToLower(getString(n, "Name")))
		}
	})
}

// TestStaticFencedWrites: the fenced-write contract, found from the trees.
// A batch takes a grant's token when it has a @fence or @held parameter;
// then it must access a fence table (the claims) under all
// four conditions of the grant's identity at top level, with an update
// lock, and every write it makes must be that access or depend on it. And
// every UPDATE of a claim that does not grant one (renew, complete, fail,
// release, journal, finish) is such a fenced access, in any batch, unless
// it fences a grant out (fenceOut: recovery's requeue, a cancel).
func TestStaticFencedWrites(t *testing.T) {
	t.Parallel()

	for _, q := range byName(sqlServerQueries(t)) {
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			accesses := grantAccesses(tree, q.SQL)
			for _, a := range accesses {
				require.Empty(t, a.missing, "a fenced access of %s lacks %v at top level", a.table, a.missing)
				require.Contains(t, a.hints, "UPDLOCK", "a fenced access of %s must hold an update lock to COMMIT (a steal waits for it)", a.table)
			}
			params := batchParams(t, q.SQL)
			if slices.Contains(params, "fence") || slices.Contains(params, "held") {
				require.NotEmpty(t, accesses, "the batch takes a grant's token (@fence/@held) but checks no grant (key, owner, fence, claimed)")
				stmts, info := dependencies(tree, q.SQL)
				for _, w := range info.writes {
					gated := info.selfGate[w] || slices.ContainsFunc(slices.Collect(maps.Keys(info.sources[w])), func(s string) bool {
						return strings.HasPrefix(s, "fence:")
					})
					require.True(t, gated, "the write of %s at statement %d does not depend on the fence check:\n%s",
						info.table[w], w+1, fragment(q.SQL, stmts[w].n))
				}
			}
			r := newTSQLReader(tree)
			walk(tree, func(n node) {
				if getString(n, "$type") != "UpdateSpecification" {
					return
				}
				targets := updateTargets(n, q.SQL)
				if len(targets) == 0 || !strings.EqualFold(targets[0].table, claimsTable) {
					return
				}
				grants := slices.ContainsFunc(getList(n, "SetClauses"), func(c any) bool {
					return columnOrWord(get(c, "Column")) == "state" && r.expr(get(c, "NewValue")).String() == "'claimed'"
				})
				if grants || fenceOut(t, r, n, q.SQL) {
					return
				}
				require.NotEmpty(t, grantAccesses(n, q.SQL), "an UPDATE of a claim that grants nothing must be fenced on key, owner, fence and claimed")
			})
		})
	}
}

func fragment(sql string, n node) string {
	src := []rune(sql)
	start, _ := get(n, "StartOffset").(float64)
	length, _ := get(n, "FragmentLength").(float64)
	if end := int(start) + int(length); int(start) >= 0 && end <= len(src) {
		return string(src[int(start):end])
	}
	return "?"
}

// TestStaticAllOrNothing: in a batch with several writes, each write after
// the first depends on an earlier one's result; a batch that writes two
// tables, or upserts through @@ROWCOUNT, does every write inside one
// transaction; and every CATCH re-throws all but a duplicate key: the
// first statement that inspects ERROR_NUMBER() is exactly IF
// ERROR_NUMBER() NOT IN (2601, 2627) THROW, and a CATCH that does not look
// at it ends with THROW.
func TestStaticAllOrNothing(t *testing.T) {
	t.Parallel()

	for _, q := range byName(sqlServerQueries(t)) {
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			stmts, info := dependencies(tree, q.SQL)
			tables := map[string]bool{}
			upsert := false
			for k, w := range info.writes {
				tables[info.table[w]] = true
				upsert = upsert || info.sources[w]["rowcount"]
				if k == 0 {
					continue
				}
				dep := slices.ContainsFunc(info.writes[:k], func(e int) bool { return info.sources[w][fmt.Sprint("write:", e)] })
				require.True(t, dep, "the write of %s at statement %d does not depend on any earlier write of the batch "+
					"(its OUTPUT INTO table, a variable set from it, or @@ROWCOUNT): it would land without them:\n%s",
					info.table[w], w+1, fragment(q.SQL, stmts[w].n))
			}
			for _, s := range stmts {
				if getString(s.n, "$type") == "IfStatement" {
					if _, rc := varsRead(get(s.n, "Predicate"), nil); rc {
						require.Equal(t, "0 = @@rowcount()", newTSQLReader(tree).boolean(get(s.n, "Predicate")).String(),
							"an upsert inserts exactly when its UPDATE matched nothing: IF @@ROWCOUNT = 0")
					}
				}
			}
			if len(tables) > 1 || upsert {
				open, closed := -1, -1
				for i, s := range stmts {
					switch getString(s.n, "$type") {
					case "BeginTransactionStatement", "SaveTransactionStatement":
						if open < 0 {
							open = i
						}
					case "CommitTransactionStatement", "RollbackTransactionStatement":
						if open >= 0 && closed < 0 {
							closed = i
						}
					}
				}
				for _, w := range info.writes {
					require.True(t, open >= 0 && open < w && closed > w,
						"the batch writes %v (or upserts): every write must lie inside one transaction; statement %d does not",
						slices.Sorted(maps.Keys(tables)), w+1)
				}
			}
			walk(tree, func(n node) {
				if getString(n, "$type") != "TryCatchStatement" {
					return
				}
				catch := getList(n, "CatchStatements", "Statements")
				require.NotEmpty(t, catch)
				looks := -1
				for i, s := range catch {
					if strings.Contains(fmt.Sprint(s), "ERROR_NUMBER") && looks < 0 {
						looks = i
					}
				}
				if looks < 0 {
					require.Equal(t, "ThrowStatement", getString(catch[len(catch)-1], "$type"), "a CATCH must re-throw")
					return
				}
				s := catch[looks]
				p := get(s, "Predicate")
				ok := getString(s, "$type") == "IfStatement" && getString(s, "ThenStatement", "$type") == "ThrowStatement" &&
					getString(p, "$type") == "InPredicate" && get(p, "NotDefined") == true &&
					strings.EqualFold(getString(p, "Expression", "FunctionName", "Value"), "ERROR_NUMBER")
				require.True(t, ok, "a CATCH must re-throw everything but a duplicate: IF ERROR_NUMBER() NOT IN (2601, 2627) THROW")
				require.ElementsMatch(t, []string{"2601", "2627"}, stringValues(getList(p, "Values")))
				for _, after := range catch[looks+1:] {
					require.Equal(t, "SetVariableStatement", getString(after, "$type"), "after the re-throw a CATCH only records the duplicate")
				}
			})
		})
	}
}

// The two WHERE forms a grant may have, canonical (static_expr_test.go):
// AcquireClaim's (free or expired) and recovery's (expired, released, or
// finished by another grant; an available episode is excluded before any
// grant, TestStaticRecoveryOrphanRules).
var grantForms = []string{
	"('claimed' <> state OR lease_until <= now)",
	"(('claimed' = state AND lease_until <= now) OR state IN ('done', 'failed', 'released'))",
}

// fenceOut reports whether the claim UPDATE spec ends a grant nobody can
// still use without holding it (RequeueOrphan, CancelEpisode): it bumps the
// fence (fence + 1: the old holder's token matches nothing any more) and
// leaves the claim unclaimed; and then it must take the claim as a grant
// would: keyed on dedupe_key, under UPDLOCK, and only a grant that is not
// live on the database clock, recovery's grant form or an expired claimed
// one ('claimed' = state and lease_until <= now, both conjuncts).
func fenceOut(t *testing.T, r tsqlReader, spec node, sql string) bool {
	set := map[string]string{}
	for _, c := range getList(spec, "SetClauses") {
		set[columnOrWord(get(c, "Column"))] = r.expr(get(c, "NewValue")).String()
	}
	if set["fence"] != "(fence + 1)" {
		return false
	}
	targets := updateTargets(spec, sql)
	require.Contains(t, targets[0].hints, "UPDLOCK", "a fence-out takes UPDLOCK")
	var keyed, claimed, expired, form bool
	for _, c := range conjuncts(get(spec, "WhereClause", "SearchCondition")) {
		e := r.boolean(c)
		switch s := e.String(); {
		case e.op == "cmp" && e.s == "=" && e.args[1].String() == "dedupe_key" && (e.args[0].op == "param" || e.args[0].op == "var"):
			keyed = true
		case s == "'claimed' = state":
			claimed = true
		case s == "lease_until <= now":
			expired = true
		case s == grantForms[1]:
			form = true
		}
	}
	require.True(t, keyed, "a fence-out is keyed on dedupe_key = @key")
	require.True(t, form || claimed && expired, "a fence-out takes only a grant that is not live: %q, or 'claimed' = state AND lease_until <= now", grantForms[1])
	require.NotEqual(t, "'claimed'", set["state"])
	return true
}

// TestStaticGrantShape: every UPDATE that sets a claim to claimed, in any
// batch, is a grant: keyed on dedupe_key, one of grantForms, fence + 1, a
// lease of @lease_ms milliseconds from the database clock, the owner, the
// clock stamps, the counters, UPDLOCK and HOLDLOCK, OUTPUT INTO a table
// variable; and every INSERT of a claim follows such an UPDATE of the same
// key, runs only when it granted nothing, is guarded by NOT EXISTS on the
// key, writes a fresh grant, and is either inside the transaction under
// UPDLOCK, HOLDLOCK or catches the primary key's 2627 as busy.
//
// A grant has one of two keys (grantKey). Keyed on one @key: dedupe_key =
// @key in its WHERE, and its INSERT runs under IF NOT EXISTS (SELECT FROM
// <its table variable>). Set-based (ClaimAvailable): its FROM is an inner
// join of a table variable of picked rows to the claims table ON
// <claims>.dedupe_key = <picked>.<column> and nothing else, so each picked
// row reaches its own claim row and no other; its INSERT then reads that
// table variable, inserts <picked>.<column> as the key, is guarded per row
// by NOT EXISTS on the claims table keyed on that column, and runs under IF
// EXISTS (a picked row WHERE NOT EXISTS (its grant in the grant's table
// variable)). Everything else, the WHERE's grant form above all, is checked
// alike on both.
func TestStaticGrantShape(t *testing.T) {
	t.Parallel()

	want := map[string][]string{
		"fence":             {"(fence + 1)"},
		"lease_until":       {"now+ms(@lease_ms)"},
		"claimed_at":        {"now"},
		"last_heartbeat_at": {"now"},
		"finished_at":       {"NULL"},
		"error_detail":      {"NULL"},
		"owner_node":        {"@owner_node"},
		"grant_kind":        {"case('claimed' = state; 'steal'; 'reclaim')"},
		"attempt":           {"case('done' = state; 1; (attempt + 1))", "(attempt + 1)"},
	}
	fresh := map[string]string{"state": "'claimed'", "owner_node": "@owner_node", "lease_until": "now+ms(@lease_ms)",
		"claimed_at": "now", "last_heartbeat_at": "now", "attempt": "1", "fence": "1", "grant_kind": "'fresh'"}
	for _, q := range byName(sqlServerQueries(t)) {
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			r := newTSQLReader(tree)
			stmts := batchStmts(tree)
			open := false
			grantKeys := map[string]grantKey{} // OUTPUT INTO variable -> key
			for _, s := range stmts {
				switch getString(s.n, "$type") {
				case "BeginTransactionStatement":
					open = true
				case "UpdateStatement":
					spec := get(s.n, "UpdateSpecification").(node)
					targets := updateTargets(spec, q.SQL)
					if len(targets) == 0 || !strings.EqualFold(targets[0].table, claimsTable) {
						continue
					}
					set := map[string]string{}
					for _, c := range getList(spec, "SetClauses") {
						set[columnOrWord(get(c, "Column"))] = r.expr(get(c, "NewValue")).String()
					}
					if set["state"] != "'claimed'" {
						continue
					}
					for col, forms := range want {
						require.Contains(t, forms, set[col], "a grant sets %s to %s", col, set[col])
					}
					require.Contains(t, targets[0].hints, "UPDLOCK", "a grant takes UPDLOCK")
					require.True(t, slices.Contains(targets[0].hints, "HOLDLOCK") || slices.Contains(targets[0].hints, "SERIALIZABLE"), "a grant takes HOLDLOCK")
					var key grantKey
					form := false
					for _, c := range conjuncts(get(spec, "WhereClause", "SearchCondition")) {
						e := r.boolean(c)
						if e.op == "cmp" && e.s == "=" && e.args[1].String() == "dedupe_key" && (e.args[0].op == "param" || e.args[0].op == "var") {
							key.param = e.args[0].String()
						}
						form = form || slices.Contains(grantForms, e.String())
					}
					if key.param == "" {
						key.picked, key.column = joinedGrantKey(spec)
						if key.picked != "" {
							fills := pickedKeyFills(r, tree, key)
							require.NotEmpty(t, fills, "the picked set %s is filled in the batch (INSERT INTO %s)", key.picked, key.picked)
							for _, v := range fills {
								require.Equal(t, episodeClaimKey, v, "the grant's join column %s.%s holds each picked episode's claim key", key.picked, key.column)
							}
						}
					}
					require.True(t, key.param != "" || key.picked != "",
						"a grant is keyed on dedupe_key = @key, or joined to a picked set ON <claims>.dedupe_key = <picked>.<column> alone")
					require.True(t, form, "a grant's WHERE must hold one of the grant forms %q", grantForms)
					into := strings.ToLower(getString(spec, "OutputIntoClause", "IntoTable", "Variable", "Name"))
					require.NotEmpty(t, into, "a grant outputs INTO a table variable (the insert and the result read it)")
					grantKeys[into] = key
				case "InsertStatement":
					spec := get(s.n, "InsertSpecification")
					if !strings.EqualFold(getString(spec, "Target", "SchemaObject", "BaseIdentifier", "Value"), claimsTable) {
						continue
					}
					guardVar, guardKey := insertGuard(r, s.guards)
					key, ok := grantKeys[guardVar]
					require.True(t, ok, "a claim INSERT runs only when the grant UPDATE before it granted nothing: under IF NOT EXISTS "+
						"(SELECT FROM <its OUTPUT INTO table>), or, set-based, IF EXISTS (a picked row WHERE NOT EXISTS (its grant in that table))")
					require.Equal(t, grantKey{picked: key.picked, column: key.column}, guardKey,
						"a set-based INSERT's guard asks about the picked key the grant UPDATE joined on (and a single key's asks about none)")
					vals := map[string]string{}
					for _, a := range tsqlAssignmentsWith(r, s.n) {
						vals[a.column] = a.value.String()
					}
					for col, v := range fresh {
						require.Equal(t, v, vals[col], "a fresh claim's %s", col)
					}
					sel := get(spec, "InsertSource", "Select")
					keyed := key.param + " = dedupe_key"
					if key.picked != "" {
						source, alias := singleVariableSource(sel)
						require.Equal(t, key.picked, source, "a set-based INSERT reads the picked set the grant UPDATE joined, alone")
						require.Equal(t, key.column, vals["dedupe_key"], "the INSERT inserts the picked key the grant UPDATE tried")
						keyed = alias + "." + key.column + " = dedupe_key"
					} else {
						require.Equal(t, key.param, vals["dedupe_key"], "the INSERT inserts the key the grant UPDATE tried")
					}
					require.Equal(t, guardVar, strings.ToLower(getString(spec, "OutputIntoClause", "IntoTable", "Variable", "Name")), "the INSERT outputs into the grant's table")
					var guard *tableRef
					for _, c := range conjuncts(get(sel, "WhereClause", "SearchCondition")) {
						if getString(c, "$type") == "BooleanNotExpression" && getString(get(c, "Expression"), "$type") == "ExistsPredicate" {
							sub := get(c, "Expression", "Subquery", "QueryExpression")
							hit := slices.ContainsFunc(conjuncts(get(sub, "WhereClause", "SearchCondition")), func(k any) bool {
								return keyComparison(r, k) == keyed
							})
							for _, ref := range tableRefs(sub, q.SQL) {
								if hit && strings.EqualFold(ref.table, claimsTable) {
									guard = &ref
								}
							}
						}
					}
					require.NotNil(t, guard, "a claim INSERT is guarded by WHERE NOT EXISTS (SELECT ... FROM %s WHERE %s)", claimsTable, keyed)
					if open {
						require.True(t, slices.Contains(guard.hints, "UPDLOCK") && slices.Contains(guard.hints, "HOLDLOCK"),
							"inside a transaction the guard holds the key range: UPDLOCK, HOLDLOCK")
					} else {
						require.True(t, s.inTry, "outside a transaction the insert race is the primary key's: the INSERT must be in a TRY")
						require.True(t, slices.ContainsFunc(s.catch, func(c any) bool {
							return strings.Contains(fmt.Sprint(c), "ERROR_NUMBER")
						}), "and its CATCH must take 2601/2627 as busy")
					}
				}
			}
		})
	}
}

// grantKey is what a grant UPDATE is keyed on: param, a parameter or
// variable (dedupe_key = @key), or, set-based, column of the picked table
// variable it joins (picked, "@name", lower case).
type grantKey struct {
	param          string
	picked, column string
}

// joinedGrantKey reads the set-based key of a grant UPDATE: its FROM is
// one inner join of a table variable and the claims table (the UPDATE's
// target alias), ON <claims>.dedupe_key = <variable>.<column> and no other
// condition. It returns "" when the FROM is anything else.
func joinedGrantKey(spec node) (picked, column string) {
	from := getList(spec, "FromClause", "TableReferences")
	if len(from) != 1 || getString(from[0], "$type") != "QualifiedJoin" || getString(from[0], "QualifiedJoinType") != "Inner" {
		return "", ""
	}
	var variable, varAlias, claimsAlias string
	for _, side := range []any{get(from[0], "FirstTableReference"), get(from[0], "SecondTableReference")} {
		switch getString(side, "$type") {
		case "VariableTableReference":
			variable = strings.ToLower(getString(side, "Variable", "Name"))
			varAlias = strings.ToLower(getString(side, "Alias", "Value"))
		case "NamedTableReference":
			if strings.EqualFold(getString(side, "SchemaObject", "BaseIdentifier", "Value"), claimsTable) {
				claimsAlias = strings.ToLower(getString(side, "Alias", "Value"))
			}
		}
	}
	target := strings.ToLower(getString(spec, "Target", "SchemaObject", "BaseIdentifier", "Value"))
	on := conjuncts(get(from[0], "SearchCondition"))
	if variable == "" || varAlias == "" || claimsAlias == "" || target != claimsAlias || len(on) != 1 ||
		getString(on[0], "ComparisonType") != "Equals" {
		return "", ""
	}
	a, b := qualifiedColumn(get(on[0], "FirstExpression")), qualifiedColumn(get(on[0], "SecondExpression"))
	if a[0] == varAlias {
		a, b = b, a
	}
	if a != [2]string{claimsAlias, "dedupe_key"} || b[0] != varAlias || b[1] == "" {
		return "", ""
	}
	return variable, b[1]
}

// episodeClaimKey is an episode's claim key, canonical: its dedupe key, or
// episode:{id}.
const episodeClaimKey = "coalesce(dedupe_key, concat('episode:', id))"

// pickedKeyFills returns what every INSERT INTO the picked table variable
// of key writes into its key column, canonical.
func pickedKeyFills(r tsqlReader, tree node, key grantKey) []string {
	var out []string
	walk(tree, func(n node) {
		if getString(n, "$type") != "InsertSpecification" || getString(n, "Target", "$type") != "VariableTableReference" ||
			!strings.EqualFold(getString(n, "Target", "Variable", "Name"), key.picked) {
			return
		}
		var values []any
		for _, e := range getList(n, "InsertSource", "Select", "SelectElements") {
			values = append(values, get(e, "Expression"))
		}
		for i, c := range getList(n, "Columns") {
			if columnOrWord(c) == key.column {
				v := "<no value>"
				if i < len(values) {
					v = r.expr(values[i]).String()
				}
				out = append(out, v)
			}
		}
	})
	return out
}

// insertGuard reads the IF a claim INSERT runs under (guards): either IF
// NOT EXISTS (SELECT FROM @granted), which gives @granted and no key, or
// IF EXISTS (SELECT FROM @picked AS p WHERE NOT EXISTS (SELECT FROM
// @granted AS g WHERE g.dedupe_key = p.column)), which gives @granted and
// the picked key (@picked, column). "" when there is no such guard.
func insertGuard(r tsqlReader, guards []any) (granted string, key grantKey) {
	for _, g := range guards {
		switch e := r.boolean(g); {
		case e.op == "not" && getString(get(g, "Expression"), "$type") == "ExistsPredicate":
			walk(g, func(n node) {
				if getString(n, "$type") == "VariableTableReference" {
					granted = strings.ToLower(getString(n, "Variable", "Name"))
				}
			})
		case e.op == "exists" && e.s == "":
			sub := get(g, "Subquery", "QueryExpression")
			picked, pickedAlias := singleVariableSource(sub)
			if picked == "" {
				continue
			}
			for _, c := range conjuncts(get(sub, "WhereClause", "SearchCondition")) {
				if getString(c, "$type") != "BooleanNotExpression" || getString(get(c, "Expression"), "$type") != "ExistsPredicate" {
					continue
				}
				inner := get(c, "Expression", "Subquery", "QueryExpression")
				grants, grantsAlias := singleVariableSource(inner)
				where := conjuncts(get(inner, "WhereClause", "SearchCondition"))
				if grants == "" || len(where) != 1 || getString(where[0], "ComparisonType") != "Equals" {
					continue
				}
				a, b := qualifiedColumn(get(where[0], "FirstExpression")), qualifiedColumn(get(where[0], "SecondExpression"))
				if a[0] == pickedAlias {
					a, b = b, a
				}
				if a == [2]string{grantsAlias, "dedupe_key"} && b[0] == pickedAlias && b[1] != "" {
					granted, key = grants, grantKey{picked: picked, column: b[1]}
				}
			}
		}
	}
	return granted, key
}

// singleVariableSource returns the table variable (lower case, "@name") a
// query specification reads as its only FROM source, and its alias; "" when
// it reads anything else.
func singleVariableSource(spec any) (variable, alias string) {
	from := getList(spec, "FromClause", "TableReferences")
	if len(from) != 1 || getString(from[0], "$type") != "VariableTableReference" {
		return "", ""
	}
	return strings.ToLower(getString(from[0], "Variable", "Name")), strings.ToLower(getString(from[0], "Alias", "Value"))
}

// qualifiedColumn returns a column reference's qualifier and column, lower
// case ("" and the column when it has no qualifier).
func qualifiedColumn(expr any) [2]string {
	ids := getList(expr, "MultiPartIdentifier", "Identifiers")
	if getString(expr, "$type") != "ColumnReferenceExpression" || len(ids) == 0 || len(ids) > 2 {
		return [2]string{}
	}
	col := strings.ToLower(getString(ids[len(ids)-1], "Value"))
	if len(ids) == 1 {
		return [2]string{"", col}
	}
	return [2]string{strings.ToLower(getString(ids[0], "Value")), col}
}

// keyComparison renders a key test of an INSERT's NOT EXISTS guard:
// "@key = dedupe_key" for a parameter or variable (canonical), and
// "alias.column = dedupe_key" for a column of the INSERT's source, its
// qualifier kept so that a guard on another source's column does not pass.
func keyComparison(r tsqlReader, c any) string {
	if getString(c, "ComparisonType") != "Equals" {
		return ""
	}
	a, b := qualifiedColumn(get(c, "FirstExpression")), qualifiedColumn(get(c, "SecondExpression"))
	if a[1] == "dedupe_key" && b[0] != "" {
		a, b = b, a
	}
	if a[0] != "" && b[1] == "dedupe_key" {
		return a[0] + "." + a[1] + " = dedupe_key"
	}
	e := r.boolean(c)
	return e.String()
}

// TestStaticDurations: every DATEADD over a duration parameter (@..._ms)
// adds exactly that many milliseconds (DATEADD(millisecond, ±@x_ms, ...),
// or the documented split into seconds and milliseconds with one sign);
// a value written (SET, INSERT) is never in the past (no minus); every
// DATEDIFF to an ..._ms column counts milliseconds.
func TestStaticDurations(t *testing.T) {
	t.Parallel()

	for name, sql := range allBatches(t) {
		t.Run(name, func(t *testing.T) {
			tree := mustParse(t, sql)
			r := newTSQLReader(tree)
			var visit func(v any)
			visit = func(v any) {
				switch x := v.(type) {
				case node:
					if getString(x, "$type") == "FunctionCall" && strings.EqualFold(getString(x, "FunctionName", "Value"), "DATEADD") {
						e := r.expr(x)
						uses := false
						walkVars(x, func(v string) { uses = uses || strings.HasSuffix(v, "_ms") })
						if uses {
							require.True(t, e.op == "ms+" || e.op == "ms-", "DATEADD over a millisecond duration must add it in milliseconds: %s", e)
						}
						return
					}
					if getString(x, "$type") == "SelectScalarExpression" && strings.HasSuffix(getString(x, "ColumnName", "Value"), "_ms") {
						e := r.expr(get(x, "Expression"))
						if e.op == "fn" && strings.HasPrefix(e.s, "datediff") {
							require.Equal(t, "millisecond", e.args[0].s, "%s counts milliseconds", getString(x, "ColumnName", "Value"))
						}
					}
					for _, c := range x {
						visit(c)
					}
				case []any:
					for _, c := range x {
						visit(c)
					}
				}
			}
			visit(tree)
			for _, a := range tsqlAssignments(tree) {
				require.False(t, hasRef(a.value, "ms-"), "%s: a deadline written into the past", a)
			}
		})
	}
}

// --- schema ---

type schemaFacts struct {
	nullable    map[string]bool     // table.column -> nullable
	collation   map[string]string   // table.column -> collation ("" none), T-SQL only
	charCol     map[string]bool     // table.column is character data
	keys        map[string]string   // constraint name -> "PRIMARY KEY t (a, b)" / "UNIQUE t (a)"
	keyCols     map[string][]string // constraint or unique index name -> table.columns
	foreignKeys map[string]string   // name -> "t (a) -> r (b) ON DELETE x"
	checks      map[string][]string // name -> sorted atoms
	indexes     map[string]string   // name -> "UNIQUE t (a, b) WHERE atoms"
	uniqueIdx   map[string]bool
	filters     map[string][]string
}

func newFacts() schemaFacts {
	return schemaFacts{nullable: map[string]bool{}, collation: map[string]string{}, charCol: map[string]bool{},
		keys: map[string]string{}, keyCols: map[string][]string{}, foreignKeys: map[string]string{},
		checks: map[string][]string{}, indexes: map[string]string{}, uniqueIdx: map[string]bool{}, filters: map[string][]string{}}
}

func sortedAtoms(e *ex) []string {
	var out []string
	atoms(e, false, &out)
	slices.Sort(out)
	return out
}

var (
	pgColumnLineRE = regexp.MustCompile(`^ {4}(\w+)\s+(.*?),?$`)
	pgConstraintRE = regexp.MustCompile(`(?s)^CONSTRAINT (\w+)\s+(PRIMARY KEY|UNIQUE|FOREIGN KEY|CHECK)\s*(.*)$`)
	pgParenRE      = regexp.MustCompile(`^\(([^)]*)\)`)
	pgFKRefRE      = regexp.MustCompile(`(?s)REFERENCES (\w+) \(([^)]*)\)(?:\s+ON DELETE (\w+))?`)
	pgIndexFullRE  = regexp.MustCompile(`(?s)^CREATE (UNIQUE )?INDEX (\w+)\s+ON (\w+) \(([^)]*)\)(?:\s+WHERE (.*?))?;`)
	pgAlterTableRE = regexp.MustCompile(`(?s)^ALTER TABLE (\w+)\s+(.*);$`)
	pgAlterAddRE   = regexp.MustCompile(`(?s)^ADD (COLUMN (\w+) (.*)|CONSTRAINT (\w+)\s+(.*))$`)
)

func splitCols(s string) string {
	var out []string
	for _, c := range strings.Split(s, ",") {
		out = append(out, strings.ToLower(strings.TrimSpace(c)))
	}
	return strings.Join(out, ", ")
}

// postgresFacts reads the Postgres migrations' Up sections (the layout
// postgresSchema reads: one column or constraint per line, continuation
// lines indented deeper).
func postgresFacts(t *testing.T) schemaFacts {
	f := newFacts()
	files, err := fs.Glob(schema.Postgres(), "*.sql")
	require.NoError(t, err)
	for _, file := range files {
		text, err := fs.ReadFile(schema.Postgres(), file)
		require.NoError(t, err)
		up := pgCommentRE.ReplaceAllString(strings.Split(strings.SplitN(string(text), "-- +goose Up", 2)[1], "-- +goose Down")[0], "")
		for _, m := range pgTableRE.FindAllStringSubmatch(up, -1) {
			table := m[1]
			// join continuation lines onto their item
			var items []string
			for _, line := range strings.Split(m[2], "\n") {
				switch {
				case strings.TrimSpace(line) == "":
				case strings.HasPrefix(line, "     ") && len(items) > 0:
					items[len(items)-1] += " " + strings.TrimSpace(line)
				default:
					items = append(items, strings.TrimRight(line, " "))
				}
			}
			for _, item := range items {
				item = strings.TrimSuffix(strings.TrimSpace(item), ",")
				if c := pgConstraintRE.FindStringSubmatch(item); c != nil {
					f.pgConstraint(table, c[1], c[2], c[3])
					continue
				}
				if c := pgColumnLineRE.FindStringSubmatch("    " + item); c != nil {
					f.nullable[table+"."+c[1]] = !strings.Contains(c[2], "NOT NULL") && !strings.Contains(c[2], "IDENTITY")
				}
			}
		}
		for _, stmt := range strings.Split(up, ";") {
			stmt = strings.TrimSpace(stmt) + ";"
			if m := pgIndexFullRE.FindStringSubmatch(stmt); m != nil {
				f.index(m[2], m[1] != "", m[3], splitCols(m[4]), pgExpr(m[5]), m[5] != "")
			}
			alter := pgAlterTableRE.FindStringSubmatch(stmt)
			if alter == nil {
				continue
			}
			for _, clause := range splitTopLevel(alter[2]) { // ADD COLUMN a ..., ADD COLUMN b ...
				m := pgAlterAddRE.FindStringSubmatch(strings.TrimSpace(clause))
				switch {
				case m == nil:
				case m[2] != "":
					f.nullable[alter[1]+"."+m[2]] = !strings.Contains(m[3], "NOT NULL")
				default:
					if c := pgConstraintRE.FindStringSubmatch("CONSTRAINT " + m[4] + " " + m[5]); c != nil {
						f.pgConstraint(alter[1], c[1], c[2], c[3])
					}
				}
			}
		}
	}
	for name, cols := range f.keyCols { // a primary key's columns are NOT NULL
		if strings.HasPrefix(f.keys[name], "PRIMARY KEY") {
			for _, c := range cols {
				f.nullable[c] = false
			}
		}
	}
	return f
}

func (f schemaFacts) pgConstraint(table, name, kind, rest string) {
	switch kind {
	case "PRIMARY KEY", "UNIQUE":
		cols := splitCols(pgParenRE.FindStringSubmatch(rest)[1])
		f.keys[name] = kind + " " + table + " (" + cols + ")"
		f.keyCols[name] = prefixed(table, cols)
	case "FOREIGN KEY":
		cols := splitCols(pgParenRE.FindStringSubmatch(rest)[1])
		ref := pgFKRefRE.FindStringSubmatch(rest)
		f.foreignKeys[name] = fmt.Sprintf("%s (%s) -> %s (%s) ON DELETE %s", table, cols, ref[1], splitCols(ref[2]), strings.ToLower(ref[3]))
	case "CHECK":
		f.checks[name] = sortedAtoms(pgExpr(rest))
	}
}

func prefixed(table, cols string) []string {
	var out []string
	for _, c := range strings.Split(cols, ", ") {
		out = append(out, table+"."+c)
	}
	return out
}

func (f schemaFacts) index(name string, unique bool, table, cols string, filter *ex, filtered bool) {
	var where []string
	if filtered {
		where = sortedAtoms(filter)
	}
	kind := "INDEX"
	if unique {
		kind = "UNIQUE INDEX"
		f.keyCols[name] = prefixed(table, cols)
	}
	f.uniqueIdx[name] = unique
	f.filters[name] = where
	f.indexes[name] = fmt.Sprintf("%s %s (%s) WHERE %v", kind, table, cols, where)
}

// sqlServerFacts reads the same facts from the T-SQL migrations' trees.
func sqlServerFacts(t *testing.T) schemaFacts {
	f := newFacts()
	sections := migrationStatements(t)
	for _, name := range slices.Sorted(maps.Keys(sections)) {
		if !strings.HasSuffix(name, " Up") {
			continue
		}
		for _, sql := range sections[name] {
			tree := mustParse(t, sql)
			r := newTSQLReader(tree)
			for _, st := range topStatements(tree) {
				table := strings.ToLower(getString(st, "SchemaObjectName", "BaseIdentifier", "Value"))
				constraint := func(c any, column string) {
					cname := getString(c, "ConstraintIdentifier", "Value")
					switch getString(c, "$type") {
					case "UniqueConstraintDefinition":
						var cols []string
						for _, col := range getList(c, "Columns") {
							cols = append(cols, columnOrWord(get(col, "Column")))
						}
						if len(cols) == 0 {
							cols = []string{column}
						}
						kind := "UNIQUE"
						if get(c, "IsPrimaryKey") == true {
							kind = "PRIMARY KEY"
						}
						f.keys[cname] = kind + " " + table + " (" + strings.Join(cols, ", ") + ")"
						f.keyCols[cname] = prefixed(table, strings.Join(cols, ", "))
					case "ForeignKeyConstraintDefinition":
						var cols, refs []string
						for _, col := range getList(c, "Columns") {
							cols = append(cols, strings.ToLower(getString(col, "Value")))
						}
						for _, col := range getList(c, "ReferencedTableColumns") {
							refs = append(refs, strings.ToLower(getString(col, "Value")))
						}
						action := map[string]string{"Cascade": "cascade", "NotSpecified": ""}[getString(c, "DeleteAction")]
						f.foreignKeys[cname] = fmt.Sprintf("%s (%s) -> %s (%s) ON DELETE %s", table, strings.Join(cols, ", "),
							strings.ToLower(getString(c, "ReferenceTableName", "BaseIdentifier", "Value")), strings.Join(refs, ", "), action)
					case "CheckConstraintDefinition":
						f.checks[cname] = sortedAtoms(r.boolean(get(c, "CheckCondition")))
					}
				}
				switch getString(st, "$type") {
				case "CreateTableStatement", "AlterTableAddTableElementStatement":
					for _, c := range getList(st, "Definition", "ColumnDefinitions") {
						col := strings.ToLower(getString(c, "ColumnIdentifier", "Value"))
						key := table + "." + col
						f.nullable[key] = true
						for _, k := range getList(c, "Constraints") {
							if getString(k, "$type") == "NullableConstraintDefinition" {
								f.nullable[key] = get(k, "Nullable") == true
							} else {
								constraint(k, col)
							}
						}
						f.collation[key] = getString(c, "Collation", "Value")
						f.charCol[key] = strings.Contains(strings.ToLower(getString(c, "DataType", "SqlDataTypeOption")), "char")
					}
					for _, c := range getList(st, "Definition", "TableConstraints") {
						constraint(c, "")
					}
				case "CreateIndexStatement":
					var cols []string
					for _, col := range getList(st, "Columns") {
						cols = append(cols, columnOrWord(get(col, "Column")))
					}
					filter := get(st, "FilterPredicate")
					f.index(getString(st, "Name", "Value"), get(st, "Unique") == true,
						strings.ToLower(getString(st, "OnName", "BaseIdentifier", "Value")), strings.Join(cols, ", "), r.boolean(filter), filter != nil)
				}
			}
		}
	}
	return f
}

// TestStaticSchemaSemantics: the SQL Server migrations give every index
// the Postgres one's UNIQUE flag, table, key columns and filter; every
// primary key, unique, foreign key and check constraint its columns, target
// and predicate; every column its nullability. And the two documented
// dialect rules hold: a unique key over a nullable column filters on IS NOT
// NULL (SQL Server treats NULLs as equal in a unique index, Postgres as
// distinct), and every character column of a unique key compares exactly
// (COLLATE Latin1_General_100_BIN2, as Postgres's default "C"-like
// equality; a case-insensitive key would merge 'Invoice:1' and
// 'invoice:1' into one trigger).
func TestStaticSchemaSemantics(t *testing.T) {
	t.Parallel()

	pg, ms := postgresFacts(t), sqlServerFacts(t)
	require.NotEmpty(t, pg.indexes)
	require.NotEmpty(t, pg.keys)
	for name, want := range pg.indexes {
		require.Equal(t, want, ms.indexes[name], "index %s", name)
	}
	for name, want := range pg.keys {
		require.Equal(t, want, ms.keys[name], "constraint %s", name)
	}
	for name, want := range pg.foreignKeys {
		require.Equal(t, want, ms.foreignKeys[name], "foreign key %s", name)
	}
	for name, want := range pg.checks {
		require.Equal(t, want, ms.checks[name], "check constraint %s", name)
	}
	for col, want := range pg.nullable {
		got, ok := ms.nullable[col]
		require.True(t, ok, "column %s missing", col)
		require.Equal(t, want, got, "column %s nullable", col)
	}
	for name, cols := range ms.keyCols {
		for _, col := range cols {
			if ms.nullable[col] {
				require.Contains(t, ms.filters[name], strings.SplitN(col, ".", 2)[1]+" IS NOT NULL",
					"%s: a unique key over nullable %s must filter on IS NOT NULL (SQL Server admits one NULL)", name, col)
			}
			if ms.charCol[col] {
				require.Equal(t, "Latin1_General_100_BIN2", ms.collation[col], "%s: key column %s must compare exactly", name, col)
			}
		}
	}
}

// TestStaticEmbeddedMatchesFiles: the static checks read sql/queries and
// sql/schema from disk (so make mutate can run one test binary against
// mutated copies); the adapter ships the embedded copies, which must be
// the same files.
func TestStaticEmbeddedMatchesFiles(t *testing.T) {
	t.Parallel()

	embedded, err := queries.SQLServer()
	require.NoError(t, err)
	onDisk := sqlServerQueries(t)
	require.Equal(t, len(onDisk), len(embedded))
	for name, q := range onDisk {
		require.Equal(t, q.SQL, embedded[name].SQL, "%s: embedded copy differs from the file", name)
	}
	files, err := fs.Glob(schema.SQLServer(), "*.sql")
	require.NoError(t, err)
	for _, file := range files {
		a, err := fs.ReadFile(schema.SQLServer(), file)
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(sqlServerSchemaDir, file))
		require.NoError(t, err)
		require.Equal(t, string(b), string(a), "%s: embedded copy differs from the file", file)
	}
}

// TestStaticStartsUnderAGrant: every UPDATE that sets an episode running,
// in any batch, runs only under a grant of its claim: its WHERE holds an
// EXISTS over the claims table (StartEpisode's fenced check), or it runs
// under an IF EXISTS over a table variable that a claim grant's OUTPUT
// INTO filled in the same batch (CreateEpisode's start with its own grant),
// or its FROM inner joins such a table variable on the grant's dedupe_key
// (ClaimAvailable's set-based start: each row only under its own grant).
// And in such a batch, an UPDATE that only clears run_after (the picked
// episodes held live elsewhere) excludes the granted ones.
func TestStaticStartsUnderAGrant(t *testing.T) {
	t.Parallel()

	for _, q := range byName(sqlServerQueries(t)) {
		t.Run(q.Name, func(t *testing.T) {
			tree := mustParse(t, q.SQL)
			r := newTSQLReader(tree)
			granted := map[string]bool{} // table variables a claim grant outputs into
			for _, s := range batchStmts(tree) {
				for _, spec := range []any{get(s.n, "UpdateSpecification"), get(s.n, "InsertSpecification")} {
					into := strings.ToLower(getString(spec, "OutputIntoClause", "IntoTable", "Variable", "Name"))
					if into == "" || !strings.Contains(strings.ToLower(fragment(q.SQL, s.n)), claimsTable) {
						continue
					}
					granted[into] = true
				}
			}
			for _, s := range batchStmts(tree) {
				spec, ok := get(s.n, "UpdateSpecification").(node)
				if !ok {
					continue
				}
				targets := updateTargets(spec, q.SQL)
				if len(targets) == 0 || !strings.EqualFold(targets[0].table, episodesTable) {
					continue
				}
				starts := slices.ContainsFunc(getList(spec, "SetClauses"), func(c any) bool {
					return columnOrWord(get(c, "Column")) == "status" && r.expr(get(c, "NewValue")).String() == "'running'"
				})
				if !starts {
					continue
				}
				fenced := slices.ContainsFunc(conjuncts(get(spec, "WhereClause", "SearchCondition")), func(c any) bool {
					return getString(c, "$type") == "ExistsPredicate" && readsTable(c, claimsTable)
				})
				underGrant := slices.ContainsFunc(s.guards, func(g any) bool {
					return slices.ContainsFunc(conjuncts(g), func(c any) bool {
						if getString(c, "$type") != "ExistsPredicate" {
							return false
						}
						found := false
						walk(c, func(n node) {
							if getString(n, "$type") == "VariableTableReference" && granted[strings.ToLower(getString(n, "Variable", "Name"))] {
								found = true
							}
						})
						return found
					})
				})
				// Set-based (ClaimAvailable): the UPDATE's rows are inner
				// joined to the grants, on the grant's key, row by row.
				joinedGrant := false
				walk(get(spec, "FromClause"), func(j node) {
					if getString(j, "$type") != "QualifiedJoin" || getString(j, "QualifiedJoinType") != "Inner" {
						return
					}
					for _, side := range []any{get(j, "FirstTableReference"), get(j, "SecondTableReference")} {
						if getString(side, "$type") != "VariableTableReference" || !granted[strings.ToLower(getString(side, "Variable", "Name"))] {
							continue
						}
						alias := strings.ToLower(getString(side, "Alias", "Value"))
						joinedGrant = joinedGrant || slices.ContainsFunc(conjuncts(get(j, "SearchCondition")), func(c any) bool {
							return getString(c, "ComparisonType") == "Equals" &&
								(qualifiedColumn(get(c, "FirstExpression")) == [2]string{alias, "dedupe_key"} ||
									qualifiedColumn(get(c, "SecondExpression")) == [2]string{alias, "dedupe_key"})
						})
					}
				})
				require.True(t, fenced || underGrant || joinedGrant, "an episode is set running only under a grant of its claim:\n%s", fragment(q.SQL, s.n))
			}
			// In a batch that grants claims, an UPDATE that takes episodes
			// out of the available set without starting them (run_after
			// NULL, status untouched: held live elsewhere) leaves the
			// granted ones alone: its WHERE holds NOT EXISTS over a grant's
			// table variable.
			for _, s := range batchStmts(tree) {
				spec, ok := get(s.n, "UpdateSpecification").(node)
				if !ok || len(granted) == 0 {
					continue
				}
				targets := updateTargets(spec, q.SQL)
				if len(targets) == 0 || !strings.EqualFold(targets[0].table, episodesTable) {
					continue
				}
				set := map[string]string{}
				for _, c := range getList(spec, "SetClauses") {
					set[columnOrWord(get(c, "Column"))] = r.expr(get(c, "NewValue")).String()
				}
				if _, status := set["status"]; status || set["run_after"] != "NULL" {
					continue
				}
				notGranted := slices.ContainsFunc(conjuncts(get(spec, "WhereClause", "SearchCondition")), func(c any) bool {
					if getString(c, "$type") != "BooleanNotExpression" || getString(get(c, "Expression"), "$type") != "ExistsPredicate" {
						return false
					}
					v, _ := singleVariableSource(get(c, "Expression", "Subquery", "QueryExpression"))
					return granted[v]
				})
				require.True(t, notGranted, "an episode made unavailable without a start must not be one this batch granted:\n%s", fragment(q.SQL, s.n))
			}
		})
	}
}

// TestStaticHoldMatchesItsProcedure: the HoldClaim batch Run.Hold sends and
// the procedure leasehold_hold that users EXEC from their own T-SQL
// (migration 00009) hold the same body, from its table variable to its
// answer, apart from the parameter names (@claim_key, @owner_node there;
// @key, @owner here): the fence a user calls is the one the static checks
// verify on the batch.
func TestStaticHoldMatchesItsProcedure(t *testing.T) {
	t.Parallel()
	body := func(sql string) string {
		start := strings.Index(sql, "DECLARE @held")
		end := strings.Index(sql, "SELECT lease_until FROM @held;")
		require.True(t, start >= 0 && end > start, "no leasehold_hold body in:\n%s", sql)
		return strings.Join(strings.Fields(sql[start:end]), " ")
	}
	batch := body(sqlServerQueries(t)["HoldClaim"].SQL)
	batch = strings.NewReplacer("@claim_key", "@key", "@owner_node", "@owner").Replace(batch)
	raw, err := fs.ReadFile(schema.SQLServer(), "00009_leasehold_hold.sql")
	require.NoError(t, err)
	require.Equal(t, batch, body(string(raw)))
}

// TestStaticGivenBackMatchesPostgres: RequeueOrphan decides whether the
// orphan's run counts as an attempt from @given_back, which the parity
// check cannot see (Postgres reads it from its claim_row CTE, T-SQL from
// the fenced claim's OUTPUT deleted.* in @fenced, as was_state and
// was_attempt). The condition must be the Postgres one, atom for atom,
// with those columns renamed.
func TestStaticGivenBackMatchesPostgres(t *testing.T) {
	t.Parallel()
	pgSQL := postgresQueries(t)["RequeueOrphan"].SQL
	const from, to = "SELECT coalesce((SELECT ", "FROM claim_row AS cr"
	i := strings.Index(pgSQL, from)
	require.GreaterOrEqual(t, i, 0, "Postgres RequeueOrphan reads given_back from claim_row: %q", from)
	j := strings.Index(pgSQL[i:], to)
	require.Greater(t, j, 0)
	var want []string
	atoms(pgExpr(pgSQL[i+len(from):i+j]), false, &want)

	tree := mustParse(t, sqlServerQueries(t)["RequeueOrphan"].SQL)
	r := newTSQLReader(tree)
	var got []string
	sets := 0
	walk(tree, func(n node) {
		if getString(n, "$type") != "SelectSetVariable" || !strings.EqualFold(getString(n, "Variable", "Name"), "@given_back") {
			return
		}
		sets++
		e := get(n, "Expression")
		whens := getList(e, "WhenClauses")
		require.Equal(t, "SearchedCaseExpression", getString(e, "$type"))
		require.Len(t, whens, 1)
		require.Equal(t, "1", getString(whens[0], "ThenExpression", "Value"))
		require.Equal(t, "0", getString(e, "ElseExpression", "Value"))
		atoms(r.boolean(get(whens[0], "WhenExpression")), false, &got)
	})
	require.Equal(t, 1, sets, "RequeueOrphan sets @given_back once")
	rename := strings.NewReplacer("was_state", "state", "was_attempt", "attempt")
	for k := range got {
		got[k] = rename.Replace(got[k])
	}
	require.NotEmpty(t, want)
	require.ElementsMatch(t, want, got, "@given_back decides what Postgres's given_back decides")
}

// boundInStatement: a Postgres takeover sets its own lock_timeout (LOCAL,
// when bound_ms > 0: outside a caller's transaction); a T-SQL takeover's
// batch is topped by BoundLockWait instead (bounds.sql, Store.batch).
const boundInStatement = "the frozen-holder bound: Postgres's takeover sets its own lock_timeout when bound_ms > 0; " +
	"T-SQL tops the takeover's batch with BoundLockWait (SET LOCK_TIMEOUT), which TestUnitParamsMatchPostgres checks"
