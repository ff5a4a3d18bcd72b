package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// TestModesConcurrent: 20 concurrent Fillups of 7 on one bucket of capacity
// 100 at one pinned instant, through the service and so through the
// coalesced batches of budgetd_fillup_batch: on a soft limit with a grace of
// 10% exactly 15 are accepted (level 105, never past the ceiling 110) and
// only the one that ended above capacity is marked over_capacity; on a
// shadow limit all 20 are accepted (level 140) and the 6 that ended above
// capacity are marked shadow_denied. Every accepted caller sees its own
// level.
func TestModesConcurrent(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxConns(4), postgres.WithTimeout(30*time.Second))
			svc := ledger.NewService(s)
			ctx := context.Background()
			for _, tc := range []struct {
				mode, grace    string
				accepted, over int
				level          string
			}{
				{ledger.ModeSoft, "10", 15, 1, "105"},
				{ledger.ModeShadow, "0", 20, 6, "140"},
			} {
				spec := ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true, Mode: tc.mode, Grace: dec(tc.grace)}
				if _, err := svc.PutLimit(ctx, tc.mode, spec); err != nil {
					t.Fatal(err)
				}
				ref := ledger.BucketRef{Limit: tc.mode, Key: "hot"}
				const n = 20
				decisions := make(chan bucket.Decision, n)
				errs := make(chan error, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: dec("7")}}, ledger.Idempotency{})
						if err != nil {
							errs <- err
							return
						}
						decisions <- res.Items[0]
					}()
				}
				close(start)
				wg.Wait()
				close(decisions)
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				accepted, over := 0, 0
				seen := map[string]bool{}
				for d := range decisions {
					if d.Level.Add(d.Held).GreaterThan(bucket.MustAmount("110")) && tc.mode == ledger.ModeSoft {
						t.Fatalf("%s: level %s past the ceiling 110", tc.mode, d.Level)
					}
					if !d.Accepted {
						if d.ShadowDenied || d.OverCapacity {
							t.Fatalf("%s: a denied decision is marked: %+v", tc.mode, d)
						}
						continue
					}
					accepted++
					if seen[d.Level.String()] {
						t.Fatalf("%s: two accepted calls saw level %s", tc.mode, d.Level)
					}
					seen[d.Level.String()] = true
					above := d.Level.GreaterThan(bucket.MustAmount("100"))
					if d.ShadowDenied != (above && tc.mode == ledger.ModeShadow) || d.OverCapacity != (above && tc.mode == ledger.ModeSoft) {
						t.Fatalf("%s: accepted at level %s marked shadow_denied=%v over_capacity=%v", tc.mode, d.Level, d.ShadowDenied, d.OverCapacity)
					}
					if above {
						over++
					}
				}
				if accepted != tc.accepted || over != tc.over {
					t.Fatalf("%s: %d accepted, %d above capacity; want %d and %d", tc.mode, accepted, over, tc.accepted, tc.over)
				}
				st, err := svc.Bucket(ctx, ref)
				if err != nil || !st.Level.Equal(bucket.MustAmount(tc.level)) {
					t.Fatalf("%s: level %s (%v), want %s", tc.mode, st.Level, err, tc.level)
				}
			}
			stats := s.Stats()
			t.Logf("%s: %d calls coalesced in %d batches", iso, stats.Batched, stats.Batches)
		})
	}
}

// TestModesBatch: one coalesced batch on a soft limit decides each call
// against the ceiling as it would alone (the last cost that fits, then a
// denial, then a zero cost), and every answer row carries the limit's mode
// and grace; a PUT back to enforce takes effect in the next batch.
func TestModesBatch(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now))
	ctx := context.Background()
	soft := ledger.Limit{Name: "b", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: dec("12.5")}
	if _, err := s.PutLimit(ctx, soft); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "b", Key: "k"}
	costs := []decimal.Decimal{dec("10"), dec("1.25"), dec("0.000001"), dec("0")}
	outs, errs := s.FillupBatch(ctx, ref, costs)
	want := []struct {
		accepted bool
		level    string
	}{{true, "10"}, {true, "11.25"}, {false, "11.25"}, {true, "11.25"}}
	for i, o := range outs {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		l := o.Items[0].Snapshot.Limit
		if o.Accepted != want[i].accepted || !o.Items[0].Snapshot.State.Level.Equal(bucket.MustAmount(want[i].level)) ||
			l.Mode != ledger.ModeSoft || !l.Grace.Equal(dec("12.5")) {
			t.Fatalf("call %d: %s mode=%s grace=%s, want accepted=%v level=%s soft 12.5", i, ledgertest.Answer(o), l.Mode, l.Grace, want[i].accepted, want[i].level)
		}
	}
	soft.Mode, soft.Grace = ledger.ModeEnforce, decimal.Decimal{}
	if _, err := s.PutLimit(ctx, soft); err != nil {
		t.Fatal(err)
	}
	outs, errs = s.FillupBatch(ctx, ref, []decimal.Decimal{dec("0.000001")})
	if errs[0] != nil || outs[0].Accepted || outs[0].Items[0].Snapshot.Limit.Mode != ledger.ModeEnforce {
		t.Fatalf("after the switch to enforce: %s %v", ledgertest.Answer(outs[0]), errs[0])
	}
}

// TestCeilingMatchesGo: budgetd_ceiling, given the scale budgetd passes
// with a bucket's terms (ledger.Limit.CeilingScale), computes exactly what
// ledger.Limit.Ceiling does, for capacities and graces at the extremes of
// their scales (no rounding, no float).
func TestCeilingMatchesGo(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	cases := []struct{ mode, capacity, grace string }{
		{ledger.ModeEnforce, "0.000001", "0"},
		{ledger.ModeEnforce, "1000000000000", "0"},
		{ledger.ModeShadow, "0.000001", "0"},
		{ledger.ModeSoft, "0.000001", "0.01"},
		{ledger.ModeSoft, "0.000003", "33.33"},
		{ledger.ModeSoft, "999999999999.999999", "99.99"},
		{ledger.ModeSoft, "1000000000000", "100"},
		{ledger.ModeSoft, "7", "0"},
	}
	for i, c := range cases {
		l := ledger.Limit{Name: fmt.Sprintf("c%d", i), Capacity: dec(c.capacity), LeakAmount: dec("1"), LeakPer: time.Second, Mode: c.mode, Grace: dec(c.grace)}
		if _, err := s.PutLimit(ctx, l); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		var got string
		var scale *string
		if sc, bounded := l.CeilingScale(); bounded {
			str := sc.String()
			scale = &str
		}
		if err := s.Pool().QueryRow(ctx, "SELECT budgetd_ceiling(l, $2::numeric)::text FROM limits l WHERE name = $1", l.Name, scale).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := l.Ceiling(); !dec(got).Equal(want) {
			t.Errorf("%+v: budgetd_ceiling %s, ledger %s", c, got, want)
		}
	}
}
