package mysql_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/mysql"
)

// queueBehind holds the store's writes at the gate, starts first (a call
// whose decision is then held at the database), then each of calls in
// turn, each once the one before is queued, so that they queue in that
// order; it opens the gate when all of them are queued.
func queueBehind(t *testing.T, s *mysql.Store, gate *atomic.Pointer[chan struct{}], first func(), calls []func()) {
	t.Helper()
	g := make(chan struct{})
	gate.Store(&g)
	defer func() {
		gate.Store(nil)
		close(g)
	}()
	first()
	if !loadReaches(s, func(in, q int) bool { return in == 1 && q == 0 }) {
		t.Fatal("the first call never reached the database")
	}
	for k, call := range calls {
		call()
		if !loadReaches(s, func(in, q int) bool { return in == 1 && q == k+1 }) {
			in, q := mysql.GroupCommitLoad(s)
			t.Fatalf("call %d: %d batches at the database, %d calls queued; want 1 and %d", k, in, q, k+1)
		}
	}
}

// TestGroupCommitAcrossBuckets: the single-bucket Fillups that queue while
// a batch is at the database go in the next batch whatever their buckets,
// and are sent as one write: on the cached rows, and new buckets presumed
// empty, in one round trip; on one read of them all when a bucket presumed
// new was not.
// Each answer is what it would be alone, in arrival order on its bucket:
// levels, denials, history ids and threshold events per bucket.
func TestGroupCommitAcrossBuckets(t *testing.T) {
	// b1…b5 are cached (written once by this store), new (never written:
	// the batch presumes them empty and inserts their rows), written once
	// by another instance (presumed new, the insert fails on the first: the
	// batch is decided on one read of them all), or written once by this
	// store and then evicted from its cache of three entries, all but b4
	// and b5 (b0 too: its call is decided alone on a read): this store saw
	// them, so the batch reads them rather than presume them new.
	variants := []struct {
		name         string
		writes, read int64
	}{{"cached", 2, 0}, {"new", 2, 0}, {"elsewhere", 5, 1}, {"evicted", 4, 1}}
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		for _, vr := range variants {
			cached := vr.name != "new" // b1…b5 hold 1 before
			t.Run(iso+"/"+vr.name, func(t *testing.T) {
				url := newDatabase(t)
				var writes atomic.Int64
				var gate atomic.Pointer[chan struct{}]
				opts := []mysql.Option{mysql.WithIsolation(iso), mysql.WithGroupSlots(1)}
				if vr.name == "evicted" {
					opts = append(opts, mysql.WithCache(3, mysql.DefaultCacheBytes))
				}
				s := gatedStore(t, url, &writes, &gate, opts...)
				ctx := context.Background()
				spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(10), Period: &ledger.Period{Every: "year"}, History: true,
					Thresholds: []ledger.Threshold{{Percent: decimal.NewFromInt(50)}}}
				if _, err := ledger.NewService(s).PutLimit(ctx, "l", spec); err != nil {
					t.Fatal(err)
				}
				ref := func(k int) ledger.BucketRef { return ledger.BucketRef{Limit: "l", Key: fmt.Sprint("b", k)} }
				// b0's call is the one held at the database.
				other := open(t, url, mysql.WithCache(0, 0), mysql.WithPruneInterval(0))
				for k := range 6 {
					by := s
					switch {
					case k > 0 && vr.name == "new":
						continue
					case k > 0 && vr.name == "elsewhere":
						by = other
					}
					if out, err := by.Fillup(ctx, charge(ref(k), 1), ledger.Idempotency{}); err != nil || !out.Accepted {
						t.Fatalf("Fillup of b%d: %+v %v", k, out, err)
					}
				}
				base := int64(0)
				if cached {
					base = 1
				}
				type call struct {
					k    int
					cost int64
					idem ledger.Idempotency
				}
				calls := []call{{1, 1, ledger.Idempotency{}}, {2, 1, ledger.Idempotency{Scope: "s", Key: "k2", Hash: "h"}}, {1, 5, ledger.Idempotency{}},
					{3, 1, ledger.Idempotency{}}, {2, 9, ledger.Idempotency{}}, {4, 1, ledger.Idempotency{Scope: "s", Key: "k4", Hash: "h"}}, {5, 1, ledger.Idempotency{}}}
				outs := make([]ledger.FillupOutcome, len(calls))
				errs := make([]error, len(calls))
				var wg sync.WaitGroup
				starts := make([]func(), len(calls))
				for j, c := range calls {
					starts[j] = func() {
						wg.Add(1)
						go func() {
							defer wg.Done()
							outs[j], errs[j] = s.Fillup(ctx, charge(ref(c.k), c.cost), c.idem)
						}()
					}
				}
				w0 := writes.Load()
				_, _, grouped0 := s.GroupCommitStats()
				mixed0, buckets0, read0 := s.GroupCommitBuckets()
				var held ledger.FillupOutcome
				var heldErr error
				queueBehind(t, s, &gate, func() {
					wg.Add(1)
					go func() {
						defer wg.Done()
						held, heldErr = s.Fillup(ctx, charge(ref(0), 1), ledger.Idempotency{})
					}()
				}, starts)
				wg.Wait()
				if heldErr != nil || !held.Accepted {
					t.Fatalf("the held Fillup: %+v %v", held, heldErr)
				}
				for j, err := range errs {
					if err != nil {
						t.Fatalf("Fillup %d: %v", j, err)
					}
				}
				// Alone, in arrival order on each bucket: b1 takes 1 then 5,
				// b2 takes 1 and then 9 fits only when b2 started empty.
				b2Fits := base+1+9 <= 10
				want := []struct {
					accepted bool
					level    int64
					entry    uint64
				}{{true, base + 1, uint64(base) + 1}, {true, base + 1, uint64(base) + 1}, {true, base + 6, uint64(base) + 2},
					{true, base + 1, uint64(base) + 1}, {b2Fits, base + 1, 0}, {true, base + 1, uint64(base) + 1}, {true, base + 1, uint64(base) + 1}}
				if b2Fits {
					want[4].level, want[4].entry = base+10, uint64(base)+2
				}
				for j, w := range want {
					got := outs[j]
					entry, _ := strconv.ParseUint(got.Items[0].EntryID, 10, 64)
					if got.Accepted != w.accepted || got.Items[0].Snapshot.State.Level.String() != strconv.FormatInt(w.level, 10) || entry != w.entry {
						t.Errorf("call %d (b%d, %d): accepted %v at level %s, entry %q; want %v at %d, entry %d", j, calls[j].k, calls[j].cost,
							got.Accepted, got.Items[0].Snapshot.State.Level, got.Items[0].EntryID, w.accepted, w.level, w.entry)
					}
				}
				// One write for the held decision; one for the batch of
				// five buckets; when a bucket presumed new was not, the
				// failed write, its rollback, one read and the write. Once
				// evicted, the held decision's read and write, and the
				// batch's.
				if got := writes.Load() - w0; got != vr.writes {
					t.Errorf("%d Fillups on six buckets in %d round trips, want %d", len(calls)+1, got, vr.writes)
				}
				if _, _, grouped := s.GroupCommitStats(); grouped-grouped0 != int64(len(calls)) {
					t.Errorf("%d calls kept in a batch, want %d", grouped-grouped0, len(calls))
				}
				mixed, buckets, read := s.GroupCommitBuckets()
				if mixed-mixed0 != 1 || buckets-buckets0 != 5 || read-read0 != vr.read {
					t.Errorf("%d batches of several buckets with %d buckets, %d on a read; want 1 with 5, %d", mixed-mixed0, buckets-buckets0, read-read0, vr.read)
				}
				// What the database holds: each bucket as the answers say,
				// one entry per accepted charge, the crossings of 50%.
				type row struct{ level, entries int64 }
				rows := map[int]row{0: {2, 2}, 1: {7, 3}, 2: {2, 2}, 3: {2, 2}, 4: {2, 2}, 5: {2, 2}}
				if !cached {
					rows = map[int]row{0: {2, 2}, 1: {6, 2}, 2: {10, 2}, 3: {1, 1}, 4: {1, 1}, 5: {1, 1}}
				}
				for k, r := range rows {
					snap, err := other.Inspect(ctx, ref(k))
					if err != nil || snap.State.Level.String() != strconv.FormatInt(r.level, 10) {
						t.Errorf("b%d: level %s, %v; want %d", k, snap.State.Level, err, r.level)
					}
					entries, _, err := other.History(ctx, ref(k), "", 100)
					if err != nil || int64(len(entries)) != r.entries {
						t.Errorf("b%d: %d history entries, %v; want %d", k, len(entries), err, r.entries)
					}
					for i, e := range entries { // newest first, ids 1…n
						if e.ID != strconv.Itoa(len(entries)-i) {
							t.Errorf("b%d: entry %d has id %s, want %d", k, i, e.ID, len(entries)-i)
						}
					}
				}
				evs, _, err := other.Events(ctx, "", 100)
				if err != nil {
					t.Fatal(err)
				}
				var crossed []string
				for _, e := range evs {
					crossed = append(crossed, e.Bucket.Key)
				}
				slices.Sort(crossed)
				wantCrossed := []string{"b1"}
				if b2Fits {
					wantCrossed = []string{"b1", "b2"}
				}
				if !slices.Equal(crossed, wantCrossed) {
					t.Errorf("threshold events of %v, want %v", crossed, wantCrossed)
				}
				// The Idempotency-Keys' records were written with the batch.
				for _, j := range []int{1, 5} {
					again, err := s.Fillup(ctx, charge(ref(calls[j].k), calls[j].cost), calls[j].idem)
					if err != nil || !again.Replayed || again.Items[0].EntryID != outs[j].Items[0].EntryID {
						t.Errorf("retry of call %d: %+v %v; want the replay of %+v", j, again, err, outs[j])
					}
				}
			})
		}
	}
}

