package ledgertest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// RunOverrides runs the conformance tests of overrides (SPEC "Terms per
// customer") against the stores factory builds. A store that keeps no
// overrides must refuse them with ledger.ErrNotServed and change nothing.
func RunOverrides(t *testing.T, factory Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Resolution", testOverrideResolution},
		{"Expiry", testOverrideExpiry},
		{"CRUD", testOverrideCRUD},
		{"BadInput", testOverrideBadInput},
		{"Kinds", testOverrideKinds},
		{"Settles", testOverrideSettles},
		{"Thresholds", testOverrideThresholds},
		{"MultiBucket", testOverrideMultiBucket},
		{"Modes", testOverrideModes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			store := factory(t, clock)
			e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: t.Context()}
			if _, ok := ledger.OverridesOf(store); !ok {
				testOverridesNotServed(t, e)
				return
			}
			tc.fn(t, e)
		})
	}
}

func capacity(s string) decimal.NullDecimal { return decimal.NewNullDecimal(dec(s)) }

func (e *env) override(limit string, o ledger.Override) ledger.Override {
	e.t.Helper()
	got, err := e.svc.PutOverride(e.ctx, limit, o)
	if err != nil {
		e.t.Fatalf("PutOverride(%s, %s): %v", limit, o.Pattern, err)
	}
	return got
}

// testOverridesNotServed: a store without overrides answers ErrNotServed
// and decides as before.
func testOverridesNotServed(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	if _, err := e.svc.PutOverride(e.ctx, "l", ledger.Override{Pattern: "k", Capacity: capacity("50")}); !errors.Is(err, ledger.ErrNotServed) {
		t.Fatalf("PutOverride: %v, want ErrNotServed", err)
	}
	if _, err := e.svc.ListOverrides(e.ctx, "l", "", 10); !errors.Is(err, ledger.ErrNotServed) {
		t.Fatalf("ListOverrides: %v, want ErrNotServed", err)
	}
	if d := e.can(ref("l", "k"), "20"); !d.NeverFits {
		t.Fatalf("a refused override changed the capacity: %+v", d)
	}
}

// testOverrideResolution: exact beats prefix beats the limit, the longest
// prefix wins, and every answer names the override and uses its capacity.
func testOverrideResolution(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	e.override("l", ledger.Override{Pattern: "team-*", Capacity: capacity("20")})
	e.override("l", ledger.Override{Pattern: "team-a*", Capacity: capacity("30")})
	e.override("l", ledger.Override{Pattern: "team-ab", Capacity: capacity("40")})
	e.override("l", ledger.Override{Pattern: "*", Capacity: capacity("15")})
	for _, c := range []struct{ key, capacity, override string }{
		{"team-ab", "40", "team-ab"},
		{"team-abc", "30", "team-a*"},
		{"team-a", "30", "team-a*"},
		{"team-b", "20", "team-*"},
		{"team-", "20", "team-*"},
		{"team", "15", "*"},
		{"other", "15", "*"},
	} {
		st := e.state(ref("l", c.key))
		eq(t, c.key+" capacity", st.Capacity, c.capacity)
		eq(t, c.key+" remaining", st.Remaining, c.capacity)
		if st.Override != c.override {
			t.Errorf("%s: override %q, want %q", c.key, st.Override, c.override)
		}
		res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ref("l", c.key), Cost: dec(c.capacity)}}, ledger.Idempotency{})
		if err != nil || !res.Accepted || res.Limits[0].Override != c.override {
			t.Fatalf("%s: Fillup of the override's capacity: %+v %v", c.key, res, err)
		}
		eq(t, c.key+" remaining after", res.Items[0].Remaining, "0")
		eq(t, c.key+" capacity after", res.Items[0].Capacity, c.capacity)
		over := dec(c.capacity).Add(dec("0.000001")).String()
		if d := e.can(ref("l", "fresh-"+c.key), over); c.override == "*" && !d.NeverFits {
			t.Errorf("%s: a cost above the override's capacity fits: %+v", c.key, d)
		}
	}
	if d := e.can(ref("l", "team-x"), "20.000001"); !d.NeverFits || d.Accepted {
		t.Errorf("cost above the prefix override's capacity: %+v, want never_fits", d)
	}
	if d := e.can(ref("l", "team-x"), "20"); !d.Accepted {
		t.Errorf("cost at the prefix override's capacity: %+v, want accepted", d)
	}
	if err := e.svc.DeleteOverride(e.ctx, "l", "*"); err != nil {
		t.Fatal(err)
	}
	st := e.state(ref("l", "other"))
	eq(t, "capacity without the catch-all", st.Capacity, "10")
	if st.Override != "" {
		t.Errorf("override after delete: %q", st.Override)
	}
	// The level is kept and compared against the limit's capacity: 15 of 10.
	eq(t, "level kept", st.Level, "15")
	eq(t, "remaining", st.Remaining, "0")
}

