package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
	"golang.org/x/sync/errgroup"
)

// queryAll reads every page of q at page size n.
func (e *env) queryAll(t *testing.T, limit string, q ledger.BucketQuery, n int) []string {
	t.Helper()
	var all []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 50 {
			t.Fatalf("%+v, page size %d: no end after %d pages", q, n, pages)
		}
		items, next, err := e.svc.QueryBuckets(e.ctx, limit, q, cursor, n)
		if err != nil {
			t.Fatalf("QueryBuckets(%+v, %q, %d): %v", q, cursor, n, err)
		}
		if len(items) > n || next != "" && len(items) != n {
			t.Fatalf("%+v, page size %d: %d items, next %q", q, n, len(items), next)
		}
		for _, it := range items {
			all = append(all, it.Key)
		}
		if next == "" {
			return all
		}
		cursor = next
	}
}

// testNearCap covers who is near the cap (QueryBuckets): ?above lists the
// buckets whose mark for a threshold is above (of the current list and
// period), ?order=used and ?order=share rank them highest first with ties
// by key, every page size gives the whole listing once, a ranking keeps the
// instant of its first page, and bad input names its field.
func testNearCap(t *testing.T, e *env) {
	t.Run("Marks", func(t *testing.T) { testNearCapMarks(t, e) })
	t.Run("Stable", func(t *testing.T) { testNearCapStable(t, e) })
	t.Run("Differential", func(t *testing.T) {
		e := *e
		e.t = t
		testNearCapDifferential(t, &e)
	})
}

// expectQuery checks q's listing at several page sizes.
func (e *env) expectQuery(t *testing.T, limit string, q ledger.BucketQuery, want ...string) {
	t.Helper()
	for _, n := range []int{1, 2, 3, len(want) + 1, ledger.MaxPage} {
		if got := e.queryAll(t, limit, q, n); !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Errorf("%+v, page size %d: %q, want %q", q, n, got, want)
		}
	}
}

func testNearCapMarks(t *testing.T, e *env) {
	spec := ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, Thresholds: thresholds(t, "50%", "80%", "90")}
	if _, err := e.svc.PutLimit(e.ctx, "near", spec); err != nil {
		t.Fatal(err)
	}
	e.limit("near.other", "100", "1", time.Hour, false) // another limit: never listed
	e.fillup(ref("near.other", "a"), "99")
	for k, cost := range map[string]string{"a": "95", "b": "85", "c": "60", "d": "10", "e": "85"} {
		e.fillup(ref("near", k), cost)
	}
	// e recovers from 80% and 50% at its drain: its marks are cleared.
	if _, err := e.svc.Drain(e.ctx, ref("near", "e"), dec("65"), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	// g's capacity is 200 by an override where the store serves them: its
	// 120 is 60%, above 50% only (percentages follow the effective
	// capacity), the most used and as much a share as c.
	shares := []string{"a", "b", "c", "e", "d"}
	used := []string{"a", "b", "c", "e", "d"}
	above50, above90 := []string{"a", "b", "c"}, []string{"a"}
	_, err := e.svc.PutOverride(e.ctx, "near", ledger.Override{Pattern: "g", Capacity: decimal.NullDecimal{Decimal: dec("200"), Valid: true}})
	switch {
	case err == nil:
		e.fillup(ref("near", "g"), "120")
		shares = []string{"a", "b", "c", "g", "e", "d"}
		used = []string{"g", "a", "b", "c", "e", "d"}
		above50, above90 = []string{"a", "b", "c", "g"}, []string{"a", "g"} // 90 is an amount
	case !errors.Is(err, ledger.ErrNotServed):
		t.Fatal(err)
	}

	e.expectQuery(t, "near", ledger.BucketQuery{Above: "80%"}, "a", "b")
	e.expectQuery(t, "near", ledger.BucketQuery{Above: "50%"}, above50...)
	e.expectQuery(t, "near", ledger.BucketQuery{Above: "90"}, above90...)
	e.expectQuery(t, "near", ledger.BucketQuery{Above: "90.00"}, above90...) // the same threshold, written otherwise
	e.expectQuery(t, "near", ledger.BucketQuery{Order: ledger.OrderUsed}, used...)
	e.expectQuery(t, "near", ledger.BucketQuery{Order: ledger.OrderShare}, shares...)
	e.expectQuery(t, "near", ledger.BucketQuery{Above: "80%", Order: ledger.OrderShare}, "a", "b")
	e.expectQuery(t, "near", ledger.BucketQuery{Order: ledger.OrderKey}, byteSorted(used)...)

	items, _, err := e.svc.QueryBuckets(e.ctx, "near", ledger.BucketQuery{Order: ledger.OrderUsed}, "", 1)
	if err != nil || len(items) != 1 {
		t.Fatalf("QueryBuckets(used) = %+v, %v", items, err)
	}
	eq(t, "top spender's level", items[0].Level, map[bool]string{true: "120", false: "95"}[len(used) == 6])

	expectNearCapRefusals(t, e)

	// Another list of thresholds: the marks are of the old one until each
	// bucket's next write recomputes them (without an event).
	spec.Thresholds = thresholds(t, "50%", "80%", "95%")
	if _, err := e.svc.PutLimit(e.ctx, "near", spec); err != nil {
		t.Fatal(err)
	}
	e.expectQuery(t, "near", ledger.BucketQuery{Above: "80%"})
	e.fillup(ref("near", "b"), "1")
	e.expectQuery(t, "near", ledger.BucketQuery{Above: "80%"}, "b")
	if _, _, err := e.svc.QueryBuckets(e.ctx, "near", ledger.BucketQuery{Above: "90"}, "", 10); invalidField(err) != "above" {
		t.Errorf("a threshold the limit no longer lists: %v, want invalid above", err)
	}

	// The next period: every mark re-armed, every level back to 0.
	e.clock.Advance(32 * 24 * time.Hour)
	e.expectQuery(t, "near", ledger.BucketQuery{Above: "50%"})
	e.expectQuery(t, "near", ledger.BucketQuery{Order: ledger.OrderUsed}, byteSorted(used)...)
}

