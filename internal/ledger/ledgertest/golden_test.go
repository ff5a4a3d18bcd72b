package ledgertest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
)

var update = flag.Bool("update", false, "rewrite golden.json's answers from the memory store")

// TestGoldenFile checks that every step of golden.json has its answer and
// that the pure rule, through the memory store, still gives it; with -update
// it writes the answers instead.
func TestGoldenFile(t *testing.T) {
	cases, err := GoldenCases()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		clock := NewClock()
		store := memory.New(memory.WithClock(clock.Now))
		e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: context.Background()}
		got := runGolden(e, fmt.Sprintf("golden%d", i), c)
		for j, s := range c.Steps {
			if *update {
				s.Want = got[j]
				continue
			}
			if len(s.Want) == 0 {
				t.Errorf("%s step %d has no answer: run with -update", c.Name, j)
			} else if diff := goldenDiff(s.Want, got[j]); diff != "" {
				t.Errorf("%s step %d: %s", c.Name, j, diff)
			}
		}
	}
	if *update {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", " ")
		if err := enc.Encode(cases); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("golden.json", buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
