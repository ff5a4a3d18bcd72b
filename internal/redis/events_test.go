package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/shopspring/decimal"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// eachServer runs fn against the standalone server and the cluster.
func eachServer(t *testing.T, fn func(t *testing.T, url string)) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) { fn(t, serverURL(t, env)) })
	}
}

// openSame opens another store on s's prefix: another budgetd instance.
func openSame(t *testing.T, url string, s *Store, opts ...Option) *Store {
	t.Helper()
	o, err := Open(context.Background(), url, append([]Option{WithPrefix(s.k.prefix), WithCallTimeout(20 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func parseThresholds(t *testing.T, ss ...string) []ledger.Threshold {
	t.Helper()
	var out []ledger.Threshold
	for _, s := range ss {
		th, err := ledger.ParseThreshold("thresholds", s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, th)
	}
	return out
}

// readAll reads every event after cursor in pages of n.
func readAll(t *testing.T, s *Store, cursor string, n int) ([]ledger.OutboxEvent, string) {
	t.Helper()
	var all []ledger.OutboxEvent
	for {
		page, next, err := s.Events(context.Background(), cursor, n)
		if err != nil {
			t.Fatalf("Events(%q): %v", cursor, err)
		}
		if len(page) == 0 {
			if next != cursor {
				t.Fatalf("an empty page moved the cursor from %q to %q", cursor, next)
			}
			return all, cursor
		}
		all = append(all, page...)
		cursor = next
	}
}

func fill(t *testing.T, s *Store, ref ledger.BucketRef, cost string) {
	t.Helper()
	if _, err := s.Fillup(context.Background(), []ledger.Charge{{Bucket: ref, Cost: dec(cost)}}, ledger.Idempotency{}); err != nil {
		t.Error(err)
	}
}

// checkOnce checks that events lists each event once, buckets buckets, and
// per bucket the events want ("threshold@used", in order).
func checkOnce(t *testing.T, events []ledger.OutboxEvent, buckets int, want string) {
	t.Helper()
	ids := map[string]bool{}
	per := map[string][]string{}
	for _, ev := range events {
		if ids[ev.ID] {
			t.Fatalf("event %s listed twice", ev.ID)
		}
		ids[ev.ID] = true
		per[ev.Bucket.Key] = append(per[ev.Bucket.Key], ev.Threshold+"@"+ev.Used.String())
	}
	if len(per) != buckets {
		t.Fatalf("events of %d buckets, want %d: %v", len(per), buckets, per)
	}
	for k, evs := range per {
		if fmt.Sprint(evs) != want {
			t.Errorf("bucket %s: events %v, want %s", k, evs, want)
		}
	}
}

// TestEventsTwoSealers: two stores on one prefix (two budgetd instances)
// seal and read at the same time while writers emit events on many slots:
// the log holds every event exactly once. (The conformance suite's
// ThresholdsConcurrent pages through events while writers run.) A cursor
// that is not a stream id is refused naming after.
func TestEventsTwoSealers(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		a := openTest(t, url, WithClock(clock.Now))
		b := openSame(t, url, a, WithClock(clock.Now))
		ctx := context.Background()
		if _, err := a.PutLimit(ctx, ledger.Limit{Name: "two", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: parseThresholds(t, "50%")}); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"x1", "1", "1-", "-1", "1-2-3", "+1-1", "1-18446744073709551615"} {
			var inv *ledger.InvalidError
			if _, _, err := a.Events(ctx, bad, 10); !errors.As(err, &inv) || inv.Field != "after" {
				t.Fatalf("Events(%q): %v, want invalid after", bad, err)
			}
		}
		const buckets = 120
		done := make(chan struct{})
		var readers sync.WaitGroup
		for _, s := range []*Store{a, b, a, b} {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for {
					select {
					case <-done:
						return
					default:
					}
					if _, _, err := s.Events(ctx, "", 1); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < buckets; i += 8 {
					s := a
					if i%2 == 1 {
						s = b
					}
					fill(t, s, ledger.BucketRef{Limit: "two", Key: fmt.Sprintf("k%03d", i)}, "6")
				}
			}()
		}
		wg.Wait()
		close(done)
		readers.Wait()
		evs, _ := readAll(t, b, "", 7)
		checkOnce(t, evs, buckets, "[50%@6]")
		again, _ := readAll(t, a, "", 1000)
		if len(again) != len(evs) {
			t.Fatalf("the other store lists %d events, this one %d", len(again), len(evs))
		}
	})
}

// TestEventsLostHint: an event whose slot hint is lost (P:evslots deleted,
// as a crash between the write and the hint leaves it) is not sealed until
// the next discovery, and then is: delayed, never lost.
func TestEventsLostHint(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		s := openTest(t, url, WithClock(clock.Now))
		ctx := context.Background()
		if _, err := s.PutLimit(ctx, ledger.Limit{Name: "hint", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: parseThresholds(t, "5")}); err != nil {
			t.Fatal(err)
		}
		_, cursor := readAll(t, s, "", 10) // the process's first call: discovery runs
		fill(t, s, ledger.BucketRef{Limit: "hint", Key: "lost"}, "6")
		if n, err := s.client.Exists(ctx, s.k.eventSlots()).Result(); err != nil || n != 1 {
			t.Fatalf("the write left no hint: %d %v", n, err)
		}
		if err := s.client.Del(ctx, s.k.eventSlots()).Err(); err != nil {
			t.Fatal(err)
		}
		if evs, _ := readAll(t, s, cursor, 10); len(evs) != 0 {
			t.Fatalf("sealed without a hint or a discovery due: %+v", evs)
		}
		// Another instance discovers at its first call.
		other := openSame(t, url, s, WithClock(clock.Now))
		evs, _ := readAll(t, other, cursor, 10)
		if len(evs) != 1 || evs[0].Bucket.Key != "lost" || evs[0].Type != ledger.EventThresholdCrossed {
			t.Fatalf("events after discovery: %+v, want the crossing of lost", evs)
		}
		// This one discovers when its discovery is due, and lists it too.
		s.mu.Lock()
		s.discovered = time.Time{}
		s.mu.Unlock()
		if again, _ := readAll(t, s, cursor, 10); len(again) != 1 || again[0].ID != evs[0].ID {
			t.Fatalf("events of the first store: %+v, want %+v", again, evs)
		}
	})
}

