package redis

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// TestLeanFillupThresholds: a single-bucket Fillup on a leaky limit with
// thresholds that the charge does not reach takes fillup_lean, and leaves
// the bucket exactly as the general path does (the marks notice writes);
// the Fillup that reaches a threshold, and every one on a bucket with a
// reached mark, takes the general path and emits what notice does: one
// crossed event, then none. The lean path is told apart by a copy of the
// library whose general Fillup path fails (BUDGETD_GENERAL_PATH).
func TestLeanFillupThresholds(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		s := openTest(t, url, WithClock(clock.Now))
		ctx := context.Background()
		ths := parseThresholds(t, "50%", "80%", "900000000000")
		if _, err := s.PutLimit(ctx, ledger.Limit{Name: "lt", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour,
			Thresholds: ths}); err != nil {
			t.Fatal(err)
		}
		sig := strconv.FormatUint(uint64(ledger.ThresholdSig(ths)), 10)
		nonce := strings.ReplaceAll(testPrefix(), "-", "_")
		body := luaConstants() + arithLua + "\n" + budgetdLua
		general := "    local c = bkt(keys[2 * i - 1], keys[2 * i], ceil"
		if strings.Count(body, general) != 1 {
			t.Fatalf("the general path of fillup is not %q", general)
		}
		body = strings.Replace(body, general, "    error('BUDGETD_GENERAL_PATH')\n"+general, 1)
		src := "#!lua name=budgetd_test_" + nonce + "\nlocal V = '_t" + nonce + "'\n" + body
		if err := s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error { return c.FunctionLoadReplace(ctx, src).Err() }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
				return c.FunctionDelete(ctx, "budgetd_test_"+nonce).Err()
			})
		})
		ref := func(key string) ledger.BucketRef { return ledger.BucketRef{Limit: "lt", Key: "{t}" + key} }
		// lean is the store's single-bucket Fillup call, sent to the copy.
		lean := func(key, cost string) error {
			t.Helper()
			keys, args, err := fillupCall(ctx, s, ref(key), dec(cost))
			if err != nil {
				t.Fatal(err)
			}
			return s.client.FCall(ctx, "budgetd_fillup_t"+nonce, keys, args...).Err()
		}
		mustGeneral := func(key, cost string) {
			t.Helper()
			if err := lean(key, cost); err == nil || !strings.Contains(err.Error(), "BUDGETD_GENERAL_PATH") {
				t.Fatalf("Fillup %s on %s: %v, want the general path", cost, key, err)
			}
		}
		fields := func(key string) map[string]string {
			t.Helper()
			tg, _ := s.target(ctx, ref(key))
			m, err := s.client.HGetAll(ctx, tg.bk).Result()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		// A fresh bucket, then one with the marks notice wrote: both lean.
		for i := 0; i < 2; i++ {
			if err := lean("a", "10"); err != nil {
				t.Fatalf("Fillup %d below the thresholds: %v, want the lean path", i, err)
			}
		}
		// The same two Fillups on the general path (an Idempotency-Key
		// keeps a call off the lean one) leave the same bucket.
		for i := 0; i < 2; i++ {
			if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref("b"), Cost: dec("10")}},
				ledger.Idempotency{Key: fmt.Sprint("k", i), Hash: "h"}); err != nil {
				t.Fatal(err)
			}
		}
		if a, b := fields("a"), fields("b"); fmt.Sprint(a) != fmt.Sprint(b) || a["t"] != sig+":0:0" || a["l"] == "" {
			t.Fatalf("lean bucket %v, general bucket %v: want the same, with marks of none reached", a, b)
		}
		if evs, _ := readAll(t, s, "", 100); len(evs) != 0 {
			t.Fatalf("events %v below every threshold", evs)
		}
		// 20 + 29.999999 stays below 50% of 100 (lean); 0.000001 more reaches it.
		if err := lean("a", "29.999999"); err != nil {
			t.Fatalf("Fillup to just below 50%%: %v, want the lean path", err)
		}
		mustGeneral("a", "0.000001")
		fill(t, s, ref("a"), "0.000001")
		evs, cursor := readAll(t, s, "", 100)
		if len(evs) != 1 || evs[0].Type != ledger.EventThresholdCrossed || evs[0].Threshold != "50%" || !evs[0].Used.Equal(dec("50")) {
			t.Fatalf("events %v, want one 50%% crossed at 50", evs)
		}
		// A bucket with a reached mark: the general path, no new event.
		mustGeneral("a", "1")
		fill(t, s, ref("a"), "1")
		if evs, _ := readAll(t, s, cursor, 100); len(evs) != 0 {
			t.Fatalf("events %v after a Fillup that crossed nothing", evs)
		}
		if f := fields("a"); f["t"] != sig+":1:0" || f["l"] != "51000000000000" {
			t.Fatalf("bucket %v, want level 51 and the 50%% mark", f)
		}
	})
}

