package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
	"golang.org/x/sync/errgroup"
)

// testListing covers ListBuckets and ListHolds: byte order of keys (with
// '/', non-ASCII, hash-tag braces and markup in them), pagination, isolation
// between limits, deleted and re-created limits, levels at the store's clock,
// and that listing writes nothing.
func testListing(t *testing.T, e *env) {
	t.Run("Buckets", func(t *testing.T) { testListBuckets(t, e) })
	t.Run("Pages", func(t *testing.T) { testListPages(t, e) })
	t.Run("DeletedLimit", func(t *testing.T) { testListDeleted(t, e) })
	t.Run("Holds", func(t *testing.T) { testListHolds(t, e) })
	t.Run("NotFound", func(t *testing.T) {
		if _, err := e.store.ListBuckets(e.ctx, "nope", "", 10); !errors.Is(err, ledger.ErrLimitNotFound) {
			t.Errorf("ListBuckets(unknown limit) = %v, want ErrLimitNotFound", err)
		}
		if _, err := e.store.ListHolds(e.ctx, ref("nope", "k")); !errors.Is(err, ledger.ErrLimitNotFound) {
			t.Errorf("ListHolds(unknown limit) = %v, want ErrLimitNotFound", err)
		}
		if _, _, err := e.svc.ListBuckets(e.ctx, "ok", "%%%", 10); invalidField(err) != "cursor" {
			t.Errorf("ListBuckets(bad cursor) = %v, want invalid cursor", err)
		}
		if _, _, err := e.svc.ListBuckets(e.ctx, "ok", "", 0); invalidField(err) != "limit" {
			t.Errorf("ListBuckets(n=0) = %v, want invalid limit", err)
		}
	})
}

func invalidField(err error) string {
	var ie *ledger.InvalidError
	if errors.As(err, &ie) {
		return ie.Field
	}
	return ""
}

// listKeys are keys whose byte order differs from a naive or
// locale-aware order: upper case before lower, '/' and '{' among letters,
// multi-byte UTF-8 after ASCII, a prefix before its extensions.
var listKeys = []string{
	"b", "a", "a/b", "a/", "A", "Z", "é", "e", "日本", "{t}x", "{t}", "<script>alert(1)</script>",
	"ab", "a b", "z", "~", "😀", "ä", "ZZ", "0", "9/9",
}

func byteSorted(keys []string) []string {
	s := slices.Clone(keys)
	sort.Strings(s) // Go compares strings byte by byte
	return s
}

func bucketKeys(bs []ledger.BucketSnapshot) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Key
	}
	return out
}

