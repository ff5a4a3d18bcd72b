package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/shopspring/decimal"
)

// nearCapRows is how many buckets TestNearCapIndexed writes: one in a
// hundred past 80% (ledgertest.NearCapCost).
const nearCapRows = 400

// TestNearCapIndexed: a listing past a threshold reads the index
// budgetd_buckets_marked of the virtual column th_marked (migration 5),
// which holds the signature of a bucket's marks exactly when one is above.
func TestNearCapIndexed(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	svc := ledger.NewService(open(t, url))
	if _, err := svc.PutLimit(ctx, "near", ledgertest.NearCapBench); err != nil {
		t.Fatal(err)
	}
	const n = nearCapRows
	for i := range n {
		ref := ledger.BucketRef{Limit: "near", Key: ledgertest.NearCapKey(i)}
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(int64(ledgertest.NearCapCost(i)))}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	db, _ := admin(t)
	dbName := strings.TrimPrefix(mustURL(t, url).Path, "/")
	sig := ledger.ThresholdSig(ledgertest.NearCapBench.Thresholds)
	var marked int
	if err := db.QueryRow("SELECT COUNT(*) FROM "+dbName+".budgetd_buckets WHERE th_marked = ?", sig).Scan(&marked); err != nil {
		t.Fatal(err)
	}
	if marked != n/100 {
		t.Errorf("%d buckets with th_marked, want %d", marked, n/100)
	}
	if _, err := db.Exec("ANALYZE TABLE " + dbName + ".budgetd_buckets"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query("EXPLAIN SELECT b.bkey FROM "+dbName+".budgetd_buckets b WHERE b.limit_id = (SELECT id FROM "+dbName+
		".budgetd_limits WHERE name = 'near') AND b.th_marked = ? AND b.bkey > '' ORDER BY b.bkey LIMIT 101", sig)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var plan strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			plan.WriteString(c + "=" + vals[i].String + " ")
		}
		plan.WriteString("\n")
	}
	if !strings.Contains(plan.String(), "key=budgetd_buckets_marked") {
		t.Errorf("the listing past a threshold does not read budgetd_buckets_marked:\n%s", plan.String())
	}
	items, next, err := svc.QueryBuckets(ctx, "near", ledger.BucketQuery{Above: "80%"}, "", 10)
	if err != nil || next != "" || len(items) != n/100 {
		t.Fatalf("past 80%%: %d items, next %q, %v", len(items), next, err)
	}
}
