package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// releasedSchema builds schema as budgetd's runner left it before this
// layout: testdata/released holds 0001-0005 as they were released, applied
// in order and recorded without checksums.
func releasedSchema(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) {
	t.Helper()
	files, err := filepath.Glob("testdata/released/*.sql")
	if err != nil || len(files) != 5 {
		t.Fatalf("released files: %v %v", files, err)
	}
	sort.Strings(files)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}
	exec("CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize())
	exec("SET search_path = " + pgx.Identifier{schema}.Sanitize())
	exec(`CREATE TABLE budgetd_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		exec(string(b))
		exec("INSERT INTO budgetd_migrations (version, name) VALUES ($1, $2)", i+1, filepath.Base(f))
	}
}

// TestUpgradeFromReleased: a database made by the released migrations, with
// limits, buckets, holds, history and idempotency records written by the
// released functions, migrates to the layout of versioned tables and
// repeatable functions with nothing lost: every table keeps its rows, the
// reads answer the same documents, replays answer what the first calls
// answered, and the store keeps working on the data.
func TestUpgradeFromReleased(t *testing.T) {
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	releasedSchema(t, ctx, conn, schema)

	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	doc := func(sql string, args ...any) string {
		t.Helper()
		var out []byte
		if err := conn.QueryRow(ctx, sql, args...).Scan(&out); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
		return string(out)
	}
	// Data, through the released functions.
	doc("SELECT budgetd_put_limit('api', '100', '1', 1000000, true, $1)", now)
	doc("SELECT budgetd_put_limit('quiet', '10', '0.5', 60000000, false, $1)", now)
	single := doc("SELECT budgetd_fillup(ARRAY['api'], ARRAY['a'], ARRAY['30'], $1, 'fillup:api/a', 'k-single', 'h-single')", now)
	multi := doc("SELECT budgetd_fillup(ARRAY['api', 'quiet'], ARRAY['b', 'b'], ARRAY['5', '2.5'], $1, 'fillup', 'k-multi', 'h-multi')", now)
	var batchFits bool
	var batchLevel string
	if err := conn.QueryRow(ctx, `SELECT r_fits, r_level FROM budgetd_fillup_batch('api', 'c', ARRAY['7', '200'], $1,
		ARRAY['fillup:api/c', NULL], ARRAY['k-batch', NULL], ARRAY['h-batch', NULL]) LIMIT 1`, now).Scan(&batchFits, &batchLevel); err != nil {
		t.Fatal(err)
	}
	batchDoc := fmt.Sprintf(`{"accepted": %v, "items": [{"fits": %v, "state": {"level": %q}}]}`, batchFits, batchFits, batchLevel)
	res := doc("SELECT budgetd_reserve('api', 'a', '20', 3600000000, 'h-open', $1, 'reserve:api/a', 'k-res', 'h-res')", now)
	doc("SELECT budgetd_reserve('api', 'a', '5', 3600000000, 'h-commit', $1, NULL, NULL, NULL)", now)
	doc("SELECT budgetd_reserve('api', 'b', '1', 1000000, 'h-expire', $1, NULL, NULL, NULL)", now)
	commit := doc("SELECT budgetd_resolve('h-commit', true, '4', false, $1, 'commit:h-commit', 'k-commit', 'h-commit')", now.Add(time.Second))
	drain := doc("SELECT budgetd_drain('api', 'a', '3', $1, 'drain:api/a', 'k-drain', 'h-drain')", now.Add(2*time.Second))

	at := now.Add(3 * time.Second)
	// inspect is budgetd_inspect as the released schema has it (before)
	// or as budgetd calls it now (after): with the bucket's terms, which
	// for a limit without overrides or rollover are its version alone
	// (migration 0021) and an enforce limit's ceiling scale (0022).
	after := false
	inspect := func(limit, key string) string {
		t.Helper()
		if !after {
			return doc("SELECT budgetd_inspect($2, $3, $1)", at, limit, key)
		}
		return doc(`SELECT budgetd_inspect($2, $3, $1, (SELECT format('(%s,%s,%s,,,,,,,,,,,,,1)', id, budgetd_us(updated_at), coalesce(override_ver, 0))
			FROM limits WHERE name = $2))`, at, limit, key)
	}
	reads := func() map[string]string {
		t.Helper()
		return map[string]string{
			"inspect a":     inspect("api", "a"),
			"inspect b":     inspect("api", "b"),
			"inspect quiet": inspect("quiet", "b"),
			"history a":     doc("SELECT budgetd_history('api', 'a', NULL, NULL, 100, $1)", at),
			"history b":     doc("SELECT budgetd_history('api', 'b', NULL, NULL, 100, $1)", at),
			"history c":     doc("SELECT budgetd_history('api', 'c', NULL, NULL, 100, $1)", at),
			"hold open":     doc("SELECT budgetd_reservation('h-open', $1)", at),
			"hold commit":   doc("SELECT budgetd_reservation('h-commit', $1)", at),
			"hold expire":   doc("SELECT budgetd_reservation('h-expire', $1)", at),
		}
	}
	tables := []string{"limits", "deleted_limits", "buckets", "holds", "history", "idempotency"}
	dump := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, tb := range tables {
			// Nulls stripped: a column a later migration adds (history.meta)
			// is null in every row that was there before, or has its
			// default (limits.record_denials false, limits.mode 'enforce'
			// with grace 0, no thresholds and bucket marks all zero, no
			// override changing a rule), also
			// stripped.
			out[tb] = doc(`SELECT coalesce(jsonb_agg(r ORDER BY r::text), '[]')
				FROM (SELECT jsonb_strip_nulls(to_jsonb(x))
				             - CASE WHEN to_jsonb(x)->'record_denials' = 'false' THEN 'record_denials' ELSE '' END
				             - CASE WHEN to_jsonb(x)->'override_lens' = '[]' THEN 'override_lens' ELSE '' END
				             - CASE WHEN to_jsonb(x)->'grant_rows' = '0' THEN 'grant_rows' ELSE '' END
				             - CASE WHEN to_jsonb(x)->'override_rules' = 'false' THEN 'override_rules' ELSE '' END
				             - CASE WHEN to_jsonb(x)->'mode' = '"enforce"' AND to_jsonb(x)->'grace' = '0' THEN ARRAY['mode', 'grace'] ELSE '{}' END
				             - CASE WHEN to_jsonb(x)->'thresholds' = '[]' AND to_jsonb(x)->'th_sig' = '0' THEN ARRAY['thresholds', 'th_sig'] ELSE '{}' END
				             - CASE WHEN to_jsonb(x)->'th_above' = '0' AND to_jsonb(x)->'th_sig' = '0' AND to_jsonb(x)->'th_period' = '0'
				                    THEN ARRAY['th_sig', 'th_above', 'th_period'] ELSE '{}' END AS r
				        FROM ` + tb + ` x) y`)
		}
		return out
	}
	reads() // records the hold that expired, as any read of history does
	before := reads()
	rows := dump()
	for _, tb := range []string{"limits", "buckets", "holds", "history", "idempotency"} {
		if rows[tb] == "[]" {
			t.Fatalf("no %s rows before the upgrade", tb)
		}
	}

	clock := at
	s, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithPruneInterval(0),
		postgres.WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatalf("Open on the released schema: %v", err)
	}
	defer s.Close()

	// The rows as they were (reads above recorded the expired hold: the
	// same in both), the reads answering the same documents.
	after = true
	if got := dump(); !equalMaps(got, rows) {
		for tb := range rows {
			if got[tb] != rows[tb] {
				t.Errorf("%s after the upgrade:\n got %s\nwant %s", tb, got[tb], rows[tb])
			}
		}
	}
	for k, v := range reads() {
		if v != before[k] {
			t.Errorf("%s after the upgrade:\n got %s\nwant %s", k, v, before[k])
		}
	}
	// Checksums recorded for the released files; the functions are the
	// current set only.
	var unchecked int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM budgetd_migrations WHERE checksum IS NULL").Scan(&unchecked); err != nil || unchecked != 0 {
		t.Errorf("%d migrations without a checksum (%v)", unchecked, err)
	}
	for _, gone := range []string{"budgetd_fillup_seq", "budgetd_fillup_many", "budgetd_fillup_batches"} {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname = $1 AND pronamespace = $2::regnamespace", gone, schema).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: %d left after the upgrade (%v)", gone, n, err)
		}
	}

	// Replays through the new functions answer what the first calls did.
	type fillDoc struct {
		Accepted bool `json:"accepted"`
		Items    []struct {
			Fits  bool `json:"fits"`
			State struct {
				Level string `json:"level"`
			} `json:"state"`
		} `json:"items"`
	}
	checkFill := func(name, first string, items []ledger.Charge, idem ledger.Idempotency) {
		t.Helper()
		var want fillDoc
		if err := json.Unmarshal([]byte(first), &want); err != nil {
			t.Fatal(err)
		}
		got, err := s.Fillup(ctx, items, idem)
		if err != nil {
			t.Fatalf("%s replay: %v", name, err)
		}
		if !got.Replayed || got.Accepted != want.Accepted || len(got.Items) != len(want.Items) {
			t.Fatalf("%s replay: %+v, want %s", name, got, first)
		}
		for i, it := range got.Items {
			if !it.Snapshot.State.Level.Equal(ledger.Amount(dec(want.Items[i].State.Level))) {
				t.Errorf("%s replay item %d: %+v, want %s", name, i, it, first)
			}
		}
	}
	ref := func(l, k string) ledger.BucketRef { return ledger.BucketRef{Limit: l, Key: k} }
	checkFill("single", single, []ledger.Charge{{Bucket: ref("api", "a"), Cost: dec("30")}}, ledger.Idempotency{Scope: "fillup:api/a", Key: "k-single", Hash: "h-single"})
	checkFill("multi", multi, []ledger.Charge{{Bucket: ref("api", "b"), Cost: dec("5")}, {Bucket: ref("quiet", "b"), Cost: dec("2.5")}},
		ledger.Idempotency{Scope: "fillup", Key: "k-multi", Hash: "h-multi"})
	checkFill("batch", batchDoc, []ledger.Charge{{Bucket: ref("api", "c"), Cost: dec("7")}}, ledger.Idempotency{Scope: "fillup:api/c", Key: "k-batch", Hash: "h-batch"})
	if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref("api", "a"), Cost: dec("1")}}, ledger.Idempotency{Scope: "fillup:api/a", Key: "k-single", Hash: "other"}); !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
		t.Errorf("a reused key with another body after the upgrade: %v, want ErrIdempotencyKeyReused", err)
	}
	r, err := s.Reserve(ctx, ref("api", "a"), dec("20"), time.Hour, ledger.Idempotency{Scope: "reserve:api/a", Key: "k-res", Hash: "h-res"}, nil)
	if err != nil || !r.Replayed || r.Reservation.ID != "h-open" || !strings.Contains(res, `"h-open"`) {
		t.Errorf("reserve replay: %+v %v", r, err)
	}
	c, err := s.Commit(ctx, "h-commit", decimal.NewNullDecimal(dec("4")), false, ledger.Idempotency{Scope: "commit:h-commit", Key: "k-commit", Hash: "h-commit"}, nil)
	if err != nil || !c.Replayed || c.Reservation.State != ledger.Committed || !strings.Contains(commit, `"committed"`) {
		t.Errorf("commit replay: %+v %v", c, err)
	}
	d, err := s.Drain(ctx, ref("api", "a"), dec("3"), ledger.Idempotency{Scope: "drain:api/a", Key: "k-drain", Hash: "h-drain"}, nil)
	if err != nil || !d.Replayed || !d.Removed.Equal(dec("3")) || !strings.Contains(drain, `"removed": "3"`) {
		t.Errorf("drain replay: %+v %v (first %s)", d, err, drain)
	}

	// And the store goes on from the stored state: the new functions see
	// what the old ones wrote.
	snap, err := s.Inspect(ctx, ref("api", "a"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := s.Release(ctx, "h-open", ledger.Idempotency{}, nil)
	if err != nil || rel.Reservation.State != ledger.Released {
		t.Fatalf("release after the upgrade: %+v %v", rel, err)
	}
	f, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref("api", "a"), Cost: dec("1")}}, ledger.Idempotency{})
	if err != nil || !f.Accepted || !f.Items[0].Snapshot.State.Level.Equal(bucket.LevelAt(snap.Limit.Rule(), snap.State, snap.Now).Add(bucket.MustAmount("1"))) {
		t.Errorf("fillup after the upgrade: %+v %v (level before %s)", f, err, snap.State.Level)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestMigrateRefusesEditedFile: once a numbered file is applied, a database
// whose recorded checksum differs from the file is refused at start-up,
// naming the file; a changed function file is simply applied again.
func TestMigrateRefusesEditedFile(t *testing.T) {
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	if err := postgres.Migrate(ctx, url, postgres.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// A function file "changed": it is applied again and recorded.
	if _, err := conn.Exec(ctx, "UPDATE budgetd_functions SET checksum = 'old' WHERE name = 'budgetd_fillup.sql'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "DROP FUNCTION budgetd_fits(numeric, numeric, numeric, numeric)"); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url, postgres.WithSchema(schema)); err != nil {
		t.Fatalf("Migrate after a function change: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname = 'budgetd_fits' AND pronamespace = $1::regnamespace", schema).Scan(&n); err != nil || n != 1 {
		t.Fatalf("budgetd_fits re-created %d times (%v)", n, err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM budgetd_functions WHERE checksum = 'old'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d stale function checksums (%v)", n, err)
	}
	// An applied numbered file "edited".
	if _, err := conn.Exec(ctx, "UPDATE budgetd_migrations SET checksum = 'edited' WHERE version = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithPruneInterval(0))
	if err == nil || !strings.Contains(err.Error(), "0001_init.sql") || !strings.Contains(err.Error(), "must not be edited") {
		t.Fatalf("Open with an edited migration: %v, want a refusal naming 0001_init.sql", err)
	}
	// A migration this binary does not know.
	if _, err := conn.Exec(ctx, "UPDATE budgetd_migrations SET checksum = NULL WHERE version = 1; INSERT INTO budgetd_migrations (version, name, checksum) VALUES (99, '0099_future.sql', 'x')"); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url, postgres.WithSchema(schema)); err == nil || !strings.Contains(err.Error(), "0099_future.sql") {
		t.Fatalf("Migrate with an unknown migration: %v", err)
	}
}

// TestUpgradeThresholdFloor: 0020_threshold_floor.sql gives the limits that
// a database already holds their lowest amount and percentage threshold
// (NULL for none of a kind), as budgetd_put_limit keeps them from then on,
// and a decision on the upgraded limit compares against them: below the
// lowest nothing is emitted, reaching it crosses.
func TestUpgradeThresholdFloor(t *testing.T) {
	ctx := context.Background()
	url, schema := dsn(t), newSchema(t)
	clock := ledgertest.NewClock()
	openStore := func() *postgres.Store {
		s, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithPruneInterval(0), postgres.WithClock(clock.Now))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}
	s := openStore()
	ths := func(ss ...string) []ledger.Threshold {
		var out []ledger.Threshold
		for _, str := range ss {
			th, err := ledger.ParseThreshold("thresholds", str)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, th)
		}
		return out
	}
	for _, l := range []ledger.Limit{
		{Name: "mixed", Capacity: dec("10000"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: ths("80%", "4500", "12.5%", "900.50")},
		{Name: "pcts", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: ths("50%")},
		{Name: "none", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour},
	} {
		if _, err := s.PutLimit(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// The schema as it stood before 0020.
	conn := schemaConn(t, url, schema)
	for _, q := range []string{"ALTER TABLE limits DROP COLUMN th_min_amount, DROP COLUMN th_min_pct",
		"DELETE FROM budgetd_migrations WHERE version = 20"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s = openStore()
	defer s.Close()
	got := map[string]string{}
	rows, err := conn.Query(ctx, "SELECT name, coalesce(th_min_amount::text, '-'), coalesce(th_min_pct::text, '-') FROM limits")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, amt, pct string
		if err := rows.Scan(&name, &amt, &pct); err != nil {
			t.Fatal(err)
		}
		got[name] = amt + " " + pct
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"mixed": "900.5 12.5", "pcts": "- 50", "none": "- -"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after 0020: lowest amount and percentage %v, want %v", got, want)
	}
	ref := ledger.BucketRef{Limit: "mixed", Key: "k"}
	for _, c := range []struct{ cost, want string }{{"900.49", ""}, {"0.01", "crossed 900.5 used=900.5"}, {"349.5", "crossed 12.5% used=1250"}} {
		_, cursor := allEvents(t, s, "", 100)
		if out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec(c.cost)}}, ledger.Idempotency{}); err != nil || !out.Accepted {
			t.Fatalf("fillup %s: %+v %v", c.cost, out, err)
		}
		evs, _ := allEvents(t, s, cursor, 100)
		var texts []string
		for _, ev := range evs {
			texts = append(texts, fmt.Sprintf("%s %s used=%s", strings.TrimPrefix(ev.Type, "threshold."), ev.Threshold, ev.Used))
		}
		if strings.Join(texts, "; ") != c.want {
			t.Fatalf("fillup %s on the upgraded limit: events [%s], want [%s]", c.cost, strings.Join(texts, "; "), c.want)
		}
	}
}
