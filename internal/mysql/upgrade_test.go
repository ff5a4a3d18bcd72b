package mysql_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/testenv"
	"github.com/budgetd/budgetd/migrations"
)

// direct opens url with the driver alone (no migration, no checks).
func direct(t testing.TB, url string) *sql.DB {
	t.Helper()
	return testenv.MySQLDB(t, url, mysql.ParseURL)
}

// pruneIndexes are the indexes migrations/mysql/0002 adds.
var pruneIndexes = []string{"budgetd_holds_expiry", "budgetd_history_at", "budgetd_idempotency_created", "budgetd_events_at"}

func indexes(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return column(t, db, "SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name IN ('"+strings.Join(pruneIndexes, "','")+"') ORDER BY index_name")
}

// checkApplied: every embedded migration file is recorded once in
// budgetd_mysql_migrations, under its name and with its checksum.
func checkApplied(t *testing.T, db *sql.DB) {
	t.Helper()
	files, err := fs.Glob(migrations.MySQL, "mysql/*.sql")
	if err != nil || len(files) < 3 {
		t.Fatalf("embedded migrations: %v %v", files, err)
	}
	var versions int
	if err := db.QueryRow("SELECT COUNT(*) FROM budgetd_mysql_migrations").Scan(&versions); err != nil || versions != len(files) {
		t.Fatalf("after the upgrade: %d versions (%v), want %d", versions, err, len(files))
	}
	for i, f := range files {
		b, err := fs.ReadFile(migrations.MySQL, f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		var name, checksum string
		if err := db.QueryRow("SELECT name, checksum FROM budgetd_mysql_migrations WHERE version = ?", i+1).Scan(&name, &checksum); err != nil {
			t.Fatalf("version %d: %v", i+1, err)
		}
		if name != path.Base(f) || checksum != hex.EncodeToString(sum[:]) {
			t.Errorf("version %d recorded as %s %s, want %s with checksum %x", i+1, name, checksum, path.Base(f), sum)
		}
	}
}

// withOseq adds budgetd_limits.oseq (migrations/mysql/0004) to a database at
// an older version, for the tests that write its rows with this budgetd's
// code, which reads the column: 0 for a limit without overrides, as the old
// rows are. 0004 then leaves the column as it is (it adds it only when
// missing).
func withOseq(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec("ALTER TABLE budgetd_limits ADD COLUMN oseq BIGINT UNSIGNED NOT NULL DEFAULT 0"); err != nil {
		t.Fatal(err)
	}
}

// openAtVersion opens url with the migrations up to version v only, as an
// older budgetd left the database, without its pruner.
func openAtVersion(t *testing.T, url string, v int) *mysql.Store {
	t.Helper()
	restore := mysql.AtSchemaVersion(v)
	defer restore()
	st, err := mysql.Open(context.Background(), url, mysql.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// withMarked adds budgetd_buckets.th_marked (migrations/mysql/0005, a plain
// column since 0006) and the table budgetd_marked (0007) to a database at a
// version before 5, for the tests that write its buckets with this
// budgetd's code, which writes both. 0005 then leaves the column, 0006
// fills it from extra, and 0007 leaves the table and copies th_marked into
// it again.
func withMarked(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec("ALTER TABLE budgetd_buckets ADD COLUMN th_marked BIGINT UNSIGNED NULL"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE budgetd_marked (limit_id BIGINT UNSIGNED NOT NULL, sig INT UNSIGNED NOT NULL, bkey VARBINARY(256) NOT NULL, PRIMARY KEY (limit_id, sig, bkey)) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeFrom0001: a database at schema version 1 (as the first
// budgetd with this store left it) holding limits, buckets, holds, history,
// idempotency records and events is brought to the latest version by two
// instances starting together under the migration lock: 0002 to 0004 are
// applied once and recorded with the files' checksums, their indexes and
// the lease table exist, every row is kept,
// the reads answer what they answered before, a replay answers what the
// first call answered, and the store keeps working on the data.
func TestUpgradeFrom0001(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	db := direct(t, url)

	old := openAtVersion(t, url, 1)
	withOseq(t, db)
	withMarked(t, db)
	svc := ledger.NewService(old)
	spec := ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Hour, History: true,
		Thresholds: []ledger.Threshold{{Percent: decimal.NewFromInt(50)}}}
	if _, err := svc.PutLimit(ctx, "api", spec); err != nil {
		t.Fatal(err)
	}
	a := ledger.BucketRef{Limit: "api", Key: "a"}
	idem := ledger.Idempotency{Scope: "fillup:api/a", Key: "k1", Hash: "h1"}
	first, err := svc.Fillup(ctx, []ledger.Item{{Bucket: a, Cost: d("60.5"), Meta: ledger.Meta{"order": "1"}}}, idem)
	if err != nil || !first.Accepted {
		t.Fatalf("fillup: %+v %v", first, err)
	}
	open, err := svc.Reserve(ctx, a, d("10"), time.Hour, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, err := svc.Reserve(ctx, a, d("5"), time.Hour, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Commit(ctx, done.Reservation.ID, decimal.NewNullDecimal(d("4")), false, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	old.Close()

	var versions int
	if err := db.QueryRow("SELECT COUNT(*) FROM budgetd_mysql_migrations").Scan(&versions); err != nil || versions != 1 {
		t.Fatalf("before the upgrade: %d versions (%v), want 1", versions, err)
	}
	if got := indexes(t, db); len(got) != 0 {
		t.Fatalf("before the upgrade the database has %v", got)
	}
	tables := []string{"budgetd_limits", "budgetd_buckets", "budgetd_history", "budgetd_holds", "budgetd_idempotency", "budgetd_events", "budgetd_event_seq"}
	dump := func() map[string][][]string {
		t.Helper()
		out := map[string][][]string{}
		for _, tb := range tables {
			stored := "*"
			if tb == "budgetd_buckets" {
				// The columns kept: th_marked (migrations 5 and 6) is filled from extra.
				stored = "limit_id, bkey, version, level, updated_us, extra, hseq, last_us"
			}
			rows, err := db.Query("SELECT " + stored + " FROM " + tb + " ORDER BY 1, 2")
			if err != nil {
				t.Fatal(err)
			}
			cols, _ := rows.Columns()
			for rows.Next() {
				raw := make([]sql.RawBytes, len(cols))
				ptrs := make([]any, len(cols))
				for i := range raw {
					ptrs[i] = &raw[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				row := make([]string, len(raw))
				for i, r := range raw {
					row[i] = string(r)
				}
				out[tb] = append(out[tb], row)
			}
			rows.Close()
			if len(out[tb]) == 0 {
				t.Fatalf("no %s rows before the upgrade", tb)
			}
		}
		return out
	}
	before := dump()

	// Two instances start together: the lock lets one apply 0002.
	stores := make([]*mysql.Store, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = mysql.Open(ctx, url, mysql.WithPruneInterval(0))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d after the upgrade: %v", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	checkApplied(t, db)
	if got := indexes(t, db); !reflect.DeepEqual(got, []string{"budgetd_events_at", "budgetd_history_at", "budgetd_holds_expiry", "budgetd_idempotency_created"}) {
		t.Errorf("indexes after the upgrade: %v, want all of %v", got, pruneIndexes)
	}
	if after := dump(); !reflect.DeepEqual(after, before) {
		t.Errorf("rows changed by the upgrade:\n got %v\nwant %v", after, before)
	}

	svc = ledger.NewService(stores[1])
	replay, err := svc.Fillup(ctx, []ledger.Item{{Bucket: a, Cost: d("60.5"), Meta: ledger.Meta{"order": "1"}}}, idem)
	if err != nil || !replay.Replayed || !replay.Items[0].Level.Decimal().Equal(first.Items[0].Level.Decimal()) {
		t.Errorf("replay after the upgrade: %+v %v, want the first answer %+v", replay, err, first)
	}
	res, err := svc.Reservation(ctx, open.Reservation.ID)
	if err != nil || res.State != ledger.Active || !res.Amount.Equal(d("10")) {
		t.Errorf("open hold after the upgrade: %+v %v", res, err)
	}
	if _, err := svc.Release(ctx, open.Reservation.ID, ledger.Idempotency{}, nil); err != nil {
		t.Errorf("release after the upgrade: %v", err)
	}
	entries, _, err := svc.History(ctx, a, "", 100)
	if err != nil || len(entries) != 5 {
		t.Errorf("history after the upgrade: %d entries %v, want fillup, 2 reserves, commit, release", len(entries), err)
	}
	events, _, err := svc.Events(ctx, "", 10)
	if err != nil || len(events) != 1 {
		t.Errorf("events after the upgrade: %+v %v, want the 50%% crossing", events, err)
	}
	if _, err := stores[0].Prune(ctx); err != nil {
		t.Errorf("prune after the upgrade: %v", err)
	}
	if held, cursor, err := stores[0].AcquireLease(ctx, "webhook", "h", time.Hour); err != nil || !held || cursor != "" {
		t.Errorf("lease after the upgrade: held %v cursor %q %v, want a free lease taken", held, cursor, err)
	}
}

// TestUpgradeFrom0002: a database at schema version 2 (budgetd before the
// webhook lease, whose --webhook-url was refused on MySQL) with a limit and
// a crossing's event gets the lease table at the next start; its rows are
// kept, and a deliverer's lease works on it at once.
func TestUpgradeFrom0002(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	db := direct(t, url)
	old := openAtVersion(t, url, 2)
	withOseq(t, db)
	withMarked(t, db)
	svc := ledger.NewService(old)
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Hour,
		Thresholds: []ledger.Threshold{{Percent: decimal.NewFromInt(50)}}}); err != nil {
		t.Fatal(err)
	}
	if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "a"}, Cost: d("60")}}, ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("fillup: %+v %v", out, err)
	}
	old.Close()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'budgetd_leases'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("budgetd_leases before the upgrade: %d %v", n, err)
	}

	st := open(t, url, mysql.WithPruneInterval(0))
	checkApplied(t, db)
	if held, _, err := st.AcquireLease(ctx, "webhook", "h", time.Hour); err != nil || !held {
		t.Fatalf("lease after the upgrade: held %v %v", held, err)
	}
	events, cursor, err := st.Events(ctx, "", 10)
	if err != nil || len(events) != 1 {
		t.Fatalf("events after the upgrade: %+v %v, want the 50%% crossing", events, err)
	}
	if ok, err := st.AdvanceLease(ctx, "webhook", "h", cursor); err != nil || !ok {
		t.Fatalf("advance after the upgrade: %v %v", ok, err)
	}
	if _, got, err := st.AcquireLease(ctx, "webhook", "h", time.Hour); err != nil || got != cursor {
		t.Fatalf("cursor after the upgrade: %q %v, want %q", got, err, cursor)
	}
}

// TestPruneUsesIndexes: EXPLAIN of each of the pruner's scans, on tables
// holding thousands of rows it must not delete, reads an index of
// migrations/mysql/0002 rather than the whole table.
func TestPruneUsesIndexes(t *testing.T) {
	url := newDatabase(t)
	open(t, url, mysql.WithPruneInterval(0))
	db := direct(t, url)
	const n = 3000
	now := time.Now().UnixMicro()
	fill := func(table, cols string, row func(i int) string) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "INSERT INTO %s (%s) VALUES ", table, cols)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(row(i))
		}
		if _, err := db.Exec(b.String()); err != nil {
			t.Fatalf("fill %s: %v", table, err)
		}
		if _, err := db.Exec("ANALYZE TABLE " + table); err != nil {
			t.Fatal(err)
		}
	}
	fill("budgetd_limits", "name, rev, spec, created_us, updated_us", func(i int) string {
		return fmt.Sprintf("('l%d', 1, '{}', %d, %d)", i, now, now)
	})
	fill("budgetd_holds", "id, limit_id, bkey, amount, state, created_us, expires_us, resolved_us", func(i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("('h%d', %d, 'k', 1, 'active', %d, %d, 0)", i, i%50+1, now, now+3600e6)
		}
		return fmt.Sprintf("('h%d', %d, 'k', 1, 'committed', %d, %d, %d)", i, i%50+1, now, now+3600e6, now)
	})
	fill("budgetd_history", "limit_id, bkey, seq, at_us, event, amount", func(i int) string {
		return fmt.Sprintf("(%d, 'k', %d, %d, 'fillup', 1)", i%50+1, i, now)
	})
	fill("budgetd_idempotency", "id, hash, limits, outcome, created_us", func(i int) string {
		return fmt.Sprintf("(UNHEX(SHA2('%d', 256)), 'h', ',1,', '{}', %d)", i, now)
	})
	fill("budgetd_events", "seq, limit_id, bkey, at_us, body", func(i int) string {
		return fmt.Sprintf("(%d, 1, 'k', %d, '{}')", i+1, now)
	})
	want := map[string]struct{ table, index string }{
		"expired holds": {"h", "budgetd_holds_expiry"},
		"closed holds":  {"budgetd_holds", "budgetd_holds_expiry"},
		"history":       {"budgetd_history", "budgetd_history_at"},
		"idempotency":   {"budgetd_idempotency", "budgetd_idempotency_created"},
		"events":        {"budgetd_events", "budgetd_events_at"},
	}
	cut := now - 86400e6
	for name, q := range mysql.PruneStatements {
		args := []any{cut, 1000}
		if strings.Count(q, "?") == 3 {
			args = []any{cut, cut, 1000}
		}
		rows, err := db.Query("EXPLAIN "+q, args...)
		if err != nil {
			t.Fatalf("EXPLAIN %s: %v", name, err)
		}
		cols, _ := rows.Columns()
		found := false
		for rows.Next() {
			raw := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range raw {
				ptrs[i] = &raw[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			row := map[string]string{}
			for i, c := range cols {
				row[c] = raw[i].String
			}
			if row["table"] != want[name].table {
				continue
			}
			found = true
			if row["type"] == "ALL" || row["key"] != want[name].index {
				t.Errorf("%s: EXPLAIN reads %s by %q (type %s, %s rows), want index %s", name, row["table"], row["key"], row["type"], row["rows"], want[name].index)
			}
		}
		rows.Close()
		if !found {
			t.Errorf("%s: EXPLAIN has no row for table %s", name, want[name].table)
		}
	}
}

// TestUpgradeFrom0005: a database at schema version 5, whose th_marked is a
// virtual column computed from extra, holding a bucket with a mark above,
// one with marks none above and one without marks, gets th_marked as a
// plain column at the next start (0006), filled from extra with the values
// the virtual column had, and the marked bucket gets its row of
// budgetd_marked in place of the index of th_marked (0007); a listing past
// a threshold finds the marked bucket, and a write that crosses the
// threshold marks its bucket in the column and the table this budgetd
// writes.
func TestUpgradeFrom0005(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	db := direct(t, url)
	old := openAtVersion(t, url, 5)
	spec := ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("1"), LeakPer: 87600 * time.Hour,
		Thresholds: []ledger.Threshold{{Percent: decimal.NewFromInt(50)}}}
	if _, err := ledger.NewService(old).PutLimit(ctx, "api", spec); err != nil {
		t.Fatal(err)
	}
	old.Close()
	generated := func() string {
		t.Helper()
		var extra string
		if err := db.QueryRow("SELECT extra FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'budgetd_buckets' AND column_name = 'th_marked'").Scan(&extra); err != nil {
			t.Fatal(err)
		}
		return extra
	}
	if g := generated(); !strings.Contains(g, "GENERATED") {
		t.Fatalf("th_marked at version 5 is %q, want a generated column", g)
	}
	sig := ledger.ThresholdSig(spec.Thresholds)
	now := time.Now().UnixMicro()
	// The rows as budgetd at version 5 wrote them (encodeState's extra).
	if _, err := db.Exec(`INSERT INTO budgetd_buckets (limit_id, bkey, version, level, updated_us, extra, hseq, last_us)
		SELECT id, 'hot', 1, 60, ?, ?, 0, ? FROM budgetd_limits WHERE name = 'api' UNION ALL
		SELECT id, 'cool', 1, 20, ?, ?, 0, ? FROM budgetd_limits WHERE name = 'api' UNION ALL
		SELECT id, 'plain', 1, 10, ?, NULL, 0, ? FROM budgetd_limits WHERE name = 'api'`,
		now, fmt.Sprintf(`{"marks":{"Sig":%d,"Above":1,"Period":0}}`, sig), now,
		now, fmt.Sprintf(`{"marks":{"Sig":%d,"Above":0,"Period":0}}`, sig), now,
		now, now); err != nil {
		t.Fatal(err)
	}
	marks := func() map[string]string {
		t.Helper()
		rows, err := db.Query("SELECT bkey, COALESCE(CAST(th_marked AS CHAR), 'NULL') FROM budgetd_buckets ORDER BY bkey")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var k, m string
			if err := rows.Scan(&k, &m); err != nil {
				t.Fatal(err)
			}
			out[k] = m
		}
		return out
	}
	want := map[string]string{"hot": fmt.Sprint(sig), "cool": "NULL", "plain": "NULL"}
	if got := marks(); !reflect.DeepEqual(got, want) {
		t.Fatalf("th_marked at version 5: %v, want %v", got, want)
	}

	st := open(t, url, mysql.WithPruneInterval(0))
	checkApplied(t, db)
	if g := generated(); strings.Contains(g, "GENERATED") {
		t.Errorf("th_marked after the upgrade is %q, want a plain column", g)
	}
	if got := marks(); !reflect.DeepEqual(got, want) {
		t.Errorf("th_marked after the upgrade: %v, want %v", got, want)
	}
	// 0007: the marked buckets copied into budgetd_marked, the index of
	// th_marked gone.
	table := func() []string {
		t.Helper()
		return column(t, db, "SELECT CONCAT(bkey, ':', sig) FROM budgetd_marked ORDER BY bkey")
	}
	if got, want := table(), []string{fmt.Sprintf("hot:%d", sig)}; !reflect.DeepEqual(got, want) {
		t.Errorf("budgetd_marked after the upgrade: %q, want %q", got, want)
	}
	if got := column(t, db, "SELECT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'budgetd_buckets' AND index_name = 'budgetd_buckets_marked'"); len(got) > 0 {
		t.Errorf("budgetd_buckets_marked after the upgrade: %q", got)
	}
	svc := ledger.NewService(st)
	above := func() []string {
		t.Helper()
		items, _, err := svc.QueryBuckets(ctx, "api", ledger.BucketQuery{Above: "50%"}, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, it := range items {
			keys = append(keys, it.Key)
		}
		return keys
	}
	if got := above(); !reflect.DeepEqual(got, []string{"hot"}) {
		t.Errorf("above 50%% after the upgrade: %q, want [hot]", got)
	}
	if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "cool"}, Cost: d("40")}}, ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("fillup: %+v %v", out, err)
	}
	want["cool"] = fmt.Sprint(sig)
	if got := marks(); !reflect.DeepEqual(got, want) {
		t.Errorf("th_marked after a crossing: %v, want %v", got, want)
	}
	if got := above(); !reflect.DeepEqual(got, []string{"cool", "hot"}) {
		t.Errorf("above 50%% after a crossing: %q, want [cool hot]", got)
	}
	if got, want := table(), []string{fmt.Sprintf("cool:%d", sig), fmt.Sprintf("hot:%d", sig)}; !reflect.DeepEqual(got, want) {
		t.Errorf("budgetd_marked after a crossing: %q, want %q", got, want)
	}
}
