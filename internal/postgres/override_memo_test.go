package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// TestOverrideMemo: a decision remembers in the bucket's row the override
// that applied (migration 0019), and the next decision on the bucket skips
// the probe of the limit's overrides while none changed: on single calls and
// on the coalesced path, for an exact key, a prefix and a key without one.
// Every change of the overrides made by another instance (a second Store on
// the same database) is seen at the next decision, on a bucket that skipped
// the probe too; a temporary override is not remembered while it or any
// override of the limit has an expiry still to come, and applies up to the
// microsecond before its expiry and not from it.
func TestOverrideMemo(t *testing.T) {
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	clock := ledgertest.NewClock()
	opts := []postgres.Option{postgres.WithSchema(schema), postgres.WithPruneInterval(0), postgres.WithClock(clock.Now)}
	s1, err := postgres.Open(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := postgres.Open(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	one, other := ledger.NewService(s1), ledger.NewService(s2)
	conn := schemaConn(t, url, schema)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := one.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: 1000 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	put := func(svc *ledger.Service, pattern, capacity string, expires time.Time) {
		t.Helper()
		if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: pattern, Capacity: decimal.NewNullDecimal(dec(capacity)),
			ExpiresAt: expires}); err != nil {
			t.Fatalf("PutOverride(%s): %v", pattern, err)
		}
	}
	put(one, "t-1", "100", time.Time{})
	put(one, "t-*", "50", time.Time{})

	// decide charges key a tiny cost on one, and checks the capacity and
	// override the decision applied.
	decide := func(key, capacity, override string) {
		t.Helper()
		res, err := one.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: key}, Cost: dec("0.000001")}}, ledger.Idempotency{})
		if err != nil || !res.Accepted || res.Items[0].Capacity.String() != capacity || res.Limits[0].Override != override {
			t.Fatalf("%s: got %+v %v, want capacity %s under %q", key, res, err, capacity, override)
		}
	}
	// coalesced decides the keys as one coalesced batch of single-bucket
	// calls (budgetd_fillup with the limit read once for all buckets).
	coalesced := func(keys []string, capacities []string, overrides []string) {
		t.Helper()
		refs := make([]ledger.BucketRef, len(keys))
		costs := make([]decimal.Decimal, len(keys))
		for i, k := range keys {
			refs[i] = ledger.BucketRef{Limit: "api", Key: k}
			costs[i] = dec("0.000001")
		}
		outs, errs := s1.FillupCalls(ctx, refs, costs, make([]ledger.Idempotency, len(keys)))
		for i := range keys {
			if errs[i] != nil || !outs[i].Accepted || outs[i].Items[0].Snapshot.Limit.Capacity.String() != capacities[i] ||
				outs[i].Items[0].Snapshot.Limit.Override != overrides[i] {
				t.Fatalf("%s coalesced: %+v %v, want capacity %s under %q", keys[i], outs[i], errs[i], capacities[i], overrides[i])
			}
		}
	}
	remembered := func(key string) (ver *int64, pattern *string) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT ov_ver, ov_pattern FROM buckets b JOIN limits l ON l.id = b.limit_id WHERE l.name = 'api' AND b.key = $1",
			key).Scan(&ver, &pattern); err != nil {
			t.Fatal(err)
		}
		return ver, pattern
	}

	keys := []string{"t-1", "t-2", "u"}
	decide("t-1", "100", "t-1")
	decide("t-2", "50", "t-*")
	decide("u", "10", "")
	coalesced(keys, []string{"100", "50", "10"}, []string{"t-1", "t-*", ""})
	for i, k := range keys {
		ver, pattern := remembered(k)
		want := []string{"t-1", "t-*", ""}[i]
		if ver == nil || (pattern == nil) != (want == "") || (pattern != nil && *pattern != want) {
			t.Fatalf("%s remembers %v %v, want %q", k, ver, pattern, want)
		}
	}

	// The next decisions skip the probe: a change of an override's row
	// behind budgetd's back (no budgetd_put_override, so no new
	// limits.override_ver) is not seen by them.
	exec("UPDATE overrides SET capacity = 99 WHERE pattern = 't-1'")
	decide("t-1", "100", "t-1")
	coalesced([]string{"t-1"}, []string{"100"}, []string{"t-1"})
	exec("UPDATE overrides SET capacity = 100 WHERE pattern = 't-1'")

	// Every change through the other instance is seen at the next decision,
	// on buckets that skipped the probe: a new capacity, a delete uncovering
	// the prefix, a new override for a key that had none, a longer prefix.
	put(other, "t-1", "7", time.Time{})
	decide("t-1", "7", "t-1")
	if err := other.DeleteOverride(ctx, "api", "t-1"); err != nil {
		t.Fatal(err)
	}
	coalesced([]string{"t-1", "u"}, []string{"50", "10"}, []string{"t-*", ""})
	put(other, "u", "20", time.Time{})
	decide("u", "20", "u")
	put(other, "t-2*", "30", time.Time{})
	coalesced([]string{"t-2", "t-1"}, []string{"30", "50"}, []string{"t-2*", "t-*"})
	decide("t-2", "30", "t-2*")

	// A temporary raise of t-2, put by the other instance: nothing is
	// remembered while an expiry is to come (the bucket probes at every
	// decision), the raise applies up to the microsecond before its end
	// and not from it, and then the memo resumes.
	end := clock.Now().Add(time.Hour)
	put(other, "t-2", "1000", end)
	decide("t-2", "1000", "t-2")
	decide("u", "20", "u")
	for _, k := range []string{"t-2", "u"} {
		if ver, _ := remembered(k); ver != nil {
			t.Fatalf("%s remembers version %d while an override's expiry is to come", k, *ver)
		}
	}
	clock.Set(end.Add(-time.Microsecond))
	coalesced([]string{"t-2", "u"}, []string{"1000", "20"}, []string{"t-2", "u"})
	clock.Set(end)
	decide("t-2", "30", "t-2*")
	coalesced([]string{"t-2", "t-1"}, []string{"30", "50"}, []string{"t-2*", "t-*"})
	if ver, pattern := remembered("t-2"); ver == nil || pattern == nil || *pattern != "t-2*" {
		t.Fatalf("t-2 remembers %v %v after the expiry, want t-2*", ver, pattern)
	}

	// A clock stepped back before that expiry: the raise applies again,
	// though the bucket's row remembers t-2* from a later instant.
	clock.Set(end.Add(-time.Second))
	decide("t-2", "1000", "t-2")
}

