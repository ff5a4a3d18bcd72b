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
	for kind, spec := range kinds {
		modeShadow(t, e, kind, spec)
		modeSoft(t, e, kind, spec)
	}
	modesMulti(t, e, kinds["window"])
	modesRefused(t, e)
}

// checkMode fails unless d has these fields.
func checkMode(t *testing.T, what string, d bucket.Decision, accepted bool, level string, shadow, over bool) {
	t.Helper()
	if d.Accepted != accepted || !d.Level.Equal(bucket.MustAmount(level)) || d.ShadowDenied != shadow || d.OverCapacity != over {
		t.Fatalf("%s: accepted=%v level=%s shadow_denied=%v over_capacity=%v, want %v %s %v %v",
			what, d.Accepted, d.Level, d.ShadowDenied, d.OverCapacity, accepted, level, shadow, over)
	}
}

// modeShadow: a shadow limit of the kind makes the decisions enforce makes,
// but charges every cost, marked shadow_denied past capacity.
func modeShadow(t *testing.T, e *env, kind string, spec ledger.LimitSpec) {
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
	checkMode(t, name+" fillup 90", e.fillup(r, "90"), true, "90", false, false)
	checkMode(t, name+" can 20", e.can(r, "20"), true, "90", true, false)
	checkMode(t, name+" fillup 20", e.fillup(r, "20"), true, "110", true, false)
	checkMode(t, name+" fillup 0", e.fillup(r, "0"), true, "110", false, false)
	checkMode(t, name+" fillup 500", e.fillup(r, "500"), true, "610", true, false)
	if d := e.fillup(r, "1"); !d.Accepted || d.NeverFits || !d.Remaining.IsZero() {
		t.Fatalf("%s: above capacity: %+v, want accepted with remaining 0", name, d)
	}
	res, err := e.svc.Reserve(e.ctx, r, dec("5"), time.Minute, ledger.Idempotency{}, nil)
	if err != nil || !res.Decision.Accepted || !res.Decision.ShadowDenied {
		t.Fatalf("%s reserve: %+v %v", name, res, err)
	}
}

// modeSoft: a soft limit of the kind with a grace of 10% accepts to 110,
// marked above 100, then denies, holds counting; back to enforce the level
// stays and nothing more fits.
func modeSoft(t *testing.T, e *env, kind string, spec ledger.LimitSpec) {
	spec.Mode, spec.Grace = ledger.ModeSoft, dec("10")
	name := "soft-" + kind
	if l, err := e.svc.PutLimit(e.ctx, name, spec); err != nil || l.Mode != ledger.ModeSoft || !l.Grace.Equal(dec("10")) {
		t.Fatalf("PutLimit %s: %+v %v", name, l, err)
	}
	if got, err := e.svc.GetLimit(e.ctx, name); err != nil || got.Mode != ledger.ModeSoft || !got.Grace.Equal(dec("10")) {
		t.Fatalf("GetLimit %s: %+v %v", name, got, err)
	}
	r := ref(name, "k")
	checkMode(t, name+" fillup 100", e.fillup(r, "100"), true, "100", false, false)
	checkMode(t, name+" can 10", e.can(r, "10"), true, "100", false, true)
	checkMode(t, name+" can 10.000001", e.can(r, "10.000001"), false, "100", false, false)
	res, err := e.svc.Reserve(e.ctx, r, dec("4"), time.Minute, ledger.Idempotency{}, nil)
	if err != nil || !res.Decision.Accepted || !res.Decision.OverCapacity || res.Decision.ShadowDenied {
		t.Fatalf("%s reserve 4: %+v %v", name, res, err)
	}
	checkMode(t, name+" fillup 6.000001", e.fillup(r, "6.000001"), false, "100", false, false)
	checkMode(t, name+" fillup 6", e.fillup(r, "6"), true, "106", false, true)
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
	checkMode(t, name+" enforce fillup 1", e.fillup(r, "1"), false, "106", false, false)
	if st := e.state(r); !st.Level.Equal(bucket.MustAmount("106")) {
		t.Fatalf("%s: level after the switch %s, want 106", name, st.Level)
	}
}

// modesMulti: in a multi-bucket call a shadow item over capacity does not
// deny the call, an enforce item does, and a soft item (of window, a
// window limit's spec) denies only past its grace. Needs modeShadow's
// shadow-leak.
func modesMulti(t *testing.T, e *env, window ledger.LimitSpec) {
	e.limit("enforce", "10", "1", time.Hour, true)
	window.Mode, window.Grace = ledger.ModeSoft, dec("10")
	if _, err := e.svc.PutLimit(e.ctx, "soft-multi", window); err != nil {
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
}

// modesRefused: bad modes change nothing (modesMulti's enforce limit).
func modesRefused(t *testing.T, e *env) {
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
