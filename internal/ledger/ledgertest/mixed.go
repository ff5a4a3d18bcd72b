package ledgertest

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// testMultiBucketMixedKinds charges one multi-bucket call across a leaky
// limit, a calendar month and a rolling window at once (per user, per team,
// per card): all or nothing, each item's decision exactly the rule's for its
// kind, a denial by any one kind charging none of the others, and the window
// item freeing its share only when its slot ages out.
func testMultiBucketMixedKinds(t *testing.T, e *env) {
	at := time.Date(2026, 5, 31, 21, 59, 30, 0, time.UTC) // 23:59:30 in Berlin, 30 s before June
	e.clock.Set(at)
	specs := map[string]ledger.LimitSpec{
		"mx-leak":   {Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true},
		"mx-month":  {Capacity: dec("10"), Period: &ledger.Period{Every: "month", TZ: "Europe/Berlin"}, History: true},
		"mx-window": {Capacity: dec("10"), Window: &ledger.Window{Length: time.Minute}, History: true},
	}
	rules := map[string]bucket.Limit{}
	for name, spec := range specs {
		l, err := e.svc.PutLimit(e.ctx, name, spec)
		if err != nil {
			t.Fatalf("PutLimit %s: %v", name, err)
		}
		rules[name] = l.Rule()
	}
	names := []string{"mx-leak", "mx-month", "mx-window"}
	states := map[string]bucket.State{}
	call := func(what string, costs ...string) ledger.FillupResult {
		t.Helper()
		now := e.clock.Now()
		items := make([]ledger.Item, len(names))
		all := true
		want := make([]bucket.Decision, len(names))
		next := make([]bucket.State, len(names))
		for i, n := range names {
			items[i] = ledger.Item{Bucket: ref(n, "{mx}k"), Cost: dec(costs[i])}
			want[i], next[i] = bucket.Fillup(rules[n], states[n], now, ledger.Amount(dec(costs[i])))
			all = all && want[i].Accepted
		}
		res, err := e.svc.Fillup(e.ctx, items, ledger.Idempotency{})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Accepted != all {
			t.Fatalf("%s: accepted %v, want %v", what, res.Accepted, all)
		}
		for i, n := range names {
			if !all {
				want[i] = bucket.CanAccept(rules[n], states[n], now, ledger.Amount(dec(costs[i])))
			} else if dec(costs[i]).Sign() > 0 {
				states[n] = next[i]
			}
			sameDecision(t, what+" "+n, res.Items[i], want[i])
		}
		return res
	}
	call("6 each", "6", "6", "6")
	if res := call("5 each: every kind denies", "5", "5", "5"); res.Accepted {
		t.Fatal("accepted above every capacity")
	}
	e.clock.Advance(30 * time.Second) // June in Berlin: the month is empty again
	if res := call("the month reset, the leak and the window still full", "4", "10", "4"); !res.Accepted {
		t.Fatalf("denied: %+v", res.Items)
	}
	if res := call("the window denies alone", "0", "0", "1"); res.Accepted || res.Items[2].Accepted || !res.Items[0].Accepted || !res.Items[1].Accepted {
		t.Fatalf("the window's denial: %+v", res.Items)
	}
	if st := e.state(ref("mx-leak", "{mx}k")); st.Level.GreaterThan(ledger.Amount(dec("10"))) {
		t.Fatalf("the leak was charged by a denied call: %+v", st)
	}
	// The first 6 stop counting in the window at 22:00:31 (slot 21:59:30 + 1 s + 1 min).
	e.clock.Set(time.Date(2026, 5, 31, 22, 0, 31, 0, time.UTC))
	call("the window's first slot aged out", "0", "0", "6")
}
