package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/prometheus/client_golang/prometheus"
)

// TestPeriodTable: a periodic limit's table of period starts (64 periods,
// computed by budgetd) is replaced when the database's clock passes its end,
// and the answers are those of the pure rule throughout: the charges of a
// day belong to that day, a day 200 days later (far past the table) starts
// from zero, and a PUT made there keeps working. The database never computes
// a calendar: its tables are the only boundaries it knows.
func TestPeriodTable(t *testing.T) {
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 3, 28, 22, 30, 0, 0, time.UTC)) // 23:30 in Berlin, DST starts that night
	s := open(t, postgres.WithClock(clock.Now))
	svc := ledger.NewService(s)
	ctx := context.Background()
	daily := &ledger.Period{Every: "day", TZ: "Europe/Berlin"}
	if _, err := svc.PutLimit(ctx, "daily", ledger.LimitSpec{Capacity: dec("10"), Period: daily, History: true}); err != nil {
		t.Fatal(err)
	}
	r := ledger.BucketRef{Limit: "daily", Key: "k"}
	fill := func(cost string) bool {
		t.Helper()
		res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec(cost)}}, ledger.Idempotency{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Accepted
	}
	if !fill("10") || fill("0.000001") {
		t.Fatal("a day's capacity is 10")
	}
	clock.Advance(30*time.Minute - time.Microsecond) // 23:59:59.999999 local
	if fill("0.000001") {
		t.Fatal("accepted before the day ended")
	}
	clock.Advance(time.Microsecond) // local midnight: a new day
	if !fill("7") {
		t.Fatal("a new day did not start from zero")
	}
	st, err := svc.Bucket(ctx, r)
	if err != nil || !st.Level.Equal(bucket.MustAmount("7")) || !st.PeriodStart.Equal(time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)) ||
		!st.ResetsAt.Equal(time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC)) { // a 23-hour day
		t.Fatalf("state %+v %v", st, err)
	}
	if n := s.Stats().PeriodTables; n != 0 {
		t.Fatalf("%d tables recomputed within the first table", n)
	}

	clock.Advance(200 * 24 * time.Hour) // past the 64 days of the table
	if !fill("10") || fill("0.000001") {
		t.Fatal("200 days on: a day's capacity is 10, starting from zero")
	}
	if n := s.Stats().PeriodTables; n != 1 {
		t.Fatalf("%d tables recomputed after 200 days, want 1", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "budgetd_postgres_period_tables_total" {
			counted = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if counted != 1 {
		t.Errorf("budgetd_postgres_period_tables_total = %v, want 1", counted)
	}
	// A PUT there (the old table no longer reaches now) keeps the level.
	if _, err := svc.PutLimit(ctx, "daily", ledger.LimitSpec{Capacity: dec("20"), Period: daily, History: true}); err != nil {
		t.Fatal(err)
	}
	if st, err := svc.Bucket(ctx, r); err != nil || !st.Level.Equal(bucket.MustAmount("10")) || !st.Remaining.Equal(bucket.MustAmount("10")) {
		t.Fatalf("after a PUT: %+v %v", st, err)
	}
	l, err := svc.GetLimit(ctx, "daily")
	if err != nil || l.Period == nil || *l.Period != *daily || !l.LeakAmount.IsZero() || l.LeakPer != 0 {
		t.Fatalf("limit read back: %+v %v", l, err)
	}
}