// expectNearCapRefusals: a listing of limit "near" (testNearCapMarks's) with
// bad input names its field, and one of an unknown limit is not found.
func expectNearCapRefusals(t *testing.T, e *env) {
	t.Helper()
	for _, c := range []struct {
		q      ledger.BucketQuery
		cursor string
		field  string
	}{
		{ledger.BucketQuery{Above: "70%"}, "", "above"},
		{ledger.BucketQuery{Above: "91"}, "", "above"},
		{ledger.BucketQuery{Above: "lots"}, "", "above"},
		{ledger.BucketQuery{Order: "level"}, "", "order"},
		{ledger.BucketQuery{Order: ledger.OrderUsed}, "%%%", "cursor"},
		{ledger.BucketQuery{Order: ledger.OrderShare}, ledger.BucketCursor("a"), "cursor"},
	} {
		if _, _, err := e.svc.QueryBuckets(e.ctx, "near", c.q, c.cursor, 10); invalidField(err) != c.field {
			t.Errorf("QueryBuckets(%+v, %q) = %v, want invalid %s", c.q, c.cursor, err, c.field)
		}
	}
	_, next, err := e.svc.QueryBuckets(e.ctx, "near", ledger.BucketQuery{Order: ledger.OrderUsed}, "", 1)
	if err != nil || next == "" {
		t.Fatalf("QueryBuckets(used) next = %q, %v", next, err)
	}
	if _, _, err := e.svc.QueryBuckets(e.ctx, "near", ledger.BucketQuery{Order: ledger.OrderShare}, next, 1); invalidField(err) != "cursor" {
		t.Errorf("a used cursor in a share listing: %v, want invalid cursor", err)
	}
	if _, _, err := e.svc.QueryBuckets(e.ctx, "nope", ledger.BucketQuery{Above: "80%"}, "", 10); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("QueryBuckets(unknown limit, above) = %v, want ErrLimitNotFound", err)
	}
	if _, _, err := e.svc.QueryBuckets(e.ctx, "nope", ledger.BucketQuery{Order: ledger.OrderUsed}, "", 10); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("QueryBuckets(unknown limit, used) = %v, want ErrLimitNotFound", err)
	}
}

