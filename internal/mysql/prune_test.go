package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/testenv"
)

// pruneStore opens a store on a database of its own on clock, with the
// background pruner off (the test calls Prune), and a row counter of its
// tables.
func pruneStore(t *testing.T, clock *ledgertest.Clock, opts ...mysql.Option) (*mysql.Store, func(table string) int) {
	t.Helper()
	url := newDatabase(t)
	s := open(t, url, append([]mysql.Option{mysql.WithClock(clock.Now), mysql.WithPruneInterval(0)}, opts...)...)
	db := testenv.MySQLDB(t, url, mysql.ParseURL)
	return s, func(table string) int {
		t.Helper()
		var n int
		if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// TestPrune: the pruner records expired holds, deletes closed holds after
// 24h, idempotency records after 25h, history after 30 days and idle empty
// buckets, in batches (of 1 here, so every step runs many batches).
func TestPrune(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, rows := pruneStore(t, clock, mysql.WithPruneBatch(1))
	svc := ledger.NewService(s)
	put := func(name string, history bool) {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: d("10"), LeakAmount: d("1"), LeakPer: time.Second, History: history}); err != nil {
			t.Fatal(err)
		}
	}
	put("h", true)
	put("quiet", false)
	hr := ledger.BucketRef{Limit: "h", Key: "k"}
	hold, err := svc.Reserve(ctx, hr, d("2"), time.Second, ledger.Idempotency{Scope: "reserve:h/k", Key: "i1", Hash: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "quiet", Key: key}, Cost: d("2")}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Second)
	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExpiredHolds != 1 || st.EmptyBuckets != 3 {
		t.Errorf("first pass: %+v, want 1 bucket with expired holds, 3 empty buckets", st)
	}
	if n := rows("budgetd_buckets"); n != 1 {
		t.Errorf("%d buckets left, want the one with history", n)
	}
	res, err := svc.Reservation(ctx, hold.Reservation.ID)
	if err != nil || res.State != ledger.Expired {
		t.Fatalf("hold after prune: %+v %v", res, err)
	}
	entries, _, err := svc.History(ctx, hr, "", 10)
	if err != nil || len(entries) != 2 || entries[0].Event != ledger.EventExpired || !entries[0].Time.Equal(hold.Reservation.ExpiresAt) {
		t.Fatalf("history after prune: %+v %v", entries, err)
	}
	// A pruned bucket is written again from empty.
	out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "quiet", Key: "a"}, Cost: d("4")}}, ledger.Idempotency{})
	if err != nil || !out.Accepted || out.Items[0].Level.Decimal().String() != "4" {
		t.Fatalf("fillup of a pruned bucket: %+v %v", out, err)
	}

	clock.Advance(25*time.Hour + time.Second)
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reservation(ctx, hold.Reservation.ID); !errors.Is(err, ledger.ErrReservationNotFound) {
		t.Errorf("closed hold after 25h: %v, want not found", err)
	}
	if n := rows("budgetd_idempotency"); n != 0 {
		t.Errorf("%d idempotency records after 25h", n)
	}
	if n := rows("budgetd_history"); n != 2 {
		t.Errorf("%d history entries after 25h, want 2", n)
	}
	if n := rows("budgetd_buckets"); n != 1 {
		t.Errorf("%d buckets after 25h, want the one with history", n)
	}
	clock.Advance(30 * 24 * time.Hour)
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rows("budgetd_history") + rows("budgetd_buckets"); n != 0 {
		t.Errorf("%d history entries and buckets left after 31 days", n)
	}
}

