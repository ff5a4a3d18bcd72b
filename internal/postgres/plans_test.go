package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/postgres"
)

// openIn makes a fresh schema with the store's tables and functions in it
// (a store opened and closed on it) and returns its name.
func openIn(t *testing.T) string {
	t.Helper()
	schema := newSchema(t)
	s, err := postgres.Open(context.Background(), dsn(t), postgres.WithSchema(schema), postgres.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return schema
}

// explain returns the lines of the plan that q, an EXPLAIN, returns.
func explain(t *testing.T, conn *pgx.Conn, q string, args ...any) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// TestHelpersInlined: the SQL helpers every decision calls are inlined into
// the statement that calls them, as their callers pass them their
// arguments, so that they are planned with it once per session rather than
// parsed and planned again in every transaction (docs/postgres.md, "Server
// time per call"). budgetd_level_at is given budgetd_period_start(…), a
// call, as every caller does: the planner does not inline a function that
// reads such an argument twice.
func TestHelpersInlined(t *testing.T) {
	schema := openIn(t)
	conn := schemaConn(t, dsn(t), schema)
	for _, tc := range []struct{ helper, sql string }{
		{"budgetd_level_at", `SELECT budgetd_level_at(b.level, b.updated_at, l.leak_amount, l.leak_per_us, now(),
		                             budgetd_period_start(l, now()), l.window_length_us, l.window_precision_us, b.slot_idx, b.slot_sum)
		                        FROM limits l JOIN buckets b ON b.limit_id = l.id`},
		{"budgetd_from_us", `SELECT budgetd_from_us(b.carry_period) FROM buckets b`},
		{"budgetd_slots_json", `SELECT budgetd_slots_json(b.slot_idx, b.slot_sum) FROM buckets b`},
	} {
		if plan := explain(t, conn, "EXPLAIN (VERBOSE, COSTS OFF) "+tc.sql); strings.Contains(plan, tc.helper+"(") {
			t.Errorf("%s is not inlined:\n%s", tc.helper, plan)
		}
	}
}

// TestFillupAllPlansOutliveAnEmptyTable: budgetd_fillup_all keeps its
// generic plans for the session (plan_cache_mode = force_generic_plan), so a
// session that first ran it on an empty table must still reach a bucket by
// its key once the table is large and not yet analysed: no statement of the
// call scans the buckets table.
func TestFillupAllPlansOutliveAnEmptyTable(t *testing.T) {
	ctx := context.Background()
	schema := openIn(t)
	s, err := postgres.Open(ctx, dsn(t), postgres.WithSchema(schema), postgres.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	svc := ledger.NewService(s)
	for _, name := range []string{"a", "b"} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: ledger.MaxPer}); err != nil {
			t.Fatal(err)
		}
	}
	conn := schemaConn(t, dsn(t), schema)
	if _, err := conn.Exec(ctx, "ALTER TABLE buckets SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	const call = `SELECT budgetd_fillup_all(ARRAY['a', 'b'], ARRAY[$1::text, $1::text], ARRAY['1', '1'], NULL, NULL, NULL, NULL, NULL,
	                  (SELECT array_agg(ROW(l.id, budgetd_us(l.updated_at), coalesce(l.override_ver, 0), NULL, NULL, NULL, NULL, NULL,
	                                        NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1)::budgetd_terms_arg::text ORDER BY l.name)
	                     FROM limits l WHERE l.name IN ('a', 'b')))`
	// This session's plans, made while the table is empty.
	for _, key := range []string{"first", "second"} {
		var doc string
		if err := conn.QueryRow(ctx, call, key).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(doc, `"accepted": true`) {
			t.Fatalf("call on %s: %s", key, doc)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO buckets (limit_id, key, level, updated_at)
	                               SELECT l.id, 'k' || i, 1, now() FROM limits l, generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for i := 0; i < 7; i++ { // past the plan cache's first five custom plans
		var doc string
		if err := tx.QueryRow(ctx, call, "k42").Scan(&doc); err != nil {
			t.Fatal(err)
		}
	}
	var scans int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables
	                             WHERE schemaname = $1 AND relname = 'buckets'`, schema).Scan(&scans); err != nil {
		t.Fatal(err)
	}
	if scans != 0 {
		t.Errorf("7 two-bucket calls scanned the buckets table %d times", scans)
	}
}

// TestSetBatchPlans: the set-based batch's lock and UPDATE look their rows up
// by the primary key whatever the statistics say. On a new table, never
// analyzed, the plan that a prepared statement keeps (the generic plan)
// scanned the whole table for each, and kept doing so as the table grew,
// until autovacuum's first ANALYZE: setPlanSQL, run first in the batch's
// transaction, rules that out.
func TestSetBatchPlans(t *testing.T) {
	ctx := context.Background()
	conn := schemaConn(t, dsn(t), openIn(t))
	for _, q := range []string{"SET plan_cache_mode = force_generic_plan", "BEGIN", postgres.SetPlanSQL,
		"PREPARE lock AS " + postgres.SetLockSQL, "PREPARE upd AS " + postgres.SetUpdateSQL} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer conn.Exec(ctx, "ROLLBACK")
	for _, q := range []string{"EXPLAIN EXECUTE lock('{1,1}', '{a,b}')",
		"EXPLAIN EXECUTE upd('{1}', '{a}', '{1}', '{0}', '{0}', '{0}', '{0}', '{NULL}', '{NULL}')"} {
		if p := explain(t, conn, q); strings.Contains(p, "Seq Scan on buckets") || !strings.Contains(p, "Index Scan using buckets_pkey") {
			t.Errorf("%s: not a lookup by the primary key:\n%s", q, p)
		}
	}
}

// TestSetBatchGenericPlans: the set-based batch runs its statements on the
// plans their prepared statements keep. Left to choose (plan_cache_mode
// auto), PostgreSQL planned the UPDATE afresh at every execution, and the
// planning cost more than the execution; setPlanSQL rules that out. The
// store has one connection, so every batch's statements are prepared on the
// one whose pg_prepared_statements the test reads.
func TestSetBatchGenericPlans(t *testing.T) {
	ctx := context.Background()
	s := open(t, postgres.WithMaxConns(1), postgres.WithSetBatch(true))
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "g", Capacity: dec("1000"), LeakAmount: dec("1"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var refs []ledger.BucketRef
	var costs []decimal.Decimal
	for _, k := range []string{"a", "b", "c", "d"} {
		refs = append(refs, ledger.BucketRef{Limit: "g", Key: k})
		costs = append(costs, dec("1"))
	}
	const rounds = 8 // the first inserts the rows, the others update them
	for round := range rounds {
		outs, errs := s.FillupCalls(ctx, refs, costs, make([]ledger.Idempotency, len(refs)))
		for i := range outs {
			if errs[i] != nil || !outs[i].Accepted {
				t.Fatalf("round %d, item %d: %+v %v", round, i, outs[i], errs[i])
			}
		}
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, st := range []struct {
		name, sql string
		runs      int64
	}{
		{"lock", postgres.SetLockSQL, rounds},
		{"read", postgres.SetReadSQL, rounds},
		{"insert", postgres.SetInsertSQL, 1},
		{"update", postgres.SetUpdateSQL, rounds - 1},
	} {
		var generic, custom int64
		err := conn.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
			st.sql).Scan(&generic, &custom)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if generic+custom != st.runs || custom != 0 {
			t.Errorf("%s: %d generic and %d custom plans in %d runs, want %d generic", st.name, generic, custom, st.runs, st.runs)
		}
	}
}
