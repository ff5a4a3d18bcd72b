package redis

import (
	"context"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/shopspring/decimal"
)

// TestPeriodTable: the table of period starts passed with each call (eight
// periods around budgetd's clock) is made again when the store's clock is
// outside it — a limit cached across many resets, here 200 days of a daily
// limit within the cache's second — and the answers stay those of the rule:
// a day starts from zero at local midnight (a 23-hour DST day in Berlin), on
// standalone Redis and on Redis Cluster.
func TestPeriodTable(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			clock.Set(time.Date(2026, 3, 28, 22, 30, 0, 0, time.UTC)) // 23:30 in Berlin; DST starts that night
			s := openTest(t, serverURL(t, env), WithClock(clock.Now), WithLimitCacheTTL(time.Hour))
			svc := ledger.NewService(s)
			ctx := context.Background()
			dec := decimal.RequireFromString
			if _, err := svc.PutLimit(ctx, "daily", ledger.LimitSpec{Capacity: dec("10"), Period: &ledger.Period{Every: "day", TZ: "Europe/Berlin"}}); err != nil {
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
			clock.Advance(30*time.Minute - time.Microsecond)
			if fill("0.000001") {
				t.Fatal("accepted before the day ended")
			}
			clock.Advance(time.Microsecond) // local midnight
			if !fill("7") {
				t.Fatal("a new day did not start from zero")
			}
			st, err := svc.Bucket(ctx, r)
			if err != nil || !st.Level.Equal(bucket.MustAmount("7")) || !st.ResetsAt.Equal(time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC)) {
				t.Fatalf("state %+v %v", st, err)
			}
			clock.Advance(200 * 24 * time.Hour) // far past the cached limit's table
			if !fill("10") || fill("0.000001") {
				t.Fatal("200 days on: a day's capacity is 10, starting from zero")
			}
			if _, err := svc.PutLimit(ctx, "daily", ledger.LimitSpec{Capacity: dec("20"), Period: &ledger.Period{Every: "day", TZ: "Europe/Berlin"}}); err != nil {
				t.Fatal(err)
			}
			if st, err := svc.Bucket(ctx, r); err != nil || !st.Level.Equal(bucket.MustAmount("10")) || !st.Remaining.Equal(bucket.MustAmount("10")) {
				t.Fatalf("after a PUT: %+v %v", st, err)
			}
		})
	}
}