// TestPruneKeeps: an empty bucket is kept while it has an active hold, an
// active grant, a reached threshold mark its next write must see, or an
// override that applies to its key; a bucket that is not empty is kept.
func TestPruneKeeps(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, rows := pruneStore(t, clock)
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: d("10"), LeakAmount: d("1"), LeakPer: time.Second,
		Thresholds: []ledger.Threshold{{Percent: d("50")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutLimit(ctx, "slow", ledger.LimitSpec{Capacity: d("10"), LeakAmount: d("1"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := func(l, k string) ledger.BucketRef { return ledger.BucketRef{Limit: l, Key: k} }
	fill := func(r ledger.BucketRef, cost string) {
		t.Helper()
		if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: d(cost)}}, ledger.Idempotency{}); err != nil || !out.Accepted {
			t.Fatalf("fillup %v: %+v %v", r, out, err)
		}
	}
	// "api/mark" reaches its 50% threshold, then leaks empty: its mark stays.
	fill(ref("api", "mark"), "6")
	// "api/held" has a hold for an hour.
	if _, err := svc.Reserve(ctx, ref("api", "held"), d("1"), time.Hour, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	// "api/granted" has a grant for a day.
	if _, err := svc.AddGrant(ctx, ref("api", "granted"), d("5"), clock.Now().Add(24*time.Hour), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	fill(ref("api", "granted"), "1")
	// "api/vip" is under an override.
	if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: "vip", Capacity: decimal.NewNullDecimal(d("100"))}); err != nil {
		t.Fatal(err)
	}
	fill(ref("api", "vip"), "1")
	// "slow/full" is still not empty a minute later; "api/empty" is.
	fill(ref("slow", "full"), "1")
	fill(ref("api", "empty"), "1")
	clock.Advance(time.Minute)
	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 1 || rows("budgetd_buckets") != 5 {
		t.Fatalf("prune: %+v, %d buckets left; want only api/empty deleted", st, rows("budgetd_buckets"))
	}
	left, err := s.ListBuckets(ctx, "api", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, b := range left {
		keys = append(keys, b.Key)
	}
	if want := []string{"granted", "held", "mark", "vip"}; !slices.Equal(keys, want) {
		t.Errorf("api buckets left: %v, want %v", keys, want)
	}
	// The kept mark emits its recovery at the bucket's next write.
	fill(ref("api", "mark"), "1")
	evs, _, err := svc.Events(ctx, "", 10)
	if err != nil || len(evs) != 2 {
		t.Fatalf("events: %+v %v, want the crossing and its recovery", evs, err)
	}
	// Events go after 7 days.
	clock.Advance(7*24*time.Hour + time.Second)
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rows("budgetd_events"); n != 0 {
		t.Errorf("%d events after 7 days", n)
	}
}

// TestPruneMarked: a bucket of a periodic limit whose threshold mark is of
// a period gone by is pruned once empty, and its row of budgetd_marked
// (migrations/mysql 0007) goes with it, in the same transaction; a bucket
// marked in the current period keeps both.
func TestPruneMarked(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, rows := pruneStore(t, clock)
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "daily", ledger.LimitSpec{Capacity: d("10"), Period: &ledger.Period{Every: "day"},
		Thresholds: []ledger.Threshold{{Percent: d("50")}}}); err != nil {
		t.Fatal(err)
	}
	fill := func(key string) {
		t.Helper()
		if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "daily", Key: key}, Cost: d("6")}}, ledger.Idempotency{}); err != nil || !out.Accepted {
			t.Fatalf("fillup %s: %+v %v", key, out, err)
		}
	}
	fill("yesterday")
	clock.Advance(24*time.Hour + time.Second)
	fill("today")
	if n := rows("budgetd_marked"); n != 2 {
		t.Fatalf("%d rows in budgetd_marked before the prune, want 2", n)
	}
	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 1 || rows("budgetd_buckets") != 1 {
		t.Fatalf("prune: %+v, %d buckets left; want only daily/yesterday deleted", st, rows("budgetd_buckets"))
	}
	if n := rows("budgetd_marked"); n != 1 {
		t.Errorf("%d rows in budgetd_marked after the prune, want 1 (today's)", n)
	}
	items, _, err := svc.QueryBuckets(ctx, "daily", ledger.BucketQuery{Above: "50%"}, "", 10)
	if err != nil || len(items) != 1 || items[0].Key != "today" {
		t.Errorf("above 50%%: %+v %v, want today", items, err)
	}
}

// TestPruneConcurrentWrites: buckets pruned while they are written lose no
// write: the pruner deletes a bucket only at the version it found empty, so
// a Fillup that committed in between keeps its charge.
func TestPruneConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, _ := pruneStore(t, clock, mysql.WithPruneBatch(7))
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: d("10"), LeakAmount: d("1"), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	refs := make([]ledger.BucketRef, n)
	for i := range refs {
		refs[i] = ledger.BucketRef{Limit: "api", Key: fmt.Sprintf("k%03d", i)}
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: refs[i], Cost: d("1")}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour) // every bucket is empty now
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Prune(ctx); err != nil {
				errs <- err
				return
			}
		}
	}()
	var fills sync.WaitGroup
	for w := range 4 {
		fills.Add(1)
		go func() {
			defer fills.Done()
			for i := w; i < n; i += 4 {
				if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: refs[i], Cost: d("2")}}, ledger.Idempotency{}); err != nil || !out.Accepted {
					errs <- fmt.Errorf("fillup %v: %+v %w", refs[i], out, err)
					return
				}
			}
		}()
	}
	fills.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, r := range refs {
		snap, err := s.Inspect(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if got := snap.State.Level.String(); got != "2" {
			t.Errorf("%v: level %s after a Fillup of 2, want 2 (a write lost to the pruner)", r, got)
		}
	}
}

