package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
)

// windowField reads a window bucket's slots field as stored ("" when the
// bucket has none).
func windowField(t *testing.T, s *Store, limit, key string) string {
	t.Helper()
	ctx := context.Background()
	cl, err := s.limitFor(ctx, limit)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.client.(goredis.Cmdable).HGet(ctx, s.k.bucket(cl.gen, key), "w").Result()
	if errors.Is(err, goredis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWindowSlotsBounded: charges and drains (of part of a slot, of many
// slots, of all) spread over many windows at irregular steps keep at most length/precision + 1 slots in the bucket's
// hash (read directly), reach that bound when every slot is charged, and
// leave the bucket's state equal, slot by slot, to package bucket's; once
// nothing counts, the next write drops the field.
func TestWindowSlotsBounded(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			start := time.Date(2026, 5, 20, 10, 0, 0, 0, time.UTC)
			clock.Set(start)
			s := openTest(t, serverURL(t, env), WithClock(clock.Now))
			ctx := context.Background()
			svc := ledger.NewService(s)
			w := ledger.Window{Length: time.Minute, Precision: time.Second}
			l, err := svc.PutLimit(ctx, "w", ledger.LimitSpec{Capacity: decimal.NewFromInt(1_000_000), Window: &w})
			if err != nil {
				t.Fatal(err)
			}
			bound := int(w.Slots()) + 1
			ref := ledger.BucketRef{Limit: "w", Key: "k"}
			rng := rand.New(rand.NewPCG(24, 1))
			var model bucket.State
			most := 0
			for i := range 400 {
				// Mostly one charge per slot, sometimes several in one slot,
				// sometimes a gap of several slots.
				step := time.Second
				switch rng.IntN(8) {
				case 0:
					step = time.Duration(rng.IntN(900)) * time.Millisecond
				case 1:
					step = time.Duration(2+rng.IntN(20)) * time.Second
				}
				clock.Advance(step + time.Duration(rng.IntN(1000))*time.Microsecond)
				now := clock.Now()
				cost := decimal.New(int64(1+rng.IntN(100_000)), -3)
				switch i % 100 {
				case 49:
					cost = decimal.NewFromInt(2000) // many slots
				case 99:
					cost = decimal.NewFromInt(1_000_000) // all of them
				}
				if i%10 == 9 {
					if _, err := svc.Drain(ctx, ref, cost, ledger.Idempotency{}, nil); err != nil {
						t.Fatal(err)
					}
					_, model = bucket.Drain(l.Rule(), model, now, ledger.Amount(cost))
				} else {
					if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: cost}}, ledger.Idempotency{}); err != nil {
						t.Fatal(err)
					}
					_, model = bucket.Fillup(l.Rule(), model, now, ledger.Amount(cost))
				}
				f := windowField(t, s, "w", "k")
				n := strings.Count(f, ",") + 1
				if f == "" {
					n = 0
				}
				if n > bound {
					t.Fatalf("after %d writes the bucket keeps %d slots, at most %d allowed: %s", i+1, n, bound, f)
				}
				most = max(most, n)
				sn, err := s.Inspect(ctx, ref)
				if err != nil {
					t.Fatal(err)
				}
				if !sn.State.Level.Equal(model.Level) || !sn.State.Updated.Equal(model.Updated) ||
					!slices.EqualFunc(sn.State.Slots, model.Slots, func(a, b bucket.Slot) bool { return a.Index == b.Index && a.Sum.Equal(b.Sum) }) {
					t.Fatalf("after %d writes at %v the state is %+v\nwant %+v", i+1, now, sn.State, model)
				}
			}
			// Then one charge in every slot for more than a window: the
			// bound is reached and kept.
			for range 2 * bound {
				clock.Advance(w.Precision)
				if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(1)}}, ledger.Idempotency{}); err != nil {
					t.Fatal(err)
				}
				f := windowField(t, s, "w", "k")
				n := strings.Count(f, ",") + 1
				if n > bound {
					t.Fatalf("charging every slot the bucket keeps %d slots, at most %d allowed: %s", n, bound, f)
				}
				most = max(most, n)
			}
			if most != bound {
				t.Errorf("the bucket kept at most %d slots, want the bound %d reached", most, bound)
			}
			cl, _ := s.limitFor(ctx, "w")
			mem, err := s.client.(goredis.Cmdable).MemoryUsage(ctx, s.k.bucket(cl.gen, "k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("MEMORY USAGE of a bucket with %d slots of sum 1: %d bytes (field w: %d bytes)", most, mem, len(windowField(t, s, "w", "k")))
			// Idle for a whole window: nothing counts, and the next write
			// (a hold settles the bucket) drops the slots.
			clock.Advance(w.Length + w.Precision)
			if _, err := svc.Reserve(ctx, ref, decimal.NewFromInt(1), time.Minute, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			if f := windowField(t, s, "w", "k"); f != "" {
				t.Errorf("a window later the bucket still keeps slots %s", f)
			}
		})
	}
}