func testListBuckets(t *testing.T, e *env) {
	e.limit("list", "100", "1", time.Second, true)
	e.limit("list.other", "100", "1", time.Second, true)
	for i, k := range listKeys {
		e.fillup(ref("list", k), decimal.NewFromInt(int64(i+10)).String())
	}
	e.fillup(ref("list.other", "a"), "1") // another limit: never listed
	e.reserve(ref("list", "held only"), "5", time.Minute)
	e.clock.Advance(3 * time.Second)

	want := byteSorted(append(slices.Clone(listKeys), "held only"))
	got, err := e.store.ListBuckets(e.ctx, "list", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bucketKeys(got), want) {
		t.Fatalf("keys = %q,\nwant %q", bucketKeys(got), want)
	}
	for _, b := range got {
		// The listing's numbers are the bucket's as Bucket reports it at the
		// same instant: leaked by 3 s at 1/s, holds counted.
		st := ledger.StateOf(b.Snapshot)
		one := e.state(ref("list", b.Key))
		if !st.Level.Equal(one.Level) || !st.Held.Equal(one.Held) || !st.Remaining.Equal(one.Remaining) ||
			!st.Capacity.Equal(one.Capacity) || !st.UpdatedAt.Equal(one.UpdatedAt) {
			t.Errorf("%q listed as %+v, Bucket says %+v", b.Key, st, one)
		}
		if !b.Now.Equal(e.clock.Now()) {
			t.Errorf("%q listed at %v, store clock %v", b.Key, b.Now, e.clock.Now())
		}
		if b.Limit.Name != "list" {
			t.Errorf("%q listed with limit %q", b.Key, b.Limit.Name)
		}
	}
	i := slices.Index(want, "a/b")
	eq(t, "level of a/b after 3s", ledger.StateOf(got[i].Snapshot).Level, decimal.NewFromInt(int64(slices.Index(listKeys, "a/b")+10-3)).String())
	h := slices.Index(want, "held only")
	eq(t, "held of a hold-only bucket", ledger.StateOf(got[h].Snapshot).Held, "5")

	// Resuming after a key that is not stored starts at the next one.
	got, err = e.store.ListBuckets(e.ctx, "list", "a/a", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bucketKeys(got), []string{"a/b", "ab"}) {
		t.Errorf("after a/a = %q, want [a/b ab]", bucketKeys(got))
	}
	// Past the last key: an empty page.
	if got, err = e.store.ListBuckets(e.ctx, "list", want[len(want)-1], 10); err != nil || len(got) != 0 {
		t.Errorf("after the last key = %q, %v", bucketKeys(got), err)
	}

	// Listing writes nothing: the state and history read the same after.
	before := e.state(ref("list", "a"))
	hist, _, _ := e.svc.History(e.ctx, ref("list", "a"), "", 100)
	e.clock.Advance(time.Second)
	if _, err := e.store.ListBuckets(e.ctx, "list", "", 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.ListHolds(e.ctx, ref("list", "held only")); err != nil {
		t.Fatal(err)
	}
	after := e.state(ref("list", "a"))
	hist2, _, _ := e.svc.History(e.ctx, ref("list", "a"), "", 100)
	if !after.UpdatedAt.Equal(before.UpdatedAt) || len(hist2) != len(hist) {
		t.Errorf("listing wrote: updated %v → %v, history %d → %d entries", before.UpdatedAt, after.UpdatedAt, len(hist), len(hist2))
	}
}

func testListPages(t *testing.T, e *env) {
	e.limit("pages", "10", "1", time.Hour, false)
	var keys []string
	for i := range 23 {
		k := string(rune('a'+i%26)) + "/" + strings.Repeat("é", i%3) + decimal.NewFromInt(int64(i)).String()
		keys = append(keys, k)
		e.fillup(ref("pages", k), "1")
	}
	want := byteSorted(keys)
	for _, size := range []int{1, 5, 23, 24} {
		var all []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 30 {
				t.Fatalf("page size %d: no end after %d pages", size, pages)
			}
			items, next, err := e.svc.ListBuckets(e.ctx, "pages", cursor, size)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) > size {
				t.Fatalf("page size %d: %d items", size, len(items))
			}
			for _, it := range items {
				all = append(all, it.Key)
				eq(t, it.Key+" level", it.Level, "1")
			}
			if next == "" {
				break
			}
			if len(items) != size {
				t.Fatalf("page size %d: a short page (%d) with a next cursor", size, len(items))
			}
			cursor = next
		}
		if !slices.Equal(all, want) {
			t.Errorf("page size %d: keys = %q,\nwant %q", size, all, want)
		}
	}
}

func testListDeleted(t *testing.T, e *env) {
	e.limit("gone", "10", "1", time.Hour, true)
	e.fillup(ref("gone", "k1"), "1")
	e.reserve(ref("gone", "k1"), "1", time.Minute)
	e.fillup(ref("gone", "k2"), "1")
	if err := e.svc.DeleteLimit(e.ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.ListBuckets(e.ctx, "gone", "", 10); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("ListBuckets(deleted) = %v, want ErrLimitNotFound", err)
	}
	if _, err := e.store.ListHolds(e.ctx, ref("gone", "k1")); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("ListHolds(deleted) = %v, want ErrLimitNotFound", err)
	}
	e.limit("gone", "10", "1", time.Hour, true)
	got, err := e.store.ListBuckets(e.ctx, "gone", "", 10)
	if err != nil || len(got) != 0 {
		t.Errorf("ListBuckets(re-created) = %q, %v; want none", bucketKeys(got), err)
	}
	holds, err := e.store.ListHolds(e.ctx, ref("gone", "k1"))
	if err != nil || len(holds) != 0 {
		t.Errorf("ListHolds(re-created) = %+v, %v; want none", holds, err)
	}
	e.fillup(ref("gone", "k3"), "1")
	if got, err = e.store.ListBuckets(e.ctx, "gone", "", 10); err != nil || !slices.Equal(bucketKeys(got), []string{"k3"}) {
		t.Errorf("ListBuckets(re-created, written) = %q, %v; want [k3]", bucketKeys(got), err)
	}
}