// TestPruneBackground: the pruner started by Open deletes an empty bucket on
// its own, and Close stops it.
func TestPruneBackground(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, rows := pruneStore(t, clock, mysql.WithPruneInterval(10*time.Millisecond))
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: d("10"), LeakAmount: d("1"), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "k"}, Cost: d("1")}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	if n := rows("budgetd_buckets"); n != 1 {
		t.Fatalf("%d buckets before it is empty, want 1", n)
	}
	clock.Advance(time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for rows("budgetd_buckets") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background pruner did not delete the empty bucket in 30s")
		}
		runtime.Gosched()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteLimitBatches: DeleteLimit removes the limit's row at once and
// leaves its buckets, holds, history and override rows to the pruner, which deletes them in
// bounded batches (of 2 here); meanwhile they are invisible: a re-created
// limit of the same name starts empty, its old hold is not found. Another
// limit's rows and the re-created limit's are kept. DeleteLimit wakes the
// background pruner, which deletes the rows long before its interval.
func TestDeleteLimitBatches(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, rows := pruneStore(t, clock, mysql.WithPruneBatch(2))
	svc := ledger.NewService(s)
	spec := ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Hour, History: true}
	for _, name := range []string{"h", "other"} {
		if _, err := svc.PutLimit(ctx, name, spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []struct{ limit, pattern string }{{"h", "x1"}, {"h", "x2"}, {"h", "x*"}, {"other", "x1"}} {
		if _, err := svc.PutOverride(ctx, ref.limit, ledger.Override{Pattern: ref.pattern, Capacity: decimal.NewNullDecimal(d("50"))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		r := ledger.BucketRef{Limit: "h", Key: fmt.Sprintf("k%d", i)}
		for range 2 {
			if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: d("1")}}, ledger.Idempotency{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	hr := ledger.BucketRef{Limit: "h", Key: "k0"}
	hold, err := svc.Reserve(ctx, hr, d("1"), time.Hour, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "other", Key: "k"}, Cost: d("1")}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	history := rows("budgetd_history")
	if rows("budgetd_buckets") != 6 || rows("budgetd_holds") != 1 || history < 12 {
		t.Fatalf("before the delete: %d buckets, %d holds, %d entries", rows("budgetd_buckets"), rows("budgetd_holds"), history)
	}
	if err := svc.DeleteLimit(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	// The rows are left to the pruner...
	if rows("budgetd_buckets") != 6 || rows("budgetd_holds") != 1 || rows("budgetd_history") != history || rows("budgetd_overrides") != 4 {
		t.Fatalf("DeleteLimit deleted rows itself: %d buckets, %d holds, %d entries", rows("budgetd_buckets"), rows("budgetd_holds"), rows("budgetd_history"))
	}
	// ...and invisible meanwhile.
	if _, err := svc.PutLimit(ctx, "h", spec); err != nil {
		t.Fatal(err)
	}
	if st, err := svc.Bucket(ctx, hr); err != nil || !st.Level.IsZero() || !st.Held.IsZero() || !st.UpdatedAt.IsZero() {
		t.Fatalf("the re-created limit's bucket: %+v %v", st, err)
	}
	if es, _, err := svc.History(ctx, hr, "", 10); err != nil || len(es) != 0 {
		t.Fatalf("the re-created limit's history: %+v %v", es, err)
	}
	if list, _, err := svc.ListBuckets(ctx, "h", "", 10); err != nil || len(list) != 0 {
		t.Fatalf("the re-created limit's buckets: %+v %v", list, err)
	}
	if _, err := svc.Reservation(ctx, hold.Reservation.ID); !errors.Is(err, ledger.ErrReservationNotFound) {
		t.Fatalf("the deleted limit's hold: %v", err)
	}
	if os, err := svc.ListOverrides(ctx, "h", "", 10); err != nil || len(os) != 0 {
		t.Fatalf("the re-created limit's overrides: %+v %v", os, err)
	}
	if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: hr, Cost: d("1")}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Left: other/k and the new h/k0 with its one entry, other/k's entry,
	// and other's override.
	if st.DeletedLimits != 1 || st.Rows < 5+1+history-1+3 || rows("budgetd_buckets") != 2 || rows("budgetd_holds") != 0 || rows("budgetd_history") != 2 || rows("budgetd_overrides") != 1 {
		t.Fatalf("after Prune %+v: %d buckets, %d holds, %d entries, %d overrides, want 2, 0, 2, 1", st, rows("budgetd_buckets"), rows("budgetd_holds"), rows("budgetd_history"), rows("budgetd_overrides"))
	}
	if b, err := svc.Bucket(ctx, hr); err != nil || b.Level.String() != "1" {
		t.Fatalf("the re-created limit's bucket after Prune: %+v %v", b, err)
	}
	if st, err := s.Prune(ctx); err != nil || st.DeletedLimits != 0 {
		t.Fatalf("a second Prune: %+v %v", st, err)
	}

	// The background pruner, woken by DeleteLimit (its interval is an hour).
	bg, bgRows := pruneStore(t, clock, mysql.WithPruneBatch(2), mysql.WithPruneInterval(time.Hour))
	bsvc := ledger.NewService(bg)
	if _, err := bsvc.PutLimit(ctx, "h", spec); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := bsvc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "h", Key: fmt.Sprintf("k%d", i)}, Cost: d("1")}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := bsvc.DeleteLimit(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(20 * time.Second); bgRows("budgetd_buckets")+bgRows("budgetd_history") > 0; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("the background pruner left %d buckets and %d entries", bgRows("budgetd_buckets"), bgRows("budgetd_history"))
		}
	}
}

