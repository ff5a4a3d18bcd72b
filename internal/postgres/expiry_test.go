package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// expiryEnv is a store with its clock pinned at t0 and a limit "l" of 100
// leaking 10/h, and helpers that fail the test on an error.
type expiryEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *ledgertest.Clock
	t0    time.Time
	s     *postgres.Store
	svc   *ledger.Service
	count func(string) int
}

func newExpiryEnv(t *testing.T) *expiryEnv {
	clock := ledgertest.NewClock()
	s, count := openCounting(t, clock)
	e := &expiryEnv{t: t, ctx: context.Background(), clock: clock, t0: clock.Now(), s: s, svc: ledger.NewService(s), count: count}
	e.putLimit("10")
	return e
}

func (e *expiryEnv) putLimit(leak string) {
	e.t.Helper()
	if _, err := e.svc.PutLimit(e.ctx, "l", ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec(leak), LeakPer: time.Hour}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *expiryEnv) override(pattern, leak string, expires time.Duration) {
	e.t.Helper()
	o := ledger.Override{Pattern: pattern, LeakAmount: dec(leak), LeakPer: time.Hour}
	if expires > 0 {
		o.ExpiresAt = e.t0.Add(expires)
	}
	if _, err := e.svc.PutOverride(e.ctx, "l", o); err != nil {
		e.t.Fatalf("PutOverride %s: %v", pattern, err)
	}
}

func (e *expiryEnv) at(d time.Duration) { e.clock.Set(e.t0.Add(d)) }

func (e *expiryEnv) fillup(key, cost string) {
	e.t.Helper()
	res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: key}, Cost: dec(cost)}}, ledger.Idempotency{})
	if err != nil || !res.Accepted {
		e.t.Fatalf("Fillup %s %s: %+v %v", key, cost, res, err)
	}
}

func (e *expiryEnv) level(key string) decimal.Decimal {
	e.t.Helper()
	st, err := e.svc.Bucket(e.ctx, ledger.BucketRef{Limit: "l", Key: key})
	if err != nil {
		e.t.Fatal(err)
	}
	return amount(st.Level)
}

func (e *expiryEnv) wantLevel(what, key, want string) {
	e.t.Helper()
	if got := e.level(key); !got.Equal(dec(want)) {
		e.t.Errorf("%s: level %s, want %s", what, got, want)
	}
}

// TestOverrideExpiryChangesOfTerms: a PUT or DELETE of an override, and a
// PUT of the limit that changes its rule, settle a bucket whose override
// expired before them at its expires_at first, then at the change; under
// the terms as they were at the change alone the time before the expiry
// would count at the limit's rate.
func TestOverrideExpiryChangesOfTerms(t *testing.T) {
	t.Run("PutReplacesExpired", func(t *testing.T) {
		e := newExpiryEnv(t)
		e.override("k", "1", 2*time.Hour)
		e.fillup("k", "50")
		// 3h: 2h at 1/h, 1h at 10/h: 38; the expired pattern put again at
		// 5/h (no expiry) replaces the row that told when the slow leak ran.
		e.at(3 * time.Hour)
		e.override("k", "5", 0)
		e.at(4 * time.Hour)
		e.wantLevel("1h at the new 5/h after the settled 38", "k", "33")
	})
	t.Run("PutSameRuleAsTheLimit", func(t *testing.T) {
		e := newExpiryEnv(t)
		e.override("k*", "1", 2*time.Hour)
		e.fillup("k", "50")
		// An exact override with the limit's own 10/h changes no rule at the
		// PUT, but resolves before the expired prefix would at any instant.
		e.at(3 * time.Hour)
		e.override("k", "10", 0)
		e.at(4 * time.Hour)
		e.wantLevel("2h at 1/h, 2h at 10/h", "k", "28")
	})
	t.Run("DeleteAfterAnExpiry", func(t *testing.T) {
		e := newExpiryEnv(t)
		e.override("k", "2", time.Hour)
		e.override("k*", "1", 0)
		e.fillup("k", "50")
		// 2h: 1h at 2/h, 1h at 1/h (the prefix): 47; the prefix deleted,
		// then 10/h.
		e.at(2 * time.Hour)
		if err := e.svc.DeleteOverride(e.ctx, "l", "k*"); err != nil {
			t.Fatal(err)
		}
		e.at(3 * time.Hour)
		e.wantLevel("47 at the DELETE, 1h at 10/h", "k", "37")
	})
	t.Run("PutLimit", func(t *testing.T) {
		e := newExpiryEnv(t)
		e.override("k", "1", 2*time.Hour)
		e.fillup("k", "50")
		// 3h: 38 as above; the limit's new 20/h applies from then on.
		e.at(3 * time.Hour)
		e.putLimit("20")
		e.at(4 * time.Hour)
		e.wantLevel("38 at the PUT, 1h at 20/h", "k", "18")
	})
}

