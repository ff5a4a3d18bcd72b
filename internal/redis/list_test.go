package redis

import (
	"context"
	"os"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	goredis "github.com/redis/go-redis/v9"
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
			b.Cleanup(func() {
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
			})
			ledgertest.BenchListBuckets(b, s, 10_000)
		})
	}
}
