package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// TestCoalescedBatchEqualsSequence: a batch decided by budgetd_fillup_batch
// answers exactly what the same Fillups sent one by one through the
// all-or-none path of budgetd_fillup (multi-bucket calls') at the same
// instant answer, and
// leaves the same level, holds and history — with leaking levels (or a
// window's slots aging out), holds that
// expire between rounds, zero costs, denials, and Idempotency-Keys: fresh
// ones, replays of earlier calls of the same or an earlier batch (whose
// stored documents must then be the same too), and keys reused with another
// request.
func TestCoalescedBatchEqualsSequence(t *testing.T) {
	kinds := []struct {
		name  string
		limit ledger.Limit
	}{
		{"leak", ledger.Limit{Name: "c", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: 3 * time.Second, History: true}},
		{"window", ledger.Limit{Name: "c", Capacity: dec("10"), Window: &ledger.Window{Length: 3 * time.Second, Precision: 250 * time.Millisecond}, History: true}},
	}
	for _, kind := range kinds {
		for _, iso := range []string{"read-committed", "serializable"} {
			t.Run(kind.name+"/"+iso, func(t *testing.T) { testCoalescedBatchEqualsSequence(t, iso, kind.limit) })
		}
	}
}

func testCoalescedBatchEqualsSequence(t *testing.T, iso string, limit ledger.Limit) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now))
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, limit); err != nil {
		t.Fatal(err)
	}
	seq := ledger.BucketRef{Limit: "c", Key: "one-by-one"}
	bat := ledger.BucketRef{Limit: "c", Key: "batched"}
	rng := rand.New(rand.NewPCG(7, 11))
	var used []ledger.Idempotency
	var replays, refusals int
	costs := []string{"0", "0.5", "1", "2.25", "3", "0.000001", "7", "11"}
	for round := 0; round < 200; round++ {
		clock.Advance(time.Duration(rng.IntN(2_000_000)) * time.Microsecond)
		if rng.IntN(2) == 0 {
			amount := dec(costs[1+rng.IntN(5)])
			ttl := time.Duration(1+rng.IntN(3_000_000)) * time.Microsecond
			for _, r := range []ledger.BucketRef{seq, bat} {
				if _, err := s.Reserve(ctx, r, amount, ttl, ledger.Idempotency{}, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		n := 2 + rng.IntN(10)
		cs := make([]decimal.Decimal, n)
		idems := make([]ledger.Idempotency, n)
		for i := range cs {
			cs[i] = dec(costs[rng.IntN(len(costs))])
			// A third of the calls carry an Idempotency-Key: a fresh
			// one, or one used before (in this batch or an earlier
			// one) with the same request (a replay) or another
			// (refused).
			switch r := rng.IntN(9); {
			case r < 2 || r < 3 && len(used) == 0:
				idems[i] = ledger.Idempotency{Key: fmt.Sprintf("r%di%d", round, i), Hash: cs[i].String()}
				used = append(used, idems[i])
			case r < 3:
				idems[i] = used[rng.IntN(len(used))]
				if rng.IntN(4) == 0 {
					idems[i].Hash = "other"
				} else {
					cs[i] = dec(idems[i].Hash)
				}
			}
		}
		got, errs := s.FillupBatchIdem(ctx, bat, cs, ledgertest.Scoped(idems, "batched"))
		for i, c := range cs {
			want, err := s.FillupAllOrNone(ctx, ledger.Charge{Bucket: seq, Cost: c}, ledgertest.Scoped(idems, "one-by-one")[i])
			if !errors.Is(errs[i], ledger.ErrIdempotencyKeyReused) || !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
				if errs[i] != nil || err != nil {
					t.Fatalf("round %d item %d: batched: %v, one by one: %v", round, i, errs[i], err)
				}
			}
			if got[i].Replayed {
				replays++
			}
			if errs[i] != nil {
				refusals++
			}
			if a, b := ledgertest.Answer(got[i]), ledgertest.Answer(want); a != b {
				t.Fatalf("round %d item %d (cost %s, %+v):\n batch      %s\n one by one %s", round, i, c, idems[i], a, b)
			}
		}
	}
	if replays == 0 || refusals == 0 {
		t.Fatalf("%d replays, %d refused reuses: the test did not exercise them", replays, refusals)
	}
	t.Logf("%d replays, %d refused reuses", replays, refusals)
	if ledgertest.SameHistory(t, s, seq, bat, ledgertest.OtherIDs) == 0 {
		t.Fatal("no history: the test did not exercise it")
	}
}

// TestCoalescedBatchFails: when the batch's call fails, every caller in it
// gets the error and nothing is charged.
func TestCoalescedBatchFails(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	_, errs := s.FillupBatch(ctx, ledger.BucketRef{Limit: "missing", Key: "k"}, []decimal.Decimal{dec("1"), dec("2"), dec("3")})
	for i, err := range errs {
		if !errors.Is(err, ledger.ErrLimitNotFound) {
			t.Errorf("call %d: %v, want ErrLimitNotFound", i, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	_, errs = s.FillupBatch(cancelled, ref, []decimal.Decimal{dec("1"), dec("2")})
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call %d: %v, want context.Canceled", i, err)
		}
	}
	// A statement that fails halfway (the third cost is not a number, after
	// two were decided and recorded) fails every caller and charges none.
	errs = s.FillupBatchRaw(ctx, ref, []string{"1", "2", "not-a-number", "3"})
	for i, err := range errs {
		if err == nil {
			t.Errorf("call %d of a failed batch: no error", i)
		}
	}
	snap, err := s.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !snap.State.Level.IsZero() {
		t.Fatalf("level %s after failed batches, want 0", snap.State.Level)
	}
	if hs, _, err := s.History(ctx, ref, "", ledger.MaxPage); err != nil || len(hs) != 0 {
		t.Fatalf("history after failed batches: %d entries, %v", len(hs), err)
	}
}

// TestCoalescingHotKeyIdempotent: 200 concurrent Fillups of one bucket, each
// with an Idempotency-Key, 50 keys sent twice at once (same request): every
// key is decided once — exactly 100 accepted keys and 100 history entries —
// and both calls of a doubled key get the same answer, exactly one of them
// replayed. Calls are coalesced.
func TestCoalescingHotKeyIdempotent(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxConns(8),
				postgres.WithTimeout(30*time.Second), postgres.WithMaxAttempts(100))
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "hot", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Second, History: true}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "hot", Key: "k"}
			const keys, doubled = 150, 50
			var mu sync.Mutex
			answers := map[string][]ledger.FillupOutcome{}
			var wg sync.WaitGroup
			start := make(chan struct{})
			var failed error
			for i := range keys + doubled {
				k := fmt.Sprint("idem-", i%keys)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("1")}}, ledger.Idempotency{Scope: "t", Key: k, Hash: "h"})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed = err
						return
					}
					answers[k] = append(answers[k], out)
				}()
			}
			close(start)
			wg.Wait()
			if failed != nil {
				t.Fatal(failed)
			}
			accepted := 0
			for k, outs := range answers {
				if outs[0].Accepted {
					accepted++
				}
				if len(outs) == 2 {
					a, b := outs[0], outs[1]
					if a.Replayed == b.Replayed {
						t.Fatalf("key %s: replayed %v and %v, want exactly one replay", k, a.Replayed, b.Replayed)
					}
					a.Replayed, b.Replayed = false, false
					if ledgertest.Answer(a) != ledgertest.Answer(b) {
						t.Fatalf("key %s: two answers:\n %s\n %s", k, ledgertest.Answer(a), ledgertest.Answer(b))
					}
				}
			}
			if len(answers) != keys || accepted != 100 {
				t.Fatalf("%d keys answered, %d accepted; want %d and 100", len(answers), accepted, keys)
			}
			var entries int
			for cursor := ""; ; {
				page, next, err := s.History(ctx, ref, cursor, ledger.MaxPage)
				if err != nil {
					t.Fatal(err)
				}
				entries += len(page)
				if next == "" {
					break
				}
				cursor = next
			}
			if entries != 100 {
				t.Fatalf("%d history entries, want 100", entries)
			}
			st := s.Stats()
			if st.Batched != keys+doubled || st.Batches >= st.Batched {
				t.Fatalf("%d calls in %d batches: want all coalesced, in fewer batches than calls", st.Batched, st.Batches)
			}
			t.Logf("%d calls in %d batches, %d idempotency retries, %d serialization retries",
				st.Batched, st.Batches, st.IdempotencyRetries, st.SerializationRetries)
		})
	}
}

