package http_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// requestBodies are the struct types of the server that carry JSON tags:
// request bodies, read by its strict decoders (jsonAmount, jsonDuration,
// jsonMeta name the offending field and give its code), checked member for
// member against package api's request types by TestBodiesAreTheAPITypes.
var requestBodies = []string{
	"fillupBody", "multiBody", "multiItem", "drainBody", "reserveBody", "commitBody", "grantBody",
	"limitBody", "periodBody", "windowBody", "overrideBody",
}

// TestNoViewTypes: the server describes no document of its own. Every answer
// is rendered from package api's type for it (documents.go), so a new
// member is one edit in api; the only JSON-tagged struct types of
// internal/http are the request bodies above (issue 43: there were 33
// view and body types beside api's).
func TestNoViewTypes(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok || !hasJSONTag(st) {
				return true
			}
			seen[ts.Name.Name] = true
			if !slices.Contains(requestBodies, ts.Name.Name) {
				t.Errorf("%s: %s describes a JSON document; answer with package api's type for it", fset.Position(ts.Pos()), ts.Name.Name)
			}
			return true
		})
	}
	for _, name := range requestBodies {
		if !seen[name] {
			t.Errorf("requestBodies lists %s, which internal/http no longer declares", name)
		}
	}
}

// hasJSONTag reports whether a field of st has a json tag.
func hasJSONTag(st *ast.StructType) bool {
	for _, f := range st.Fields.List {
		if f.Tag == nil {
			continue
		}
		tag, err := strconv.Unquote(f.Tag.Value)
		if err == nil && reflect.StructTag(tag).Get("json") != "" {
			return true
		}
	}
	return false
}
