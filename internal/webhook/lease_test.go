package webhook_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/redis"
	"github.com/budgetd/budgetd/internal/testenv"
	"github.com/budgetd/budgetd/internal/webhook"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

func suffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openPostgres opens a PostgreSQL store on a schema of its own, dropped
// when t ends.
func openPostgres(t *testing.T) *postgres.Store {
	url := testenv.Server(t, testenv.Postgres)
	schema := "budgetd_hook_" + suffix()
	st, err := postgres.Open(context.Background(), url, postgres.WithSchema(schema), postgres.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	return st
}

// openRedis opens a Redis store under a prefix of its own, whose lease key
// is removed when t ends.
func openRedis(t *testing.T) *redis.Store {
	url := testenv.Server(t, testenv.Redis)
	prefix := "hook-" + suffix()
	st, err := redis.Open(context.Background(), url, redis.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		o, err := goredis.ParseURL(url)
		if err != nil {
			t.Error(err)
			return
		}
		c := goredis.NewClient(o)
		defer c.Close()
		c.Del(context.Background(), prefix+":lease:{"+prefix+"}:"+webhook.DefaultLeaseName)
	})
	return st
}

// openMySQL opens a MySQL store on url, closed when t ends.
func openMySQL(t *testing.T, url string) *mysql.Store {
	st, err := mysql.Open(context.Background(), url, mysql.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLeaseTakeover: two deliverers share a store's lease. The first
// delivers, the second sends nothing while the first holds the lease; the
// first dies (its context ends without a release), and the second takes
// over once the TTL ran out and delivers what came after, in order. On
// MySQL the two deliverers run on two Store instances of one database, as
// two budgetd instances would.
func TestLeaseTakeover(t *testing.T) {
	for _, kind := range []string{"postgres", "redis", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			var (
				out, out2       webhook.Outbox // d1's, d2's
				leases, leases2 webhook.Leases
				st              ledger.Store
			)
			switch kind {
			case "postgres":
				pg := openPostgres(t)
				st, out, leases = pg, pg, pg
			case "redis":
				// The Redis store's lease, with the events of a memory store
				// (one process shares it): the lease is what is tested.
				m := memory.New()
				st, out, leases = m, m, openRedis(t)
			case "mysql":
				url := testenv.MySQLDatabase(t)
				my1, my2 := openMySQL(t, url), openMySQL(t, url)
				st, out, leases, out2, leases2 = my1, my1, my1, my2, my2
			}
			if out2 == nil {
				out2, leases2 = out, leases
			}
			em := newEmitter(t, st)
			const ttl = 3 * time.Second
			r1, r2 := newReceiver(t, nil), newReceiver(t, nil)
			d1 := webhook.New(r1.srv.URL, key(t), out, leases, fast(webhook.WithLease(webhook.DefaultLeaseName, ttl), webhook.WithHolder("d1"), webhook.WithoutRelease())...)
			d2 := webhook.New(r2.srv.URL, key(t), out2, leases2, fast(webhook.WithLease(webhook.DefaultLeaseName, ttl), webhook.WithHolder("d2"))...)

			stop1 := run(t, d1)
			em.bucket(t, "a")
			r1.waitFor(t, "bucket a at d1", 30*time.Second, func(es []client.Event) bool { return len(byBucket(es, em.limit)["a"]) >= 16 })
			run(t, d2)
			em.bucket(t, "b")
			r1.waitFor(t, "bucket b at d1", 30*time.Second, func(es []client.Event) bool { return len(byBucket(es, em.limit)["b"]) >= 16 })
			// d2 has polled the lease several times by now (every TTL/3).
			if n := len(r2.events()); n != 0 {
				t.Fatalf("d2 sent %d events while d1 held the lease", n)
			}

			stop1() // dies: no cursor stored at the end, no release
			died := time.Now()
			n1 := len(r1.events())
			em.bucket(t, "c")
			want := em.want(t)
			got := r2.waitFor(t, "bucket c at d2", 30*time.Second, func(es []client.Event) bool { return len(byBucket(es, em.limit)["c"]) >= 16 })
			if d := time.Since(died); d < ttl/2 {
				t.Errorf("d2 delivered %v after d1 died, before its lease could expire (TTL %v)", d, ttl)
			}
			by := byBucket(got, em.limit)
			if fmt.Sprint(by["c"]) != fmt.Sprint(want["c"]) {
				t.Fatalf("d2 delivered c as %v, want %v", by["c"], want["c"])
			}
			// At least once: what d2 sent again of a and b (from the cursor
			// d1 stored last) is a run of each, in order.
			for _, k := range []string{"a", "b"} {
				if g, w := by[k], want[k]; !isRun(g, w) {
					t.Errorf("d2 sent again %s: %v, not a run of %v", k, g, w)
				}
			}
			if n := len(r1.events()); n != n1 {
				t.Errorf("d1 sent %d events after it died", n-n1)
			}
		})
	}
}

