package postgres

import (
	"context"
	"slices"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// TestRuleKeepsOrder: in one pass over the queue, as the batcher makes it,
// fillRule leaves the calls of a bucket at the database in the queue, and
// with them every later call carrying the Idempotency-Key of one it left, so
// that no key is decided out of arrival order.
func TestRuleKeepsOrder(t *testing.T) {
	x, y, z := ledger.BucketRef{Limit: "l", Key: "x"}, ledger.BucketRef{Limit: "l", Key: "y"}, ledger.BucketRef{Limit: "l", Key: "z"}
	call := func(name string, ref ledger.BucketRef, key string) *fillCall {
		c := newFillCall(context.Background(), ref, decimal.NewFromInt(1), ledger.Idempotency{Scope: "s", Key: key, Hash: name})
		c.cost = name // a label for the test
		return c
	}
	r := newFillRule()
	r.busy[x] = 1
	queue := []*fillCall{call("a", x, "k1"), call("b", y, "k1"), call("c", y, ""), call("d", z, "k2"), call("e", x, ""), call("f", z, "")}
	// pass is what the batcher does when a batch returns.
	pass := func() (took, left []string) {
		r.Pass()
		var rest []*fillCall
		for _, c := range queue {
			if r.Admit(c) {
				took = append(took, c.cost)
			} else {
				left = append(left, c.cost)
				rest = append(rest, c)
			}
		}
		queue = rest
		return took, left
	}
	if took, left := pass(); !slices.Equal(took, []string{"c", "d", "f"}) || !slices.Equal(left, []string{"a", "b", "e"}) {
		t.Fatalf("took %v, left %v; want [c d f], [a b e]", took, left)
	}
	if r.busy[y] != 1 || r.busy[z] != 2 || r.busy[x] != 1 {
		t.Fatalf("busy %v", r.busy)
	}
	// The batches return: x's first (a fresh pass must not remember k1).
	r.Returned(&fillCall{ref: x})
	for _, ref := range []ledger.BucketRef{y, z, z} {
		r.Returned(&fillCall{ref: ref})
	}
	if len(r.busy) != 0 {
		t.Fatalf("busy %v after every batch returned", r.busy)
	}
	if took, left := pass(); !slices.Equal(took, []string{"a", "b", "e"}) || len(left) != 0 {
		t.Fatalf("took %v, left %v; want [a b e], none", took, left)
	}
}