func testListHolds(t *testing.T, e *env) {
	e.limit("holds", "100", "1", time.Hour, true)
	r := ref("holds", "tenant/<b>é</b>")
	other := ref("holds", "other")
	if hs, err := e.store.ListHolds(e.ctx, r); err != nil || len(hs) != 0 {
		t.Fatalf("holds of a bucket never written = %+v, %v", hs, err)
	}
	h1 := e.reserve(r, "10", time.Hour).Reservation
	e.clock.Advance(time.Second)
	h2 := e.reserve(r, "5", 10*time.Second).Reservation
	e.clock.Advance(time.Second)
	h3 := e.reserve(r, "1", time.Hour).Reservation
	h4 := e.reserve(r, "2", time.Hour).Reservation // same instant as h3
	e.reserve(other, "3", time.Hour)
	if _, err := e.svc.Commit(e.ctx, h4.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}

	check := func(what string, want ...ledger.Reservation) {
		t.Helper()
		got, err := e.store.ListHolds(e.ctx, r)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// Same instant: by id.
		slices.SortStableFunc(want, func(a, b ledger.Reservation) int {
			if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		if len(got) != len(want) {
			t.Fatalf("%s: %d holds %+v, want %d", what, len(got), got, len(want))
		}
		for i := range want {
			one, err := e.svc.Reservation(e.ctx, want[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			g := got[i]
			if g.ID != one.ID || g.Bucket != one.Bucket || !g.Amount.Equal(one.Amount) || g.State != ledger.Active ||
				one.State != ledger.Active || !g.CreatedAt.Equal(one.CreatedAt) || !g.ExpiresAt.Equal(one.ExpiresAt) ||
				g.CommittedAmount.Valid || !g.ResolvedAt.IsZero() {
				t.Errorf("%s: hold %d = %+v, Reservation says %+v", what, i, g, one)
			}
		}
	}
	check("three active", h1, h2, h3)
	e.clock.Advance(9 * time.Second) // h2, reserved at +1s for 10s, expires now
	check("one expired", h1, h3)
	if _, err := e.svc.Release(e.ctx, h1.ID, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	check("one released", h3)
}

// BenchListBuckets measures ListBuckets pages of 100 (the first, and one from
// the middle) of a limit with n buckets, beside another limit with n buckets
// of its own, on store. The store's clock may be the real one.
func BenchListBuckets(b *testing.B, store ledger.Store, n int) {
	ctx := context.Background()
	for _, name := range []string{"bench-list", "bench-other"} {
		if _, err := store.PutLimit(ctx, ledger.Limit{Name: name, Capacity: dec("1000"), LeakAmount: dec("1"), LeakPer: time.Hour, History: false}); err != nil {
			b.Fatal(err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(16)
		for i := range n {
			g.Go(func() error {
				_, err := store.Fillup(gctx, []ledger.Charge{{Bucket: ref(name, fmt.Sprintf("tenant-%07d", i)), Cost: dec("1")}}, ledger.Idempotency{})
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	for _, after := range []string{"", fmt.Sprintf("tenant-%07d", n/2)} {
		b.Run("after="+after, func(b *testing.B) {
			for b.Loop() {
				page, err := store.ListBuckets(ctx, "bench-list", after, 100)
				if err != nil || len(page) != 100 {
					b.Fatalf("page of %d: %v", len(page), err)
				}
			}
		})
	}
}
