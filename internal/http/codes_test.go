package http_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bapi "github.com/budgetd/budgetd/api"
)

// codeLiteralsAllowed lists, by file (relative to the repository's root),
// the string literals equal to a problem code that are not problem codes
// written outside package api (issue 43).
var codeLiteralsAllowed = map[string][]string{
	// The ledger's own codes (it may not import api); TestCodesAreAPICodes
	// in internal/ledger checks each is in api.Codes.
	"internal/ledger/codes.go": {"invalid_request", "invalid_amount", "invalid_duration", "invalid_key", "invalid_name",
		"exceeds_hold", "reservation_expired", "reservation_closed"},
	// The error vocabulary of the Redis functions (Lua), mapped to ledger
	// errors in reply.go; not answered as such.
	"internal/redis/library.go": {"not_found", "too_many_holds", "level_overflow", "grant_not_found", "override_not_found"},
	// The names of the error codes the generated SQL raises, mapped to
	// ledger errors in errors.go; not answered as such.
	"internal/postgres/errors.go": {"limit_not_found", "too_many_holds", "level_overflow", "reservation_not_found", "grant_not_found"},
	// Values of the outcome label of the store metrics.
	"internal/storemetrics/storemetrics.go": {"not_found", "too_many_holds"},
}

// TestNoCodeLiterals: outside package api, a problem code is written as its
// api.Code constant (or, in internal/ledger and the stores, as the ledger's
// Code constant), never as a string literal: a renamed or misspelt code
// then fails to compile instead of changing an answer.
func TestNoCodeLiterals(t *testing.T) {
	codes := map[string]bool{}
	for _, c := range bapi.Codes {
		codes[string(c)] = true
	}
	root := filepath.Join("..", "..")
	used := map[string]map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"internal", "cmd", "client"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil || !codes[s] {
					return true
				}
				for _, a := range codeLiteralsAllowed[rel] {
					if a == s {
						if used[rel] == nil {
							used[rel] = map[string]bool{}
						}
						used[rel][s] = true
						return true
					}
				}
				t.Errorf("%s: the problem code %q as a literal; use its api.Code (or ledger.Code) constant", fset.Position(lit.Pos()), s)
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Keep the allow-list short: an entry no longer needed goes.
	for file, lits := range codeLiteralsAllowed {
		for _, s := range lits {
			if !used[file][s] {
				t.Errorf("codeLiteralsAllowed[%q] lists %q, which the file no longer has", file, s)
			}
		}
	}
}

// TestNoBuiltCodes: the server never builds a problem code from text (a
// conversion to api.Code or ledger.Code of a literal or a concatenation, or
// a Code member set to one): the code of a bad path parameter was
// "invalid_"+name, so a hold's id or an override's pattern answered codes
// outside api.Codes (issue 43). Codes come from the constants only.
func TestNoBuiltCodes(t *testing.T) {
	root := filepath.Join("..", "..", "internal")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if isCodeType(n.Fun) && len(n.Args) == 1 && builtText(n.Args[0]) {
					t.Errorf("%s: a problem code built from text; use a Code constant", fset.Position(n.Pos()))
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Code" && builtText(n.Value) {
					t.Errorf("%s: a Code member set to text; use a Code constant", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// isCodeType reports whether e names api.Code, ledger.Code or (inside
// package ledger) Code.
func isCodeType(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "Code"
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		return ok && e.Sel.Name == "Code" && (x.Name == "api" || x.Name == "bapi" || x.Name == "ledger")
	}
	return false
}

// builtText reports whether e is a string literal or an expression with
// one among its operands.
func builtText(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		return e.Kind == token.STRING
	case *ast.BinaryExpr:
		return builtText(e.X) || builtText(e.Y)
	case *ast.ParenExpr:
		return builtText(e.X)
	}
	return false
}