// testNearCapStable: a ranking by used of leaking buckets keeps the order
// of its first page's instant, so pages read while the levels leak give
// every bucket once, in that order.
func testNearCapStable(t *testing.T, e *env) {
	e.limit("leaky", "1000", "1", time.Second, false)
	var want []string
	for i := range 12 {
		k := string(rune('a' + i))
		e.fillup(ref("leaky", k), decimal.NewFromInt(int64(10+(i*7)%12*10)).String())
	}
	for _, q := range []ledger.BucketQuery{{Order: ledger.OrderUsed}, {Order: ledger.OrderShare}} {
		want = e.queryAll(t, "leaky", q, ledger.MaxPage)
		if len(want) != 12 {
			t.Fatalf("%+v: %q", q, want)
		}
		var got []string
		cursor := ""
		for {
			items, next, err := e.svc.QueryBuckets(e.ctx, "leaky", q, cursor, 5)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				got = append(got, it.Key)
			}
			if next == "" {
				break
			}
			cursor = next
			e.clock.Advance(25 * time.Second) // several buckets leak empty between pages
		}
		if !slices.Equal(got, want) {
			t.Errorf("%+v, pages read while leaking: %q, want %q", q, got, want)
		}
	}
}

// scanOnly is a store with none of its optional interfaces: QueryBuckets
// ranks its buckets in Go, from page after page of ListBuckets.
type scanOnly struct{ ledger.Store }

// testNearCapDifferential: a ranking by used and by share, with and
// without a threshold, lists page for page what the ranking in Go of every
// bucket lists (the store's own ranking, ledger.RankedLister, where it has
// one), on a random population: leaky, periodic and rollover limits,
// overrides of capacity (exact and prefix, some lower, one expired), of
// the leak rate and the zone (one that ended since the buckets' writes),
// holds (some expired), grants, buckets drained or leaked empty, and many
// ties. Pages are read while the clock moves.
func testNearCapDifferential(t *testing.T, e *env) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := &nearCapRun{t: t, e: e, rng: rand.New(rand.NewPCG(seed, 7)), inGo: ledger.NewService(scanOnly{e.store}), overrides: true, grants: true}
	start := e.clock.Now()
	r.putLimits()
	r.putOrderTraps()
	for _, limit := range r.limits {
		r.charge(limit)
	}
	e.clock.Set(start.Add(3*time.Hour + 30*time.Minute)) // the temporary overrides ended, some holds and grants too
	r.compare()
	// Into the next month: the periodic buckets written before count 0,
	// the rollover ones receive their carry, and then some more charges.
	now := e.clock.Now()
	e.clock.Set(time.Date(now.Year(), now.Month()+1, 1, 0, 30, 0, 0, time.UTC))
	for _, limit := range r.limits[1:] {
		r.charge(limit)
	}
	r.compare()
}

// nearCapRun is one run of testNearCapDifferential: its random source, the
// ranking in Go it compares with, its limits and what the store serves.
type nearCapRun struct {
	t         *testing.T
	e         *env
	rng       *rand.Rand
	inGo      *ledger.Service // the store's buckets ranked in Go
	limits    []string
	overrides bool // the store serves overrides
	grants    bool // the store serves grants
}

// putLimits stores the leaky, monthly and (where served) rollover limits
// and the overrides of their capacity, leak rate and zone.
func (r *nearCapRun) putLimits() {
	t, e := r.t, r.e
	r.limits = []string{"rank.leaky", "rank.month"}
	e.limit("rank.leaky", "100", "30", time.Hour, false)
	month := ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, Thresholds: thresholds(t, "80%")}
	if _, err := e.svc.PutLimit(e.ctx, "rank.month", month); err != nil {
		t.Fatal(err)
	}
	month.Rollover = &ledger.Rollover{Max: dec("30")}
	if _, err := e.svc.PutLimit(e.ctx, "rank.carry", month); err == nil {
		r.limits = append(r.limits, "rank.carry")
	} else if !errors.Is(err, ledger.ErrNotServed) {
		t.Fatal(err)
	}
	r.putOverride("rank.leaky", "k-07", "200", "", "", 0)             // a raise for one key
	r.putOverride("rank.leaky", "k-1*", "50", "", "", 0)              // lower for a prefix
	r.putOverride("rank.leaky", "k-2*", "", "60", "", 0)              // a faster leak
	r.putOverride("rank.leaky", "k-3*", "", "0.001", "", 3*time.Hour) // a slower one, ending before the pages
	r.putOverride("rank.leaky", "k-4*", "400", "", "", 3*time.Hour)
	r.putOverride("rank.month", "k-0*", "50", "", "", 0)
	r.putOverride("rank.month", "k-5*", "", "", "Asia/Tokyo", 0)
	r.putOverride("rank.carry", "k-1*", "200", "", "", 0)
}

