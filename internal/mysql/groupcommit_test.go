package mysql_test

import (
	"context"
	"fmt"
	"net"
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

// gatedConn counts a connection's writes (round trips, as countingConn)
// and, while a gate is set, holds each write until the gate closes.
type gatedConn struct {
	net.Conn
	writes *atomic.Int64
	gate   *atomic.Pointer[chan struct{}]
}

func (c gatedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	if g := c.gate.Load(); g != nil {
		<-*g
	}
	return c.Conn.Write(b)
}

// gatedStore opens a store with the decision cache (and group commit, the
// default) whose writes are counted and can be held at a gate.
func gatedStore(t *testing.T, url string, writes *atomic.Int64, gate *atomic.Pointer[chan struct{}], opts ...mysql.Option) *mysql.Store {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return gatedConn{Conn: c, writes: writes, gate: gate}, nil
	}
	// A long skew and timeout: the gate holds a write as long as the test
	// needs, which the clock guard must not count against it.
	return open(t, url, append([]mysql.Option{mysql.WithDial(dial), mysql.WithCache(mysql.DefaultCacheEntries, mysql.DefaultCacheBytes),
		mysql.WithPruneInterval(0), mysql.WithCacheSkew(time.Minute), mysql.WithTimeout(time.Minute)}, opts...)...)
}

// holdWhileQueued holds the store's writes at the gate, runs start (which
// starts the calls), waits until queued calls are in the group commit's
// queue behind the one decision held at the database, and opens the gate.
// holdGate closes the gate of a gatedStore: its writes wait for g. release
// opens it for good; it may be called more than once.
func holdGate(gate *atomic.Pointer[chan struct{}]) (g chan struct{}, release func()) {
	g = make(chan struct{})
	gate.Store(&g)
	released := false
	return g, func() {
		if !released {
			released = true
			gate.Store(nil)
			close(g)
		}
	}
}

