package mysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
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

// TestNearCapIndexed: a listing past a threshold reads budgetd_marked
// (migrations/mysql 0007), which holds a row for each bucket whose marks
// have one above, by limit, signature and key, and joins only those rows of
// budgetd_buckets by their primary key.
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
	if err := db.QueryRow("SELECT COUNT(*) FROM "+dbName+".budgetd_marked WHERE sig = ?", sig).Scan(&marked); err != nil {
		t.Fatal(err)
	}
	if marked != n/100 {
		t.Errorf("%d rows in budgetd_marked, want %d", marked, n/100)
	}
	for _, table := range []string{"budgetd_buckets", "budgetd_marked"} {
		if _, err := db.Exec("ANALYZE TABLE " + dbName + "." + table); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Query("EXPLAIN SELECT b.bkey FROM "+dbName+".budgetd_marked m STRAIGHT_JOIN "+dbName+".budgetd_buckets b"+
		" ON b.limit_id = m.limit_id AND b.bkey = m.bkey AND b.th_marked = m.sig WHERE m.limit_id = (SELECT id FROM "+dbName+
		".budgetd_limits WHERE name = 'near') AND m.sig = ? AND m.bkey > '' ORDER BY m.bkey LIMIT 101", sig)
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
	for _, want := range []string{"table=m type=range possible_keys=PRIMARY key=PRIMARY", "table=b type=eq_ref possible_keys=PRIMARY key=PRIMARY"} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("the listing past a threshold: no %q in its plan:\n%s", want, plan.String())
		}
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
	sig := ledger.ThresholdSig(ledgertest.NearCapBench.Thresholds)
	marks, err := json.Marshal(map[string]ledger.Marks{"marks": {Sig: sig, Above: 1}})
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
	insert := "INSERT INTO " + table + " (limit_id, bkey, version, level, updated_us, extra, th_marked, hseq, last_us)" +
		" SELECT (SELECT id FROM " + strings.TrimSuffix(table, "buckets") + "limits WHERE name = ?), CONCAT('tenant-', LPAD(g.i, 7, '0')), 1," +
		" IF(g.i % 100 = 0, 90, g.i % 79), ?, IF(g.i % 100 = 0, ?, NULL), IF(g.i % 100 = 0, ?, NULL), 0, ?" +
		" FROM (SELECT ? + " + strings.Join(num, " + ") + " AS i FROM " + strings.Join(from, ", ") + ") g WHERE g.i < ?"
	if ledgertest.NearCapKey(0) != "tenant-0000000" || ledgertest.NearCapCost(79) != 0 || ledgertest.NearCapCost(100) != 90 {
		t.Fatal("ledgertest.NearCapKey or NearCapCost changed: change this statement too")
	}
	us := time.Now().UnixMicro()
	for i := 0; i < n; i += 100_000 {
		if _, err := db.ExecContext(ctx, insert, []byte(limit), us, string(marks), sig, us, i, n); err != nil {
			t.Fatal(err)
		}
	}
	marked := strings.TrimSuffix(table, "buckets") + "marked"
	if _, err := db.ExecContext(ctx, "INSERT INTO "+marked+" (limit_id, sig, bkey) SELECT limit_id, th_marked, bkey FROM "+table+" WHERE th_marked IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{table, marked} {
		if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+name); err != nil {
			t.Fatal(err)
		}
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

// TestMarkedRows: budgetd_marked (migrations/mysql 0007) holds a row for
// exactly the buckets whose th_marked is set, and with its signature,
// through every way a mark changes: a Fillup that crosses, a hold that
// crosses and its release that leaves, a new list of thresholds, and a
// deleted limit's buckets pruned. budgetd_buckets keeps no index of
// th_marked: MariaDB would give every bucket an entry in it.
func TestMarkedRows(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	st := open(t, url, mysql.WithPruneInterval(0))
	svc := ledger.NewService(st)
	db := direct(t, url)
	spec := ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("1"), LeakPer: 87600 * time.Hour,
		Thresholds: []ledger.Threshold{{Percent: decimal.NewFromInt(50)}}}
	if _, err := svc.PutLimit(ctx, "api", spec); err != nil {
		t.Fatal(err)
	}
	ref := func(k string) ledger.BucketRef { return ledger.BucketRef{Limit: "api", Key: k} }
	fill := func(k, cost string) {
		t.Helper()
		if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref(k), Cost: d(cost)}}, ledger.Idempotency{}); err != nil || !out.Accepted {
			t.Fatalf("fillup %s %s: %+v %v", k, cost, out, err)
		}
	}
	// rows is budgetd_marked as "key:sig", and checks that th_marked says
	// the same of every bucket.
	rows := func() []string {
		t.Helper()
		got := strings.Join(column(t, db, "SELECT CONCAT(bkey, ':', sig) FROM budgetd_marked ORDER BY bkey, sig"), " ")
		if want := strings.Join(column(t, db, "SELECT CONCAT(bkey, ':', th_marked) FROM budgetd_buckets WHERE th_marked IS NOT NULL ORDER BY bkey"), " "); got != want {
			t.Errorf("budgetd_marked holds %q, th_marked says %q", got, want)
		}
		if got == "" {
			return nil
		}
		return strings.Split(got, " ")
	}
	sig := fmt.Sprint(ledger.ThresholdSig(spec.Thresholds))
	check := func(step string, want ...string) {
		t.Helper()
		if got := rows(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: budgetd_marked %q, want %q", step, got, want)
		}
	}

	fill("a", "10")
	check("below the threshold")
	hold, err := svc.Reserve(ctx, ref("b"), d("60"), time.Hour, ledger.Idempotency{}, nil)
	if err != nil || !hold.Decision.Accepted {
		t.Fatalf("reserve: %+v %v", hold, err)
	}
	check("a hold across", "b:"+sig)
	fill("a", "45")
	check("a fillup across", "a:"+sig, "b:"+sig)
	if _, err := svc.Release(ctx, hold.Reservation.ID, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	check("the hold released", "a:"+sig)

	spec.Thresholds = append(spec.Thresholds, ledger.Threshold{Percent: decimal.NewFromInt(90)})
	if _, err := svc.PutLimit(ctx, "api", spec); err != nil {
		t.Fatal(err)
	}
	fill("a", "1")
	sig2 := fmt.Sprint(ledger.ThresholdSig(spec.Thresholds))
	check("a new list of thresholds", "a:"+sig2)
	items, _, err := svc.QueryBuckets(ctx, "api", ledger.BucketQuery{Above: "50%"}, "", 10)
	if err != nil || len(items) != 1 || items[0].Key != "a" {
		t.Errorf("above 50%%: %+v %v, want a", items, err)
	}

	if got := column(t, db, "SELECT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'budgetd_buckets' AND column_name = 'th_marked'"); len(got) > 0 {
		t.Errorf("budgetd_buckets indexes th_marked: %q", got)
	}

	if err := svc.DeleteLimit(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	check("the limit deleted and pruned")
}

// column is the first column of query's rows, as strings.
func column(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	r, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for r.Next() {
		var s string
		if err := r.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