// TestEventsKeepReachedBucket: a bucket whose threshold is reached keeps no
// TTL (it would expire once it leaked empty, and its recovery would never
// be emitted), while one of a limit without thresholds gets its TTL; the
// write after the leak emits the recovery and the bucket gets a TTL again.
// A limit whose thresholds are removed drops the marks at the next write.
func TestEventsKeepReachedBucket(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		s := openTest(t, url, WithClock(clock.Now))
		ctx := context.Background()
		for _, name := range []string{"plain", "marked"} {
			l := ledger.Limit{Name: name, Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second}
			if name == "marked" {
				l.Thresholds = parseThresholds(t, "5")
			}
			if _, err := s.PutLimit(ctx, l); err != nil {
				t.Fatal(err)
			}
			fill(t, s, ledger.BucketRef{Limit: name, Key: "k"}, "6")
		}
		ttl := func(name string) time.Duration {
			cl, err := s.fetchLimit(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.client.PTTL(ctx, s.k.bucket(cl.gen, "k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if p, m := ttl("plain"), ttl("marked"); p <= 0 || m != -1 {
			t.Fatalf("TTLs: plain %s, marked %s; want a TTL and none", p, m)
		}
		_, cursor := readAll(t, s, "", 100)
		clock.Advance(time.Minute) // leaked empty
		fill(t, s, ledger.BucketRef{Limit: "marked", Key: "k"}, "1")
		evs, _ := readAll(t, s, cursor, 100)
		if len(evs) != 1 || evs[0].Type != ledger.EventThresholdRecovered || !evs[0].Used.Equal(dec("1")) {
			t.Fatalf("the write after the leak: events %+v, want the recovery", evs)
		}
		if m := ttl("marked"); m <= 0 {
			t.Fatalf("TTL after the recovery: %s", m)
		}
		fill(t, s, ledger.BucketRef{Limit: "marked", Key: "k"}, "5") // reached again
		if _, err := s.PutLimit(ctx, ledger.Limit{Name: "marked", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second}); err != nil {
			t.Fatal(err)
		}
		fill(t, s, ledger.BucketRef{Limit: "marked", Key: "k"}, "1")
		cl, _ := s.fetchLimit(ctx, "marked")
		if f, err := s.client.HGetAll(ctx, s.k.bucket(cl.gen, "k")).Result(); err != nil || f["t"] != "" || ttl("marked") <= 0 {
			t.Fatalf("after the thresholds were removed: fields %v %v, TTL %s", f, err, ttl("marked"))
		}
	})
}

// TestEventsRetention: the global log keeps an event for the retention
// from its sealing; a cursor older than what is kept continues from the
// oldest event kept.
func TestEventsRetention(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		s := openTest(t, url, WithClock(clock.Now), WithEventRetention(time.Second))
		ctx := context.Background()
		if _, err := s.PutLimit(ctx, ledger.Limit{Name: "keep", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: parseThresholds(t, "5")}); err != nil {
			t.Fatal(err)
		}
		fill(t, s, ledger.BucketRef{Limit: "keep", Key: "first"}, "6")
		first, _ := readAll(t, s, "", 10)
		if len(first) != 1 {
			t.Fatalf("events: %+v", first)
		}
		// Each round seals one more event, which trims the log to the last
		// second; the first event goes once it is older than that.
		deadline := time.Now().Add(20 * time.Second)
		poll := time.NewTicker(50 * time.Millisecond)
		defer poll.Stop()
		for i := 0; ; i++ {
			fill(t, s, ledger.BucketRef{Limit: "keep", Key: fmt.Sprintf("k%d", i)}, "6")
			all, _ := readAll(t, s, "", 1000)
			if len(all) > 0 && all[0].ID != first[0].ID {
				after, _ := readAll(t, s, first[0].ID, 1000)
				if len(after) != len(all) || after[0].ID != all[0].ID {
					t.Fatalf("from a cursor no longer kept: %d events from %v, want the %d kept", len(after), after, len(all))
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the first event is still kept after %d rounds", i)
			}
			<-poll.C
		}
	})
}
