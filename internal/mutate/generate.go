package main

import (
	"fmt"
	"regexp"
	"strings"
)

// A generated mutant: one plausible mistake in one statement, found by
// scanning the statement's text rather than listed by hand, so that a
// statement added later is covered without anyone remembering to. ID is
// stable across runs while the statement does not change
// (<dialect>:<statement>:<operator>#<n>), which is what the equivalents
// list (equivalent.go) keys on.
type generated struct {
	ID        string
	Dialect   string
	File      string // the file the statement's text is applied to
	Statement string
	Op        string // cmp-dir, cmp-strict, cmp-neg, drop, not, lock, ret-swap
	Old, New  string // the statement's whole text before and after
	What      string
}

// decidingTerm matches what a coordination predicate decides on: the fence,
// the owner, a state or status, a lease or due time against the database
// clock, attempts, archiving, cancel requests, the expectation (a poller
// takes only the (actor, expectation) pairs it runs: issue 31), and the
// dedupe key version (the guard that refuses a version 1 key once the
// database moved, and the switch: migration 00014) or a definition's.
var decidingTerm = regexp.MustCompile(`(?i)\b(fence|owner_node|claimed_by|owner|state|status|lease_until|claim_until|run_after|attempts?|max_attempts|archived_at|cancel_requested_at|finished_at|expires_at|expectation_id|now\(\)|unixepoch|SYSUTCDATETIME|@fence|@owner_node|key_version|version)\b`)

// cmpOp matches one comparison operator, longest first.
var cmpOp = regexp.MustCompile(`<=|>=|<>|!=|<|>|=`)

// lockClause matches a row-lock clause or table hint that a mutant removes.
var lockClause = regexp.MustCompile(`(?i)\s+FOR (NO KEY )?UPDATE( OF \w+)?|\s+FOR SHARE( OF \w+)?|\s+SKIP LOCKED|\s+NOWAIT|\b(UPDLOCK|HOLDLOCK|READPAST|ROWLOCK|SERIALIZABLE)\b,?\s*`)