// TestCoalescingHotKey: 200 concurrent Fillups of one bucket at one pinned
// instant are decided in batches; exactly ⌊100/1⌋ are accepted, the accepted
// callers see the levels 1…100 once each, and there is one history entry per
// accepted call.
func TestCoalescingHotKey(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now), postgres.WithMaxConns(8), postgres.WithTimeout(30*time.Second))
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "hot", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Second, History: true}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "hot", Key: "k"}
	const n = 200
	levels := make(chan string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("1")}}, ledger.Idempotency{})
			if err != nil {
				errs <- err
				return
			}
			if out.Accepted {
				levels <- out.Items[0].Snapshot.State.Level.String()
			} else if lv := out.Items[0].Snapshot.State.Level; !lv.Equal(bucket.MustAmount("100")) {
				errs <- fmt.Errorf("a denied call saw level %s, want 100", lv)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(levels)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for l := range levels {
		if seen[l] {
			t.Fatalf("two accepted calls saw level %s", l)
		}
		seen[l] = true
	}
	for i := 1; i <= 100; i++ {
		if !seen[fmt.Sprint(i)] {
			t.Fatalf("no accepted call saw level %d (accepted: %d)", i, len(seen))
		}
	}
	if len(seen) != 100 {
		t.Fatalf("%d accepted, want 100", len(seen))
	}
	var entries int
	for cursor := ""; ; {
		page, next, err := s.History(ctx, ref, cursor, ledger.MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		entries += len(page)
		if next == "" {
			break
		}
		cursor = next
	}
	if entries != 100 {
		t.Fatalf("%d history entries, want 100", entries)
	}
	st := s.Stats()
	if st.Batched != n || st.Batches >= st.Batched {
		t.Fatalf("%d calls in %d batches: want all %d coalesced, in fewer batches than calls", st.Batched, st.Batches, n)
	}
	t.Logf("%d calls in %d batches", st.Batched, st.Batches)
}

// TestCoalescedBucketsEqualSequence: a batch of Fillups of several buckets
// (two limits, one of them missing, four keys, interleaved) decided by
// budgetd_fillup answers exactly what the same Fillups sent one by one
// through its all-or-none path answer, each on its own (a denial in one bucket
// changes nothing in another), with Idempotency-Keys fresh, replayed and
// refused, and leaves the same levels and history.
func TestCoalescedBucketsEqualSequence(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now))
			ctx := context.Background()
			for _, name := range []string{"p", "q"} {
				if _, err := s.PutLimit(ctx, ledger.Limit{Name: name, Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: 3 * time.Second, History: true}); err != nil {
					t.Fatal(err)
				}
			}
			type pair struct{ bat, seq ledger.BucketRef }
			var buckets []pair
			for _, l := range []string{"q", "p", "missing"} {
				for _, k := range []string{"b", "a"} {
					buckets = append(buckets, pair{ledger.BucketRef{Limit: l, Key: "bat-" + k}, ledger.BucketRef{Limit: l, Key: "seq-" + k}})
				}
			}
			rng := rand.New(rand.NewPCG(3, 5))
			costs := []string{"0", "0.5", "1", "2.25", "3", "7", "11"}
			var used []ledger.Idempotency
			var replays, refusals, denials int
			for round := 0; round < 100; round++ {
				clock.Advance(time.Duration(rng.IntN(2_000_000)) * time.Microsecond)
				n := 2 + rng.IntN(20)
				refs := make([]ledger.BucketRef, n)
				seqs := make([]ledger.BucketRef, n)
				cs := make([]decimal.Decimal, n)
				idems := make([]ledger.Idempotency, n)
				for i := range cs {
					b := buckets[rng.IntN(len(buckets))]
					refs[i], seqs[i] = b.bat, b.seq
					cs[i] = dec(costs[rng.IntN(len(costs))])
					switch r := rng.IntN(9); {
					case r < 2 || r < 3 && len(used) == 0:
						idems[i] = ledger.Idempotency{Key: fmt.Sprintf("r%di%d", round, i), Hash: refs[i].Limit + refs[i].Key + cs[i].String()}
						used = append(used, idems[i])
					case r < 3:
						// The same key for another request (refused), or
						// for the same bucket and cost (replayed).
						idems[i] = used[rng.IntN(len(used))]
						if rng.IntN(3) == 0 {
							idems[i].Hash = "other"
						}
					}
				}
				got, errs := s.FillupCalls(ctx, refs, cs, ledgertest.Scoped(idems, "batched"))
				for i, c := range cs {
					want, err := s.FillupAllOrNone(ctx, ledger.Charge{Bucket: seqs[i], Cost: c}, ledgertest.Scoped(idems, "one-by-one")[i])
					if !ledgertest.SameRefusal(errs[i], err) {
						t.Fatalf("round %d item %d: batched: %v, one by one: %v", round, i, errs[i], err)
					}
					switch {
					case errors.Is(err, ledger.ErrIdempotencyKeyReused):
						refusals++
					case got[i].Replayed:
						replays++
					case err == nil && !got[i].Accepted:
						denials++
					}
					// The answers name the bucket's key, which differs: compare the rest.
					if a, b := ledgertest.Answer(got[i]), ledgertest.Answer(want); a != b {
						t.Fatalf("round %d item %d (%v cost %s, %+v):\n batch      %s\n one by one %s", round, i, refs[i], c, idems[i], a, b)
					}
				}
			}
			if replays == 0 || refusals == 0 || denials == 0 {
				t.Fatalf("%d replays, %d refused reuses, %d denials: the test did not exercise them", replays, refusals, denials)
			}
			for _, b := range buckets[:4] {
				if ledgertest.SameHistory(t, s, b.seq, b.bat, ledgertest.OtherIDs) == 0 {
					t.Fatalf("%v: no history: the test did not exercise it", b.bat)
				}
			}
			t.Logf("%d replays, %d refused reuses, %d denials", replays, refusals, denials)
		})
	}
}