// testOverrideExpiry: a temporary raise applies until expires_at and not
// from that instant, with no write in between.
func testOverrideExpiry(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	e.override("l", ledger.Override{Pattern: "acme*", Capacity: capacity("12")})
	until := e.clock.Now().Add(time.Hour)
	o := e.override("l", ledger.Override{Pattern: "acme", Capacity: capacity("100"), ExpiresAt: until})
	if !o.ExpiresAt.Equal(until) || !o.CreatedAt.Equal(e.clock.Now()) {
		t.Fatalf("override = %+v", o)
	}
	r := ref("l", "acme")
	if d := e.fillup(r, "60"); !d.Accepted {
		t.Fatalf("fillup within the raise: %+v", d)
	}
	e.clock.Set(until.Add(-time.Microsecond))
	st := e.state(r)
	eq(t, "capacity just before expiry", st.Capacity, "100")
	if st.Override != "acme" {
		t.Fatalf("override just before expiry: %q", st.Override)
	}
	e.clock.Set(until)
	st = e.state(r)
	eq(t, "capacity at expiry", st.Capacity, "12")
	eq(t, "remaining at expiry", st.Remaining, "0")
	eq(t, "level at expiry (leaked 1/h)", st.Level, "59")
	if st.Override != "acme*" {
		t.Fatalf("override at expiry: %q, want the prefix acme*", st.Override)
	}
	if d := e.fillup(r, "1"); d.Accepted {
		t.Fatalf("fillup after the raise ended: %+v", d)
	}
	if _, err := e.svc.GetOverride(e.ctx, "l", "acme"); !errors.Is(err, ledger.ErrOverrideNotFound) {
		t.Errorf("GetOverride of an expired override: %v", err)
	}
	list, err := e.svc.ListOverrides(e.ctx, "l", "", 10)
	if err != nil || len(list) != 1 || list[0].Pattern != "acme*" {
		t.Errorf("ListOverrides after expiry: %+v %v", list, err)
	}
	// A new raise of the same pattern applies again.
	e.override("l", ledger.Override{Pattern: "acme", Capacity: capacity("100"), ExpiresAt: until.Add(time.Hour)})
	if d := e.fillup(r, "1"); !d.Accepted {
		t.Fatalf("fillup under the renewed raise: %+v", d)
	} else {
		eq(t, "capacity under the renewed raise", d.Capacity, "100")
	}
}