// firstWriteGoes lets the write held at the gate g go and waits until the
// next one (the batch's, queued behind it) has started and is held in turn.
func firstWriteGoes(t *testing.T, s *mysql.Store, writes *atomic.Int64, g chan struct{}) {
	t.Helper()
	w := writes.Load()
	g <- struct{}{}
	deadline := time.Now().Add(20 * time.Second)
	for in, q := mysql.GroupCommitLoad(s); writes.Load() < w+1 || in != 1 || q != 0; in, q = mysql.GroupCommitLoad(s) {
		if time.Now().After(deadline) {
			t.Fatalf("the batch's write never started: %d writes, %d batches, %d queued", writes.Load()-w, in, q)
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
}

func holdWhileQueued(t *testing.T, s *mysql.Store, gate *atomic.Pointer[chan struct{}], queued int, start func()) {
	t.Helper()
	g := make(chan struct{})
	gate.Store(&g)
	start()
	ok := loadReaches(s, func(in, q int) bool { return in == 1 && q == queued })
	gate.Store(nil)
	close(g)
	if !ok {
		in, q := mysql.GroupCommitLoad(s)
		t.Fatalf("group commit: %d batches at the database, %d calls queued; want 1 and %d", in, q, queued)
	}
}

// loadReaches polls the group commit's load until cond holds of it, for at
// most 20 s, and reports whether it did.
func loadReaches(s *mysql.Store, cond func(inFlight, queued int) bool) bool {
	deadline := time.Now().Add(20 * time.Second)
	for !cond(mysql.GroupCommitLoad(s)) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
	return true
}

// TestGroupCommitHotKey: the single-bucket Fillups that arrive for a bucket
// while a decision of it is at the database are decided together and sent as
// one write; every answer is what it would be alone, in arrival order: no
// charge over the capacity, one history entry per accepted charge with ids
// in order, the threshold crossed once, each Idempotency-Key's record kept.
func TestGroupCommitHotKey(t *testing.T) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		t.Run(iso, func(t *testing.T) {
			url := newDatabase(t)
			var writes atomic.Int64
			var gate atomic.Pointer[chan struct{}]
			s := gatedStore(t, url, &writes, &gate, mysql.WithIsolation(iso))
			ctx := context.Background()
			spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(20), Period: &ledger.Period{Every: "year"}, History: true,
				Thresholds: []ledger.Threshold{{Percent: decimal.NewFromInt(50)}}}
			if _, err := ledger.NewService(s).PutLimit(ctx, "l", spec); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "hot"}
			if out, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{}); err != nil || !out.Accepted {
				t.Fatalf("first Fillup: %+v %v", out, err)
			}
			// 1 decision held at the database and 30 queued behind it.
			const n = 31
			idem := func(i int) ledger.Idempotency {
				if i%2 == 1 {
					return ledger.Idempotency{Scope: "s", Key: fmt.Sprint("key-", i), Hash: "h"}
				}
				return ledger.Idempotency{}
			}
			outs := make([]ledger.FillupOutcome, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			w0 := writes.Load()
			_, _, grouped0 := s.GroupCommitStats()
			holdWhileQueued(t, s, &gate, n-1, func() {
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						outs[i], errs[i] = s.Fillup(ctx, charge(ref, 1), idem(i))
					}()
				}
			})
			wg.Wait()
			var levels []string
			var ids []int
			denied := 0
			for i, out := range outs {
				if errs[i] != nil {
					t.Fatalf("Fillup %d: %v", i, errs[i])
				}
				if !out.Accepted {
					denied++
					if l := out.Items[0].Snapshot.State.Level.String(); l != "20" || out.Items[0].EntryID != "" {
						t.Errorf("a denial at level %s with entry %q, want at 20 with none", l, out.Items[0].EntryID)
					}
					continue
				}
				levels = append(levels, out.Items[0].Snapshot.State.Level.String())
				id, _ := strconv.Atoi(out.Items[0].EntryID)
				ids = append(ids, id)
			}
			// The first charge took 1 of 20: 19 more fit, 12 are denied;
			// the accepted ones, in arrival order, each see the one before.
			slices.SortFunc(levels, func(a, b string) int { return decimal.RequireFromString(a).Cmp(decimal.RequireFromString(b)) })
			slices.Sort(ids)
			var wantLevels []string
			var wantIDs []int
			for l := 2; l <= 20; l++ {
				wantLevels, wantIDs = append(wantLevels, strconv.Itoa(l)), append(wantIDs, l)
			}
			if denied != 12 || !slices.Equal(levels, wantLevels) || !slices.Equal(ids, wantIDs) {
				t.Errorf("%d denied, accepted at levels %v with entries %v; want 12 denied, levels and entries 2…20 once each", denied, levels, ids)
			}
			// One write for the decision held at the gate, one for the 30
			// behind it (without group commit: one each).
			if got := writes.Load() - w0; got != 2 {
				t.Errorf("%d Fillups on one bucket in %d round trips, want 2", n, got)
			}
			if _, _, grouped := s.GroupCommitStats(); grouped-grouped0 != n-1 {
				t.Errorf("%d calls decided in a group, want %d", grouped-grouped0, n-1)
			}
			entries, _, err := s.History(ctx, ref, "", 100)
			if err != nil || len(entries) != 20 {
				t.Fatalf("history: %d entries, %v; want 20", len(entries), err)
			}
			for i, e := range entries { // newest first
				if e.ID != strconv.Itoa(20-i) || e.Event != ledger.EventFillup {
					t.Errorf("history entry %d: %s %s, want %d fillup", i, e.ID, e.Event, 20-i)
				}
			}
			evs, _, err := s.Events(ctx, "", 100)
			if err != nil || len(evs) != 1 {
				t.Errorf("events: %d, %v; want the one crossing of 50%%", len(evs), err)
			}
			// Each key's record was written with the group: a retry replays.
			for i := range n {
				if idem(i).Key == "" {
					continue
				}
				again, err := s.Fillup(ctx, charge(ref, 1), idem(i))
				if err != nil || !again.Replayed || again.Accepted != outs[i].Accepted || again.Items[0].EntryID != outs[i].Items[0].EntryID ||
					!again.Items[0].Snapshot.State.Level.Equal(outs[i].Items[0].Snapshot.State.Level) {
					t.Errorf("retry of call %d: %+v %v; want the replay of %+v", i, again, err, outs[i])
				}
			}
		})
	}
}

