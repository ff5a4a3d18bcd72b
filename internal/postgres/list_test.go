package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
)

func BenchmarkListBuckets(b *testing.B) { ledgertest.BenchListBuckets(b, open(b), 10_000) }

// seedNearCap opens a store on a fresh schema with limit as
// ledgertest.NearCapBench and n buckets inserted as rows, as
// ledgertest.SeedNearCap makes them (the bucket past 80% marked as a
// write would mark it), analysed.
func seedNearCap(t testing.TB, limit string, n int) (*postgres.Store, string) {
	t.Helper()
	ctx := context.Background()
	schema := newSchema(t)
	s, err := postgres.Open(ctx, dsn(t), postgres.WithSchema(schema), postgres.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := ledger.NewService(s).PutLimit(ctx, limit, ledgertest.NearCapBench); err != nil {
		t.Fatal(err)
	}
	conn := schemaConn(t, dsn(t), schema)
	sig := int32(ledger.ThresholdSig(ledgertest.NearCapBench.Thresholds))
	if _, err := conn.Exec(ctx, `
INSERT INTO buckets (limit_id, key, level, updated_at, th_sig, th_above, th_period)
SELECT l.id, 'tenant-' || lpad(g::text, 7, '0'), CASE WHEN g % 100 = 0 THEN 90 ELSE g % 79 END,
       date_trunc('microseconds', clock_timestamp()),
       CASE WHEN g % 100 = 0 THEN $3::integer ELSE 0 END, CASE WHEN g % 100 = 0 THEN 1 ELSE 0 END, 0
  FROM limits l CROSS JOIN generate_series(0, $2::integer - 1) g WHERE l.name = $1`, limit, n, sig); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE buckets"); err != nil {
		t.Fatal(err)
	}
	return s, schema
}

// TestNearCapIndexed: a listing past a threshold reads the partial index
// buckets_marked (migration 0023), not every bucket of the limit, and
// lists exactly the marked buckets.
func TestNearCapIndexed(t *testing.T) {
	ctx := context.Background()
	const n = 20_000
	s, schema := seedNearCap(t, "near", n)
	conn := schemaConn(t, dsn(t), schema)
	plan := explain(t, conn, "EXPLAIN (COSTS OFF) "+postgres.ListMarkedSQL, "near", "", 101, nil,
		int32(ledger.ThresholdSig(ledgertest.NearCapBench.Thresholds)), int16(1))
	if !strings.Contains(plan, "buckets_marked") {
		t.Errorf("the listing past a threshold does not read buckets_marked:\n%s", plan)
	}
	items, next, err := ledger.NewService(s).QueryBuckets(ctx, "near", ledger.BucketQuery{Above: "80%"}, "", ledger.MaxPage)
	if err != nil || next != "" || len(items) != n/100 {
		t.Fatalf("past 80%%: %d items, next %q, %v; want %d", len(items), next, err, n/100)
	}
	for i, it := range items {
		if it.Key != ledgertest.NearCapKey(i*100) {
			t.Fatalf("item %d is %q, want %q", i, it.Key, ledgertest.NearCapKey(i*100))
		}
	}
}

// BenchmarkNearCap lists who is near the cap of a limit of 1,000,000
// buckets (docs/api.md, "Who is near the cap").
func BenchmarkNearCap(b *testing.B) {
	const n = 1_000_000
	s, _ := seedNearCap(b, "near", n)
	ledgertest.BenchNearCap(b, s, "near", n)
}
