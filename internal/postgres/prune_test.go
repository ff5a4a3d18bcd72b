package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
)

// TestPruneSweepPerLimit: one batch of the idle-bucket sweep over the
// written buckets of a monthly limit and a leaky one computes each limit's
// period start once, not once a bucket, and sends only the buckets that
// look empty on to budgetd_prune_bucket; it still deletes those and keeps
// the others. The calls are counted in the sweep's own transaction
// (track_functions, pg_stat_get_xact_function_calls).
func TestPruneSweepPerLimit(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "m", ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month", TZ: "Europe/Berlin"}}); err != nil {
		t.Fatal(err)
	}
	// Leaks 1 a millisecond: a bucket charged 1 is empty at the sweep.
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: dec("1000"), LeakAmount: dec("1"), LeakPer: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	const full, empty = 40, 5
	var items []ledger.Item
	for i := range full {
		items = append(items, ledger.Item{Bucket: ledger.BucketRef{Limit: "m", Key: fmt.Sprint("k", i)}, Cost: dec("1")})
	}
	for i := range empty {
		items = append(items, ledger.Item{Bucket: ledger.BucketRef{Limit: "l", Key: fmt.Sprint("e", i)}, Cost: dec("1")})
	}
	if _, err := svc.Fillup(ctx, items, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	// Empty at the database's clock, which the sweep reads: 1 leaks in 1 ms.
	time.Sleep(5 * time.Millisecond)

	var periodStarts, pruneBucket, deleted int
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL track_functions = 'all'"); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT deleted FROM budgetd_prune_buckets(0, '', clock_timestamp(), 1000)").Scan(&deleted); err != nil {
			return err
		}
		calls := func(name string) (n int, err error) {
			err = tx.QueryRow(ctx, `SELECT coalesce(sum(pg_stat_get_xact_function_calls(p.oid)), 0)::int
				FROM pg_proc p WHERE p.proname = $1`, name).Scan(&n)
			return n, err
		}
		var err error
		if periodStarts, err = calls("budgetd_period_start"); err != nil {
			return err
		}
		pruneBucket, err = calls("budgetd_prune_bucket")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if deleted != empty {
		t.Errorf("the sweep deleted %d buckets, want the %d empty ones", deleted, empty)
	}
	// Once for each of the 2 limits, and once in each budgetd_prune_bucket,
	// which judges its bucket again under the bucket's lock.
	if periodStarts > 2+empty {
		t.Errorf("budgetd_period_start ran %d times for a batch of %d buckets of 2 limits (%d of them empty), want at most %d",
			periodStarts, full+empty, empty, 2+empty)
	}
	if pruneBucket != empty {
		t.Errorf("budgetd_prune_bucket ran %d times, want %d (the buckets that look empty)", pruneBucket, empty)
	}
	var left int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM buckets").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != full {
		t.Errorf("%d buckets left after the sweep, want the %d of the monthly limit", left, full)
	}
}
