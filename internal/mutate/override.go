package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Rebuilding a package's tests for every mutant of a statement sqlc
// generated costs seconds (the generated package and everything above it
// compiled and linked again: about 6 s of a caught Postgres mutant's 9 on
// this machine). On the scratch copy only, the generated statements become
// variables that an init function may replace from a file before any test
// runs: the tests are built once, and a mutant is the same binary run with
// overrideNameEnv naming the statement and overrideTextEnv the file holding
// its mutated text. The text the adapters send is the mutant's exactly, as
// when the generated file itself is rewritten (which remains the way for
// a mutant this cannot express).
const (
	overrideNameEnv = "LEASEHOLD_MUTATE_STATEMENT"
	overrideTextEnv = "LEASEHOLD_MUTATE_TEXT"
)

// statementVars maps a generated file (relative to the scratch root) to its
// statements: the text of each, and the name of the variable holding it.
type statementVars map[string]map[string]string

// prepareOverride rewrites the generated files of glob (under scratch) so
// that each statement constant is a variable, and adds the init function
// that replaces one by the environment. It returns the statements it made
// replaceable.
func prepareOverride(scratch, glob string) (statementVars, error) {
	files, err := filepath.Glob(filepath.Join(scratch, filepath.FromSlash(glob)))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("override: no generated files match %s (%v)", glob, err)
	}
	sort.Strings(files)
	vars := statementVars{}
	var names []string
	pkg := ""
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("override: %w", err)
		}
		pkg = parsed.Name.Name
		rel, _ := filepath.Rel(scratch, f)
		texts := map[string]string{}
		out := string(src)
		for _, decl := range parsed.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST || gd.Lparen.IsValid() || len(gd.Specs) != 1 {
				continue
			}
			spec := gd.Specs[0].(*ast.ValueSpec)
			if len(spec.Names) != 1 || len(spec.Values) != 1 {
				continue
			}
			lit, ok := spec.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			text, err := strconv.Unquote(lit.Value)
			if err != nil || !strings.HasPrefix(text, "-- name: ") {
				continue
			}
			name := spec.Names[0].Name
			decl := "const " + name + " = "
			if strings.Count(out, decl) != 1 {
				return nil, fmt.Errorf("override: %s: %q occurs %d times", rel, decl, strings.Count(out, decl))
			}
			out = strings.Replace(out, decl, "var "+name+" = ", 1)
			texts[text] = name
			names = append(names, name)
		}
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			return nil, err
		}
		vars[filepath.ToSlash(rel)] = texts
	}
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport \"os\"\n\n", pkg)
	fmt.Fprintf(&b, "// Written by internal/mutate on its scratch copy: replaces one statement.\nfunc init() {\n")
	fmt.Fprintf(&b, "\tname := os.Getenv(%q)\n\tif name == \"\" {\n\t\treturn\n\t}\n", overrideNameEnv)
	fmt.Fprintf(&b, "\ttext, err := os.ReadFile(os.Getenv(%q))\n\tif err != nil {\n\t\tpanic(err)\n\t}\n", overrideTextEnv)
	fmt.Fprintf(&b, "\tstatements := map[string]*string{\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t\t%q: &%s,\n", n, n)
	}
	fmt.Fprintf(&b, "\t}\n\tp, ok := statements[name]\n\tif !ok {\n\t\tpanic(\"internal/mutate: no statement \" + name)\n\t}\n\t*p = string(text)\n}\n")
	if err := os.WriteFile(filepath.Join(filepath.Dir(files[0]), "zz_mutate_override.go"), []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	return vars, nil
}

// overrideOf returns the environment that runs mutant g through the
// override (the variable's name, and the file written with its mutated
// text), or nil when g is not a statement prepareOverride made
// replaceable.
func (v statementVars) overrideOf(scratch string, g generated) ([]string, error) {
	var name, text string
	for whole, n := range v[g.File] {
		if strings.Contains(whole, g.Old) {
			if name != "" {
				return nil, nil // ambiguous: rewrite the file instead
			}
			name, text = n, strings.Replace(whole, g.Old, g.New, 1)
		}
	}
	if name == "" {
		return nil, nil
	}
	path := filepath.Join(scratch, "mutant-statement.sql")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return nil, err
	}
	return []string{overrideNameEnv + "=" + name, overrideTextEnv + "=" + path}, nil
}
