package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// testCounts holds ledger.Counter to its contract: a limit's buckets are
// those its full listing shows (a hold-only bucket and one whose holds
// all ended included, another limit's not, a deleted limit's not under a
// re-created one), its active holds those ListHolds lists (not expired,
// committed or released), at the store's clock; counting writes nothing.
func testCounts(t *testing.T, e *env) {
	c, ok := ledger.CounterOf(e.store)
	if !ok {
		t.Fatalf("%T is not a ledger.Counter", e.store)
	}
	e.limit("count", "100", "1", time.Hour, true)
	e.limit("count.other", "100", "1", time.Hour, true)
	for _, k := range []string{"a", "b", "c"} {
		e.fillup(ref("count", k), "1")
	}
	for _, k := range []string{"a", "x", "y"} { // another limit: never counted
		e.fillup(ref("count.other", k), "1")
	}
	e.reserve(ref("count.other", "x"), "1", time.Minute)
	e.reserve(ref("count", "a"), "1", time.Minute)
	e.reserve(ref("count", "a"), "2", time.Minute)
	e.reserve(ref("count", "d"), "3", 10*time.Second) // a hold-only bucket
	committed := e.reserve(ref("count", "b"), "1", time.Minute).Reservation.ID
	released := e.reserve(ref("count", "c"), "1", time.Minute).Reservation.ID
	if _, err := e.svc.Commit(e.ctx, committed, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Release(e.ctx, released, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	e.expectCounts(t, c, "count", 4, 3)
	e.expectCounts(t, c, "count.other", 3, 1)

	// The hold of d expires: d stays a bucket, its hold is no longer
	// counted, and counting records nothing (ListHolds still agrees).
	e.clock.Advance(11 * time.Second)
	e.expectCounts(t, c, "count", 4, 2)
	e.expectCounts(t, c, "count", 4, 2)

	// A hold expires exactly at its ExpiresAt: at that instant it is not
	// active.
	e.reserve(ref("count", "e"), "1", time.Second)
	e.expectCounts(t, c, "count", 5, 3)
	e.clock.Advance(time.Second)
	e.expectCounts(t, c, "count", 5, 2)

	// The service answers the store's counts; a name that cannot exist
	// and an unknown limit are not found.
	got, err := e.svc.Counts(e.ctx, "count")
	if err != nil || got.Buckets != 5 || got.ActiveHolds != 2 || !got.At.Equal(e.clock.Now()) {
		t.Errorf("Service.Counts = %+v, %v; want 5 buckets, 2 holds at %v", got, err, e.clock.Now())
	}
	for _, name := range []string{"nope", "Not A Name"} {
		if _, err := e.svc.Counts(e.ctx, name); !errors.Is(err, ledger.ErrLimitNotFound) {
			t.Errorf("Counts(%q) = %v, want ErrLimitNotFound", name, err)
		}
	}

	// A deleted limit's buckets and holds are gone, also under a
	// re-created limit of the same name.
	if err := e.svc.DeleteLimit(e.ctx, "count"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CountBuckets(e.ctx, "count"); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("CountBuckets(deleted) = %v, want ErrLimitNotFound", err)
	}
	e.limit("count", "100", "1", time.Hour, true)
	e.expectCounts(t, c, "count", 0, 0)
	e.expectCounts(t, c, "count.other", 3, 1)
}

// expectCounts checks the limit's counts against buckets and holds, and
// against what a full listing and ListHolds show at the same clock.
func (e *env) expectCounts(t *testing.T, c ledger.Counter, limit string, buckets, holds int64) {
	t.Helper()
	got, err := c.CountBuckets(e.ctx, limit)
	if err != nil {
		t.Fatalf("CountBuckets(%s): %v", limit, err)
	}
	if got.Buckets != buckets || got.ActiveHolds != holds {
		t.Errorf("CountBuckets(%s) = %d buckets, %d active holds; want %d, %d", limit, got.Buckets, got.ActiveHolds, buckets, holds)
	}
	if !got.At.Equal(e.clock.Now()) {
		t.Errorf("CountBuckets(%s) at %v, store clock %v", limit, got.At, e.clock.Now())
	}
	listed, err := e.store.ListBuckets(e.ctx, limit, "", ledger.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	var held int64
	for _, b := range listed {
		hs, err := e.store.ListHolds(e.ctx, ref(limit, b.Key))
		if err != nil {
			t.Fatal(err)
		}
		held += int64(len(hs))
	}
	if int64(len(listed)) != got.Buckets || held != got.ActiveHolds {
		t.Errorf("CountBuckets(%s) = %d buckets, %d active holds; the listing shows %d, %d", limit, got.Buckets, got.ActiveHolds, len(listed), held)
	}
}