// putOverride puts an override of the capacity, the leak (an amount an
// hour) or the zone, ending after expires unless 0; it does nothing once
// the store said it serves no overrides.
func (r *nearCapRun) putOverride(limit, pattern, capacity string, leak string, tz string, expires time.Duration) {
	r.t.Helper()
	if !r.overrides {
		return
	}
	o := ledger.Override{Pattern: pattern}
	if capacity != "" {
		o.Capacity = decimal.NullDecimal{Decimal: dec(capacity), Valid: true}
	}
	if leak != "" {
		o.LeakAmount, o.LeakPer = dec(leak), time.Hour
	}
	o.TZ = tz
	if expires != 0 {
		o.ExpiresAt = r.e.clock.Now().Add(expires)
	}
	if _, err := r.e.svc.PutOverride(r.e.ctx, limit, o); errors.Is(err, ledger.ErrNotServed) {
		r.overrides = false
	} else if err != nil {
		r.t.Fatalf("PutOverride(%s, %+v): %v", limit, o, err)
	}
}

// putOrderTraps writes buckets whose order a bound that forgot a term
// would get wrong: h-* hold more as their keys grow and have no level; s-*
// leaked slowly under an override that ended an hour before the pages.
func (r *nearCapRun) putOrderTraps() {
	r.putOverride("rank.leaky", "s-*", "", "0.001", "", 3*time.Hour)
	r.e.fillup(ref("rank.leaky", "s-1"), "30")
	r.e.fillup(ref("rank.leaky", "s-2"), "60")
	for i := 1; i <= 5; i++ {
		r.e.reserve(ref("rank.leaky", fmt.Sprintf("h-%d", i)), fmt.Sprint(10*i), 23*time.Hour)
	}
}

// nearCapCosts are the costs charge draws from: many ties.
var nearCapCosts = []string{"1", "5", "10", "10", "25", "40", "50", "80", "90", "99.5"}

// charge writes (or leaves unwritten) the 60 buckets k-00…k-59 of limit
// at random: a charge, a hold, a charge drained empty, now and then a
// grant, the clock moving a few minutes between buckets.
func (r *nearCapRun) charge(limit string) {
	t, e, rng := r.t, r.e, r.rng
	for i := range 60 {
		b := ref(limit, fmt.Sprintf("k-%d%d", i/10, i%10))
		switch x := rng.IntN(10); {
		case x == 0:
			continue // never written: not listed
		case x == 1:
			e.fillup(b, "30")
			if _, err := e.svc.Drain(e.ctx, b, dec("30"), ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err) // written, and empty
			}
		case x == 2:
			e.reserve(b, nearCapCosts[rng.IntN(len(nearCapCosts))], time.Duration(1+rng.IntN(23))*time.Hour)
		default:
			e.fillup(b, nearCapCosts[rng.IntN(len(nearCapCosts))])
		}
		if rng.IntN(6) == 0 && r.grants {
			_, err := e.svc.AddGrant(e.ctx, b, dec("20"), e.clock.Now().Add(time.Duration(1+rng.IntN(3))*time.Hour), ledger.Idempotency{}, nil)
			if errors.Is(err, ledger.ErrNotServed) {
				r.grants = false
			} else if err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(time.Duration(rng.IntN(3)) * time.Minute)
	}
}

// compare reads every limit's rankings (by used, by share, by share above
// 80% where the limit has that threshold) in pages of 1, 4, 17 and
// ledger.MaxPage from the store and in Go.
func (r *nearCapRun) compare() {
	r.t.Helper()
	for _, limit := range r.limits {
		for _, q := range []ledger.BucketQuery{{Order: ledger.OrderUsed}, {Order: ledger.OrderShare}, {Above: "80%", Order: ledger.OrderShare}} {
			if q.Above != "" && limit == "rank.leaky" {
				continue
			}
			for _, n := range []int{1, 4, 17, ledger.MaxPage} {
				r.comparePages(limit, q, n)
			}
		}
	}
}

