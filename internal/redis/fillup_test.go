package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// TestFillupIdempotencyRecordFormat: the record a Fillup keeps for its
// Idempotency-Key is its reply with the limit of each bucket filled in, so a
// replay shows the limit of the original call; and a record as an earlier
// version kept it (a JSON document, {now, acc, items: [{l, u, h, lim,
// fits}]}) still replays, so a retry across an upgrade is not charged again.
func TestFillupIdempotencyRecordFormat(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithClock(func() time.Time { return time.UnixMicro(1_800_000_000_000_000) }))
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "{t}a"}
			idem := ledger.Idempotency{Scope: "fillup:l/{t}a", Key: "k1", Hash: "h1"}
			out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: decimal.RequireFromString("12.37")}}, idem)
			if err != nil || !out.Accepted || out.Replayed {
				t.Fatalf("first call: %+v %v", out, err)
			}
			cl, err := s.limitFor(ctx, "l")
			if err != nil {
				t.Fatal(err)
			}
			ik := s.k.idemBucket(cl.gen, ref.Key, idem.Scope, idem.Key)
			rec, err := s.client.(goredis.Cmdable).Get(ctx, ik).Result()
			if err != nil {
				t.Fatal(err)
			}
			_, body, _ := strings.Cut(rec, ":"+idem.Hash)
			r, err := parseReply([]string{"replay", body})
			if err != nil {
				t.Fatalf("record %q: %v", rec, err)
			}
			if !r.replayed || r.now.UnixMicro() != 1_800_000_000_000_000 || r.x != "1" || len(r.buckets) != 1 {
				t.Fatalf("record %q", rec)
			}
			if it := r.buckets[0]; it.L != "12370000000000" || it.U != "1800000000000000" || it.H != "" || it.Lim != cl.args.doc {
				t.Fatalf("record item %+v, want level 12.37 in units, the call's time and limit", it)
			}
			again, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: decimal.RequireFromString("12.37")}}, idem)
			if err != nil || !again.Replayed || !again.Items[0].Snapshot.State.Level.Equal(out.Items[0].Snapshot.State.Level) {
				t.Fatalf("replay: %+v %v", again, err)
			}

			// A record as an earlier version stored it, with a limit that
			// differs from the current one: the replay shows that limit.
			old := `{"now":"1799999999000000","acc":false,"items":[{"l":"99000000000000","u":"1799999999000000","h":"","lim":` +
				`"{\"n\":\"l\",\"c\":\"99\",\"a\":\"2\",\"p\":1000000,\"h\":false,\"ct\":0,\"ut\":0}","fits":false}]}`
			idem2 := ledger.Idempotency{Scope: idem.Scope, Key: "k2", Hash: "h2"}
			ik2 := s.k.idemBucket(cl.gen, ref.Key, idem2.Scope, idem2.Key)
			if err := s.client.(goredis.Cmdable).Set(ctx, ik2, "2:h2"+old, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			rep, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(1)}}, idem2)
			if err != nil || !rep.Replayed || rep.Accepted || len(rep.Items) != 1 {
				t.Fatalf("replay of an earlier record: %+v %v", rep, err)
			}
			sn := rep.Items[0].Snapshot
			if !sn.State.Level.Equal(bucket.AmountOf(99)) || !sn.Limit.Capacity.Equal(decimal.NewFromInt(99)) || !sn.Limit.LeakAmount.Equal(decimal.NewFromInt(2)) {
				t.Fatalf("replayed snapshot %+v, want level 99 under capacity 99, leak 2", sn)
			}
		})
	}
}