// TestCoalescingManyBuckets: 400 concurrent Fillups over 8 buckets through a
// pool of 2 connections are sent in batches that mix buckets; each bucket
// accepts exactly ⌊20/1⌋ and has one history entry per accepted call.
func TestCoalescingManyBuckets(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxConns(2),
				postgres.WithTimeout(30*time.Second), postgres.WithMaxAttempts(100))
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "m", Capacity: dec("20"), LeakAmount: dec("1"), LeakPer: time.Second, History: true}); err != nil {
				t.Fatal(err)
			}
			const buckets, per = 8, 50
			var mu sync.Mutex
			accepted := map[string]int{}
			var failed error
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range buckets * per {
				ref := ledger.BucketRef{Limit: "m", Key: fmt.Sprint("k", i%buckets)}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("1")}}, ledger.Idempotency{})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed = err
					} else if out.Accepted {
						accepted[ref.Key]++
					}
				}()
			}
			close(start)
			wg.Wait()
			if failed != nil {
				t.Fatal(failed)
			}
			for i := range buckets {
				ref := ledger.BucketRef{Limit: "m", Key: fmt.Sprint("k", i)}
				hs, _, err := s.History(ctx, ref, "", ledger.MaxPage)
				if err != nil {
					t.Fatal(err)
				}
				if accepted[ref.Key] != 20 || len(hs) != 20 {
					t.Fatalf("%s: %d accepted, %d history entries; want 20 and 20", ref.Key, accepted[ref.Key], len(hs))
				}
			}
			st := s.Stats()
			if st.Batched != buckets*per || st.Batches*4 > st.Batched {
				t.Fatalf("%d calls in %d batches: want all coalesced, at least 4 a batch on average", st.Batched, st.Batches)
			}
			t.Logf("%d calls in %d batches, %d serialization and %d deadlock retries", st.Batched, st.Batches, st.SerializationRetries, st.DeadlockRetries)
		})
	}
}