// testOverrideCRUD: put, replace, get, list in pages, delete, and a
// deleted limit takes its overrides with it.
func testOverrideCRUD(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	first := e.override("l", ledger.Override{Pattern: "b", Capacity: capacity("20")})
	e.clock.Advance(time.Minute)
	again := e.override("l", ledger.Override{Pattern: "b", Capacity: capacity("25"), LeakAmount: dec("2"), LeakPer: time.Minute})
	if !again.CreatedAt.Equal(first.CreatedAt) || !again.UpdatedAt.Equal(e.clock.Now()) {
		t.Errorf("replaced override times: %+v (first %+v)", again, first)
	}
	for _, p := range []string{"a", "c*", "a*", "c"} {
		e.override("l", ledger.Override{Pattern: p, Capacity: capacity("30")})
	}
	got, err := e.svc.GetOverride(e.ctx, "l", "b")
	if err != nil || !got.Capacity.Decimal.Equal(dec("25")) || got.LeakPer != time.Minute || !got.LeakAmount.Equal(dec("2")) {
		t.Fatalf("GetOverride = %+v %v", got, err)
	}
	var all []string
	after := ""
	for {
		page, err := e.svc.ListOverrides(e.ctx, "l", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			all = append(all, o.Pattern)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Pattern
	}
	if strings.Join(all, " ") != "a a* b c c*" {
		t.Fatalf("listed %v, want byte order a a* b c c*", all)
	}
	if err := e.svc.DeleteOverride(e.ctx, "l", "b"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteOverride(e.ctx, "l", "b"); !errors.Is(err, ledger.ErrOverrideNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, err := e.svc.GetOverride(e.ctx, "l", "b"); !errors.Is(err, ledger.ErrOverrideNotFound) {
		t.Errorf("GetOverride after delete: %v", err)
	}
	if _, err := e.svc.GetOverride(e.ctx, "nope", "b"); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("GetOverride of an unknown limit: %v", err)
	}
	if err := e.svc.DeleteLimit(e.ctx, "l"); err != nil {
		t.Fatal(err)
	}
	e.limit("l", "10", "1", time.Hour, true)
	if list, err := e.svc.ListOverrides(e.ctx, "l", "", 10); err != nil || len(list) != 0 {
		t.Fatalf("a re-created limit has overrides: %+v %v", list, err)
	}
	if st := e.state(ref("l", "a")); st.Override != "" || st.Capacity.String() != "10" {
		t.Fatalf("a re-created limit applies an old override: %+v", st)
	}
}

// testOverrideBadInput: every refusal names its field and changes nothing.
func testOverrideBadInput(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	if _, err := e.svc.PutLimit(e.ctx, "p", ledger.LimitSpec{Capacity: dec("10"), Period: &ledger.Period{Every: "day"}}); err != nil {
		t.Fatal(err)
	}
	past := e.clock.Now()
	for _, c := range []struct {
		limit string
		o     ledger.Override
		field string
	}{
		{"l", ledger.Override{Pattern: "", Capacity: capacity("5")}, "pattern"},
		{"l", ledger.Override{Pattern: "a*b", Capacity: capacity("5")}, "pattern"},
		{"l", ledger.Override{Pattern: "a**", Capacity: capacity("5")}, "pattern"},
		{"l", ledger.Override{Pattern: "k", Capacity: capacity("0")}, "capacity"},
		{"l", ledger.Override{Pattern: "k", Capacity: capacity("-1")}, "capacity"},
		{"l", ledger.Override{Pattern: "k", Capacity: capacity("1000000000001")}, "capacity"},
		{"l", ledger.Override{Pattern: "k", Capacity: capacity("1.0000001")}, "capacity"},
		{"l", ledger.Override{Pattern: "k", ExpiresAt: past}, "expires_at"},
		{"l", ledger.Override{Pattern: "k", ExpiresAt: past.Add(-time.Hour)}, "expires_at"},
		{"l", ledger.Override{Pattern: "k", WindowLength: time.Minute}, "window"},
		{"l", ledger.Override{Pattern: "k", TZ: "Asia/Tokyo"}, "period"},
		{"l", ledger.Override{Pattern: "k", LeakAmount: dec("0"), LeakPer: time.Hour}, "leak.amount"},
		{"l", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: 0}, "leak.per"},
		{"p", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: time.Hour}, "leak"},
		{"p", ledger.Override{Pattern: "k", StartDay: 3}, "period.start_day"},
		{"p", ledger.Override{Pattern: "k", TZ: "Mars/Olympus"}, "period.tz"},
	} {
		_, err := e.svc.PutOverride(e.ctx, c.limit, c.o)
		var ie *ledger.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("PutOverride(%s, %+v) = %v, want a 400 naming %s", c.limit, c.o, err, c.field)
		}
	}
	if _, err := e.svc.PutOverride(e.ctx, "nope", ledger.Override{Pattern: "k", Capacity: capacity("5")}); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("PutOverride on an unknown limit: %v", err)
	}
	for _, l := range []string{"l", "p"} {
		if list, err := e.svc.ListOverrides(e.ctx, l, "", 10); err != nil || len(list) != 0 {
			t.Errorf("refused overrides were stored on %s: %+v %v", l, list, err)
		}
		if st := e.state(ref(l, "k")); st.Override != "" || st.Capacity.String() != "10" {
			t.Errorf("refused overrides apply on %s: %+v", l, st)
		}
	}
}