// TestWindowTTL: an idle window bucket lives exactly until its newest slot
// stops counting (plus the store's margin) and until its last hold has
// expired, so it vanishes by TTL only once nothing counts.
func TestWindowTTL(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			t0 := time.Date(2026, 5, 20, 10, 0, 20, 0, time.UTC)
			clock.Set(t0)
			s := openTest(t, serverURL(t, env), WithClock(clock.Now))
			ctx := context.Background()
			svc := ledger.NewService(s)
			w := ledger.Window{Length: time.Hour, Precision: time.Minute}
			if _, err := svc.PutLimit(ctx, "w", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Window: &w}); err != nil {
				t.Fatal(err)
			}
			fill := func(key string, cost int64) {
				t.Helper()
				if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "w", Key: key}, Cost: decimal.NewFromInt(cost)}}, ledger.Idempotency{}); err != nil {
					t.Fatal(err)
				}
			}
			// left is the time left until the key expires, from its
			// PEXPIRETIME and the server's clock.
			left := func(key string) time.Duration {
				t.Helper()
				cl, err := s.limitFor(ctx, "w")
				if err != nil {
					t.Fatal(err)
				}
				c := s.client.(goredis.Cmdable)
				bk := s.k.bucket(cl.gen, key)
				at, err := c.PExpireTime(ctx, bk).Result()
				if err != nil {
					t.Fatal(err)
				}
				if at < 0 {
					t.Fatalf("bucket %s has no TTL (PEXPIRETIME %v)", key, at)
				}
				tm, err := c.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				return at - time.Duration(tm.UnixMilli())*time.Millisecond // at: ms since the epoch, as a Duration
			}
			// counts is how long after now a charge made at charged counts:
			// to length after the end of its slot.
			counts := func(charged time.Time) time.Duration {
				return charged.Truncate(w.Precision).Add(w.Precision + w.Length).Sub(clock.Now())
			}
			// check: the key outlives what counts, cover, and vanishes at
			// most the store's margin (ttlSlack) after it.
			check := func(what, key string, cover time.Duration) {
				t.Helper()
				if d := left(key); d < cover || d > cover+ttlSlack+time.Millisecond {
					t.Errorf("%s: bucket %s expires in %v, want from %v to %v", what, key, d, cover, cover+ttlSlack)
				}
			}
			fill("a", 10)
			fill("b", 10)
			check("after a charge", "a", counts(t0))
			// Half a window later a second charge moves the deadline to the
			// end of its own slot's count.
			clock.Advance(30*time.Minute + 7*time.Second)
			t1 := clock.Now()
			fill("a", 5)
			fill("b", 5)
			check("after a later charge", "a", counts(t1))
			// Draining the newest slot empty leaves the older one to set the
			// deadline.
			if _, err := svc.Drain(ctx, ledger.BucketRef{Limit: "w", Key: "a"}, decimal.NewFromInt(5), ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			if f := windowField(t, s, "w", "a"); strings.Count(f, ":") != 1 {
				t.Errorf("after draining the newest slot the bucket keeps %q, want one slot", f)
			}
			check("after draining the newest slot", "a", counts(t0))
			// A hold that outlives every slot keeps the bucket to its expiry.
			if _, err := svc.Reserve(ctx, ledger.BucketRef{Limit: "w", Key: "b"}, decimal.NewFromInt(1), 3*time.Hour, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			check("with a 3h hold", "b", 3*time.Hour)
		})
	}
}