// TestGroupCommitFallback: a call with the Idempotency-Key of an earlier
// call of its batch is answered alone once the batch is written (the
// replay of that call), and the batch keeps its other calls; a batch with
// a retry whose record was written before cannot be kept as one write (the
// record meets the earlier one) and is decided again call by call, each as
// without group commit: one charge per key, its retries replays with the
// same entry.
func TestGroupCommitFallback(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	s := gatedStore(t, url, &writes, &gate)
	ctx := context.Background()
	if _, err := ledger.NewService(s).PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}, History: true}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "hot"}
	if _, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	key := ledger.Idempotency{Scope: "s", Key: "same", Hash: "h"}
	// queued runs the Fillups of idems, the first held at the database
	// while the others queue behind it, and returns the calls of them kept
	// in a batch.
	queued := func(idems []ledger.Idempotency) ([]ledger.FillupOutcome, int64) {
		outs := make([]ledger.FillupOutcome, len(idems))
		errs := make([]error, len(idems))
		var wg sync.WaitGroup
		_, _, grouped0 := s.GroupCommitStats()
		holdWhileQueued(t, s, &gate, len(idems)-1, func() {
			for i, idem := range idems {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outs[i], errs[i] = s.Fillup(ctx, charge(ref, 2), idem)
				}()
				// The first is the one held at the database.
				if i == 0 && !loadReaches(s, func(in, _ int) bool { return in == 1 }) {
					t.Error("the first Fillup never reached the database")
				}
			}
		})
		wg.Wait()
		for i, err := range errs {
			if err != nil || !outs[i].Accepted {
				t.Fatalf("Fillup %d: %+v %v", i, outs[i], err)
			}
		}
		_, _, grouped := s.GroupCommitStats()
		return outs, grouped - grouped0
	}
	outs, kept := queued([]ledger.Idempotency{{}, key, key, {}})
	if kept != 2 {
		t.Errorf("%d calls kept in a batch, want 2 (the key's repeat answered alone)", kept)
	}
	// The two calls of the key queue in either order (goroutines started
	// one after the other need not arrive so): one charges, the other
	// replays it.
	a, b := outs[1], outs[2]
	if a.Replayed {
		a, b = b, a
	}
	if a.Replayed || !b.Replayed || a.Items[0].EntryID != b.Items[0].EntryID {
		t.Errorf("one key's calls: replayed %v and %v, entries %s and %s; want one charge and its replay", a.Replayed, b.Replayed, a.Items[0].EntryID, b.Items[0].EntryID)
	}
	outs, kept = queued([]ledger.Idempotency{{}, key, {}})
	if kept != 0 {
		t.Errorf("%d calls kept in a batch that meets a key's record, want none", kept)
	}
	if !outs[1].Replayed || outs[1].Items[0].EntryID != a.Items[0].EntryID {
		t.Errorf("the retry: %+v, want the replay of entry %s", outs[1], a.Items[0].EntryID)
	}
	snap, err := s.Inspect(ctx, ref)
	if err != nil || snap.State.Level.String() != "11" {
		t.Errorf("level %s, %v; want 11 (1, then five charges of 2: the key's once)", snap.State.Level, err)
	}
	if entries, _, err := s.History(ctx, ref, "", 100); err != nil || len(entries) != 6 {
		t.Errorf("history: %d entries, %v; want 6", len(entries), err)
	}
}