// TestUpgradeOverrideMemo: migration 0019 on a database whose limits have
// overrides and whose buckets were written before it: the limits with
// overrides start counting at 1, the buckets remember nothing, and the
// first decision after the upgrade probes, applies the right override and
// remembers it; a later change of the overrides is seen.
func TestUpgradeOverrideMemo(t *testing.T) {
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	clock := ledgertest.NewClock()
	openAt := func() (*postgres.Store, *ledger.Service) {
		t.Helper()
		s, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithPruneInterval(0), postgres.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		return s, ledger.NewService(s)
	}
	s, svc := openAt()
	for _, name := range []string{"api", "plain"} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: "t-*", Capacity: decimal.NewNullDecimal(dec("50"))}); err != nil {
		t.Fatal(err)
	}
	fill := func(svc *ledger.Service, key, capacity, override string) {
		t.Helper()
		res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: key}, Cost: dec("1")}}, ledger.Idempotency{})
		if err != nil || !res.Accepted || res.Items[0].Capacity.String() != capacity || res.Limits[0].Override != override {
			t.Fatalf("%s: %+v %v, want capacity %s under %q", key, res, err, capacity, override)
		}
	}
	fill(svc, "t-1", "50", "t-*")
	s.Close()

	// The schema as before 0019.
	conn := schemaConn(t, url, schema)
	for _, sql := range []string{
		"ALTER TABLE limits DROP COLUMN override_ver",
		"ALTER TABLE buckets DROP COLUMN ov_ver, DROP COLUMN ov_pattern, DROP COLUMN ov_capacity",
		"DELETE FROM budgetd_migrations WHERE version = 19",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	s, svc = openAt()
	defer s.Close()
	version := func(limit string) *int64 {
		t.Helper()
		var v *int64
		if err := conn.QueryRow(ctx, "SELECT override_ver FROM limits WHERE name = $1", limit).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	remembered := func(key string) (ver *int64, pattern *string) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT ov_ver, ov_pattern FROM buckets b JOIN limits l ON l.id = b.limit_id WHERE l.name = 'api' AND b.key = $1",
			key).Scan(&ver, &pattern); err != nil {
			t.Fatal(err)
		}
		return ver, pattern
	}
	if v := version("api"); v == nil || *v != 1 {
		t.Fatalf("api's override_ver after 0019: %v, want 1", v)
	}
	if v := version("plain"); v != nil {
		t.Fatalf("plain's override_ver after 0019: %d, want NULL", *v)
	}
	if ver, pattern := remembered("t-1"); ver != nil || pattern != nil {
		t.Fatalf("t-1 remembers %v %v right after 0019", ver, pattern)
	}
	fill(svc, "t-1", "50", "t-*")
	if ver, pattern := remembered("t-1"); ver == nil || *ver != 1 || pattern == nil || *pattern != "t-*" {
		t.Fatalf("t-1 remembers %v %v, want version 1 and t-*", ver, pattern)
	}
	if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: "t-1", Capacity: decimal.NewNullDecimal(dec("70"))}); err != nil {
		t.Fatal(err)
	}
	fill(svc, "t-1", "70", "t-1")
}
