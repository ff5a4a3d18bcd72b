package mysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/shopspring/decimal"
)

// nearCapRows is how many buckets TestNearCapIndexed writes: one in a
// hundred past 80% (ledgertest.NearCapCost).
const nearCapRows = 400

// TestNearCapIndexed: a listing past a threshold reads the index
// budgetd_buckets_marked of the column th_marked (migrations 5 and 6),
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

// seedNearCap opens a store on a database of its own with limit as
// ledgertest.NearCapBench and n buckets inserted as rows, as
// ledgertest.SeedNearCap makes them (the bucket past 80% marked as a write
// would mark it, a bucket of level 0 written), 100,000 rows a statement,
// the table analysed.
func seedNearCap(t testing.TB, limit string, n int) *mysql.Store {
	t.Helper()
	ctx := context.Background()
	url := newDatabase(t)
	s := open(t, url, mysql.WithPruneInterval(0))
	if _, err := ledger.NewService(s).PutLimit(ctx, limit, ledgertest.NearCapBench); err != nil {
		t.Fatal(err)
	}
	db, _ := admin(t)
	table := strings.TrimPrefix(mustURL(t, url).Path, "/") + ".budgetd_buckets"
	marks, err := json.Marshal(map[string]ledger.Marks{"marks": {Sig: ledger.ThresholdSig(ledgertest.NearCapBench.Thresholds), Above: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// i = from + a number of 5 digits, one table of digits each.
	digits := "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL " +
		"SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	var from, num []string
	for j, w := range []string{"1", "10", "100", "1000", "10000"} {
		from = append(from, fmt.Sprintf("%s d%d", digits, j))
		num = append(num, fmt.Sprintf("%s * d%d.d", w, j))
	}
	insert := "INSERT INTO " + table + " (limit_id, bkey, version, level, updated_us, extra, hseq, last_us)" +
		" SELECT (SELECT id FROM " + strings.TrimSuffix(table, "buckets") + "limits WHERE name = ?), CONCAT('tenant-', LPAD(g.i, 7, '0')), 1," +
		" IF(g.i % 100 = 0, 90, g.i % 79), ?, IF(g.i % 100 = 0, ?, NULL), 0, ?" +
		" FROM (SELECT ? + " + strings.Join(num, " + ") + " AS i FROM " + strings.Join(from, ", ") + ") g WHERE g.i < ?"
	if ledgertest.NearCapKey(0) != "tenant-0000000" || ledgertest.NearCapCost(79) != 0 || ledgertest.NearCapCost(100) != 90 {
		t.Fatal("ledgertest.NearCapKey or NearCapCost changed: change this statement too")
	}
	us := time.Now().UnixMicro()
	for i := 0; i < n; i += 100_000 {
		if _, err := db.ExecContext(ctx, insert, []byte(limit), us, string(marks), us, i, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
	return s
}

// BenchmarkNearCap lists who is near the cap of a limit of 1,000,000
// buckets (docs/api.md, "Who is near the cap").
func BenchmarkNearCap(b *testing.B) {
	const n = 1_000_000
	s := seedNearCap(b, "near", n)
	ledgertest.BenchNearCap(b, s, "near", n)
}
