package ledgertest

import (
	"slices"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// testListKinds: the buckets of a periodic limit and of a leaky one are
// listed on every store, each with the limit as stored (the period, or the
// leak rate) and the numbers Bucket reports at the same instant: a periodic
// bucket's period_start and resets_at, its reset at the period's end with a
// hold outliving it, and the listing (ListBuckets, Service.ListBuckets)
// across a reset.
func testListKinds(t *testing.T, e *env) {
	month := ledger.Period{Every: "month", TZ: "Europe/Berlin"}
	e.periodic("spend", "5000.00", month, true)
	e.limit("rate", "100", "1", time.Second, false)
	e.clock.Set(utc(t, "2026-01-31T22:30:00Z")) // 23:30 on 31 January in Berlin
	e.fillup(ref("spend", "a"), "60")
	e.fillup(ref("spend", "b"), "4000.5")
	e.reserve(ref("spend", "c"), "30", 2*time.Hour) // held across the reset
	e.fillup(ref("rate", "x"), "10")
	e.clock.Advance(4 * time.Second)

	check := func(when string, limit string, keys []string, wantPeriod *ledger.Period) []ledger.BucketSnapshot {
		t.Helper()
		got, err := e.store.ListBuckets(e.ctx, limit, "", 100)
		if err != nil {
			t.Fatalf("%s: ListBuckets(%s): %v", when, limit, err)
		}
		if !slices.Equal(bucketKeys(got), keys) {
			t.Fatalf("%s: keys of %s = %q, want %q", when, limit, bucketKeys(got), keys)
		}
		for _, b := range got {
			if b.Limit.Name != limit || !b.Now.Equal(e.clock.Now()) {
				t.Errorf("%s: %s/%s listed with limit %q at %v, want %q at %v", when, limit, b.Key, b.Limit.Name, b.Now, limit, e.clock.Now())
			}
			switch {
			case wantPeriod == nil && (b.Limit.Period != nil || b.Limit.LeakPer != time.Second || !b.Limit.LeakAmount.Equal(dec("1"))):
				t.Errorf("%s: %s/%s listed with rule %+v, want 1 per 1s", when, limit, b.Key, b.Limit)
			case wantPeriod != nil && (b.Limit.Period == nil || *b.Limit.Period != *wantPeriod || !b.Limit.LeakAmount.IsZero() || b.Limit.LeakPer != 0):
				t.Errorf("%s: %s/%s listed with rule %+v, want period %+v", when, limit, b.Key, b.Limit, *wantPeriod)
			}
			st, one := ledger.StateOf(b.Snapshot), e.state(ref(limit, b.Key))
			if !st.Level.Equal(one.Level) || !st.Held.Equal(one.Held) || !st.Remaining.Equal(one.Remaining) ||
				!st.Capacity.Equal(one.Capacity) || !st.UpdatedAt.Equal(one.UpdatedAt) ||
				!st.PeriodStart.Equal(one.PeriodStart) || !st.ResetsAt.Equal(one.ResetsAt) {
				t.Errorf("%s: %s/%s listed as %+v, Bucket says %+v", when, limit, b.Key, st, one)
			}
		}
		return got
	}
	stored := month
	stored.StartDay = 1
	got := check("before the reset", "spend", []string{"a", "b", "c"}, &stored)
	for i, want := range []struct{ level, held, remaining string }{{"60", "0", "4940"}, {"4000.5", "0", "999.5"}, {"0", "30", "4970"}} {
		st := ledger.StateOf(got[i].Snapshot)
		eq(t, got[i].Key+" level", st.Level, want.level)
		eq(t, got[i].Key+" held", st.Held, want.held)
		eq(t, got[i].Key+" remaining", st.Remaining, want.remaining)
		eq(t, got[i].Key+" capacity", st.Capacity, "5000")
		e.bounds(got[i].Key, st.PeriodStart, st.ResetsAt, "2025-12-31T23:00:00Z", "2026-01-31T23:00:00Z")
	}
	got = check("leaky", "rate", []string{"x"}, nil)
	if st := ledger.StateOf(got[0].Snapshot); !st.PeriodStart.IsZero() || !st.ResetsAt.IsZero() {
		t.Errorf("a leaky bucket listed with a period [%v, %v)", st.PeriodStart, st.ResetsAt)
	} else {
		eq(t, "leaky level after 4s", st.Level, "6")
	}

	// Past midnight in Berlin: levels are back to zero, the hold still held.
	e.clock.Set(utc(t, "2026-01-31T23:00:00Z"))
	got = check("after the reset", "spend", []string{"a", "b", "c"}, &stored)
	for i, held := range []string{"0", "0", "30"} {
		st := ledger.StateOf(got[i].Snapshot)
		eq(t, got[i].Key+" level after the reset", st.Level, "0")
		eq(t, got[i].Key+" held after the reset", st.Held, held)
		e.bounds(got[i].Key+" after the reset", st.PeriodStart, st.ResetsAt, "2026-01-31T23:00:00Z", "2026-02-28T23:00:00Z")
	}

	// The service pages a periodic limit's buckets with their periods.
	page, next, err := e.svc.ListBuckets(e.ctx, "spend", "", 2)
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("page 1: %+v %q %v", page, next, err)
	}
	rest, next, err := e.svc.ListBuckets(e.ctx, "spend", next, 2)
	if err != nil || len(rest) != 1 || rest[0].Key != "c" || next != "" {
		t.Fatalf("page 2: %+v %q %v", rest, next, err)
	}
	e.bounds("page 2", rest[0].PeriodStart, rest[0].ResetsAt, "2026-01-31T23:00:00Z", "2026-02-28T23:00:00Z")
}