// TestGroupCommitAcrossBucketsConflict: another instance writes one bucket
// of a batch of several while the batch's write is on its way: the
// compare-and-set of that row fails, nothing of the batch is kept (not the
// other buckets' charges either), and every caller decides again alone:
// each charge counted once, after the other instance's.
func TestGroupCommitAcrossBucketsConflict(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	s := gatedStore(t, url, &writes, &gate, mysql.WithGroupSlots(1))
	other := open(t, url, mysql.WithCache(0, 0), mysql.WithPruneInterval(0))
	ctx := context.Background()
	if _, err := ledger.NewService(s).PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}, History: true}); err != nil {
		t.Fatal(err)
	}
	ref := func(k int) ledger.BucketRef { return ledger.BucketRef{Limit: "l", Key: fmt.Sprint("b", k)} }
	for k := range 4 {
		if _, err := s.Fillup(ctx, charge(ref(k), 1), ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	keys := []int{1, 2, 1, 3, 2}
	outs := make([]ledger.FillupOutcome, len(keys)+1)
	errs := make([]error, len(keys)+1)
	var wg sync.WaitGroup
	_, _, grouped0 := s.GroupCommitStats()
	_, _, conflicts0 := s.CacheStats()
	g, release := holdGate(&gate)
	defer release()
	start := func(j, k int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[j], errs[j] = s.Fillup(ctx, charge(ref(k), 1), ledger.Idempotency{})
		}()
	}
	start(0, 0) // held at the database
	if !loadReaches(s, func(in, _ int) bool { return in == 1 }) {
		t.Fatal("the first Fillup never reached the database")
	}
	for j, k := range keys {
		start(j+1, k)
		if !loadReaches(s, func(in, q int) bool { return in == 1 && q == j+1 }) {
			t.Fatalf("Fillup %d did not queue", j+1)
		}
	}
	firstWriteGoes(t, s, &writes, g)
	if out, err := other.Fillup(ctx, charge(ref(2), 5), ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("the other instance's Fillup: %+v %v", out, err)
	}
	release()
	wg.Wait()
	for j, err := range errs {
		if err != nil || !outs[j].Accepted {
			t.Fatalf("Fillup %d: %+v %v", j, outs[j], err)
		}
	}
	if _, _, grouped := s.GroupCommitStats(); grouped != grouped0 {
		t.Errorf("%d calls kept in a batch one of whose rows another instance changed", grouped-grouped0)
	}
	if _, _, conflicts := s.CacheStats(); conflicts == conflicts0 {
		t.Error("no cached write failed its compare-and-set")
	}
	// b0: 1+1; b1: 1+1+1; b2: 1, 5 elsewhere, 1+1; b3: 1+1.
	for k, want := range map[int]struct{ level, entries int }{0: {2, 2}, 1: {3, 3}, 2: {8, 4}, 3: {2, 2}} {
		snap, err := other.Inspect(ctx, ref(k))
		if err != nil || snap.State.Level.String() != strconv.Itoa(want.level) {
			t.Errorf("b%d: level %s, %v; want %d", k, snap.State.Level, err, want.level)
		}
		entries, _, err := other.History(ctx, ref(k), "", 100)
		if err != nil || len(entries) != want.entries {
			t.Errorf("b%d: %d history entries, %v; want %d", k, len(entries), err, want.entries)
		}
		ids := map[string]bool{}
		for _, e := range entries {
			ids[e.ID] = true
		}
		for j, kk := range append([]int{0}, keys...) {
			if kk != k {
				continue
			}
			if id := outs[j].Items[0].EntryID; !ids[id] {
				t.Errorf("call %d's entry %s is not in b%d's history", j, id, k)
			}
			delete(ids, outs[j].Items[0].EntryID)
		}
	}
}