// TestOverrideExpiryListPruneAndWrites: the listing of buckets shows a
// bucket settled at its override's expiry, and so do Drain, Reserve and a
// multi-bucket Fillup; the pruner judges a bucket settled there (under the
// limit's rule alone it would look empty) and writes the settled state; a
// limit whose overrides change no rule does not look at expiries at all.
func TestOverrideExpiryListPruneAndWrites(t *testing.T) {
	e := newExpiryEnv(t)
	for _, k := range []string{"a", "b", "c", "d"} {
		e.override(k, "1", 2*time.Hour)
		e.fillup(k, "50")
	}
	// 5h: 2h at 1/h, 3h at 10/h: 18 (the limit's rule alone: 0).
	e.at(5 * time.Hour)
	list, _, err := e.svc.ListBuckets(e.ctx, "l", "", 10)
	if err != nil || len(list) != 4 {
		t.Fatalf("listing: %+v %v", list, err)
	}
	for _, b := range list {
		if !amount(b.Level).Equal(dec("18")) || b.Override != "" {
			t.Errorf("listed %s: level %s override %q, want 18 and none", b.Key, amount(b.Level), b.Override)
		}
	}
	if n := e.count("SELECT count(*) FROM buckets WHERE level = 50"); n != 4 {
		t.Errorf("a read wrote: %d buckets still at their stored 50, want 4", n)
	}
	st, err := e.s.Prune(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 0 || e.count("SELECT count(*) FROM buckets") != 4 {
		t.Errorf("prune at 5h %+v: want every bucket kept", st)
	}
	if n := e.count("SELECT count(*) FROM buckets WHERE level = 48 AND updated_at = '" + e.t0.Add(2*time.Hour).Format(time.RFC3339Nano) + "'"); n != 4 {
		t.Errorf("%d buckets settled at the expiry by the pruner, want 4", n)
	}

	a, b, c := ledger.BucketRef{Limit: "l", Key: "a"}, ledger.BucketRef{Limit: "l", Key: "b"}, ledger.BucketRef{Limit: "l", Key: "c"}
	if d, err := e.svc.Drain(e.ctx, a, dec("8"), ledger.Idempotency{}, nil); err != nil || !d.Removed.Equal(dec("8")) {
		t.Errorf("Drain of 8 from 18: %+v %v", d, err)
	}
	if r, err := e.svc.Reserve(e.ctx, b, dec("83"), time.Minute, ledger.Idempotency{}, nil); err != nil || r.Decision.Accepted {
		t.Errorf("Reserve of 83 over 18: %+v %v", r, err)
	}
	res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: c, Cost: dec("82")}, {Bucket: a, Cost: dec("1")}}, ledger.Idempotency{})
	if err != nil || !res.Accepted || !amount(res.Items[0].Level).Equal(dec("100")) || !amount(res.Items[1].Level).Equal(dec("11")) {
		t.Errorf("multi-bucket Fillup of 82 over 18 and 1 over 10: %+v %v", res, err)
	}
	e.wantLevel("d, untouched", "d", "18")

	// Past 6.8h the settled level is 0 too: the buckets go.
	e.at(7 * time.Hour)
	if st, err := e.s.Prune(e.ctx); err != nil || e.count("SELECT count(*) FROM buckets WHERE key IN ('b', 'd')") != 0 {
		t.Errorf("prune at 7h %+v %v: want the empty b and d deleted", st, err)
	}

	// A limit whose overrides set capacities only never looks.
	if _, err := e.svc.PutLimit(e.ctx, "cap", ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("10"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.PutOverride(e.ctx, "cap", ledger.Override{Pattern: "k", Capacity: decimal.NewNullDecimal(dec("200")), ExpiresAt: e.t0.Add(8 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := e.count("SELECT count(*) FROM limits WHERE name = 'cap' AND NOT override_rules"); n != 1 {
		t.Errorf("a capacity override marked the limit as changing rules")
	}
	if n := e.count("SELECT count(*) FROM limits WHERE name = 'l' AND override_rules AND override_expiry = '" + e.t0.Add(2*time.Hour).Format(time.RFC3339Nano) + "'"); n != 1 {
		t.Errorf("limit l: override_rules and override_expiry not kept")
	}
}

// amount is a bucket.Amount as a decimal.
func amount(a fmt.Stringer) decimal.Decimal { return decimal.RequireFromString(a.String()) }

// TestUpgradeOverrideExpiry: a database whose limits have overrides from
// before migration 0018 gets limits.override_rules and override_expiry from
// the overrides it has, so that a bucket written before the upgrade is
// settled at its override's expiry after it.
func TestUpgradeOverrideExpiry(t *testing.T) {
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	clock := ledgertest.NewClock()
	t0 := clock.Now()
	openAt := func() (*postgres.Store, *ledger.Service) {
		s, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithPruneInterval(0), postgres.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		return s, ledger.NewService(s)
	}
	s, svc := openAt()
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("10"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plain", "caps"} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("10"), LeakPer: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	overrides := []struct {
		limit string
		o     ledger.Override
	}{
		{"l", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(2 * time.Hour)}},
		{"l", ledger.Override{Pattern: "c", Capacity: decimal.NewNullDecimal(dec("200")), ExpiresAt: t0.Add(5 * time.Hour)}},
		{"caps", ledger.Override{Pattern: "c", Capacity: decimal.NewNullDecimal(dec("200")), ExpiresAt: t0.Add(5 * time.Hour)}},
	}
	for _, o := range overrides {
		if _, err := svc.PutOverride(ctx, o.limit, o.o); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: "k"}, Cost: dec("50")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
		t.Fatalf("Fillup: %+v %v", res, err)
	}
	s.Close()

	// The schema as before 0018: without the columns, 0018 not applied.
	conn := schemaConn(t, url, schema)
	for _, sql := range []string{
		"ALTER TABLE limits DROP COLUMN override_rules, DROP COLUMN override_expiry",
		"DELETE FROM budgetd_migrations WHERE version = 18",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	clock.Set(t0.Add(3 * time.Hour))
	s, svc = openAt()
	defer s.Close()
	rows, err := conn.Query(ctx, "SELECT name, override_rules, override_expiry FROM limits ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var name string
		var rules bool
		var exp *time.Time
		if err := rows.Scan(&name, &rules, &exp); err != nil {
			t.Fatal(err)
		}
		got[name] = fmt.Sprint(rules, " ", exp != nil && exp.Equal(t0.Add(5*time.Hour)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"l": "true true", "caps": "false true", "plain": "false false"}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("limit %s after 0018: override_rules, override_expiry = 5h: %q, want %q", name, got[name], w)
		}
	}
	st, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "l", Key: "k"})
	if err != nil || !amount(st.Level).Equal(dec("38")) {
		t.Errorf("bucket after the upgrade: %+v %v, want level 38 (2h at 1/h, 1h at 10/h)", st, err)
	}
}

// TestOverrideExpiryConcurrentFillups: Fillups from many goroutines (so
// coalesced and not) on a bucket that crossed its override's expiry settle
// it once: every decision builds on the settled level, at both isolation
// levels.
func TestOverrideExpiryConcurrentFillups(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			t0 := clock.Now()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxAttempts(100))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("10"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(2 * time.Hour)}); err != nil {
				t.Fatal(err)
			}
			r := ledger.BucketRef{Limit: "l", Key: "k"}
			if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("50")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
				t.Fatalf("Fillup: %+v %v", res, err)
			}
			// 3h: settled 38 (the limit's rule alone: 20); 62 fit, 20 × 3 of them.
			clock.Set(t0.Add(3 * time.Hour))
			const n = 20
			levels := make(chan decimal.Decimal, n)
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("3")}}, ledger.Idempotency{})
					if err != nil || !res.Accepted {
						t.Errorf("Fillup: %+v %v", res, err)
						return
					}
					levels <- amount(res.Items[0].Level)
				}()
			}
			wg.Wait()
			close(levels)
			seen := map[string]bool{}
			for l := range levels {
				seen[l.String()] = true
			}
			for i := 1; i <= n; i++ {
				if w := dec("38").Add(decimal.NewFromInt(int64(3 * i))); !seen[w.String()] {
					t.Errorf("no decision left the level at %s (38 + 3 × %d); levels: %v", w, i, seen)
				}
			}
			if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("3")}}, ledger.Idempotency{}); err != nil || res.Accepted {
				t.Errorf("Fillup past the settled capacity (98 + 3): %+v %v", res, err)
			}
		})
	}
}
