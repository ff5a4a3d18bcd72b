package postgres

import (
	"context"
	"slices"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// TestTakeKeepsOrder: take leaves the calls of a bucket at the database in
// the queue, and with them every later call carrying the Idempotency-Key of
// one it left, so that no key is decided out of arrival order.
func TestTakeKeepsOrder(t *testing.T) {
	x, y, z := ledger.BucketRef{Limit: "l", Key: "x"}, ledger.BucketRef{Limit: "l", Key: "y"}, ledger.BucketRef{Limit: "l", Key: "z"}
	call := func(name string, ref ledger.BucketRef, key string) *fillCall {
		c := newFillCall(context.Background(), ref, decimal.NewFromInt(1), ledger.Idempotency{Scope: "s", Key: key, Hash: name})
		c.cost = name // a label for the test
		return c
	}
	co := &coalescer{busy: map[ledger.BucketRef]int{x: 1}}
	co.queue = []*fillCall{call("a", x, "k1"), call("b", y, "k1"), call("c", y, ""), call("d", z, "k2"), call("e", x, ""), call("f", z, "")}
	names := func(cs []*fillCall) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.cost)
		}
		return out
	}
	if got := names(co.take()); !slices.Equal(got, []string{"c", "d", "f"}) {
		t.Fatalf("took %v, want [c d f]", got)
	}
	if got := names(co.queue); !slices.Equal(got, []string{"a", "b", "e"}) {
		t.Fatalf("left %v, want [a b e]", got)
	}
	if co.busy[y] != 1 || co.busy[z] != 2 || co.busy[x] != 1 {
		t.Fatalf("busy %v", co.busy)
	}
	co.busy = map[ledger.BucketRef]int{} // the batches returned
	if got := names(co.take()); !slices.Equal(got, []string{"a", "b", "e"}) || len(co.queue) != 0 {
		t.Fatalf("took %v, left %d; want [a b e], none", got, len(co.queue))
	}
}