// TestWindowDifferential replays a random sequence of every write on two
// window limits of different lengths and precisions (fillups, some denied,
// multi-bucket fillups, holds committed, over-committed, released and left
// to expire, drains, a clock that steps back a little) and demands package
// bucket's decision for every call and its state, slot by slot, after it.
func TestWindowDifferential(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			clock.Set(time.Date(2026, 5, 20, 10, 0, 0, 123456000, time.UTC))
			s := openTest(t, serverURL(t, env), WithClock(clock.Now))
			ctx := context.Background()
			svc := ledger.NewService(s)
			limits := map[string]ledger.Limit{}
			for name, w := range map[string]ledger.Window{
				"w": {Length: 5 * time.Minute, Precision: 10 * time.Second},
				"v": {Length: time.Minute, Precision: time.Second},
			} {
				l, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Window: &w, History: name == "w"})
				if err != nil {
					t.Fatal(err)
				}
				limits[name] = l
			}
			refs := []ledger.BucketRef{{Limit: "w", Key: "{t}a"}, {Limit: "v", Key: "{t}b"}}
			model := map[ledger.BucketRef]bucket.State{}
			rule := func(r ledger.BucketRef) bucket.Limit { return limits[r.Limit].Rule() }
			same := func(what string, got, want bucket.Decision) {
				t.Helper()
				if got.Accepted != want.Accepted || !got.Level.Equal(want.Level) || !got.Held.Equal(want.Held) ||
					!got.Remaining.Equal(want.Remaining) || !got.RetryAfter.Equal(want.RetryAfter) ||
					got.NeverFits != want.NeverFits || !got.At.Equal(want.At) || !got.ClearsAt.Equal(want.ClearsAt) {
					t.Fatalf("%s at %v: got %+v\nwant %+v", what, clock.Now(), got, want)
				}
			}
			check := func(what string) {
				t.Helper()
				now := clock.Now()
				for _, r := range refs {
					sn, err := s.Inspect(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					got, want := sn.State, model[r]
					active := func(st bucket.State) []string {
						var out []string
						for _, h := range bucket.ActiveHolds(st, now) {
							out = append(out, h.Amount.String()+"@"+h.ExpiresAt.UTC().String())
						}
						slices.Sort(out)
						return out
					}
					slotsEq := slices.EqualFunc(got.Slots, want.Slots, func(a, b bucket.Slot) bool { return a.Index == b.Index && a.Sum.Equal(b.Sum) })
					if !got.Level.Equal(want.Level) || !got.Updated.Equal(want.Updated) || !slotsEq ||
						!slices.Equal(active(got), active(want)) {
						t.Fatalf("after %s at %v: %v is %+v\nwant %+v", what, now, r, got, want)
					}
				}
			}
			rng := rand.New(rand.NewPCG(24, 2))
			amount := func(max int) decimal.Decimal { return decimal.New(int64(rng.IntN(max*1000+1)), -3) }
			seen := map[string]int{} // what the sequence covered
			for i := range 300 {
				switch x := rng.IntN(20); {
				case x == 0:
					clock.Advance(-time.Duration(rng.IntN(20_000_000)) * time.Microsecond) // back, within ledger.ClockStep
				case x < 4:
					clock.Advance(time.Duration(rng.IntN(120_000_000)) * time.Microsecond)
				default:
					clock.Advance(time.Duration(rng.IntN(5_000_000)) * time.Microsecond)
				}
				now := clock.Now()
				r := refs[rng.IntN(len(refs))]
				var what string
				switch op := rng.IntN(10); {
				case op < 4:
					cost := amount(40)
					what = fmt.Sprintf("%d: fillup %v %s", i, r, cost)
					res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: cost}}, ledger.Idempotency{})
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					want, ns := bucket.Fillup(rule(r), model[r], now, ledger.Amount(cost))
					if !want.Accepted {
						want = bucket.CanAccept(rule(r), model[r], now, ledger.Amount(cost))
					}
					same(what, res.Items[0], want)
					model[r] = ns
					seen[fmt.Sprint("fillup accepted ", want.Accepted)]++
				case op == 4:
					ca, cb := amount(30), amount(20)
					what = fmt.Sprintf("%d: multi-bucket fillup %s, %s", i, ca, cb)
					res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: refs[0], Cost: ca}, {Bucket: refs[1], Cost: cb}}, ledger.Idempotency{})
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					da := bucket.CanAccept(rule(refs[0]), model[refs[0]], now, ledger.Amount(ca))
					db := bucket.CanAccept(rule(refs[1]), model[refs[1]], now, ledger.Amount(cb))
					if res.Accepted != (da.Accepted && db.Accepted) {
						t.Fatalf("%s: accepted %v, want %v", what, res.Accepted, da.Accepted && db.Accepted)
					}
					seen[fmt.Sprint("multi-bucket accepted ", res.Accepted)]++
					if res.Accepted {
						da, model[refs[0]] = bucket.Fillup(rule(refs[0]), model[refs[0]], now, ledger.Amount(ca))
						db, model[refs[1]] = bucket.Fillup(rule(refs[1]), model[refs[1]], now, ledger.Amount(cb))
					} // a denial answers each item's own CanAccept
					same(what+" (first)", res.Items[0], da)
					same(what+" (second)", res.Items[1], db)
				case op < 7:
					a, ttl := amount(30), time.Duration(1+rng.IntN(180))*time.Second
					what = fmt.Sprintf("%d: reserve %v %s for %v", i, r, a, ttl)
					res, err := svc.Reserve(ctx, r, a, ttl, ledger.Idempotency{}, nil)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					want, ns := bucket.Reserve(rule(r), model[r], now, ledger.Amount(a), now.Add(ttl))
					if !want.Accepted {
						want = bucket.CanAccept(rule(r), model[r], now, ledger.Amount(a))
					} else {
						ns.Holds[len(ns.Holds)-1].ID = res.Reservation.ID
						model[r] = ns
						seen["hold"]++
					}
					same(what, res.Decision, want)
				case op < 9:
					st := model[r]
					k := slices.IndexFunc(st.Holds, func(h bucket.Hold) bool { return h.ExpiresAt.After(now) })
					if k < 0 {
						continue
					}
					h := st.Holds[k]
					if rng.IntN(3) == 0 {
						what = fmt.Sprintf("%d: release %v %s", i, r, h.Amount)
						if _, err := svc.Release(ctx, h.ID, ledger.Idempotency{}, nil); err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						model[r] = bucket.Resolve(rule(r), st, now, k, bucket.Amount{})
						seen["release"]++
						break
					}
					actual := amount(45) // more than held at times: an overrun
					what = fmt.Sprintf("%d: commit %v %s of %s", i, r, actual, h.Amount)
					if _, err := svc.Commit(ctx, h.ID, decimal.NewNullDecimal(actual), true, ledger.Idempotency{}, nil); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					seen[fmt.Sprint("commit overrun ", actual.GreaterThan(h.Amount.Decimal()))]++
					model[r] = bucket.Resolve(rule(r), st, now, k, ledger.Amount(actual))
				default:
					a := amount(60)
					what = fmt.Sprintf("%d: drain %v %s", i, r, a)
					res, err := svc.Drain(ctx, r, a, ledger.Idempotency{}, nil)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					var removed bucket.Amount
					removed, model[r] = bucket.Drain(rule(r), model[r], now, ledger.Amount(a))
					if !ledger.Amount(res.Removed).Equal(removed) {
						t.Fatalf("%s: removed %s, want %s", what, res.Removed, removed)
					}
					seen[fmt.Sprint("drain all ", removed.Cmp(ledger.Amount(a)) < 0)]++
				}
				check(what)
			}
			for _, k := range []string{"fillup accepted true", "fillup accepted false", "multi-bucket accepted true", "multi-bucket accepted false",
				"hold", "release", "commit overrun true", "commit overrun false", "drain all true", "drain all false"} {
				if seen[k] == 0 {
					t.Errorf("the sequence has no %q: %v", k, seen)
				}
			}
		})
	}
}
