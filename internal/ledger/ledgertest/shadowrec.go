package ledgertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// testShadowRecorded: on a shadow limit with record_denials, an accepted
// Fillup, multi-bucket item or Reserve that enforce would have denied is
// flagged shadow_denied on the fillup or reserved entry it writes, and one
// within capacity is not; the same limit without record_denials flags
// nothing; in a multi-bucket call only the shadow-denied item's entry is
// flagged (docs/modes.md, "Shadow denials in the history").
func testShadowRecorded(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 6, 12, 8, 0, 0, 0, time.UTC))
	flags := func(r ledger.BucketRef) string {
		t.Helper()
		es, _, err := e.svc.History(e.ctx, r, "", 100)
		if err != nil {
			t.Fatalf("History %v: %v", r, err)
		}
		var out []string // oldest first
		for i := len(es) - 1; i >= 0; i-- {
			out = append(out, fmt.Sprintf("%s %s %v", es[i].Event, es[i].Amount, es[i].ShadowDenied))
		}
		return fmt.Sprint(out)
	}
	for _, rec := range []bool{true, false} {
		name := fmt.Sprintf("shadowrec-%v", rec)
		spec := ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true,
			RecordDenials: rec, Mode: ledger.ModeShadow}
		if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
			t.Fatalf("PutLimit %s: %v", name, err)
		}
		r := ref(name, "{s}k")
		for _, c := range []struct {
			cost   string
			shadow bool
		}{{"6", false}, {"4", false}, {"0", false}, {"3", true}} {
			if d := e.fillup(r, c.cost); !d.Accepted || d.ShadowDenied != c.shadow {
				t.Fatalf("%s fillup %s: %+v", name, c.cost, d)
			}
		}
		res, err := e.svc.Reserve(e.ctx, r, dec("2"), time.Minute, ledger.Idempotency{}, nil)
		if err != nil || !res.Decision.Accepted || !res.Decision.ShadowDenied || (res.EntryID == "") {
			t.Fatalf("%s reserve: %+v %v", name, res, err)
		}
		want := "[fillup 6 false fillup 4 false fillup 3 true reserved 2 true]"
		if !rec {
			want = "[fillup 6 false fillup 4 false fillup 3 false reserved 2 false]"
		}
		if got := flags(r); got != want {
			t.Fatalf("%s history %s, want %s", name, got, want)
		}
		// A reserve within capacity on a fresh bucket is not flagged.
		r2 := ref(name, "{s}k2")
		if res, err := e.svc.Reserve(e.ctx, r2, dec("2"), time.Minute, ledger.Idempotency{}, nil); err != nil || !res.Decision.Accepted || res.Decision.ShadowDenied {
			t.Fatalf("%s reserve within capacity: %+v %v", name, res, err)
		}
		if got := flags(r2); got != "[reserved 2 false]" {
			t.Fatalf("%s history of a reserve within capacity: %s", name, got)
		}
	}

	// Multi-bucket: two items on the shadow limit with record_denials, one
	// over capacity and one within; only the one over is flagged.
	over, within := ref("shadowrec-true", "{s}m1"), ref("shadowrec-true", "{s}m2")
	if d := e.fillup(over, "9"); !d.Accepted || d.ShadowDenied {
		t.Fatalf("fillup 9: %+v", d)
	}
	res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: over, Cost: dec("5")}, {Bucket: within, Cost: dec("5")}}, ledger.Idempotency{})
	if err != nil || !res.Accepted || !res.Items[0].ShadowDenied || res.Items[1].ShadowDenied {
		t.Fatalf("multi-bucket: %+v %v", res, err)
	}
	if got := flags(over); got != "[fillup 9 false fillup 5 true]" {
		t.Fatalf("history of the item over capacity: %s", got)
	}
	if got := flags(within); got != "[fillup 5 false]" {
		t.Fatalf("history of the item within capacity: %s", got)
	}
}
