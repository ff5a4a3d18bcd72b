package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	goredis "github.com/redis/go-redis/v9"
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
		if _, err := s.PutLimit(ctx, ledger.Limit{Name: "lt", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour,
			Thresholds: parseThresholds(t, "50%", "80%", "900000000000")}); err != nil {
			t.Fatal(err)
		}
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
			tg, err := s.target(ctx, ref(key))
			if err != nil {
				t.Fatal(err)
			}
			keys, check := []string{tg.bk, tg.hk}, "0"
			if !s.cluster {
				keys, check = append(keys, tg.lim.args.defKey), "1"
			}
			args := append([]any{s.nowArg(), "", check, 1}, tg.lim.args.list(s.k, tg.slot, s.keepArg, ledger.Idempotency{})...)
			return s.client.FCall(ctx, "budgetd_fillup_t"+nonce, keys, append(args, units(dec(cost)), "")...).Err()
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
		if a, b := fields("a"), fields("b"); fmt.Sprint(a) != fmt.Sprint(b) || a["ta"] != "0" || a["l"] == "" {
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
		if f := fields("a"); f["ta"] != "1" || f["l"] != "51000000000000" {
			t.Fatalf("bucket %v, want level 51 and the 50%% mark", f)
		}
	})
}
