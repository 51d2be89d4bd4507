package sqlserver_test

// The expression model the semantic checks compare (static_semantics_test.go):
// a small canonical form that both dialects are read into, the T-SQL from
// teesql's parse tree, the Postgres from a tokenizer and a recursive-descent
// parser of the expression subset sql/queries/postgres and
// sql/schema/postgres use. Neither side is compared as text: two statements
// agree when their canonical atoms agree.
//
// Canonical rules, the same on both sides:
//   - a column is its last name part, lower case (c.state and state agree);
//   - a parameter is @name (sqlc.arg(name) and an undeclared @name); a
//     variable the batch DECLAREs is $name (no Postgres counterpart);
//   - casts are dropped (::bigint, CAST(x AS int));
//   - now() and SYSUTCDATETIME() are now; now() ± (@p * interval '1
//     millisecond'), DATEADD(millisecond, ±@p, now) and the documented split
//     DATEADD(second, ±@p / 1000, DATEADD(millisecond, ±@p % 1000, now)) are
//     now+ms(@p) / now-ms(@p); every other DATEADD stays dateadd(unit, ...);
//   - 'x' and N'x' are 'x'; true/false are 1/0; || and CONCAT are concat;
//     CASE WHEN a > b THEN a ELSE b END is greatest(a, b) (arguments sorted);
//   - a comparison puts its smaller side first (mirroring the operator), a
//     negated comparison flips its operator, a literal IN list is sorted,
//     and a bare boolean column or parameter p is p = 1 (NOT p: p = 0).

import (
	"slices"
	"strings"
)

// ex is one canonical expression.
type ex struct {
	op   string // col, param, var, str, num, null, now, fn, bin, neg, case, cmp, in, notin, isnull, isnotnull, exists, notexists, like, notlike, between, and, or, not, sub, star, ms+, ms-, interval, ?
	s    string // name, value, operator or function name
	args []*ex
}

func (e *ex) String() string {
	if e == nil {
		return "<nil>"
	}
	args := func(sep string) string {
		out := make([]string, len(e.args))
		for i, a := range e.args {
			out[i] = a.String()
		}
		return strings.Join(out, sep)
	}
	switch e.op {
	case "col", "excluded", "cte":
		return e.s
	case "param":
		return "@" + e.s
	case "var":
		return "$" + e.s
	case "str":
		return "'" + e.s + "'"
	case "num", "?":
		return e.s
	case "null":
		return "NULL"
	case "now":
		return "now"
	case "star":
		return "*"
	case "ms+", "ms-":
		return e.args[0].String() + e.op[2:] + "ms(" + e.args[1].String() + ")"
	case "fn":
		return e.s + "(" + args(", ") + ")"
	case "bin":
		return "(" + e.args[0].String() + " " + e.s + " " + e.args[1].String() + ")"
	case "neg":
		return "-" + e.args[0].String()
	case "case":
		return "case(" + args("; ") + ")"
	case "cmp":
		return e.args[0].String() + " " + e.s + " " + e.args[1].String()
	case "in", "notin":
		return e.args[0].String() + map[string]string{"in": " IN (", "notin": " NOT IN ("}[e.op] + joinEx(e.args[1:]) + ")"
	case "isnull":
		return e.args[0].String() + " IS NULL"
	case "isnotnull":
		return e.args[0].String() + " IS NOT NULL"
	case "exists":
		return "EXISTS(" + e.s + ")"
	case "notexists":
		return "NOT EXISTS(" + e.s + ")"
	case "like":
		return e.args[0].String() + " LIKE " + e.args[1].String()
	case "notlike":
		return e.args[0].String() + " NOT LIKE " + e.args[1].String()
	case "between":
		return e.args[0].String() + " BETWEEN " + e.args[1].String() + " AND " + e.args[2].String()
	case "and", "or":
		return "(" + args(" "+strings.ToUpper(e.op)+" ") + ")"
	case "not":
		return "NOT " + e.args[0].String()
	case "sub":
		return "(SELECT FROM " + e.s + ")"
	case "interval":
		return "interval '" + e.s + "'"
	}
	return e.op + "?"
}

func joinEx(list []*ex) string {
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = a.String()
	}
	return strings.Join(out, ", ")
}