// TestGroupCommitTwoInstances: another instance writes the bucket while a
// group's write is on its way: the group's compare-and-set fails, nothing of
// it is kept, and each of its calls is decided again on a read: every charge
// counted once, after the other instance's.
func TestGroupCommitTwoInstances(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	s := gatedStore(t, url, &writes, &gate)
	other := open(t, url, mysql.WithCache(0, 0), mysql.WithPruneInterval(0))
	ctx := context.Background()
	if _, err := ledger.NewService(s).PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}, History: true}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "hot"}
	if _, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	const n = 11
	outs := make([]ledger.FillupOutcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	_, _, grouped0 := s.GroupCommitStats()
	_, _, conflicts0 := s.CacheStats()
	g, release := holdGate(&gate)
	defer release()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{})
		}()
		if i == 0 && !loadReaches(s, func(in, _ int) bool { return in == 1 }) {
			t.Fatal("the first Fillup never reached the database")
		}
	}
	if !loadReaches(s, func(in, q int) bool { return in == 1 && q == n-1 }) {
		t.Fatal("the Fillups did not queue behind the first")
	}
	firstWriteGoes(t, s, &writes, g)
	if out, err := other.Fillup(ctx, charge(ref, 5), ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("the other instance's Fillup: %+v %v", out, err)
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil || !outs[i].Accepted {
			t.Fatalf("Fillup %d: %+v %v", i, outs[i], err)
		}
	}
	if _, _, grouped := s.GroupCommitStats(); grouped != grouped0 {
		t.Errorf("%d calls kept in a group whose row another instance changed", grouped-grouped0)
	}
	if _, _, conflicts := s.CacheStats(); conflicts == conflicts0 {
		t.Error("no cached write failed its compare-and-set")
	}
	snap, err := other.Inspect(ctx, ref)
	if err != nil || snap.State.Level.String() != "17" {
		t.Errorf("level %s, %v; want 17 (1, 5 from the other instance, 11 of 1)", snap.State.Level, err)
	}
	entries, _, err := other.History(ctx, ref, "", 100)
	if err != nil || len(entries) != 13 {
		t.Fatalf("history: %d entries, %v; want 13", len(entries), err)
	}
	ids := map[string]bool{}
	for _, e := range entries {
		ids[e.ID] = true
	}
	for i := range n {
		if id := outs[i].Items[0].EntryID; !ids[id] {
			t.Errorf("call %d's entry %s is not in the history", i, id)
		}
		delete(ids, outs[i].Items[0].EntryID)
	}
	if len(ids) != 2 {
		t.Errorf("entries %v besides the calls'; want the first charge's and the other instance's", ids)
	}
}

// TestGroupCommitOneBatchAtATime: by default the group commit has one batch
// at the database at a time (groupSlots), so the Fillups of other buckets
// that arrive while it is out queue and go together in the next batch,
// rather than each take a free slot alone; every charge is kept.
func TestGroupCommitOneBatchAtATime(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	s := gatedStore(t, url, &writes, &gate)
	ctx := context.Background()
	if _, err := ledger.NewService(s).PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}}); err != nil {
		t.Fatal(err)
	}
	ref := func(k int) ledger.BucketRef { return ledger.BucketRef{Limit: "l", Key: fmt.Sprint("b", k)} }
	batches0, calls0, grouped0 := s.GroupCommitStats()
	_, release := holdGate(&gate)
	defer release()
	const n = 5
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[k] = s.Fillup(ctx, charge(ref(k), int64(k+1)), ledger.Idempotency{})
		}()
		// The call is either at the database or queued: which one is the test.
		if !loadReaches(s, func(in, q int) bool { return in+q == k+1 }) {
			t.Fatalf("Fillup %d never reached the group commit", k)
		}
		if in, q := mysql.GroupCommitLoad(s); in != 1 {
			t.Fatalf("after Fillup %d: %d batches at the database, %d calls queued; want 1 and %d", k, in, q, k)
		}
	}
	release()
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("Fillup %d: %v", k, err)
		}
	}
	batches, calls, grouped := s.GroupCommitStats()
	if batches-batches0 != 2 || calls-calls0 != n || grouped-grouped0 != n-1 {
		t.Errorf("%d batches of %d calls, %d kept in a batch of several; want 2 of %d, %d", batches-batches0, calls-calls0, grouped-grouped0, n, n-1)
	}
	for k := range n {
		snap, err := s.Inspect(ctx, ref(k))
		if err != nil || snap.State.Level.String() != strconv.Itoa(k+1) {
			t.Errorf("b%d: level %s, %v; want %d", k, snap.State.Level, err, k+1)
		}
	}
}
