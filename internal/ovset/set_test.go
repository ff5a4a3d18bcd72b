package ovset

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// sameOverride reports whether a and b are the same override: every field
// equal, decimals to their exponent (a capacity put as "8000.00" comes
// back as "8000.00"), times as instants.
func sameOverride(a, b ledger.Override) bool {
	sameDec := func(x, y decimal.Decimal) bool {
		return x.Equal(y) && x.Exponent() == y.Exponent() && x.String() == y.String()
	}
	return a.Pattern == b.Pattern && a.Capacity.Valid == b.Capacity.Valid && sameDec(a.Capacity.Decimal, b.Capacity.Decimal) &&
		sameDec(a.LeakAmount, b.LeakAmount) && a.LeakPer == b.LeakPer && a.TZ == b.TZ && a.StartDay == b.StartDay &&
		a.WindowLength == b.WindowLength && a.ExpiresAt.Equal(b.ExpiresAt) && a.ExpiresAt.IsZero() == b.ExpiresAt.IsZero() &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}

// TestOverrideSetMatchesLedger: the memory store's pointer-free overrides
// answer exactly as ledger.Overrides does, through random puts, replaces
// and deletes of exact and prefix patterns with every kind of term (amounts
// of any exponent, one that fits no int64, zones, expiries), compared at
// every step on Get, Resolve at instants around the expiries, Len and List,
// with the arena compacted on the way.
func TestOverrideSetMatchesLedger(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	long := "a-customer-key-longer-than-what-a-record-holds-itself" // in the arena
	base := time.Date(2026, 11, 26, 12, 0, 0, 123456789, time.FixedZone("X", 3600))
	var want ledger.Overrides
	got := &Set{}
	patterns := []string{"*", "a*", "ab*", "abc", "abc*", "abcd", "b", "b*", "bcd*", "bcdef", "zz-long-key-0001", "zz-*", "zz-long-*", long, long + "*", long[:40] + "*", long + "-x"}
	amounts := []string{"5", "8000.00", "0.000001", "1000000000000", "12.5", "1.000000000000000000000000"}
	zones := []string{"", "Europe/Berlin", "Asia/Tokyo"}
	keys := []string{"", "a", "ab", "abc", "abcd", "abcde", "b", "bc", "bcd", "bcdef", "zz-long-key-0001", "zz-long-key-0002", "zz-", "q", long, long + "-x", long[:40], long[:40] + "y"}
	for step := range 20000 {
		p := patterns[rng.IntN(len(patterns))]
		if step%7 == 0 {
			p = fmt.Sprintf("gen-%d%s%s", rng.IntN(3000), map[bool]string{true: long}[rng.IntN(3) == 0], map[bool]string{true: "*"}[rng.IntN(2) == 0])
		}
		switch rng.IntN(4) {
		case 0, 1:
			o := ledger.Override{Pattern: p, CreatedAt: base.Add(time.Duration(step) * time.Millisecond), UpdatedAt: base.Add(time.Duration(step) * time.Second)}
			if rng.IntN(3) > 0 {
				o.Capacity = decimal.NewNullDecimal(decimal.RequireFromString(amounts[rng.IntN(len(amounts))]))
			}
			switch rng.IntN(4) {
			case 0:
				o.LeakAmount, o.LeakPer = decimal.RequireFromString(amounts[rng.IntN(len(amounts))]), time.Duration(1+rng.IntN(5))*time.Hour
			case 1:
				o.TZ, o.StartDay = zones[rng.IntN(len(zones))], rng.IntN(28)
			case 2:
				o.WindowLength = time.Duration(1+rng.IntN(48)) * time.Hour
			}
			if rng.IntN(2) == 0 {
				o.ExpiresAt = base.Add(time.Duration(rng.IntN(1000)) * time.Microsecond).Truncate(time.Microsecond)
			}
			want.Put(o)
			got.Put(o)
		case 2:
			if w, g := want.Delete(p), got.Delete(p); w != g {
				t.Fatalf("step %d: Delete(%q) = %v, want %v", step, p, g, w)
			}
		case 3:
			w, wok := want.Get(p)
			g, gok := got.Get(p)
			if wok != gok || wok && !sameOverride(w, g) {
				t.Fatalf("step %d: Get(%q) = %+v %v, want %+v %v", step, p, g, gok, w, wok)
			}
		}
		if want.Len() != got.Len() {
			t.Fatalf("step %d: Len %d, want %d", step, got.Len(), want.Len())
		}
		if step%50 != 0 {
			continue
		}
		rules := false
		for _, o := range want.List("", want.Len(), time.Time{}) {
			rules = rules || ChangesRule(o)
		}
		for _, k := range append(keys, fmt.Sprintf("gen-%d", rng.IntN(3000)), fmt.Sprintf("gen-%d-x", rng.IntN(3000))) {
			for _, d := range []time.Duration{0, 499 * time.Microsecond, 500*time.Microsecond - time.Nanosecond, 500 * time.Microsecond, time.Second} {
				now := base.Truncate(time.Microsecond).Add(d)
				w, wok := want.Resolve(k, now)
				i := got.resolve(k, now)
				if wok != (i != 0) || wok && !sameOverride(w, got.override(i-1)) {
					t.Fatalf("step %d: resolve(%q, +%s) = %d, want %+v %v", step, k, d, i, w, wok)
				}
				if g, gok := got.Resolve(k, now); gok != wok || wok && !sameOverride(w, g) {
					t.Fatalf("step %d: Resolve(%q, +%s) = %+v %v, want %+v %v", step, k, d, g, gok, w, wok)
				}
				// Effective, three times: the third may come from the memo,
				// which every change since must have made stale.
				lim := ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(7), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}
				for range 3 {
					we, ge := want.Effective(lim, k, now), got.Effective(lim, k, now)
					if ge.Override != we.Override || !ge.Capacity.Equal(we.Capacity) || ge.LeakPer != we.LeakPer || !ge.LeakAmount.Equal(we.LeakAmount) {
						t.Fatalf("step %d: Effective(%q, +%s) = %+v, want %+v", step, k, d, ge, we)
					}
				}
				// MayExpire is SettleExpiries' first test: the override in
				// force at the bucket's write has expired by the read, and
				// some override changes a rule.
				for _, later := range []time.Duration{0, 250 * time.Microsecond, time.Second} {
					wantMay := wok && rules && !w.ExpiresAt.IsZero() && !w.ExpiresAt.After(now.Add(later))
					if may := got.MayExpire(k, now.UnixMicro(), now.Add(later)); may != wantMay {
						t.Fatalf("step %d: MayExpire(%q, +%s, +%s) = %v, want %v (override %+v)", step, k, d, later, may, wantMay, w)
					}
				}
			}
		}
		for _, after := range []string{"", "abc", "gen-1"} {
			now := base.Add(300 * time.Microsecond)
			w, g := want.List(after, 20, now), got.List(after, 20, now)
			if len(w) != len(g) {
				t.Fatalf("step %d: List(%q) has %d, want %d", step, after, len(g), len(w))
			}
			for i := range w {
				if !sameOverride(w[i], g[i]) {
					t.Fatalf("step %d: List(%q)[%d] = %+v, want %+v", step, after, i, g[i], w[i])
				}
			}
		}
	}
	if got.odd == nil {
		t.Fatal("no override was kept whole: the amount beyond int64 was not exercised")
	}
}

