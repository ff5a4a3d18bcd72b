package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// RankedLister holds a store's RankBuckets and ReadBuckets to their
// contract (ledger.RankedLister), batch after batch of a few: every written
// bucket once, by bound highest first and then by key; each bound at least
// the bucket's rank computed in Go from its snapshot, and equal to it (by
// used) where the bucket's rule is the limit's; a batch after a skip leaves
// out only buckets that rank at or before it, and in the orders of skips
// (those the store skips by) at least one. svc is a Service of the store
// rl, on clock.
func RankedLister(t *testing.T, svc *ledger.Service, rl ledger.RankedLister, clock *Clock, skips ...ledger.BucketOrder) {
	t.Helper()
	ctx := context.Background()
	if _, err := svc.PutLimit(ctx, "rank", ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("20"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []ledger.Override{
		{Pattern: "a-1*", Capacity: decimal.NullDecimal{Decimal: dec("40"), Valid: true}},
		{Pattern: "a-2*", LeakAmount: dec("1"), LeakPer: time.Hour},                                          // a rule: bound by the stored level
		{Pattern: "a-3*", LeakAmount: dec("0.5"), LeakPer: time.Hour, ExpiresAt: clock.Now().Add(time.Hour)}, // a rule that ends
		{Pattern: "a-44", Capacity: decimal.NullDecimal{Decimal: dec("300"), Valid: true}},
	} {
		if _, err := svc.PutOverride(ctx, "rank", o); err != nil {
			t.Fatal(err)
		}
	}
	const n = 60
	for i := range n {
		r := ledger.BucketRef{Limit: "rank", Key: fmt.Sprintf("a-%02d", i)}
		cost := dec(fmt.Sprint(5 + i*37%90))
		if i%7 == 0 {
			if _, err := svc.Reserve(ctx, r, cost, 5*time.Hour, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
		} else if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: cost}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
		if i%9 == 0 {
			if _, err := svc.AddGrant(ctx, r, dec("25"), clock.Now().Add(3*time.Hour), ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Minute)
	}
	clock.Advance(2 * time.Hour)

	for _, order := range []ledger.BucketOrder{ledger.OrderUsed, ledger.OrderShare} {
		t.Run(string(order), func(t *testing.T) {
			q := ledger.RankQuery{Order: order, N: 7}
			var all []ledger.RankBound
			for {
				r, err := rl.RankBuckets(ctx, "rank", q)
				if err != nil {
					t.Fatal(err)
				}
				if !r.At.Equal(clock.Now()) || !r.Now.Equal(clock.Now()) {
					t.Fatalf("ranked at %s, read at %s; want the store's now %s", r.At, r.Now, clock.Now())
				}
				q.At, q.Now = r.At, r.Now
				all = append(all, r.Buckets...)
				if len(r.Buckets) < q.N {
					break
				}
				q.After = &r.Buckets[len(r.Buckets)-1]
			}
			listed, _, err := svc.ListBuckets(ctx, "rank", "", ledger.MaxPage)
			if err != nil || len(all) != len(listed) || len(all) < n-10 {
				t.Fatalf("%d buckets ranked, %d listed (%v)", len(all), len(listed), err)
			}
			seen := map[string]bool{}
			for _, c := range all {
				seen[c.Key] = true
			}
			for _, b := range listed {
				if !seen[b.Key] {
					t.Errorf("%s listed, not ranked", b.Key)
				}
			}
			keys := make([]string, len(all))
			for i, c := range all {
				keys[i] = c.Key
				if i > 0 && (c.Bound.GreaterThan(all[i-1].Bound) || c.Bound.Equal(all[i-1].Bound) && c.Key <= all[i-1].Key) {
					t.Fatalf("%v after %v", c, all[i-1])
				}
			}
			snaps, err := rl.ReadBuckets(ctx, "rank", keys, q.Now)
			if err != nil || len(snaps) != len(all) {
				t.Fatalf("ReadBuckets: %d, %v", len(snaps), err)
			}
			pos := map[string]ledger.RankPos{}
			for _, b := range snaps {
				d := bucket.CanAccept(b.Limit.Rule(), b.State, q.At, bucket.Amount{})
				pos[b.Key] = ledger.RankPos{Used: d.Level.Add(d.Held), Capacity: d.Capacity, Key: b.Key}
			}
			exact := 0
			for _, c := range all {
				p := pos[c.Key]
				if p.Used.Decimal().GreaterThan(boundUsed(order, c, p)) {
					t.Errorf("%s: bound %s below used %s of capacity %s", c.Key, c.Bound, p.Used, p.Capacity)
				}
				if order == ledger.OrderUsed && !strings.HasPrefix(c.Key, "a-2") && !strings.HasPrefix(c.Key, "a-3") {
					exact++
					if !c.Bound.Equal(p.Used.Decimal()) {
						t.Errorf("%s under the limit's rule: bound %s, used %s", c.Key, c.Bound, p.Used)
					}
				}
			}
			if order == ledger.OrderUsed && exact < 30 {
				t.Fatalf("%d buckets under the limit's rule, want 30 or more", exact)
			}

			// A skip at the 20th bucket in exact order: nothing left out
			// ranks after it.
			var ranked []ledger.RankPos
			for _, p := range pos {
				ranked = append(ranked, p)
			}
			sortRanked(order, ranked)
			skip := ranked[19]
			r, err := rl.RankBuckets(ctx, "rank", ledger.RankQuery{Order: order, At: q.At, Now: q.Now, Skip: &skip, N: len(all)})
			if err != nil {
				t.Fatal(err)
			}
			kept := map[string]bool{}
			for _, c := range r.Buckets {
				kept[c.Key] = true
			}
			for i, p := range ranked {
				if i > 19 && !kept[p.Key] {
					t.Errorf("%s ranks after the skip and was left out", p.Key)
				}
			}
			if slices.Contains(skips, order) && len(r.Buckets) >= len(all) {
				t.Errorf("a skip left out no bucket")
			}
		})
	}
}

// boundUsed is the most used a bucket of capacity p.Capacity may have
// under bound c: the bound itself by used, bound × capacity by share.
func boundUsed(order ledger.BucketOrder, c ledger.RankBound, p ledger.RankPos) decimal.Decimal {
	if order == ledger.OrderShare {
		return c.Bound.Mul(p.Capacity.Decimal())
	}
	return c.Bound
}

// sortRanked sorts ps highest first in order, ties by key.
func sortRanked(order ledger.BucketOrder, ps []ledger.RankPos) {
	slices.SortFunc(ps, func(a, b ledger.RankPos) int {
		var c int
		if order == ledger.OrderShare {
			c = a.Used.Decimal().Mul(b.Capacity.Decimal()).Cmp(b.Used.Decimal().Mul(a.Capacity.Decimal()))
		} else {
			c = a.Used.Cmp(b.Used)
		}
		if c != 0 {
			return -c
		}
		return strings.Compare(a.Key, b.Key)
	})
}