// testOverrideKinds: each term an override may set changes decisions: a
// leak rate, a period's tz and start_day, a window's length.
func testOverrideKinds(t *testing.T, e *env) {
	start := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	e.clock.Set(start)
	// Leak: 1/h for the limit, 10/h for "fast".
	e.limit("leak", "100", "1", time.Hour, true)
	e.override("leak", ledger.Override{Pattern: "fast", LeakAmount: dec("10"), LeakPer: time.Hour})
	e.fillup(ref("leak", "fast"), "50")
	e.fillup(ref("leak", "slow"), "50")
	// Period: a month from the 1st in UTC; "jp" from the 3rd in Tokyo.
	if _, err := e.svc.PutLimit(e.ctx, "month", ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, History: true}); err != nil {
		t.Fatal(err)
	}
	e.override("month", ledger.Override{Pattern: "jp", TZ: "Asia/Tokyo", StartDay: 3})
	e.fillup(ref("month", "jp"), "70")
	e.fillup(ref("month", "de"), "70")
	// Window: an hour for the limit, a minute for "short".
	if _, err := e.svc.PutLimit(e.ctx, "win", ledger.LimitSpec{Capacity: dec("100"), Window: &ledger.Window{Length: time.Hour}, History: true}); err != nil {
		t.Fatal(err)
	}
	e.override("win", ledger.Override{Pattern: "short", WindowLength: time.Minute})
	e.fillup(ref("win", "short"), "80")
	e.fillup(ref("win", "long"), "80")

	jp := e.state(ref("month", "jp"))
	if want := time.Date(2026, 2, 2, 15, 0, 0, 0, time.UTC); !jp.PeriodStart.Equal(want) { // 3 Feb 00:00 JST
		t.Errorf("jp period_start %s, want %s", jp.PeriodStart, want)
	}
	if want := time.Date(2026, 3, 2, 15, 0, 0, 0, time.UTC); !jp.ResetsAt.Equal(want) {
		t.Errorf("jp resets_at %s, want %s", jp.ResetsAt, want)
	}
	de := e.state(ref("month", "de"))
	if want := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC); !de.PeriodStart.Equal(want) {
		t.Errorf("de period_start %s, want %s", de.PeriodStart, want)
	}

	e.clock.Advance(2 * time.Minute)
	eq(t, "short level", e.state(ref("win", "short")).Level, "0")
	eq(t, "long level", e.state(ref("win", "long")).Level, "80")
	if d := e.fillup(ref("win", "short"), "100"); !d.Accepted {
		t.Errorf("the short window kept its charge: %+v", d)
	}
	e.clock.Advance(2*time.Hour - 2*time.Minute) // 14:00 UTC = 23:00 JST on 2 March
	eq(t, "fast level", e.state(ref("leak", "fast")).Level, "30")
	eq(t, "slow level", e.state(ref("leak", "slow")).Level, "48")
	eq(t, "jp level before its period ends", e.state(ref("month", "jp")).Level, "70")
	e.clock.Advance(time.Hour) // 00:00 JST on 3 March: jp's new period
	eq(t, "jp level in its new period", e.state(ref("month", "jp")).Level, "0")
	eq(t, "de level", e.state(ref("month", "de")).Level, "70")
	if d := e.fillup(ref("month", "jp"), "100"); !d.Accepted {
		t.Errorf("jp in its new period: %+v", d)
	}
}