// comparePages fails unless the store lists, page for page of n, what the
// ranking in Go lists, the clock moving up to a minute between pages.
func (r *nearCapRun) comparePages(limit string, q ledger.BucketQuery, n int) {
	t, e := r.t, r.e
	t.Helper()
	var cursor, cursorGo string
	for page := 0; ; page++ {
		got, next, err := e.svc.QueryBuckets(e.ctx, limit, q, cursor, n)
		if err != nil {
			t.Fatalf("%s %+v page %d of %d: %v", limit, q, page, n, err)
		}
		want, nextGo, err := r.inGo.QueryBuckets(e.ctx, limit, q, cursorGo, n)
		if err != nil {
			t.Fatalf("%s %+v page %d of %d, in Go: %v", limit, q, page, n, err)
		}
		// Equal as the API writes them (times and decimals as values).
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) || next != nextGo {
			t.Fatalf("%s %+v page %d of %d:\n%+v, next %q\nin Go:\n%+v, next %q", limit, q, page, n, got, next, want, nextGo)
		}
		if next == "" {
			return
		}
		cursor, cursorGo = next, nextGo
		e.clock.Advance(time.Duration(r.rng.IntN(60)) * time.Second) // levels leak between pages
	}
}

// NearCapBench is the limit BenchNearCap lists: capacity 100, leaking 1 an
// hour, one threshold at 80%.
var NearCapBench = ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour,
	Thresholds: []ledger.Threshold{{Percent: dec("80")}}}

// NearCapKey and NearCapCost are bucket i of BenchNearCap's limit and its
// level: one bucket in a hundred at 90 (past 80%), the others below 79.
func NearCapKey(i int) string { return fmt.Sprintf("tenant-%07d", i) }

// NearCapCost is the level of bucket i (see NearCapKey).
func NearCapCost(i int) int {
	if i%100 == 0 {
		return 90
	}
	return i % 79
}

// SeedNearCap creates limit as NearCapBench with n buckets through the
// service (Fillup), for a store where that is quick enough.
func SeedNearCap(b *testing.B, store ledger.Store, limit string, n int) {
	ctx := context.Background()
	svc := ledger.NewService(store)
	if _, err := svc.PutLimit(ctx, limit, NearCapBench); err != nil {
		b.Fatal(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			_, err := store.Fillup(gctx, []ledger.Charge{{Bucket: ref(limit, NearCapKey(i)), Cost: decimal.NewFromInt(int64(NearCapCost(i)))}}, ledger.Idempotency{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// BenchNearCap measures who is near the cap on limit, seeded as
// SeedNearCap does with n buckets: the first page of 100 past 80%, one from
// the middle, and the first and a second page of 100 by used and by share.
func BenchNearCap(b *testing.B, store ledger.Store, limit string, n int) {
	ctx := context.Background()
	svc := ledger.NewService(store)
	for _, c := range []struct {
		name   string
		q      ledger.BucketQuery
		cursor string
	}{
		{"above=80%", ledger.BucketQuery{Above: "80%"}, ""},
		{"above=80%/middle", ledger.BucketQuery{Above: "80%"}, ledger.BucketCursor(NearCapKey(n / 2))},
		{"order=used", ledger.BucketQuery{Order: ledger.OrderUsed}, ""},
		{"order=share", ledger.BucketQuery{Order: ledger.OrderShare}, ""},
		{"order=used/page2", ledger.BucketQuery{Order: ledger.OrderUsed}, "page2"},
	} {
		b.Run(c.name, func(b *testing.B) {
			cursor := c.cursor
			if cursor == "page2" {
				var err error
				if _, cursor, err = svc.QueryBuckets(ctx, limit, c.q, "", 100); err != nil || cursor == "" {
					b.Fatalf("first page: %q, %v", cursor, err)
				}
			}
			for b.Loop() {
				page, _, err := svc.QueryBuckets(ctx, limit, c.q, cursor, 100)
				if err != nil || len(page) != 100 {
					b.Fatalf("page of %d: %v", len(page), err)
				}
			}
		})
	}
}
