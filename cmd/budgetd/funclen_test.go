package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function of cmd/budgetd may take, from
// `func` to its closing brace (issue 43: a 140-line run is three).
const maxFuncLines = 80

// TestFunctionLength fails for every function of the package's source (not
// its tests) longer than maxFuncLines, naming it.
func TestFunctionLength(t *testing.T) {
	if long := longFunctions(t, ".", maxFuncLines); len(long) > 0 {
		t.Errorf("functions longer than %d lines, split them:\n%s", maxFuncLines, strings.Join(long, "\n"))
	}
}

// longFunctions lists the functions and methods of the .go files in dir,
// _test.go files aside, longer than max lines, as "file:line name (N lines)".
func longFunctions(t *testing.T, dir string, max int) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	var long []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			from, to := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := to.Line - from.Line + 1; n > max {
				long = append(long, fmt.Sprintf("%s:%d %s (%d lines)", filepath.Base(name), from.Line, funcName(fn), n))
			}
		}
	}
	return long
}

// funcName is fn's name, with its receiver's type for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	if star, ok := recv.(*ast.StarExpr); ok {
		recv = star.X
	}
	if id, ok := recv.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// TestLongFunctionsFound checks the check: in a file with a function of 81
// lines and one of 80, it names the first only.
func TestLongFunctionsFound(t *testing.T) {
	dir := t.TempDir()
	body := func(name string, lines int) string { // func line, lines-2 statements, brace
		return "func " + name + "() {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	src := "package p\n\n" + body("long", 81) + "\n" + body("fits", 80) + "\ntype T struct{}\n\n" + body("(*T) method", 90)
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\n"+body("longTest", 200)), 0o600); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(longFunctions(t, dir, maxFuncLines), "\n")
	want := "p.go:3 long (81 lines)\np.go:168 T.method (90 lines)"
	if got != want {
		t.Fatalf("found\n%s\nwant\n%s", got, want)
	}
}