// testOverrideSettles: an override that changes a bucket's leak rate
// applies from its PUT on, and its DELETE from then on: the time before
// leaked at the rate in force (as a PUT of the limit that changes the
// rate settles every bucket).
func testOverrideSettles(t *testing.T, e *env) {
	e.limit("l", "100", "10", time.Hour, true)
	r := ref("l", "k")
	e.fillup(r, "50")
	e.clock.Advance(time.Hour)
	eq(t, "level after 1h at 10/h", e.state(r).Level, "40")
	e.override("l", ledger.Override{Pattern: "k*", LeakAmount: dec("1"), LeakPer: time.Hour})
	e.clock.Advance(time.Hour)
	eq(t, "level after 1h more at 1/h", e.state(r).Level, "39")
	if err := e.svc.DeleteOverride(e.ctx, "l", "k*"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	eq(t, "level after 1h more at 10/h", e.state(r).Level, "29")
	// A capacity override writes no bucket: the level is kept and compared
	// with the new capacity.
	before := e.state(r)
	e.override("l", ledger.Override{Pattern: "k", Capacity: capacity("20")})
	after := e.state(r)
	eq(t, "level under a lower capacity", after.Level, "29")
	eq(t, "remaining under a lower capacity", after.Remaining, "0")
	if !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("a capacity override wrote the bucket: updated_at %s → %s", before.UpdatedAt, after.UpdatedAt)
	}
	// A PUT of the limit that changes its rate leaves the bucket of an
	// override with its own rate as it is.
	e.override("l", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: time.Hour})
	e.clock.Advance(time.Hour)
	e.limit("l", "100", "5", time.Hour, true)
	e.clock.Advance(time.Hour)
	eq(t, "level at the override's own rate across a PUT of the limit", e.state(r).Level, "27")
}

// testOverrideThresholds: a percentage threshold follows the override's
// capacity, and the event names it.
func testOverrideThresholds(t *testing.T, e *env) {
	spec := ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, History: true, Thresholds: thresholds(t, "80%")}
	if _, err := e.svc.PutLimit(e.ctx, "spend", spec); err != nil {
		t.Fatal(err)
	}
	e.override("spend", ledger.Override{Pattern: "big", Capacity: capacity("200")})
	_, cursor := e.eventsAfter("", 10)
	e.fillup(ref("spend", "big"), "100") // 50% of 200: nothing
	e.fillup(ref("spend", "small"), "80")
	evs, cursor := e.eventsAfter(cursor, 10)
	if len(evs) != 1 || eventText(evs[0]) != "crossed small 80% used=80 cap=100" {
		t.Fatalf("events %+v, want only small crossing 80%% of 100", evs)
	}
	e.fillup(ref("spend", "big"), "60")
	evs, _ = e.eventsAfter(cursor, 10)
	if len(evs) != 1 || eventText(evs[0]) != "crossed big 80% used=160 cap=200" {
		t.Fatalf("events %+v, want big crossing 80%% of 200", evs)
	}
}

// testOverrideMultiBucket: each item of a multi-bucket Fillup is decided
// under its own bucket's terms.
func testOverrideMultiBucket(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	e.override("l", ledger.Override{Pattern: "vip*", Capacity: capacity("100")})
	// The keys share a hash tag: one slot in Redis Cluster.
	items := []ledger.Item{{Bucket: ref("l", "vip-1{t}"), Cost: dec("50")}, {Bucket: ref("l", "std{t}"), Cost: dec("5")}}
	res, err := e.svc.Fillup(e.ctx, items, ledger.Idempotency{})
	if err != nil || !res.Accepted || res.Limits[0].Override != "vip*" || res.Limits[1].Override != "" {
		t.Fatalf("multi-bucket Fillup: %+v %v", res, err)
	}
	eq(t, "vip remaining", res.Items[0].Remaining, "50")
	eq(t, "std remaining", res.Items[1].Remaining, "5")
	items[1].Cost = dec("6")
	res, err = e.svc.Fillup(e.ctx, items, ledger.Idempotency{Scope: "s", Key: "k1", Hash: "h"})
	if err != nil || res.Accepted || !res.Items[0].Accepted || res.Items[1].Accepted {
		t.Fatalf("multi-bucket Fillup over std's capacity: %+v %v", res, err)
	}
	res, err = e.svc.Fillup(e.ctx, items, ledger.Idempotency{Scope: "s", Key: "k1", Hash: "h"})
	if err != nil || !res.Replayed || res.Limits[0].Override != "vip*" {
		t.Fatalf("replay: %+v %v", res, err)
	}
}

