package ledgertest

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// testModes: a limit's mode is stored and read back; on every kind a shadow
// limit accepts and charges what enforce denies, marked shadow_denied, and a
// soft limit accepts up to capacity × (1 + grace), marked over_capacity, and
// denies past it; holds count against the ceiling; a PUT switches the mode
// with the level kept; in a multi-bucket call only an enforce item (or a
// soft one past its grace) denies the call.
func testModes(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC))
	kinds := map[string]ledger.LimitSpec{
		"leak":   {Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true},
		"period": {Capacity: dec("100"), Period: &ledger.Period{Every: "month", TZ: "Europe/Berlin"}, History: true},
		"window": {Capacity: dec("100"), Window: &ledger.Window{Length: time.Hour, Precision: time.Minute}, History: true},
	}
	check := func(what string, d bucket.Decision, accepted bool, level string, shadow, over bool) {
		t.Helper()
		if d.Accepted != accepted || !d.Level.Equal(bucket.MustAmount(level)) || d.ShadowDenied != shadow || d.OverCapacity != over {
			t.Fatalf("%s: accepted=%v level=%s shadow_denied=%v over_capacity=%v, want %v %s %v %v",
				what, d.Accepted, d.Level, d.ShadowDenied, d.OverCapacity, accepted, level, shadow, over)
		}
	}
	for kind, spec := range kinds {
		// Shadow: the same decisions as enforce, but every cost is charged.
		spec.Mode = ledger.ModeShadow
		name := "shadow-" + kind
		l, err := e.svc.PutLimit(e.ctx, name, spec)
		if err != nil || l.Mode != ledger.ModeShadow || !l.Grace.IsZero() {
			t.Fatalf("PutLimit %s: %+v %v", name, l, err)
		}
		if got, err := e.svc.GetLimit(e.ctx, name); err != nil || got.Mode != ledger.ModeShadow {
			t.Fatalf("GetLimit %s: %+v %v", name, got, err)
		}
		r := ref(name, "k")
		check(name+" fillup 90", e.fillup(r, "90"), true, "90", false, false)
		check(name+" can 20", e.can(r, "20"), true, "90", true, false)
		check(name+" fillup 20", e.fillup(r, "20"), true, "110", true, false)
		check(name+" fillup 0", e.fillup(r, "0"), true, "110", false, false)
		check(name+" fillup 500", e.fillup(r, "500"), true, "610", true, false)
		if d := e.fillup(r, "1"); !d.Accepted || d.NeverFits || !d.Remaining.IsZero() {
			t.Fatalf("%s: above capacity: %+v, want accepted with remaining 0", name, d)
		}
		res, err := e.svc.Reserve(e.ctx, r, dec("5"), time.Minute, ledger.Idempotency{}, nil)
		if err != nil || !res.Decision.Accepted || !res.Decision.ShadowDenied {
			t.Fatalf("%s reserve: %+v %v", name, res, err)
		}

		// Soft, grace 10%: accepted to 110, marked above 100, then denied.
		spec.Mode, spec.Grace = ledger.ModeSoft, dec("10")
		name = "soft-" + kind
		if l, err := e.svc.PutLimit(e.ctx, name, spec); err != nil || l.Mode != ledger.ModeSoft || !l.Grace.Equal(dec("10")) {
			t.Fatalf("PutLimit %s: %+v %v", name, l, err)
		}
		if got, err := e.svc.GetLimit(e.ctx, name); err != nil || got.Mode != ledger.ModeSoft || !got.Grace.Equal(dec("10")) {
			t.Fatalf("GetLimit %s: %+v %v", name, got, err)
		}
		r = ref(name, "k")
		check(name+" fillup 100", e.fillup(r, "100"), true, "100", false, false)
		check(name+" can 10", e.can(r, "10"), true, "100", false, true)
		check(name+" can 10.000001", e.can(r, "10.000001"), false, "100", false, false)
		res, err = e.svc.Reserve(e.ctx, r, dec("4"), time.Minute, ledger.Idempotency{}, nil)
		if err != nil || !res.Decision.Accepted || !res.Decision.OverCapacity || res.Decision.ShadowDenied {
			t.Fatalf("%s reserve 4: %+v %v", name, res, err)
		}
		check(name+" fillup 6.000001", e.fillup(r, "6.000001"), false, "100", false, false)
		check(name+" fillup 6", e.fillup(r, "6"), true, "106", false, true)
		if d := e.fillup(r, "110.000001"); d.Accepted || !d.NeverFits {
			t.Fatalf("%s: a cost above the ceiling: %+v, want never_fits", name, d)
		}
		if _, err := e.svc.Release(e.ctx, res.Reservation.ID, ledger.Idempotency{}, nil); err != nil {
			t.Fatalf("%s release: %v", name, err)
		}

		// Back to enforce: the level stays, nothing more fits.
		spec.Mode, spec.Grace = ledger.ModeEnforce, dec("0")
		if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
			t.Fatalf("PutLimit %s enforce: %v", name, err)
		}
		check(name+" enforce fillup 1", e.fillup(r, "1"), false, "106", false, false)
		if st := e.state(r); !st.Level.Equal(bucket.MustAmount("106")) {
			t.Fatalf("%s: level after the switch %s, want 106", name, st.Level)
		}
	}

	// Multi-bucket: a shadow item over capacity does not deny the call, an
	// enforce item does, and a soft item denies only past its grace.
	e.limit("enforce", "10", "1", time.Hour, true)
	softWindow := kinds["window"]
	softWindow.Mode, softWindow.Grace = ledger.ModeSoft, dec("10")
	if _, err := e.svc.PutLimit(e.ctx, "soft-multi", softWindow); err != nil {
		t.Fatalf("PutLimit soft-multi: %v", err)
	}
	items := func(shadowCost, enforceCost, softCost string) []ledger.Item {
		return []ledger.Item{
			{Bucket: ref("shadow-leak", "m"), Cost: dec(shadowCost)},
			{Bucket: ref("enforce", "m"), Cost: dec(enforceCost)},
			{Bucket: ref("soft-multi", "m"), Cost: dec(softCost)},
		}
	}
	res, err := e.svc.Fillup(e.ctx, items("150", "5", "105"), ledger.Idempotency{})
	if err != nil || !res.Accepted || !res.Items[0].ShadowDenied || res.Items[1].ShadowDenied || !res.Items[2].OverCapacity {
		t.Fatalf("multi-bucket within enforce and grace: %+v %v", res, err)
	}
	res, err = e.svc.Fillup(e.ctx, items("1", "6", "1"), ledger.Idempotency{})
	if err != nil || res.Accepted || res.Items[1].Accepted {
		t.Fatalf("multi-bucket with the enforce item over: %+v %v", res, err)
	}
	res, err = e.svc.Fillup(e.ctx, items("1", "1", "5.000001"), ledger.Idempotency{})
	if err != nil || res.Accepted || res.Items[2].Accepted || !res.Items[0].Accepted {
		t.Fatalf("multi-bucket with the soft item past its grace: %+v %v", res, err)
	}
	if st := e.state(ref("shadow-leak", "m")); !st.Level.Equal(bucket.MustAmount("150")) {
		t.Fatalf("a denied multi-bucket call charged the shadow item: level %s", st.Level)
	}

	// Bad modes change nothing.
	for _, bad := range []ledger.LimitSpec{
		{Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: "strict"},
		{Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: ledger.ModeShadow, Grace: dec("5")},
		{Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: dec("100.01")},
		{Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: dec("-1")},
		{Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: dec("1.005")},
	} {
		if _, err := e.svc.PutLimit(e.ctx, "enforce", bad); err == nil {
			t.Fatalf("PutLimit %+v: accepted", bad)
		}
	}
	if l, err := e.svc.GetLimit(e.ctx, "enforce"); err != nil || l.Mode != ledger.ModeEnforce || !l.Capacity.Equal(dec("10")) {
		t.Fatalf("a refused PUT changed the limit: %+v %v", l, err)
	}
}