var mirrored = map[string]string{"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
var negated = map[string]string{"=": "<>", "<>": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}

// mkCmp builds a canonical comparison.
func mkCmp(op string, l, r *ex) *ex {
	if op == "!=" {
		op = "<>"
	}
	if l.String() > r.String() {
		l, r, op = r, l, mirrored[op]
	}
	return &ex{op: "cmp", s: op, args: []*ex{l, r}}
}

func mkIn(not bool, subject *ex, list []*ex) *ex {
	list = slices.Clone(list)
	slices.SortFunc(list, func(a, b *ex) int { return strings.Compare(a.String(), b.String()) })
	op := "in"
	if not {
		op = "notin"
	}
	return &ex{op: op, args: append([]*ex{subject}, list...)}
}

// mkFn builds a function call, recognising the clock and concatenation.
func mkFn(name string, args []*ex) *ex {
	name = strings.ToLower(name)
	switch name {
	case "now", "sysutcdatetime":
		if len(args) == 0 {
			return &ex{op: "now"}
		}
	case "concat":
		var flat []*ex
		for _, a := range args {
			if a.op == "fn" && a.s == "concat" {
				flat = append(flat, a.args...)
			} else {
				flat = append(flat, a)
			}
		}
		return &ex{op: "fn", s: "concat", args: flat}
	case "greatest":
		args = slices.Clone(args)
		slices.SortFunc(args, func(a, b *ex) int { return strings.Compare(a.String(), b.String()) })
	}
	return &ex{op: "fn", s: name, args: args}
}

// isIntervalMs: interval '1 millisecond'.
func isIntervalMs(e *ex) bool {
	return e.op == "interval" && strings.EqualFold(strings.TrimSpace(e.s), "1 millisecond")
}

// mkBin builds arithmetic, recognising now() ± @p * interval '1 millisecond'.
func mkBin(op string, l, r *ex) *ex {
	if op == "||" {
		return mkFn("concat", []*ex{l, r})
	}
	if (op == "+" || op == "-") && l.op == "now" && r.op == "bin" && r.s == "*" {
		a, b := r.args[0], r.args[1]
		if isIntervalMs(a) {
			a, b = b, a
		}
		if isIntervalMs(b) {
			return &ex{op: "ms" + op, args: []*ex{l, a}}
		}
	}
	return &ex{op: "bin", s: op, args: []*ex{l, r}}
}

// mkDateAdd reads DATEADD(unit, n, base) into the canonical form.
func mkDateAdd(unit string, n, base *ex) *ex {
	unit = strings.ToLower(unit)
	sign, amount := "+", n
	if n.op == "neg" {
		sign, amount = "-", n.args[0]
	}
	if unit == "millisecond" && (amount.op == "param" || amount.op == "var") {
		return &ex{op: "ms" + sign, args: []*ex{base, amount}}
	}
	// The split: DATEADD(second, ±(@p / 1000), DATEADD(millisecond, ±(@p % 1000), b)).
	if unit == "second" && amount.op == "bin" && amount.s == "/" && amount.args[1].String() == "1000" &&
		base.op == "fn" && base.s == "dateadd" && len(base.args) == 3 && base.args[0].s == "millisecond" {
		inner := base.args[1]
		innerSign := "+"
		if inner.op == "neg" {
			innerSign, inner = "-", inner.args[0]
		}
		if innerSign == sign && inner.op == "bin" && inner.s == "%" && inner.args[1].String() == "1000" &&
			inner.args[0].String() == amount.args[0].String() {
			return &ex{op: "ms" + sign, args: []*ex{base.args[2], amount.args[0]}}
		}
	}
	return &ex{op: "fn", s: "dateadd", args: []*ex{{op: "?", s: unit}, n, base}}
}

// mkCase builds a searched CASE (whens/thens alternating, else last),
// recognising CASE WHEN a > b THEN a ELSE b END as greatest(a, b).
func mkCase(parts []*ex) *ex {
	if len(parts) == 3 && parts[0].op == "cmp" && parts[2] != nil {
		c, then, els := parts[0], parts[1].String(), parts[2].String()
		a, b := c.args[0].String(), c.args[1].String()
		switch {
		case (c.s == ">" || c.s == ">=") && then == a && els == b,
			(c.s == "<" || c.s == "<=") && then == b && els == a:
			return mkFn("greatest", []*ex{parts[1], parts[2]})
		}
	}
	return &ex{op: "case", args: parts}
}

// atoms returns the canonical predicates of a boolean expression: its
// comparisons, IN lists, IS [NOT] NULL tests, LIKE and EXISTS tests, with
// NOT pushed into them. CASE in a boolean position contributes its
// branches (its WHEN conditions are roots of their own).
func atoms(e *ex, neg bool, out *[]string) {
	if e == nil {
		return
	}
	switch e.op {
	case "and", "or":
		for _, a := range e.args {
			atoms(a, neg, out)
		}
		return
	case "not":
		atoms(e.args[0], !neg, out)
		return
	case "case":
		for i := 1; i < len(e.args); i += 2 {
			atoms(e.args[i], neg, out)
		}
		if len(e.args)%2 == 1 {
			atoms(e.args[len(e.args)-1], neg, out)
		}
		return
	case "col", "param", "var": // a bare boolean
		v := "1"
		if neg {
			v = "0"
		}
		*out = append(*out, mkCmp("=", e, &ex{op: "num", s: v}).String())
		return
	case "num": // ON true, ON 1 = 1: always true, nothing decided
		return
	case "exists":
		if e.s == "" { // a table variable's or CTE's rows: the dependency checks' business
			return
		}
	case "cmp":
		if e.args[0].op == "num" && e.args[1].op == "num" && e.s == "=" && e.args[0].s == e.args[1].s {
			return // ON 1 = 1
		}
	}
	if hasRef(e, "cte") { // a CTE's column: T-SQL has a variable there
		return
	}
	if neg {
		e = negate(e)
	}
	*out = append(*out, e.String())
}

func negate(e *ex) *ex {
	flip := map[string]string{"in": "notin", "notin": "in", "isnull": "isnotnull", "isnotnull": "isnull",
		"exists": "notexists", "notexists": "exists", "like": "notlike", "notlike": "like"}
	switch {
	case e.op == "cmp":
		return mkCmp(negated[e.s], e.args[0], e.args[1])
	case flip[e.op] != "":
		return &ex{op: flip[e.op], s: e.s, args: e.args}
	}
	return &ex{op: "not", args: []*ex{e}}
}

// hasRef reports whether e mentions a column, variable or subquery (what a
// literal-only comparison of SET values leaves out).
func hasRef(e *ex, ops ...string) bool {
	if e == nil {
		return false
	}
	if slices.Contains(ops, e.op) {
		return true
	}
	return slices.ContainsFunc(e.args, func(a *ex) bool { return hasRef(a, ops...) })
}

// --- T-SQL: from teesql's tree ---

// tsqlReader converts tree expressions; declared holds the batch's
// DECLAREd variables, lower case with "@".
type tsqlReader struct{ declared map[string]bool }

func newTSQLReader(tree any) tsqlReader {
	r := tsqlReader{declared: map[string]bool{}}
	walk(tree, func(n node) {
		switch getString(n, "$type") {
		case "DeclareVariableElement", "DeclareTableVariableBody":
			r.declared[strings.ToLower(getString(n, "VariableName", "Value"))] = true
		}
	})
	return r
}

func (r tsqlReader) expr(v any) *ex {
	n, ok := v.(node)
	if !ok || n == nil {
		return &ex{op: "?", s: "nil"}
	}
	switch getString(n, "$type") {
	case "ColumnReferenceExpression":
		ids := getList(n, "MultiPartIdentifier", "Identifiers")
		if len(ids) == 0 {
			return &ex{op: "star"}
		}
		return &ex{op: "col", s: strings.ToLower(getString(ids[len(ids)-1], "Value"))}
	case "VariableReference":
		name := strings.ToLower(getString(n, "Name"))
		if r.declared[name] {
			return &ex{op: "var", s: strings.TrimPrefix(name, "@")}
		}
		return &ex{op: "param", s: strings.TrimPrefix(name, "@")}
	case "GlobalVariableExpression":
		return &ex{op: "fn", s: strings.ToLower(getString(n, "Name"))}
	case "StringLiteral":
		return &ex{op: "str", s: getString(n, "Value")}
	case "IntegerLiteral", "NumericLiteral", "RealLiteral", "MoneyLiteral":
		return &ex{op: "num", s: getString(n, "Value")}
	case "NullLiteral":
		return &ex{op: "null"}
	case "FunctionCall":
		name := getString(n, "FunctionName", "Value")
		params := getList(n, "Parameters")
		if strings.EqualFold(name, "DATEADD") && len(params) == 3 {
			return mkDateAdd(columnOrWord(params[0]), r.expr(params[1]), r.expr(params[2]))
		}
		var args []*ex
		for _, p := range params {
			args = append(args, r.expr(p))
		}
		if strings.EqualFold(name, "DATEDIFF_BIG") || strings.EqualFold(name, "DATEDIFF") {
			if len(args) > 0 {
				args[0] = &ex{op: "?", s: strings.ToLower(columnOrWord(params[0]))}
			}
		}
		return mkFn(name, args)
	case "CastCall", "ConvertCall", "TryCastCall", "TryConvertCall":
		return r.expr(get(n, "Parameter"))
	case "CoalesceExpression":
		var args []*ex
		for _, p := range getList(n, "Expressions") {
			args = append(args, r.expr(p))
		}
		return mkFn("coalesce", args)
	case "SearchedCaseExpression":
		var parts []*ex
		for _, w := range getList(n, "WhenClauses") {
			parts = append(parts, r.boolean(get(w, "WhenExpression")), r.expr(get(w, "ThenExpression")))
		}
		if e := get(n, "ElseExpression"); e != nil {
			parts = append(parts, r.expr(e))
		}
		return mkCase(parts)
	case "BinaryExpression":
		op := map[string]string{"Add": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "Modulo": "%"}[getString(n, "BinaryExpressionType")]
		return mkBin(op, r.expr(get(n, "FirstExpression")), r.expr(get(n, "SecondExpression")))
	case "UnaryExpression":
		inner := r.expr(get(n, "Expression"))
		if getString(n, "UnaryExpressionType") == "Negative" {
			return &ex{op: "neg", args: []*ex{inner}}
		}
		return inner
	case "ParenthesisExpression":
		return r.expr(get(n, "Expression"))
	case "ScalarSubquery":
		return &ex{op: "sub", s: firstTable(n)}
	}
	return r.boolean(n)
}

func (r tsqlReader) boolean(v any) *ex {
	n, _ := v.(node)
	switch getString(n, "$type") {
	case "BooleanBinaryExpression":
		op := strings.ToLower(getString(n, "BinaryExpressionType"))
		return &ex{op: op, args: []*ex{r.boolean(get(n, "FirstExpression")), r.boolean(get(n, "SecondExpression"))}}
	case "BooleanNotExpression":
		return &ex{op: "not", args: []*ex{r.boolean(get(n, "Expression"))}}
	case "BooleanParenthesisExpression":
		return r.boolean(get(n, "Expression"))
	case "BooleanComparisonExpression":
		op := map[string]string{"Equals": "=", "NotEqualToBrackets": "<>", "NotEqualToExclamation": "<>",
			"LessThan": "<", "LessThanOrEqualTo": "<=", "GreaterThan": ">", "GreaterThanOrEqualTo": ">="}[getString(n, "ComparisonType")]
		return mkCmp(op, r.expr(get(n, "FirstExpression")), r.expr(get(n, "SecondExpression")))
	case "InPredicate":
		subject := r.expr(get(n, "Expression"))
		var list []*ex
		if sub := get(n, "Subquery"); sub != nil {
			list = []*ex{{op: "sub", s: firstTable(sub)}}
		}
		for _, v := range getList(n, "Values") {
			list = append(list, r.expr(v))
		}
		return mkIn(get(n, "NotDefined") == true, subject, list)
	case "BooleanIsNullExpression":
		op := "isnull"
		if get(n, "IsNot") == true {
			op = "isnotnull"
		}
		return &ex{op: op, args: []*ex{r.expr(get(n, "Expression"))}}
	case "ExistsPredicate":
		return &ex{op: "exists", s: firstTable(get(n, "Subquery"))}
	case "LikePredicate":
		op := "like"
		if get(n, "NotDefined") == true {
			op = "notlike"
		}
		return &ex{op: op, args: []*ex{r.expr(get(n, "FirstExpression")), r.expr(get(n, "SecondExpression"))}}
	case "BooleanTernaryExpression":
		e := &ex{op: "between", args: []*ex{r.expr(get(n, "FirstExpression")), r.expr(get(n, "SecondExpression")), r.expr(get(n, "ThirdExpression"))}}
		if getString(n, "TernaryExpressionType") != "Between" {
			return &ex{op: "not", args: []*ex{e}}
		}
		return e
	case "":
		return &ex{op: "?", s: "nil"}
	}
	if strings.HasSuffix(getString(n, "$type"), "Expression") || strings.HasSuffix(getString(n, "$type"), "Literal") ||
		strings.HasSuffix(getString(n, "$type"), "Call") || getString(n, "$type") == "ScalarSubquery" {
		return r.expr(n)
	}
	return &ex{op: "?", s: getString(n, "$type")}
}

// columnOrWord reads DATEADD's unit, which the parser keeps as a column.
func columnOrWord(v any) string {
	ids := getList(v, "MultiPartIdentifier", "Identifiers")
	if len(ids) > 0 {
		return strings.ToLower(getString(ids[len(ids)-1], "Value"))
	}
	return strings.ToLower(getString(v, "Value"))
}

// firstTable is the first real (leasehold_) table a subquery reads, or "".
func firstTable(v any) string {
	table, at := "", -1.0
	walk(v, func(n node) {
		if getString(n, "$type") == "NamedTableReference" {
			t := strings.ToLower(getString(n, "SchemaObject", "BaseIdentifier", "Value"))
			off, _ := get(n, "StartOffset").(float64)
			if strings.HasPrefix(t, "leasehold_") && (at < 0 || off < at) {
				table, at = t, off
			}
		}
	})
	return table
}

// tsqlAtoms returns the atoms of every boolean expression in a T-SQL tree:
// WHERE and JOIN conditions, IF predicates, CASE conditions, index filters,
// subqueries included.
func tsqlAtoms(tree any) []string { return tsqlAtomsOf(tree, func(e *ex) *ex { return e }) }

// tsqlAtomsOf returns the atoms of every predicate of a T-SQL batch, each
// predicate rewritten first.
func tsqlAtomsOf(tree any, rewrite func(*ex) *ex) []string {
	r := newTSQLReader(tree)
	var out []string
	walk(tree, func(n node) {
		for _, k := range []string{"SearchCondition", "Predicate", "WhenExpression", "FilterPredicate"} {
			if c, ok := n[k].(node); ok {
				if k == "Predicate" && getString(n, "$type") != "IfStatement" && getString(n, "$type") != "WhileStatement" {
					continue
				}
				atoms(rewrite(r.boolean(c)), false, &out)
			}
		}
	})
	return out
}

// --- Postgres: a tokenizer and a parser of the expression subset ---

type pgTok struct {
	kind string // word, str, num, op
	text string // words upper-cased in up; text as written
	up   string
}

// pgTokens splits Postgres text into tokens, dropping comments.
func pgTokens(sql string) []pgTok {
	var out []pgTok
	ops := []string{"::", "<=", ">=", "<>", "!=", "||", "=>"}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'':
			j := i + 1
			var b strings.Builder
			for j < len(sql) {
				if sql[j] == '\'' {
					if j+1 < len(sql) && sql[j+1] == '\'' {
						b.WriteByte('\'')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(sql[j])
				j++
			}
			out = append(out, pgTok{kind: "str", text: b.String()})
			i = j + 1
		case isIdent(c) && !('0' <= c && c <= '9'):
			j := i
			for j < len(sql) && isIdent(sql[j]) {
				j++
			}
			out = append(out, pgTok{kind: "word", text: sql[i:j], up: strings.ToUpper(sql[i:j])})
			i = j
		case '0' <= c && c <= '9':
			j := i
			for j < len(sql) && ('0' <= sql[j] && sql[j] <= '9' || sql[j] == '.') {
				j++
			}
			out = append(out, pgTok{kind: "num", text: sql[i:j]})
			i = j
		default:
			op := string(c)
			for _, o := range ops {
				if strings.HasPrefix(sql[i:], o) {
					op = o
					break
				}
			}
			out = append(out, pgTok{kind: "op", text: op, up: op})
			i += len(op)
		}
	}
	return out
}

type pgParser struct {
	toks []pgTok
	pos  int
	ctes map[string]bool // the statement's CTE names, lower case
}

// pgCTEs returns the names a statement's WITH clause defines.
func pgCTEs(toks []pgTok) map[string]bool {
	out := map[string]bool{}
	depth := 0
	for i, t := range toks {
		switch {
		case t.text == "(":
			depth++
		case t.text == ")":
			depth--
		case depth == 0 && (t.up == "WITH" || t.text == ",") && i+3 < len(toks) &&
			toks[i+1].kind == "word" && toks[i+2].up == "AS" && toks[i+3].text == "(":
			out[strings.ToLower(toks[i+1].text)] = true
		}
	}
	return out
}

func (p *pgParser) peek(k int) pgTok {
	if p.pos+k < len(p.toks) {
		return p.toks[p.pos+k]
	}
	return pgTok{kind: "eof"}
}

func (p *pgParser) word(w string) bool {
	if t := p.peek(0); t.kind == "word" && t.up == w {
		p.pos++
		return true
	}
	return false
}

func (p *pgParser) opTok(o string) bool {
	if t := p.peek(0); t.kind == "op" && t.text == o {
		p.pos++
		return true
	}
	return false
}

// skipParens skips a balanced parenthesised run starting at "(" and returns
// the first leasehold_ table named after a FROM or JOIN in it.
func (p *pgParser) skipParens() string {
	depth, table := 0, ""
	for p.pos < len(p.toks) {
		t := p.toks[p.pos]
		p.pos++
		switch {
		case t.text == "(":
			depth++
		case t.text == ")":
			depth--
			if depth == 0 {
				return table
			}
		case t.kind == "word" && (t.up == "FROM" || t.up == "JOIN") && table == "":
			if n := p.peek(0); n.kind == "word" && strings.HasPrefix(strings.ToLower(n.text), "leasehold_") {
				table = strings.ToLower(n.text)
			}
		}
	}
	return table
}

func (p *pgParser) or() *ex {
	e := p.and()
	for p.word("OR") {
		e = &ex{op: "or", args: []*ex{e, p.and()}}
	}
	return e
}

func (p *pgParser) and() *ex {
	e := p.not()
	for p.word("AND") {
		e = &ex{op: "and", args: []*ex{e, p.not()}}
	}
	return e
}

func (p *pgParser) not() *ex {
	if p.word("NOT") {
		return &ex{op: "not", args: []*ex{p.not()}}
	}
	return p.pred()
}

func (p *pgParser) pred() *ex {
	l := p.add()
	t := p.peek(0)
	if t.kind == "op" {
		switch t.text {
		case "=", "<>", "!=", "<", "<=", ">", ">=":
			p.pos++
			if p.peek(0).up == "ANY" {
				p.pos++
				return mkCmp(t.text, l, mkFn("any", []*ex{p.primary()}))
			}
			return mkCmp(t.text, l, p.add())
		case "~":
			p.pos++
			return mkFn("regex", []*ex{l, p.add()})
		}
	}
	not := false
	if t.kind == "word" && t.up == "NOT" && (p.peek(1).up == "IN" || p.peek(1).up == "LIKE") {
		not = true
		p.pos++
	}
	switch {
	case p.word("IS"):
		if p.word("NOT") {
			p.word("NULL")
			return &ex{op: "isnotnull", args: []*ex{l}}
		}
		p.word("NULL")
		return &ex{op: "isnull", args: []*ex{l}}
	case p.word("IN"):
		if p.peek(1).up == "SELECT" {
			return mkIn(not, l, []*ex{{op: "sub", s: p.skipParens()}})
		}
		p.opTok("(")
		var list []*ex
		for {
			list = append(list, p.add())
			if !p.opTok(",") {
				break
			}
		}
		p.opTok(")")
		return mkIn(not, l, list)
	case p.word("LIKE"):
		op := "like"
		if not {
			op = "notlike"
		}
		return &ex{op: op, args: []*ex{l, p.add()}}
	case p.word("BETWEEN"):
		lo := p.add()
		p.word("AND")
		return &ex{op: "between", args: []*ex{l, lo, p.add()}}
	}
	return l
}

func (p *pgParser) add() *ex {
	e := p.mul()
	for {
		t := p.peek(0)
		if t.kind == "op" && (t.text == "+" || t.text == "-" || t.text == "||") {
			p.pos++
			e = mkBin(t.text, e, p.mul())
			continue
		}
		return e
	}
}

func (p *pgParser) mul() *ex {
	e := p.unary()
	for {
		t := p.peek(0)
		if t.kind == "op" && (t.text == "*" || t.text == "/" || t.text == "%") {
			p.pos++
			e = mkBin(t.text, e, p.unary())
			continue
		}
		return e
	}
}

func (p *pgParser) unary() *ex {
	if p.opTok("-") {
		return &ex{op: "neg", args: []*ex{p.unary()}}
	}
	e := p.primary()
	for p.opTok("::") { // casts are dropped: a type name, maybe an array
		p.pos++
		if p.opTok("[") {
			p.opTok("]")
		}
	}
	return e
}

func (p *pgParser) primary() *ex {
	t := p.peek(0)
	switch {
	case t.kind == "str":
		p.pos++
		return &ex{op: "str", s: t.text}
	case t.kind == "num":
		p.pos++
		return &ex{op: "num", s: t.text}
	case t.text == "*":
		p.pos++
		return &ex{op: "star"}
	case t.text == "(":
		if n := p.peek(1); n.up == "SELECT" || n.up == "WITH" {
			return &ex{op: "sub", s: p.skipParens()}
		}
		p.pos++
		e := p.or()
		p.opTok(")")
		return e
	case t.kind != "word":
		p.pos++
		return &ex{op: "?", s: t.text}
	}
	p.pos++
	switch t.up {
	case "NULL":
		return &ex{op: "null"}
	case "TRUE":
		return &ex{op: "num", s: "1"}
	case "FALSE":
		return &ex{op: "num", s: "0"}
	case "INTERVAL":
		s := p.peek(0).text
		p.pos++
		return &ex{op: "interval", s: s}
	case "EXISTS":
		return &ex{op: "exists", s: p.skipParens()}
	case "CASE":
		var parts []*ex
		for p.word("WHEN") {
			parts = append(parts, p.or())
			p.word("THEN")
			parts = append(parts, p.or())
		}
		if p.word("ELSE") {
			parts = append(parts, p.or())
		}
		p.word("END")
		return mkCase(parts)
	}
	name := []string{t.text}
	for p.peek(0).text == "." && p.peek(1).kind == "word" {
		name = append(name, p.peek(1).text)
		p.pos += 2
	}
	if p.peek(0).text != "(" {
		if len(name) == 2 && strings.EqualFold(name[0], "excluded") {
			return &ex{op: "excluded", s: strings.ToLower(name[1])}
		}
		if len(name) == 2 && p.ctes[strings.ToLower(name[0])] {
			return &ex{op: "cte", s: strings.ToLower(name[0] + "." + name[1])}
		}
		return &ex{op: "col", s: strings.ToLower(name[len(name)-1])}
	}
	full := strings.ToLower(strings.Join(name, "."))
	if full == "sqlc.arg" || full == "sqlc.narg" {
		p.pos++
		arg := strings.ToLower(p.peek(0).text)
		p.pos++
		p.opTok(")")
		return &ex{op: "param", s: arg}
	}
	if p.peek(1).up == "SELECT" {
		return mkFn(full, []*ex{{op: "sub", s: p.skipParens()}})
	}
	p.pos++ // (
	var args []*ex
	for p.peek(0).text != ")" && p.peek(0).kind != "eof" {
		if p.peek(0).kind == "word" && p.peek(1).text == "=>" { // named argument
			p.pos += 2
		}
		p.word("DISTINCT")
		args = append(args, p.or())
		if !p.opTok(",") && !p.word("FROM") {
			break
		}
	}
	p.opTok(")")
	return mkFn(full, args)
}

// pgRoots parses every boolean expression of a Postgres statement: the
// conditions after WHERE, ON (not ON CONFLICT) and WHEN, subqueries
// included, as the T-SQL side reads WHERE, JOIN, IF and CASE conditions.
func pgRoots(sql string) []*ex {
	toks := pgTokens(sql)
	ctes := pgCTEs(toks)
	var out []*ex
	for i, t := range toks {
		if t.kind != "word" {
			continue
		}
		switch t.up {
		case "WHERE", "WHEN":
		case "COALESCE":
			// coalesce(<condition>, false): a boolean a statement returns
			// (ListOrphanedEpisodes' given_back), which T-SQL spells CASE
			// WHEN <condition> THEN 1 ELSE 0 END; read as a WHEN.
			if i+1 >= len(toks) || toks[i+1].text != "(" {
				continue
			}
			p := &pgParser{toks: toks, pos: i + 2, ctes: ctes}
			if e := p.or(); isCondition(e) && p.opTok(",") && p.word("FALSE") {
				out = append(out, &ex{op: "when", args: []*ex{e}})
			}
			continue
		case "ON":
			if i+1 < len(toks) && toks[i+1].up == "CONFLICT" {
				continue
			}
		default:
			continue
		}
		p := &pgParser{toks: toks, pos: i + 1, ctes: ctes}
		e := p.or()
		if t.up == "WHERE" || t.up == "ON" {
			out = append(out, e)
		} else {
			out = append(out, &ex{op: "when", args: []*ex{e}})
		}
	}
	return out
}

// isCondition says whether e is a boolean condition (not a value).
func isCondition(e *ex) bool {
	switch e.op {
	case "cmp", "in", "notin", "isnull", "isnotnull", "exists", "notexists", "like", "notlike", "between", "and", "or", "not":
		return true
	}
	return false
}

// pgAtomsOf returns the atoms of every root of a Postgres statement, each
// root rewritten first.
func pgAtomsOf(sql string, rewrite func(*ex) *ex) []string {
	var out []string
	for _, e := range pgRoots(sql) {
		if e.op == "when" {
			e = e.args[0]
		}
		atoms(rewrite(e), false, &out)
	}
	return out
}

// pgExpr parses one Postgres expression from text.
func pgExpr(sql string) *ex {
	p := &pgParser{toks: pgTokens(sql)}
	return p.or()
}

// assignment is one column a write sets: "table.column := value".
type assignment struct {
	table, column string
	value         *ex
}

func (a assignment) String() string { return a.table + "." + a.column + " := " + a.value.String() }

// pgAssignments returns the columns every INSERT and UPDATE of a Postgres
// statement writes, ON CONFLICT DO UPDATE included, with excluded.x
// resolved to the value the INSERT gives x.
func pgAssignments(sql string) []assignment {
	toks := pgTokens(sql)
	ctes := pgCTEs(toks)
	var out []assignment
	var inserted map[string]*ex
	insertTable := ""
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.up == "INSERT" && i+2 < len(toks) && toks[i+1].up == "INTO":
			insertTable = strings.ToLower(toks[i+2].text)
			j := i + 3
			for j < len(toks) && toks[j].text != "(" {
				j++
			}
			var cols []string
			for j++; j < len(toks) && toks[j].text != ")"; j++ {
				if toks[j].kind == "word" {
					cols = append(cols, strings.ToLower(toks[j].text))
				}
			}
			j++
			if j < len(toks) && (toks[j].up == "VALUES" || toks[j].up == "SELECT") {
				p := &pgParser{toks: toks, pos: j + 1, ctes: ctes}
				p.opTok("(")
				inserted = map[string]*ex{}
				for k := 0; k < len(cols); k++ {
					v := p.or()
					inserted[cols[k]] = v
					out = append(out, assignment{insertTable, cols[k], v})
					if !p.opTok(",") {
						break
					}
				}
			}
		case t.up == "SET" && i > 0:
			table := insertTable
			for k := i - 1; k >= 0; k-- { // UPDATE t [AS a] SET, or DO UPDATE SET
				if toks[k].up == "UPDATE" {
					if k+1 < i && toks[k+1].up != "SET" {
						table = strings.ToLower(toks[k+1].text)
					}
					break
				}
			}
			p := &pgParser{toks: toks, pos: i + 1, ctes: ctes}
			for {
				col := strings.ToLower(p.peek(0).text)
				if !p.opTok("=") && p.peek(1).text != "=" {
					break
				}
				p.pos += 2
				v := resolveExcluded(p.or(), inserted)
				out = append(out, assignment{table, col, v})
				if !p.opTok(",") {
					break
				}
			}
		}
	}
	return out
}