// generate returns the mutants of one statement. text is its SQL as the
// file the mutant is applied to holds it (comments already stripped by
// sqlc for the generated Go, or as written for T-SQL).
func generate(dialect, file, name, text string) []generated {
	var out []generated
	n := map[string]int{}
	add := func(op, mutated, what string) {
		if mutated == text {
			return
		}
		n[op]++
		out = append(out, generated{
			ID: fmt.Sprintf("%s:%s:%s#%d", dialect, name, op, n[op]), Dialect: dialect, File: file,
			Statement: name, Op: op, Old: text, New: mutated, What: what,
		})
	}
	lines := strings.SplitAfter(text, "\n")
	offsets := make([]int, len(lines))
	at := 0
	for i, l := range lines {
		offsets[i] = at
		at += len(l)
	}
	inSet := false
	for i, line := range lines {
		code := stripComment(line)
		trim := strings.TrimSpace(code)
		upper := strings.ToUpper(trim)
		switch {
		case setKeyword.MatchString(code) && !strings.HasPrefix(upper, "SET @") && !strings.Contains(upper, "ANSI"):
			inSet = true
		case startsClause(upper):
			inSet = false
		}
		if trim == "" || strings.HasPrefix(trim, "--") {
			continue
		}
		// Comparisons in predicates that decide on a deciding term.
		if !(inSet && isAssignment(trim)) {
			for _, loc := range cmpOp.FindAllStringIndex(code, -1) {
				op := code[loc[0]:loc[1]]
				if insideQuotes(code, loc[0]) || !decidingTerm.MatchString(code) || isAssignmentAt(code, loc[0], inSet) ||
					jsonArrow(code, loc[0]) {
					continue
				}
				if op == "=" && (strings.Contains(upper, "DEFAULT") || strings.HasPrefix(upper, "DECLARE")) {
					continue
				}
				for _, m := range cmpMutations(op) {
					abs := offsets[i] + loc[0]
					mutated := text[:abs] + m.to + text[abs+len(op):]
					add(m.op, mutated, fmt.Sprintf("%s: %q -> %q in %q", name, op, m.to, trim))
				}
			}
		}
		// Whole predicates: an AND/OR line with balanced parentheses.
		if (strings.HasPrefix(upper, "AND ") || strings.HasPrefix(upper, "OR ")) && balanced(trim) && decidingTerm.MatchString(trim) {
			start := offsets[i]
			end := start + len(line)
			keep := ""
			if strings.HasSuffix(trim, ";") {
				keep = ";\n"
			}
			add("drop", text[:start]+keep+text[end:], fmt.Sprintf("%s: predicate removed: %q", name, trim))
			kw, rest, _ := strings.Cut(trim, " ")
			if strings.Count(rest, ")") > strings.Count(rest, "(") {
				continue // closes an outer group: negated alone it would not parse
			}
			indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			tail := ""
			if r := strings.TrimSpace(rest); strings.HasSuffix(r, ";") {
				rest, tail = strings.TrimSuffix(r, ";"), ";"
			}
			negated := indent + kw + " NOT (" + strings.TrimSpace(rest) + ")" + tail
			add("not", text[:start]+negated+"\n"+text[end:], fmt.Sprintf("%s: predicate negated: %q", name, trim))
		}
	}
	// Lock clauses and hints, each removed alone.
	for _, loc := range lockClause.FindAllStringIndex(text, -1) {
		if insideQuotes(text, loc[0]) || insideComment(text, loc[0]) {
			continue
		}
		removed := text[:loc[0]] + text[loc[1]:]
		removed = strings.ReplaceAll(removed, "WITH ()", "")
		removed = strings.ReplaceAll(removed, ", )", ")")
		add("lock", removed, fmt.Sprintf("%s: lock clause removed: %q", name, strings.TrimSpace(text[loc[0]:loc[1]])))
	}
	// Adjacent columns of a RETURNING or OUTPUT list swapped. Inside a CTE,
	// whose columns the statement reads by name, the values are swapped and
	// each keeps the other's output name (an AS alias, or the column's own
	// name), so that one column's value reaches the other's reader, as a
	// plain swap does in a list read by position (the adapter's scan, an
	// OUTPUT ... INTO's table).
	for _, m := range returnedList.FindAllStringSubmatchIndex(text, -1) {
		if insideComment(text, m[0]) {
			continue
		}
		listEnd := m[1] + returnedListLen(text[m[1]:])
		list := text[m[1]:listEnd]
		// A list that the ')' of its CTE ends is read by name; any other
		// (the statement's own result, an OUTPUT ... INTO) by position.
		inCTE := listEnd < len(text) && text[listEnd] == ')'
		cols := splitTop(list)
		for k := 0; k+1 < len(cols); k++ {
			a, b := strings.TrimSpace(cols[k].text), strings.TrimSpace(cols[k+1].text)
			if a == b || strings.Contains(a, "*") || strings.Contains(b, "*") {
				continue
			}
			na, nb := b, a
			if inCTE {
				na, nb = renamed(b, a), renamed(a, b)
			}
			swapped := list[:cols[k].start] + strings.Replace(cols[k].text, a, na, 1) + "," +
				strings.Replace(cols[k+1].text, b, nb, 1) + list[cols[k+1].end:]
			add("ret-swap", text[:m[1]]+swapped+text[listEnd:], fmt.Sprintf("%s: returned %q and %q swapped", name, a, b))
		}
	}
	return out
}

// asAlias splits a returned column into its value and its AS alias;
// namedColumn is a column reference without one, named after its column.
var (
	asAlias     = regexp.MustCompile(`(?is)^(.*\S)\s+AS\s+(\w+)$`)
	namedColumn = regexp.MustCompile(`^(?:\w+\.)?(\w+)$`)
)

// renamed is returned column col's value under the output name of column
// in: its alias, or the name of the column it reads; col's value alone
// when in is an expression with no name of its own.
func renamed(col, in string) string {
	value := col
	if m := asAlias.FindStringSubmatch(col); m != nil {
		value = m[1]
	}
	if m := asAlias.FindStringSubmatch(in); m != nil {
		return value + " AS " + m[2]
	}
	if m := namedColumn.FindStringSubmatch(in); m != nil {
		return value + " AS " + m[1]
	}
	return value
}

