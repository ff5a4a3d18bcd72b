package docs

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestExampleParsing: how TestExamplesRun reads a document — blocks and
// markers, commands and the answers shown after them, elided answers, field
// sets and instants to come.
func TestExampleParsing(t *testing.T) {
	doc := strings.Join([]string{
		"Prose.",
		"",
		"    curl -s -X PUT localhost:8080/v1/limits/a \\",
		"      -d '{\"capacity\":\"1\"}'",
		"    {\"name\":\"a\",…}",
		"    curl -s -i localhost:8080/v1/limits/a/buckets/k?cost=2",
		"    HTTP/1.1 429 Too Many Requests",
		"    Retry-After: 1",
		"",
		"    {\"accepted\":false}",
		"",
		"<!-- no-run: needs PostgreSQL -->",
		"```sh",
		"budgetd --store postgres://…",
		"```",
		"",
		"```sh",
		"# a comment",
		"curl -d '{\"items\":[",
		"  {\"cost\":\"1\"}]}' $B/v1/fillup   # 404",
		"budgetd check a k 2   # exit 3",
		"```",
		"",
		"The answer:",
		"",
		"```json",
		"{\"accepted\":true}",
		"```",
	}, "\n")
	blocks, err := parseBlocks(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 4 {
		t.Fatalf("%d blocks, want 4: %+v", len(blocks), blocks)
	}
	if !blocks[1].marked || blocks[1].noRun != "needs PostgreSQL" || blocks[0].marked || blocks[2].marked {
		t.Errorf("markers: %+v", blocks)
	}
	cmds := commands(blocks[0])
	if len(cmds) != 2 || cmds[0].shown != `{"name":"a",…}` || !strings.HasPrefix(cmds[1].shown, "HTTP/1.1 429") ||
		!strings.HasSuffix(cmds[1].shown, `{"accepted":false}`) || cmds[0].line != 3 || cmds[1].line != 6 {
		t.Errorf("indented block: %+v", cmds)
	}
	cmds = commands(blocks[2])
	if len(cmds) != 2 || !strings.Contains(cmds[0].text, "$B/v1/fillup") || cmds[1].wantCode != 3 {
		t.Errorf("fenced block: %+v", cmds)
	}
	if shown, ok := followingAnswer(blocks, 2); !ok || shown != `{"accepted":true}` {
		t.Errorf("following answer: %q %v", shown, ok)
	}
	if p := checkCommand(cmds[0], "0", `{"type":"urn:budgetd:problem:limit_not_found"}`, "DOCS-HTTP-STATUS 404\n"); len(p) != 0 {
		t.Errorf("a 404 its comment names: %v", p)
	}
	if p := checkCommand(cmds[1], "0", "", ""); len(p) != 1 {
		t.Errorf("exit 0 where the comment says 3: %v", p)
	}

	for _, bad := range []string{
		"<!-- no-run: x -->\nprose\n\n```sh\ncurl $B\n```\n",
		"<!-- no-run: -->\n```sh\ncurl $B\n```\n",
		"text\n<!-- no-run: x -->\n",
	} {
		if _, err := parseBlocks(bad); err == nil {
			t.Errorf("no error for a marker before no block: %q", bad)
		}
	}

	shown, elided, err := parseShown(`{"items":[{"id":"6","time":"…","meta":{"ip":"x"}},{"id":"5",…,"event":"fillup",…}],…}`)
	if err != nil || !elided {
		t.Fatalf("elided answer: %v %v", err, elided)
	}
	got := map[string]any{"next_cursor": nil, "items": []any{
		map[string]any{"id": "6", "time": "t", "event": "denied", "meta": map[string]any{"ip": "y"}},
		map[string]any{"id": "5", "time": "t", "event": "fillup"},
	}}
	if p := sameFields("", shown, got, elided); len(p) != 0 {
		t.Errorf("elided answer: %v", p)
	}
	full, elided, err := parseShown(`{"a":"1","b":{"c":null}}`)
	if err != nil || elided {
		t.Fatalf("whole answer: %v %v", err, elided)
	}
	p := sameFields("", full, map[string]any{"a": "2", "b": map[string]any{"c": "x", "d": "y"}, "e": nil}, false)
	want := []string{
		`.b: the answer has "d", the document does not show it (show it, or elide with …)`,
		`the answer: the answer has "e", the document does not show it (show it, or elide with …)`,
	}
	slices.Sort(p)
	if !slices.Equal(p, want) {
		t.Errorf("field sets:\n got %q\nwant %q", p, want)
	}

	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	if timeBomb(`-d '{"expires_at":"2026-12-04T00:00:00Z"}'`, now) == "" {
		t.Error("an expires_at to come is not found")
	}
	if p := timeBomb(`levels?from=2026-01-31T20:00:00Z`, now); p != "" {
		t.Errorf("a past instant: %s", p)
	}
}
