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
	rankPopulation(t, svc, clock)
	for _, order := range []ledger.BucketOrder{ledger.OrderUsed, ledger.OrderShare} {
		t.Run(string(order), func(t *testing.T) {
			r := &rankRun{t: t, ctx: context.Background(), svc: svc, rl: rl, clock: clock, q: ledger.RankQuery{Order: order, N: 7}}
			r.pages()
			r.bounds()
			r.skip(slices.Contains(skips, order))
		})
	}
}

// rankPopulation puts the limit "rank" (with overrides of capacity and of
// rule, one of them ending) and charges its buckets, some with holds and
// grants.
func rankPopulation(t *testing.T, svc *ledger.Service, clock *Clock) {
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
	for i := range rankBuckets {
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
}

// rankBuckets is how many buckets rankPopulation charges.
const rankBuckets = 60

// rankRun ranks the population in one order: the candidates of every
// batch (all, after pages), and each one's rank computed in Go (pos, after
// bounds).
type rankRun struct {
	t     *testing.T
	ctx   context.Context
	svc   *ledger.Service
	rl    ledger.RankedLister
	clock *Clock
	q     ledger.RankQuery
	all   []ledger.RankBound
	pos   map[string]ledger.RankPos
}

// pages ranks batch after batch of a few, at the store's now: every
// written bucket once, by bound highest first and then by key.
func (r *rankRun) pages() {
	t := r.t
	for {
		got, err := r.rl.RankBuckets(r.ctx, "rank", r.q)
		if err != nil {
			t.Fatal(err)
		}
		if !got.At.Equal(r.clock.Now()) || !got.Now.Equal(r.clock.Now()) {
			t.Fatalf("ranked at %s, read at %s; want the store's now %s", got.At, got.Now, r.clock.Now())
		}
		r.q.At, r.q.Now = got.At, got.Now
		r.all = append(r.all, got.Buckets...)
		if len(got.Buckets) < r.q.N {
			break
		}
		r.q.After = &got.Buckets[len(got.Buckets)-1]
	}
	listed, _, err := r.svc.ListBuckets(r.ctx, "rank", "", ledger.MaxPage)
	if err != nil || len(r.all) != len(listed) || len(r.all) < rankBuckets-10 {
		t.Fatalf("%d buckets ranked, %d listed (%v)", len(r.all), len(listed), err)
	}
	seen := map[string]bool{}
	for _, c := range r.all {
		seen[c.Key] = true
	}
	for _, b := range listed {
		if !seen[b.Key] {
			t.Errorf("%s listed, not ranked", b.Key)
		}
	}
	for i, c := range r.all {
		if i > 0 && (c.Bound.GreaterThan(r.all[i-1].Bound) || c.Bound.Equal(r.all[i-1].Bound) && c.Key <= r.all[i-1].Key) {
			t.Fatalf("%v after %v", c, r.all[i-1])
		}
	}
}

// bounds computes each candidate's rank in Go from its snapshot
// (ReadBuckets): its bound is at least that, and equal to it by used where
// the bucket's rule is the limit's.
func (r *rankRun) bounds() {
	t := r.t
	keys := make([]string, len(r.all))
	for i, c := range r.all {
		keys[i] = c.Key
	}
	snaps, err := r.rl.ReadBuckets(r.ctx, "rank", keys, r.q.Now)
	if err != nil || len(snaps) != len(r.all) {
		t.Fatalf("ReadBuckets: %d, %v", len(snaps), err)
	}
	r.pos = map[string]ledger.RankPos{}
	for _, b := range snaps {
		d := bucket.CanAccept(b.Limit.Rule(), b.State, r.q.At, bucket.Amount{})
		r.pos[b.Key] = ledger.RankPos{Used: d.Level.Add(d.Held), Capacity: d.Capacity, Key: b.Key}
	}
	exact := 0
	for _, c := range r.all {
		p := r.pos[c.Key]
		if p.Used.Decimal().GreaterThan(boundUsed(r.q.Order, c, p)) {
			t.Errorf("%s: bound %s below used %s of capacity %s", c.Key, c.Bound, p.Used, p.Capacity)
		}
		if r.q.Order == ledger.OrderUsed && !strings.HasPrefix(c.Key, "a-2") && !strings.HasPrefix(c.Key, "a-3") {
			exact++
			if !c.Bound.Equal(p.Used.Decimal()) {
				t.Errorf("%s under the limit's rule: bound %s, used %s", c.Key, c.Bound, p.Used)
			}
		}
	}
	if r.q.Order == ledger.OrderUsed && exact < 30 {
		t.Fatalf("%d buckets under the limit's rule, want 30 or more", exact)
	}
}

// skip ranks once more after a skip at the 20th bucket in exact order:
// nothing left out ranks after it, and with skips something is left out.
func (r *rankRun) skip(skips bool) {
	t := r.t
	var ranked []ledger.RankPos
	for _, p := range r.pos {
		ranked = append(ranked, p)
	}
	sortRanked(r.q.Order, ranked)
	skip := ranked[19]
	got, err := r.rl.RankBuckets(r.ctx, "rank", ledger.RankQuery{Order: r.q.Order, At: r.q.At, Now: r.q.Now, Skip: &skip, N: len(r.all)})
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, c := range got.Buckets {
		kept[c.Key] = true
	}
	for i, p := range ranked {
		if i > 19 && !kept[p.Key] {
			t.Errorf("%s ranks after the skip and was left out", p.Key)
		}
	}
	if skips && len(got.Buckets) >= len(r.all) {
		t.Errorf("a skip left out no bucket")
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