func resolveExcluded(e *ex, inserted map[string]*ex) *ex {
	if e == nil {
		return nil
	}
	if e.op == "excluded" {
		if v, ok := inserted[e.s]; ok {
			return v
		}
		return &ex{op: "col", s: e.s}
	}
	c := *e
	c.args = nil
	for _, a := range e.args {
		c.args = append(c.args, resolveExcluded(a, inserted))
	}
	if c.op == "cmp" { // re-canonicalize
		return mkCmp(c.s, c.args[0], c.args[1])
	}
	return &c
}

// tsqlAssignments returns the columns every INSERT and UPDATE of a T-SQL
// batch writes. The table of an UPDATE through an alias or a CTE is the
// table the alias or CTE reads.
func tsqlAssignments(tree any) []assignment { return tsqlAssignmentsWith(newTSQLReader(tree), tree) }

func tsqlAssignmentsWith(r tsqlReader, tree any) []assignment {
	aliases := map[string]string{}
	walk(tree, func(n node) {
		switch getString(n, "$type") {
		case "NamedTableReference":
			if a := getString(n, "Alias", "Value"); a != "" {
				aliases[strings.ToLower(a)] = strings.ToLower(getString(n, "SchemaObject", "BaseIdentifier", "Value"))
			}
		case "CommonTableExpression":
			aliases[strings.ToLower(getString(n, "ExpressionName", "Value"))] = firstTable(n)
		}
	})
	resolve := func(target any) string {
		t := strings.ToLower(getString(target, "SchemaObject", "BaseIdentifier", "Value"))
		if a, ok := aliases[t]; ok {
			return a
		}
		return t
	}
	var out []assignment
	walk(tree, func(n node) {
		switch getString(n, "$type") {
		case "UpdateSpecification":
			table := resolve(get(n, "Target"))
			for _, c := range getList(n, "SetClauses") {
				out = append(out, assignment{table, columnOrWord(get(c, "Column")), r.expr(get(c, "NewValue"))})
			}
		case "InsertSpecification":
			table := resolve(get(n, "Target"))
			var values []any
			src := get(n, "InsertSource")
			switch getString(src, "$type") {
			case "ValuesInsertSource":
				if rows := getList(src, "RowValues"); len(rows) > 0 {
					values = getList(rows[0], "ColumnValues")
				}
			case "SelectInsertSource":
				for _, e := range getList(src, "Select", "SelectElements") {
					values = append(values, get(e, "Expression"))
				}
			}
			for i, c := range getList(n, "Columns") {
				if i < len(values) {
					out = append(out, assignment{table, columnOrWord(c), r.expr(values[i])})
				}
			}
		}
	})
	return out
}