// testOverrideModes: a capacity override moves the ceiling of a soft limit
// (capacity × (1 + grace)) and the line past which a shadow limit marks its
// decisions, on a bucket's first decision and on the ones after it, and an
// idempotent single-bucket Fillup names the override when it is replayed.
func testOverrideModes(t *testing.T, e *env) {
	check := func(what string, d bucket.Decision, accepted bool, level string, shadow, over, never bool) {
		t.Helper()
		if d.Accepted != accepted || !d.Level.Equal(bucket.MustAmount(level)) || d.ShadowDenied != shadow || d.OverCapacity != over || d.NeverFits != never {
			t.Fatalf("%s: accepted=%v level=%s shadow_denied=%v over_capacity=%v never_fits=%v, want %v %s %v %v %v",
				what, d.Accepted, d.Level, d.ShadowDenied, d.OverCapacity, d.NeverFits, accepted, level, shadow, over, never)
		}
	}
	soft := ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: dec("10")}
	if _, err := e.svc.PutLimit(e.ctx, "soft", soft); err != nil {
		t.Fatal(err)
	}
	e.override("soft", ledger.Override{Pattern: "big", Capacity: capacity("200")})
	big, small := ref("soft", "big"), ref("soft", "small")
	check("soft big fillup 210", e.fillup(big, "210"), true, "210", false, true, false)
	check("soft big fillup 10.000001", e.fillup(big, "10.000001"), false, "210", false, false, false)
	check("soft big fillup 10", e.fillup(big, "10"), true, "220", false, true, false)
	check("soft big fillup 220.000001", e.fillup(big, "220.000001"), false, "220", false, false, true)
	check("soft small fillup 110.000001", e.fillup(small, "110.000001"), false, "0", false, false, true)
	check("soft small fillup 105", e.fillup(small, "105"), true, "105", false, true, false)

	shadow := ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: ledger.ModeShadow}
	if _, err := e.svc.PutLimit(e.ctx, "shadow", shadow); err != nil {
		t.Fatal(err)
	}
	e.override("shadow", ledger.Override{Pattern: "big*", Capacity: capacity("200")})
	big, small = ref("shadow", "big-1"), ref("shadow", "small")
	check("shadow big fillup 150", e.fillup(big, "150"), true, "150", false, false, false)
	check("shadow big fillup 50", e.fillup(big, "50"), true, "200", false, false, false)
	check("shadow big fillup 1", e.fillup(big, "1"), true, "201", true, false, false)
	check("shadow small fillup 150", e.fillup(small, "150"), true, "150", true, false, false)

	items := []ledger.Item{{Bucket: ref("soft", "big"), Cost: dec("0")}}
	idem := ledger.Idempotency{Scope: "s", Key: "modes", Hash: "h"}
	for _, replay := range []bool{false, true} {
		res, err := e.svc.Fillup(e.ctx, items, idem)
		if err != nil || !res.Accepted || res.Replayed != replay || res.Limits[0].Override != "big" || !res.Limits[0].Capacity.Equal(dec("200")) {
			t.Fatalf("idempotent Fillup (replay %v): %+v %v, want override big of capacity 200", replay, res, err)
		}
		eq(t, "idempotent Fillup's level", res.Items[0].Level, "220")
	}
}