// TestCoalescingSlots: with a pool of 8 connections, Fillups of 6 different
// buckets whose rows another session holds go to the database in at most
// the batch slots' batches (WithBatchSlots, DefaultBatchSlots by default);
// the others queue, whatever their buckets, and go together as one batch
// once a slot is back. Before the slots, every call found a connection free
// and went alone.
func TestCoalescingSlots(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []postgres.Option
		slots int
	}{
		{"default", nil, postgres.DefaultBatchSlots},
		{"two", []postgres.Option{postgres.WithBatchSlots(2)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const calls = 6
			clock := ledgertest.NewClock()
			s := open(t, append([]postgres.Option{postgres.WithClock(clock.Now), postgres.WithMaxConns(8), postgres.WithTimeout(30 * time.Second)}, tc.opts...)...)
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "s", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true}); err != nil {
				t.Fatal(err)
			}
			refs := make([]ledger.BucketRef, calls)
			for i := range refs {
				refs[i] = ledger.BucketRef{Limit: "s", Key: fmt.Sprint("k", i)}
				if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: refs[i], Cost: dec("1")}}, ledger.Idempotency{}); err != nil {
					t.Fatal(err)
				}
			}
			before := s.Stats()
			// Another session holds every bucket's row.
			release := holdBucketRows(t, s)
			errs := make(chan error, calls)
			for _, r := range refs {
				go func() {
					out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: r, Cost: dec("1")}}, ledger.Idempotency{})
					if err == nil && (!out.Accepted || !out.Items[0].Snapshot.State.Level.Decimal().Equal(dec("2"))) {
						err = fmt.Errorf("%s: %s, want accepted at level 2", r.Key, ledgertest.Answer(out))
					}
					errs <- err
				}()
			}
			// Every call has arrived: the slots' batches at the database, the rest queued.
			for deadline := time.Now().Add(10 * time.Second); ; {
				in, q := s.CoalescerLoad()
				if in+q == calls || time.Now().After(deadline) {
					if in != tc.slots || q != calls-tc.slots {
						t.Fatalf("%d batches at the database and %d calls queued, want %d and %d", in, q, tc.slots, calls-tc.slots)
					}
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			release()
			for range calls {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			// The slots' batches of one call each, then the queued calls as one.
			st := s.Stats()
			if b, n := st.Batches-before.Batches, st.Batched-before.Batched; b != uint64(tc.slots)+1 || n != calls {
				t.Fatalf("%d calls in %d batches, want %d in %d", n, b, calls, tc.slots+1)
			}
		})
	}
}

