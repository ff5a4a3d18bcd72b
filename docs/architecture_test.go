package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// mapSection is the heading of the section of architecture.md whose table
// lists every package of the module with the module's packages it imports.
const mapSection = "## The map"

// forbidden are imports the layering rules out ("imports point inward":
// bucket ← ledger ← {stores, http} ← cmd/budgetd), checked on what go list
// finds, directly or through other packages of the module.
var forbidden = []struct{ from, to, why string }{
	{"internal/bucket", "api", "the bucket rule takes nothing from the wire package"},
	{"internal/ledger", "api", "the domain owns its limits; package api keeps copies (internal/ledger/limits_test.go)"},
	{"internal/bucket", "internal/ledger", "the bucket rule knows nothing of the domain around it"},
	{"internal/memory", "internal/postgres", "adapters never import each other"},
	{"internal/memory", "internal/redis", "adapters never import each other"},
	{"internal/memory", "internal/mysql", "adapters never import each other"},
	{"internal/postgres", "internal/memory", "adapters never import each other"},
	{"internal/postgres", "internal/redis", "adapters never import each other"},
	{"internal/postgres", "internal/mysql", "adapters never import each other"},
	{"internal/redis", "internal/memory", "adapters never import each other"},
	{"internal/redis", "internal/postgres", "adapters never import each other"},
	{"internal/redis", "internal/mysql", "adapters never import each other"},
	{"internal/mysql", "internal/memory", "adapters never import each other"},
	{"internal/mysql", "internal/postgres", "adapters never import each other"},
	{"internal/mysql", "internal/redis", "adapters never import each other"},
}

// TestArchitectureMap: the map in docs/architecture.md lists exactly the
// packages of the module, each with exactly the module's packages it
// imports (tests' imports are not part of it), as go list sees them.
func TestArchitectureMap(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	documented, err := parseMap(doc)
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	for _, p := range diffMap(documented, goList(t)) {
		t.Error(p)
	}
}

// TestImportsPointInward: no package reaches an import the layering rules
// out, not even through another package of the module.
func TestImportsPointInward(t *testing.T) {
	graph := goList(t)
	for _, f := range forbidden {
		if _, ok := graph[f.from]; !ok {
			t.Errorf("%s is not a package any more: update the rules of docs/architecture_test.go", f.from)
			continue
		}
		if path := reaches(graph, f.from, f.to); path != nil {
			t.Errorf("%s imports %s (%s): %s", f.from, f.to, strings.Join(path, " → "), f.why)
		}
	}
}

// TestMapCheckFailsOnChange: the comparison TestArchitectureMap makes
// reports a package added, a package gone, and an import added or dropped.
func TestMapCheckFailsOnChange(t *testing.T) {
	doc := []byte(mapSection + "\n\n| package | imports | what |\n| --- | --- | --- |\n" +
		"| `internal/bucket` | `internal/calendar` | the rule |\n" +
		"| `internal/calendar` | — | periods |\n" +
		"| `internal/ledger` | `internal/bucket`, `internal/calendar` | the domain |\n\n## Next\n| `ignored` | — | |\n")
	documented, err := parseMap(doc)
	if err != nil {
		t.Fatal(err)
	}
	same := map[string][]string{
		"internal/bucket":   {"internal/calendar"},
		"internal/calendar": nil,
		"internal/ledger":   {"internal/bucket", "internal/calendar"},
	}
	if p := diffMap(documented, same); len(p) != 0 {
		t.Fatalf("the same map: %q", p)
	}
	for _, c := range []struct {
		name   string
		change func(map[string][]string)
		want   string
	}{
		{"a new package", func(m map[string][]string) { m["internal/terms"] = []string{"internal/bucket"} }, "internal/terms is missing"},
		{"a package gone", func(m map[string][]string) { delete(m, "internal/calendar") }, "internal/calendar, which go list does not find"},
		{"an import added", func(m map[string][]string) { m["internal/ledger"] = append(m["internal/ledger"], "api") }, "go list finds internal/ledger importing api"},
		{"an import dropped", func(m map[string][]string) { m["internal/ledger"] = []string{"internal/bucket"} }, "internal/ledger importing internal/calendar"},
	} {
		actual := map[string][]string{}
		for p, imps := range same {
			actual[p] = slices.Clone(imps)
		}
		c.change(actual)
		problems := diffMap(documented, actual)
		if len(problems) != 1 || !strings.Contains(problems[0], c.want) {
			t.Errorf("%s: %q, want one problem saying %q", c.name, problems, c.want)
		}
	}
	if _, err := parseMap([]byte("# no map\n")); err == nil {
		t.Error("a document without the map parsed")
	}
	if _, err := parseMap([]byte(mapSection + "\n| `a` | — | |\n| `a` | — | |\n")); err == nil {
		t.Error("a package listed twice parsed")
	}
}

