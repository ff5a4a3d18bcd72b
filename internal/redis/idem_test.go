package redis

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// TestMultiBucketIdempotencyKeyedByCall: the target of a multi-bucket
// Fillup is the call (route + key), not its first bucket. The same key sent
// again with another body is refused with ErrIdempotencyKeyReused and
// charges nothing — whether its first item is another bucket of the same
// slot, or (in Redis Cluster, where the record proper lives in the buckets'
// slot) its buckets are in another slot altogether; the same body replays.
func TestMultiBucketIdempotencyKeyedByCall(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithClock(func() time.Time { return time.UnixMicro(1_800_000_000_000_000) }))
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
				t.Fatal(err)
			}
			charge := func(keys ...string) []ledger.Charge {
				var out []ledger.Charge
				for _, k := range keys {
					out = append(out, ledger.Charge{Bucket: ledger.BucketRef{Limit: "l", Key: k}, Cost: decimal.NewFromInt(10)})
				}
				return out
			}
			levels := func() map[string]string {
				out := map[string]string{}
				for _, k := range []string{"{t}a", "{t}b", "{u}c", "{u}d"} {
					sn, err := s.Inspect(ctx, ledger.BucketRef{Limit: "l", Key: k})
					if err != nil {
						t.Fatal(err)
					}
					out[k] = sn.State.Level.String()
				}
				return out
			}
			first := ledger.Idempotency{Scope: "multi-fillup", Key: "k", Hash: "h1"}
			out, err := s.Fillup(ctx, charge("{t}a", "{t}b"), first)
			if err != nil || !out.Accepted || out.Replayed {
				t.Fatalf("first call: %+v %v", out, err)
			}
			before := levels()
			other := ledger.Idempotency{Scope: "multi-fillup", Key: "k", Hash: "h2"}
			for _, keys := range [][]string{{"{t}b", "{t}a"}, {"{u}c", "{u}d"}} {
				if _, err := s.Fillup(ctx, charge(keys...), other); !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
					t.Errorf("same key, another body on %v: %v, want ErrIdempotencyKeyReused", keys, err)
				}
			}
			if after := levels(); !maps.Equal(before, after) {
				t.Errorf("levels changed by refused calls: %v, then %v", before, after)
			}
			again, err := s.Fillup(ctx, charge("{t}a", "{t}b"), first)
			if err != nil || !again.Replayed || !again.Accepted || len(again.Items) != 2 ||
				!again.Items[1].Snapshot.State.Level.Equal(out.Items[1].Snapshot.State.Level) {
				t.Fatalf("retry with the same body: %+v %v, want the first answer replayed", again, err)
			}
			// A record an earlier version kept with the call's first item
			// replays: a retry across the upgrade is not charged again.
			cl, err := s.limitFor(ctx, "l")
			if err != nil {
				t.Fatal(err)
			}
			doc := `{"now":"1799999999000000","acc":true,"items":[` +
				`{"l":"30000000000000","u":"1799999999000000","h":"","lim":"","fits":true},` +
				`{"l":"40000000000000","u":"1799999999000000","h":"","lim":"","fits":true}]}`
			old := ledger.Idempotency{Scope: "multi-fillup", Key: "old", Hash: "h4"}
			if err := s.client.Set(ctx, s.k.idemMultiLegacy("{u}c", old.Scope, old.Key), "2:h4"+doc, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			before = levels()
			rep, err := s.Fillup(ctx, charge("{u}c", "{u}d"), old)
			if err != nil || !rep.Replayed || !rep.Accepted || len(rep.Items) != 2 ||
				!rep.Items[1].Snapshot.State.Level.Equal(bucket.AmountOf(40)) || !rep.Items[1].Snapshot.Limit.Capacity.Equal(cl.l.Capacity) {
				t.Fatalf("retry of a call an earlier version recorded: %+v %v, want its record replayed", rep, err)
			}
			if after := levels(); !maps.Equal(before, after) {
				t.Errorf("levels changed by a replay: %v, then %v", before, after)
			}

			// The same key on another route is another target.
			elsewhere := ledger.Idempotency{Scope: "fillup:l/{u}c", Key: "k", Hash: "h3"}
			if res, err := s.Fillup(ctx, charge("{u}c"), elsewhere); err != nil || res.Replayed || !res.Accepted {
				t.Fatalf("same key on a single-bucket route: %+v %v", res, err)
			}
		})
	}
}