// TestThresholdMarksUpgrade: a bucket whose threshold marks an earlier
// version wrote in three fields (ts, ta, tp) behaves after the upgrade as
// it did: a reached mark emits no second crossed event, an unreached one
// crosses once, a reached one recovers once; the first write moves the
// marks into the field t and drops the old ones. A bucket with both (an
// earlier version, during a rolling upgrade, marked it after this one did)
// goes by the old fields, which only that version writes. A limit whose
// thresholds were removed drops them all.
func TestThresholdMarksUpgrade(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		s := openTest(t, url, WithClock(clock.Now))
		ctx := context.Background()
		ths := parseThresholds(t, "50%", "80%", "900000000000")
		put := func(th []ledger.Threshold) {
			t.Helper()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "up", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour,
				Thresholds: th}); err != nil {
				t.Fatal(err)
			}
		}
		put(ths)
		sig := strconv.FormatUint(uint64(ledger.ThresholdSig(ths)), 10)
		ref := func(key string) ledger.BucketRef { return ledger.BucketRef{Limit: "up", Key: key} }
		now := strconv.FormatInt(clock.Now().UnixMicro(), 10)
		// stored writes a bucket as the earlier version left it: its level
		// (whole units) at now, and its marks.
		stored := func(key, level string, marks ...string) {
			t.Helper()
			tg, err := s.target(ctx, ref(key))
			if err != nil {
				t.Fatal(err)
			}
			args := []any{"l", level + "000000000000", "u", now}
			for _, m := range marks {
				args = append(args, m)
			}
			if err := s.client.HSet(ctx, tg.bk, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		fields := func(key string) map[string]string {
			t.Helper()
			tg, _ := s.target(ctx, ref(key))
			m, err := s.client.HGetAll(ctx, tg.bk).Result()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		marked := func(key, want string) {
			t.Helper()
			f := fields(key)
			if f["t"] != want || f["ts"] != "" || f["ta"] != "" || f["tp"] != "" {
				t.Fatalf("bucket %s: %v, want the marks %q in t alone", key, f, want)
			}
		}
		stored("reached", "60", "ts", sig, "ta", "1", "tp", "0")   // 50% reached
		stored("unreached", "40", "ts", sig, "ta", "0", "tp", "0") // none reached
		stored("recovers", "60", "ts", sig, "ta", "3", "tp", "0")  // 50% and 80% marked, 60 used
		stored("both", "60", "t", sig+":0:0", "ts", sig, "ta", "1", "tp", "0")
		fill(t, s, ref("reached"), "1")    // 61: nothing new
		fill(t, s, ref("unreached"), "20") // 60: crosses 50%
		fill(t, s, ref("recovers"), "1")   // 61: below 80%, recovers it
		fill(t, s, ref("both"), "1")       // 61: 50% reached, by the old fields
		evs, cursor := readAll(t, s, "", 100)
		got := map[string]string{}
		for _, ev := range evs {
			got[ev.Bucket.Key] += string(ev.Type) + " " + ev.Threshold + "@" + ev.Used.String() + ";"
		}
		want := map[string]string{"unreached": "threshold.crossed 50%@60;", "recovers": "threshold.recovered 80%@61;"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		for _, k := range []string{"reached", "unreached", "recovers", "both"} {
			marked(k, sig+":1:0")
		}
		// Written again: the marks in t keep the buckets as they were.
		fill(t, s, ref("reached"), "1")
		fill(t, s, ref("both"), "1")
		fill(t, s, ref("unreached"), "25") // 85: crosses 80%
		if evs, _ := readAll(t, s, cursor, 100); len(evs) != 1 || evs[0].Bucket.Key != "unreached" || evs[0].Threshold != "80%" ||
			evs[0].Type != ledger.EventThresholdCrossed {
			t.Fatalf("events %+v, want unreached's 80%% crossed alone", evs)
		}
		marked("unreached", sig+":3:0")
		// The thresholds removed: the next write drops old marks and new.
		stored("old", "10", "ts", sig, "ta", "0", "tp", "0")
		put(nil)
		fill(t, s, ref("old"), "1")
		fill(t, s, ref("reached"), "1")
		for _, k := range []string{"old", "reached"} {
			if f := fields(k); len(f) != 2 || f["l"] == "" || f["u"] == "" {
				t.Fatalf("bucket %s after the thresholds were removed: %v, want only l and u", k, f)
			}
		}
	})
}

// fillupCall is the KEYS and ARGV of the function call of a single-bucket
// Fillup without Idempotency-Key, as Store.Fillup sends it.
func fillupCall(ctx context.Context, s *Store, ref ledger.BucketRef, cost decimal.Decimal) ([]string, []any, error) {
	tg, err := s.target(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	keys, check := []string{tg.bk, tg.hk}, "0"
	if !s.cluster {
		keys, check = append(keys, tg.lim.args.defKey), "1"
	}
	args := append([]any{s.nowArg(), "", check, 1}, tg.lim.args.list(s.k, tg.slot, s.keepArg, ledger.Idempotency{})...)
	return keys, append(args, units(cost), ""), nil
}

// BenchmarkFillupScript measures the function call of a single-bucket
// Fillup by itself: calls sent in pipelines of 64 (so a call costs about
// what Redis spends on it), on one hot bucket and spread over 100,000, on
// BenchmarkFillup's limit without thresholds ("none") and with three the
// load never reaches ("th": BenchmarkFillupThresholds's).
func BenchmarkFillupScript(b *testing.B) {
	url := os.Getenv("BUDGETD_TEST_REDIS")
	if url == "" {
		b.Skip("BUDGETD_TEST_REDIS is not set")
	}
	ctx := context.Background()
	var th []ledger.Threshold
	for _, x := range []string{"50%", "80%", "900000000000"} {
		t, err := ledger.ParseThreshold("thresholds", x)
		if err != nil {
			b.Fatal(err)
		}
		th = append(th, t)
	}
	for _, c := range []struct {
		name string
		keys int
	}{{"hot", 1}, {"spread", 100000}} {
		for _, v := range []struct {
			name string
			th   []ledger.Threshold
		}{{"none", nil}, {"th", th}} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				prefix := testPrefix()
				s, err := Open(ctx, url, WithPrefix(prefix))
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					_ = s.scanKeys(ctx, prefix+":*", func(ctx context.Context, c goredis.Cmdable, ks []string) error {
						return c.Unlink(ctx, ks...).Err()
					})
					s.Close()
				}()
				if _, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.New(1, 12), LeakAmount: decimal.NewFromInt(1000),
					LeakPer: time.Second, Thresholds: v.th}); err != nil {
					b.Fatal(err)
				}
				cost := decimal.RequireFromString("12.37")
				b.ResetTimer()
				for i := 0; i < b.N; i += 64 {
					pipe := s.client.Pipeline()
					for j := i; j < min(i+64, b.N); j++ {
						keys, args, err := fillupCall(ctx, s, ledger.BucketRef{Limit: "l", Key: fmt.Sprint(j % c.keys)}, cost)
						if err != nil {
							b.Fatal(err)
						}
						pipe.FCall(ctx, fn("fillup"), keys, args...)
					}
					cmds, err := pipe.Exec(ctx)
					if err != nil {
						b.Fatal(err)
					}
					for _, cmd := range cmds {
						if r, _ := cmd.(*goredis.Cmd).StringSlice(); len(r) < 3 || r[2] != "1" {
							b.Fatalf("Fillup answered %v, want accepted", r)
						}
					}
				}
			})
		}
	}
}