// TestGroupCommitSpreadExact: two instances, each with group commit, charge
// many buckets at once from many goroutines, every bucket by every
// goroutine once, so that batches hold calls of several buckets, some of
// them cached and some not, and fail each other's compare-and-sets. With
// capacity C and cost 1 exactly C calls of each bucket are accepted: the
// level is C, with C history entries 1…C, the sum of the accepted costs.
func TestGroupCommitSpreadExact(t *testing.T) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		t.Run(iso, func(t *testing.T) {
			url := newDatabase(t)
			opts := []mysql.Option{mysql.WithIsolation(iso), mysql.WithCache(mysql.DefaultCacheEntries, mysql.DefaultCacheBytes),
				mysql.WithPruneInterval(0), mysql.WithTimeout(time.Minute)}
			// One with a batch at a time, so that its batches are large.
			stores := []*mysql.Store{open(t, url, append(opts, mysql.WithGroupSlots(1))...), open(t, url, opts...)}
			ctx := context.Background()
			const capacity, nBuckets, perStore = 7, 40, 6
			if _, err := ledger.NewService(stores[0]).PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(capacity), Period: &ledger.Period{Every: "year"}, History: true}); err != nil {
				t.Fatal(err)
			}
			ref := func(k int) ledger.BucketRef { return ledger.BucketRef{Limit: "l", Key: fmt.Sprint("b", k)} }
			var accepted [nBuckets]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 2*perStore)
			for si, s := range stores {
				for g := range perStore {
					wg.Add(1)
					go func() {
						defer wg.Done()
						order := rand.New(rand.NewPCG(uint64(si), uint64(g))).Perm(nBuckets)
						for _, k := range order {
							out, err := s.Fillup(ctx, charge(ref(k), 1), ledger.Idempotency{})
							if err != nil {
								errs <- fmt.Errorf("Fillup of b%d: %w", k, err)
								return
							}
							if out.Accepted {
								accepted[k].Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for k := range nBuckets {
				snap, err := stores[0].Inspect(ctx, ref(k))
				if err != nil {
					t.Fatal(err)
				}
				entries, _, err := stores[1].History(ctx, ref(k), "", 100)
				if err != nil {
					t.Fatal(err)
				}
				ids := make([]string, len(entries))
				for i, e := range entries {
					ids[i] = e.ID
				}
				var want []string
				for id := capacity; id >= 1; id-- {
					want = append(want, strconv.Itoa(id))
				}
				if n := accepted[k].Load(); n != capacity || snap.State.Level.String() != strconv.FormatInt(int64(capacity), 10) || !slices.Equal(ids, want) {
					t.Errorf("b%d: %d accepted, level %s, history %v; want %d, %d and ids %d…1", k, n, snap.State.Level, ids, capacity, capacity, capacity)
				}
			}
			for i, s := range stores {
				batches, calls, grouped := s.GroupCommitStats()
				mixed, buckets, read := s.GroupCommitBuckets()
				_, _, conflicts := s.CacheStats()
				t.Logf("store %d: %d batches of %d calls, %d kept in batches of several; %d batches of several buckets (%d buckets), %d on a read; %d cached writes conflicted",
					i, batches, calls, grouped, mixed, buckets, read, conflicts)
			}
		})
	}
}

// TestGroupCommitDenialsOneRead: a batch of denials alone (its buckets at
// their capacity, no denied entries) writes nothing, so it checks nothing
// on the cached rows: it is decided again on one read of all its buckets,
// one round trip for the batch rather than one per call.
func TestGroupCommitDenialsOneRead(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	s := gatedStore(t, url, &writes, &gate, mysql.WithGroupSlots(1))
	ctx := context.Background()
	if _, err := ledger.NewService(s).PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(3), Period: &ledger.Period{Every: "year"}, History: true}); err != nil {
		t.Fatal(err)
	}
	ref := func(k int) ledger.BucketRef { return ledger.BucketRef{Limit: "l", Key: fmt.Sprint("b", k)} }
	for k := range 4 {
		if out, err := s.Fillup(ctx, charge(ref(k), 3), ledger.Idempotency{}); err != nil || !out.Accepted {
			t.Fatalf("Fillup of b%d: %+v %v", k, out, err)
		}
	}
	keys := []int{1, 2, 1, 3, 2, 3}
	outs := make([]ledger.FillupOutcome, len(keys)+1)
	errs := make([]error, len(keys)+1)
	var wg sync.WaitGroup
	start := func(j, k int) func() {
		return func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[j], errs[j] = s.Fillup(ctx, charge(ref(k), 1), ledger.Idempotency{})
			}()
		}
	}
	var starts []func()
	for j, k := range keys {
		starts = append(starts, start(j+1, k))
	}
	w0 := writes.Load()
	_, _, grouped0 := s.GroupCommitStats()
	mixed0, _, read0 := s.GroupCommitBuckets()
	queueBehind(t, s, &gate, start(0, 0), starts)
	wg.Wait()
	for j, err := range errs {
		if err != nil || outs[j].Accepted || outs[j].Items[0].Snapshot.State.Level.String() != "3" {
			t.Fatalf("Fillup %d: %+v %v; want a denial at level 3", j, outs[j], err)
		}
	}
	// The held call's read (its cached decision writes nothing), then the
	// batch's one read.
	if got := writes.Load() - w0; got != 2 {
		t.Errorf("%d denials in %d round trips, want 2", len(keys)+1, got)
	}
	_, _, grouped := s.GroupCommitStats()
	mixed, _, read := s.GroupCommitBuckets()
	if grouped-grouped0 != int64(len(keys)) || mixed-mixed0 != 1 || read-read0 != 1 {
		t.Errorf("%d calls kept in %d batches of several buckets, %d on a read; want %d in 1, on 1", grouped-grouped0, mixed-mixed0, read-read0, len(keys))
	}
}