// TestSetBatchOfOneUnderLoad: a call that reaches the database alone goes
// through budgetd_fillup, one round trip, while the store is otherwise idle,
// and set-wise while another batch is at the database, where budgetd_fillup
// would cost the database about three times as much. Before, it always went
// through budgetd_fillup, and the test fails that way.
func TestSetBatchOfOneUnderLoad(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now), postgres.WithMaxConns(8), postgres.WithTimeout(30*time.Second))
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "s", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fill := func(key string) (ledger.FillupOutcome, error) {
		return s.Fillup(ctx, []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "s", Key: key}, Cost: dec("1")}}, ledger.Idempotency{})
	}
	for _, k := range []string{"busy", "alone"} {
		before := s.Stats()
		if out, err := fill(k); err != nil || !out.Accepted {
			t.Fatalf("%s: %s %v", k, ledgertest.Answer(out), err)
		}
		if st := s.Stats(); st.Batches-before.Batches != 1 || st.SetBatches != before.SetBatches {
			t.Fatalf("%s on an idle store: %d batches, %d set-wise, want 1 through budgetd_fillup",
				k, st.Batches-before.Batches, st.SetBatches-before.SetBatches)
		}
	}
	// Another session holds the row of "busy": its next call stays at the
	// database while "alone" goes.
	release := holdBucketRows(t, s, "busy")
	busy := make(chan error, 1)
	go func() {
		out, err := fill("busy")
		if err == nil && (!out.Accepted || !out.Items[0].Snapshot.State.Level.Decimal().Equal(dec("2"))) {
			err = fmt.Errorf("busy: %s, want accepted at level 2", ledgertest.Answer(out))
		}
		busy <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if in, _ := s.CoalescerLoad(); in == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call of the held bucket did not reach the database")
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := s.Stats()
	out, err := fill("alone")
	if err != nil || !out.Accepted || !out.Items[0].Snapshot.State.Level.Decimal().Equal(dec("2")) {
		t.Fatalf("alone: %s %v, want accepted at level 2", ledgertest.Answer(out), err)
	}
	if st := s.Stats(); st.Batches-before.Batches != 1 || st.SetBatches-before.SetBatches != 1 {
		t.Fatalf("alone beside a batch at the database: %d batches, %d set-wise, want 1 set-wise",
			st.Batches-before.Batches, st.SetBatches-before.SetBatches)
	}
	release()
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
}

// holdBucketRows locks the rows of the store's buckets with the given keys
// (every row, without keys) from another session until the returned release
// is called or the test ends. (The server may have ended that session first,
// idle in its transaction: the rows are free then too, so release does not
// report it.)
func holdBucketRows(t testing.TB, s *postgres.Store, keys ...string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		t.Fatal(err)
	}
	lock, args := "SELECT 1 FROM buckets FOR UPDATE", []any{}
	if len(keys) > 0 {
		lock, args = "SELECT 1 FROM buckets WHERE key = ANY ($1) FOR UPDATE", []any{keys}
	}
	if _, err := tx.Exec(ctx, lock, args...); err != nil {
		tx.Rollback(ctx)
		conn.Release()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = tx.Rollback(ctx)
			conn.Release()
		})
	}
	t.Cleanup(release)
	return release
}