// returnedListLen returns the length of the RETURNING or OUTPUT column list
// that rest begins with. The list ends, outside parentheses and quoted
// text, at a ';', a blank line, the ')' that closes the CTE it is in (what
// follows is the next statement, not a column), or a clause keyword: INTO
// (T-SQL's OUTPUT ... INTO @t), FROM, WHERE, VALUES, SELECT.
func returnedListLen(rest string) int {
	depth, quoted := 0, false
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return i
			}
			depth--
		case depth > 0:
		case c == ';' || strings.HasPrefix(rest[i:], "\n\n"):
			return i
		case c == ' ' || c == '\n' || c == '\t':
			word := strings.ToUpper(strings.TrimLeft(rest[i:], " \n\t"))
			for _, kw := range []string{"INTO", "FROM", "WHERE", "VALUES", "SELECT"} {
				if strings.HasPrefix(word, kw) && (len(word) == len(kw) || !isWordByte(word[len(kw)])) {
					return i
				}
			}
		}
	}
	return len(rest)
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

type cmpMutation struct{ op, to string }

// cmpMutations: each comparison's direction flipped, its strictness
// changed, and its equality negated.
func cmpMutations(op string) []cmpMutation {
	switch op {
	case "<":
		return []cmpMutation{{"cmp-dir", ">"}, {"cmp-strict", "<="}}
	case "<=":
		return []cmpMutation{{"cmp-dir", ">="}, {"cmp-strict", "<"}}
	case ">":
		return []cmpMutation{{"cmp-dir", "<"}, {"cmp-strict", ">="}}
	case ">=":
		return []cmpMutation{{"cmp-dir", "<="}, {"cmp-strict", ">"}}
	case "=":
		return []cmpMutation{{"cmp-neg", "<>"}, {"cmp-strict", ">="}}
	case "<>", "!=":
		return []cmpMutation{{"cmp-neg", "="}}
	}
	return nil
}

// startsClause reports whether a line begins a clause that ends a SET list.
func startsClause(upper string) bool {
	for _, p := range []string{"WHERE", "FROM", "RETURNING", "OUTPUT", "ON CONFLICT", "SELECT", "INSERT", "UPDATE", "DELETE", "VALUES", "WITH", "IF ", "BEGIN", "END", ")"} {
		if strings.HasPrefix(upper, p) {
			return true
		}
	}
	return false
}

var (
	assignment   = regexp.MustCompile(`^[A-Za-z_][\w.]*\s*=[^=]`)
	bareColumn   = regexp.MustCompile(`^[A-Za-z_][\w.]*$`)
	setKeyword   = regexp.MustCompile(`(?i)(^|\s)SET\s`)
	returnedList = regexp.MustCompile(`(?i)\bRETURNING\s+|\bOUTPUT\s+`)
)

// isAssignment reports whether a SET-list line assigns a column.
func isAssignment(trim string) bool { return assignment.MatchString(trim) }

// isAssignmentAt reports whether the = at i of code assigns (col = ...) in
// a SET list or a T-SQL SET @v = ....
func isAssignmentAt(code string, i int, inSet bool) bool {
	if code[i] != '=' {
		return false
	}
	before := strings.TrimSpace(code[:i])
	if strings.HasSuffix(strings.ToUpper(before), "SET "+lastWord(before)) || strings.HasPrefix(strings.ToUpper(strings.TrimSpace(code)), "SET ") {
		return true
	}
	return inSet && bareColumn.MatchString(before)
}

func lastWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return strings.ToUpper(f[len(f)-1])
}

func stripComment(line string) string {
	if i := strings.Index(line, "--"); i >= 0 && !insideQuotes(line, i) {
		return line[:i]
	}
	return line
}

func insideQuotes(s string, i int) bool { return strings.Count(s[:i], "'")%2 == 1 }

func insideComment(s string, i int) bool {
	start := strings.LastIndex(s[:i], "\n") + 1
	return strings.Contains(s[start:i], "--")
}

func balanced(s string) bool { return strings.Count(s, "(") == strings.Count(s, ")") }

type part struct {
	text       string
	start, end int
}

// splitTop splits a column list at its top-level commas.
func splitTop(list string) []part {
	var out []part
	depth, start := 0, 0
	for i, r := range list {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, part{list[start:i], start, i})
				start = i + 1
			}
		}
	}
	return append(out, part{list[start:], start, len(list)})
}

// jsonArrow reports whether the '>' at i is part of a JSON operator (->,
// ->>, #>, #>>), not a comparison.
func jsonArrow(code string, i int) bool {
	return code[i] == '>' && i > 0 && strings.ContainsRune("-#>", rune(code[i-1]))
}
