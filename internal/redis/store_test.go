package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/testenv"
)

// serverURL returns the URL of the test server named by env (a redis:// URL
// or a comma-separated list of cluster nodes), skipping the test when it is
// unset, or failing it on CI.
func serverURL(t *testing.T, env string) string {
	t.Helper()
	v := testenv.Server(t, env)
	if env == "BUDGETD_TEST_REDIS_CLUSTER" && !IsURL(v) {
		v = "redis+cluster://" + v
	}
	return v
}

func testPrefix() string {
	var b [6]byte
	rand.Read(b[:])
	return "bt-" + hex.EncodeToString(b[:])
}

// openTest opens a store with a fresh prefix and removes its keys when the
// test ends.
func openTest(t *testing.T, url string, opts ...Option) *Store {
	t.Helper()
	prefix := testPrefix()
	// A long call deadline: the test machine may be far busier than Redis
	// ever is in service (TestDeadlineCoversQueue checks the default).
	s, err := Open(context.Background(), url, append([]Option{WithPrefix(prefix), WithCallTimeout(20 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		err := s.scanKeys(ctx, prefix+":*", func(ctx context.Context, c goredis.Cmdable, ks []string) error {
			p := c.Pipeline()
			for _, k := range ks {
				p.Unlink(ctx, k)
			}
			_, err := p.Exec(ctx)
			return err
		})
		if err != nil && !strings.Contains(err.Error(), "closed") {
			t.Errorf("cleanup: %v", err)
		}
		s.Close()
	})
	return s
}

func TestConformanceStandalone(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS")
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return openTest(t, url, WithClock(clock.Now))
	})
}

func TestConformanceCluster(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS_CLUSTER")
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return openTest(t, url, WithClock(clock.Now))
	})
}

func TestOverrideExpiryStandalone(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS")
	ledgertest.RunOverrideExpiry(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return openTest(t, url, WithClock(clock.Now))
	})
}

func TestOverrideExpiryCluster(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS_CLUSTER")
	ledgertest.RunOverrideExpiry(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return openTest(t, url, WithClock(clock.Now))
	})
}

// The changes of overrides around an expiry (ledgertest.RunOverrideExpiryChanges),
// standalone and in a cluster: every terms suite runs on every store.
func TestOverrideExpiryChangesStandalone(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS")
	ledgertest.RunOverrideExpiryChanges(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return openTest(t, url, WithClock(clock.Now))
	})
}

func TestOverrideExpiryChangesCluster(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS_CLUSTER")
	ledgertest.RunOverrideExpiryChanges(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return openTest(t, url, WithClock(clock.Now))
	})
}

var _ = time.Second