// TestPruneAfterOverrideExpiry: the pruner judges a bucket whose temporary
// slow leak has ended by its level settled at the expiry: 50 charged under
// 1 an hour is 49 at the end of that hour, not the 0 that the limit's
// 100 a second would make of it from the charge on. Once it has leaked empty
// under the limit's rule, it is pruned.
func TestPruneAfterOverrideExpiry(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, rows := pruneStore(t, clock)
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("100"), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	t0 := clock.Now()
	if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: "k", LeakAmount: d("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "k"}, Cost: d("50")}}, ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("fillup: %+v %v", out, err)
	}
	clock.Set(t0.Add(time.Hour + 100*time.Millisecond))
	if st, err := s.Prune(ctx); err != nil || st.EmptyBuckets != 0 || rows("budgetd_buckets") != 1 {
		t.Fatalf("prune: %+v %v, %d buckets; want the bucket kept", st, err, rows("budgetd_buckets"))
	}
	b, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "api", Key: "k"})
	if err != nil || !b.Level.Decimal().Equal(d("39")) {
		t.Fatalf("bucket: %+v %v; want 49 at the expiry, then 0.1s at 100/s", b, err)
	}
	clock.Set(t0.Add(time.Hour + time.Second))
	if st, err := s.Prune(ctx); err != nil || st.EmptyBuckets != 1 || rows("budgetd_buckets") != 0 {
		t.Fatalf("prune: %+v %v, %d buckets; want the empty bucket pruned", st, err, rows("budgetd_buckets"))
	}
}

// TestPruneBatchOfLimits: one scan batch holds the buckets of several
// limits (the pruner decodes a limit's spec once for its run of rows), and
// each bucket is judged by its own limit's terms, whether its limit's id
// is lower or higher than the others'; and by a limit's new terms at the
// next pass after they change.
func TestPruneBatchOfLimits(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, rows := pruneStore(t, clock, mysql.WithPruneBatch(1000))
	svc := ledger.NewService(s)
	put := func(name string, per time.Duration) {
		t.Helper()
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: d("10"), LeakAmount: d("1"), LeakPer: per}); err != nil {
			t.Fatal(err)
		}
	}
	fill := func(limit string, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: limit, Key: k}, Cost: d("2")}}, ledger.Idempotency{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// "slow" has the lower id and leaks 1 an hour, "fast" 1 a second, and
	// "slow2" (the highest id) 1 an hour again.
	put("slow", time.Hour)
	put("fast", time.Second)
	put("slow2", time.Hour)
	fill("slow", "a", "b")
	fill("fast", "a", "b", "c")
	fill("slow2", "a")
	clock.Advance(3 * time.Second)
	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 3 || rows("budgetd_buckets") != 3 {
		t.Fatalf("pass 1: %+v, %d rows; want fast's 3 buckets deleted and the slow ones' 3 kept", st, rows("budgetd_buckets"))
	}
	// slow's terms change (now it leaks fast too): its rows are judged by
	// the new terms, slow2's still by its own.
	put("slow", time.Second)
	clock.Advance(3 * time.Second)
	if st, err = s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 2 || rows("budgetd_buckets") != 1 {
		t.Fatalf("pass 2: %+v, %d rows; want slow's 2 buckets deleted and slow2's kept", st, rows("budgetd_buckets"))
	}
}