// parseMap reads the table of the map section: one row per package, the
// package in backquotes in the first cell and the module's packages it
// imports in backquotes in the second ("—" for none).
func parseMap(doc []byte) (map[string][]string, error) {
	m := map[string][]string{}
	in, found := false, false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == mapSection
			found = found || in
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			return nil, fmt.Errorf("map row %q has fewer than 3 cells", line)
		}
		pkgs := quoted(cells[1])
		if len(pkgs) != 1 {
			return nil, fmt.Errorf("map row %q names %d packages in its first cell, not 1", line, len(pkgs))
		}
		if _, dup := m[pkgs[0]]; dup {
			return nil, fmt.Errorf("the map lists %s twice", pkgs[0])
		}
		m[pkgs[0]] = quoted(cells[2])
	}
	if !found {
		return nil, fmt.Errorf("no section %q", mapSection)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("section %q has no rows of the form | `package` | `import`, … | what it is |", mapSection)
	}
	return m, nil
}

// quoted returns the strings between backquotes in s, in order.
func quoted(s string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(s, "`")
		if !ok {
			return out
		}
		q, after, ok := strings.Cut(rest, "`")
		if !ok {
			return out
		}
		out, s = append(out, q), after
	}
}

// diffMap says, one problem a line, how the documented map differs from
// the actual one and what to update.
func diffMap(documented, actual map[string][]string) []string {
	var problems []string
	for _, p := range sortedKeys(actual) {
		doc, ok := documented[p]
		if !ok {
			imps := "—"
			if len(actual[p]) > 0 {
				imps = "`" + strings.Join(actual[p], "`, `") + "`"
			}
			problems = append(problems, fmt.Sprintf("docs/architecture.md: package %s is missing from the map: add the row | `%s` | %s | what it is and why it is apart |", p, p, imps))
			continue
		}
		for _, i := range actual[p] {
			if !slices.Contains(doc, i) {
				problems = append(problems, fmt.Sprintf("docs/architecture.md: go list finds %s importing %s, which the map does not list: add it to the row of %s (or, if it points outward, remove the import)", p, i, p))
			}
		}
		for _, i := range doc {
			if !slices.Contains(actual[p], i) {
				problems = append(problems, fmt.Sprintf("docs/architecture.md: the map has %s importing %s, which go list does not find: remove it from the row of %s", p, i, p))
			}
		}
	}
	for _, p := range sortedKeys(documented) {
		if _, ok := actual[p]; !ok {
			problems = append(problems, fmt.Sprintf("docs/architecture.md: the map lists package %s, which go list does not find: remove its row (or fix its path)", p))
		}
	}
	return problems
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// reaches returns a chain of imports from "from" to "to" in graph, nil when
// there is none.
func reaches(graph map[string][]string, from, to string) []string {
	seen := map[string]bool{from: true}
	var walk func(p string) []string
	walk = func(p string) []string {
		for _, i := range graph[p] {
			if i == to {
				return []string{p, i}
			}
			if !seen[i] {
				seen[i] = true
				if path := walk(i); path != nil {
					return append([]string{p}, path...)
				}
			}
		}
		return nil
	}
	return walk(from)
}

// goList returns every package of the module, by its path inside the
// module ("internal/bucket"), with the module's packages it imports (not
// its tests'), sorted, as go list reports them from the module's root.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	module, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	prefix := strings.TrimSpace(string(module)) + "/"
	cmd := exec.Command("go", "list", "-e", "-deps=false", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", root, err, stderr.Bytes())
	}
	graph := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		p, ok := strings.CutPrefix(fields[0], prefix)
		if !ok {
			t.Fatalf("go list found %s outside module %s", fields[0], prefix)
		}
		imps := []string{}
		for _, i := range fields[1:] {
			if rel, ok := strings.CutPrefix(i, prefix); ok {
				imps = append(imps, rel)
			}
		}
		slices.Sort(imps)
		graph[p] = imps
	}
	if len(graph) == 0 {
		t.Fatalf("go list found no packages in %s", root)
	}
	return graph
}
