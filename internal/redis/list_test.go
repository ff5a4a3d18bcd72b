package redis

import (
	"context"
	"os"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// BenchmarkListBuckets measures a page of 100 buckets of 10,000 in a Redis
// that holds both limits' keys (scripts/test sets the addresses).
func BenchmarkListBuckets(b *testing.B) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		b.Run(env, func(b *testing.B) {
			url := os.Getenv(env)
			if url == "" {
				b.Skipf("%s is not set; run scripts/test", env)
			}
			if env == "BUDGETD_TEST_REDIS_CLUSTER" && !IsURL(url) {
				url = "redis+cluster://" + url
			}
			prefix := testPrefix()
			s, err := Open(context.Background(), url, WithPrefix(prefix))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { unlinkAll(s, prefix) })
			ledgertest.BenchListBuckets(b, s, 10_000)
		})
	}
}

// unlinkAll deletes every key of prefix and closes s.
func unlinkAll(s *Store, prefix string) {
	ctx := context.Background()
	_ = s.scanKeys(ctx, prefix+":*", func(ctx context.Context, c goredis.Cmdable, ks []string) error {
		p := c.Pipeline()
		for _, k := range ks {
			p.Unlink(ctx, k) // one key per command: a cluster node refuses keys of several slots
		}
		_, err := p.Exec(ctx)
		return err
	})
	s.Close()
}

// BenchmarkNearCap lists who is near the cap of a limit of 1,000,000
// buckets in a standalone Redis (docs/api.md, "Who is near the cap"),
// seeded by seedNearCap.
func BenchmarkNearCap(b *testing.B) {
	const n = 1_000_000
	url := os.Getenv("BUDGETD_TEST_REDIS")
	if url == "" {
		b.Skip("BUDGETD_TEST_REDIS is not set; run scripts/test")
	}
	prefix := testPrefix()
	s, err := Open(context.Background(), url, WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unlinkAll(s, prefix) })
	seedNearCap(b, s, "near", n)
	ledgertest.BenchNearCap(b, s, "near", n)
}

// seedNearCap creates limit as ledgertest.NearCapBench with n buckets as
// ledgertest.SeedNearCap makes them, quickly: the first bucket of each
// level is written by the store (a Fillup, and for level 0 a Drain after
// it), and every other bucket of that level is a copy of its hash, written
// in pipelines of 10,000 HSETs.
func seedNearCap(b *testing.B, s *Store, limit string, n int) {
	ctx := context.Background()
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, limit, ledgertest.NearCapBench); err != nil {
		b.Fatal(err)
	}
	cl, err := s.fetchLimit(ctx, limit)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := map[int][]any{} // level → the fields and values of its first bucket
	p := s.client.Pipeline()
	for i := range n {
		cost := ledgertest.NearCapCost(i)
		fields, ok := tmpl[cost]
		if !ok {
			ref := ledger.BucketRef{Limit: limit, Key: ledgertest.NearCapKey(i)}
			written := decimal.NewFromInt(int64(max(cost, 1)))
			if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: written}}, ledger.Idempotency{}); err != nil {
				b.Fatal(err)
			}
			if cost == 0 {
				if _, err := svc.Drain(ctx, ref, written, ledger.Idempotency{}, nil); err != nil {
					b.Fatal(err)
				}
			}
			h, err := s.client.HGetAll(ctx, s.k.bucket(cl.gen, ref.Key)).Result()
			if err != nil {
				b.Fatal(err)
			}
			for f, v := range h {
				fields = append(fields, f, v)
			}
			tmpl[cost] = fields
			continue
		}
		p.HSet(ctx, s.k.bucket(cl.gen, ledgertest.NearCapKey(i)), fields...)
		if p.Len() == 10_000 {
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if p.Len() > 0 {
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