// isRun reports whether g is w[i:i+len(g)] for some i.
func isRun(g, w []string) bool {
	for i := 0; i+len(g) <= len(w); i++ {
		if fmt.Sprint(g) == fmt.Sprint(w[i:i+len(g)]) {
			return true
		}
	}
	return false
}

// flakyLeases fails every lease call while fail is set, and reports each
// failed call on failed.
type flakyLeases struct {
	webhook.Leases
	fail   atomic.Bool
	failed chan struct{}
}

func (f *flakyLeases) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, string, error) {
	if f.fail.Load() {
		select {
		case f.failed <- struct{}{}:
		default:
		}
		return false, "", fmt.Errorf("lease: %w", ledger.ErrUnavailable)
	}
	return f.Leases.AcquireLease(ctx, name, holder, ttl)
}

func (f *flakyLeases) AdvanceLease(ctx context.Context, name, holder, cursor string) (bool, error) {
	if f.fail.Load() {
		return false, fmt.Errorf("lease: %w", ledger.ErrUnavailable)
	}
	return f.Leases.AdvanceLease(ctx, name, holder, cursor)
}

// TestStopsWhenRenewalFails: when the lease cannot be renewed the deliverer
// sends nothing more, until it holds the lease again.
func TestStopsWhenRenewalFails(t *testing.T) {
	st := memory.New()
	em := newEmitter(t, st)
	leases := &flakyLeases{Leases: st, failed: make(chan struct{}, 1000)}
	r := newReceiver(t, nil)
	run(t, webhook.New(r.srv.URL, key(t), st, leases, fast(webhook.WithLease(webhook.DefaultLeaseName, 300*time.Millisecond))...))
	em.bucket(t, "a")
	r.waitFor(t, "bucket a", 30*time.Second, func(es []client.Event) bool { return len(byBucket(es, em.limit)["a"]) >= 16 })

	leases.fail.Store(true)
	waitFailed := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-leases.failed:
			case <-time.After(30 * time.Second):
				t.Fatal("the deliverer stopped asking for the lease")
			}
		}
	}
	// The failed renewal ends the session; the next failed call is Run's
	// attempt to take the lease again, made after the session has stopped.
	waitFailed(2)
	em.bucket(t, "b")
	waitFailed(3) // three more rounds (TTL/3 apart) without the lease
	if n := len(byBucket(r.events(), em.limit)["b"]); n != 0 {
		t.Fatalf("%d events of b sent without the lease", n)
	}
	leases.fail.Store(false)
	got := r.waitFor(t, "bucket b", 30*time.Second, func(es []client.Event) bool { return len(byBucket(es, em.limit)["b"]) >= 16 })
	if want := em.want(t)["b"]; fmt.Sprint(byBucket(got, em.limit)["b"]) != fmt.Sprint(want) {
		t.Fatalf("b received %v, want %v", byBucket(got, em.limit)["b"], want)
	}
}