// TestOverrideSetCompacts: deleting most of many overrides of long patterns
// (kept in the arena) copies the live ones to a smaller arena, and every
// override left still resolves.
func TestOverrideSetCompacts(t *testing.T) {
	s := &Set{}
	const n = 20000
	for i := range n {
		s.Put(ledger.Override{Pattern: fmt.Sprintf("customer-%06d-of-a-tenant-with-a-long-name", i), Capacity: decimal.NewNullDecimal(decimal.NewFromInt(int64(i + 1)))})
	}
	full := len(s.arena)
	for i := range n {
		if i%10 != 0 {
			s.Delete(fmt.Sprintf("customer-%06d-of-a-tenant-with-a-long-name", i))
		}
	}
	if len(s.arena) >= full/2 || s.Len() != n/10 {
		t.Fatalf("arena %d bytes of %d after deleting 90%%, %d overrides", len(s.arena), full, s.Len())
	}
	now := time.Now()
	for i := 0; i < n; i += 10 {
		j := s.resolve(fmt.Sprintf("customer-%06d-of-a-tenant-with-a-long-name", i), now)
		if j == 0 || !s.override(j-1).Capacity.Decimal.Equal(decimal.NewFromInt(int64(i+1))) {
			t.Fatalf("customer-%06d after compaction: %d", i, j)
		}
	}
	if s.resolve("customer-000001-of-a-tenant-with-a-long-name", now) != 0 {
		t.Fatal("a deleted override resolves")
	}
}

// TestOverrideSetMemo: a key resolved again and again (a hot key) gets
// its override without decoding it, allocating nothing, while a load
// spread over many keys keeps no memo (nothing allocated for one).
func TestOverrideSetMemo(t *testing.T) {
	s := &Set{}
	for i := range 100_000 {
		p := fmt.Sprintf("k%d", i)
		if i%2 == 0 {
			p += "*"
		}
		s.Put(ledger.Override{Pattern: p, Capacity: decimal.NewNullDecimal(decimal.NewFromInt(50))})
	}
	l := ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(7), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() {
		if e := s.Effective(l, "k0", now); e.Override != "k0*" {
			t.Fatalf("k0 under %q", e.Override)
		}
	}); n != 0 {
		t.Errorf("the hot key's override allocates %.0f times a decision", n)
	}
	// Spread: each exact key once, against decoding without the memo.
	keys := make([]string, 2000)
	for j := range keys {
		keys[j] = fmt.Sprintf("k%d", 1+(j*7919)%100_000/2*2)
	}
	i := 0
	spread := testing.AllocsPerRun(1000, func() {
		i++
		s.Effective(l, keys[i%len(keys)], now)
	})
	decoded := testing.AllocsPerRun(1000, func() {
		i++
		if r := s.resolve(keys[i%len(keys)], now); r != 0 {
			s.override(r - 1).Apply(l)
		}
	})
	if spread > decoded {
		t.Errorf("spread: %.1f allocations a decision, %.1f without the memo", spread, decoded)
	}
}
