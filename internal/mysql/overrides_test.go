package mysql_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/mysql"
)

// capacityOf is the capacity a CanAccept of key on limit "l" answers with.
func capacityOf(t *testing.T, svc *ledger.Service, key string) string {
	t.Helper()
	out, err := svc.CanAccept(context.Background(), ledger.BucketRef{Limit: "l", Key: key}, decimal.NewFromInt(1))
	if err != nil {
		t.Fatalf("CanAccept %q: %v", key, err)
	}
	return out.Capacity.String()
}

func capOverride(pattern string, capacity int64) ledger.Override {
	return ledger.Override{Pattern: pattern, Capacity: decimal.NewNullDecimal(decimal.NewFromInt(capacity))}
}

// TestOverridesTwoStores: two Stores on one database, each with its own
// copy of the limit's overrides: B sees A's PUT, replacement and DELETE of
// an override (exact and prefix) at its next decision, on a Fillup as on a
// CanAccept, with the decision cache off and on, although it had read the
// limit's overrides before each change.
func TestOverridesTwoStores(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			ctx := context.Background()
			url := newDatabase(t)
			opts := []mysql.Option{mysql.WithCache(0, 0)}
			if cached {
				opts = []mysql.Option{mysql.WithCache(mysql.DefaultCacheEntries, mysql.DefaultCacheBytes)}
			}
			a := ledger.NewService(open(t, url, append(opts, mysql.WithPruneInterval(0))...))
			b := ledger.NewService(open(t, url, append(opts, mysql.WithPruneInterval(0))...))
			if _, err := a.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				if _, err := a.PutOverride(ctx, "l", capOverride(fmt.Sprintf("other-%d", i), 7)); err != nil {
					t.Fatal(err)
				}
			}
			fill := func(svc *ledger.Service, key string) string {
				t.Helper()
				out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: key}, Cost: d("1")}}, ledger.Idempotency{})
				if err != nil || !out.Accepted {
					t.Fatalf("fillup %q: %+v %v", key, out, err)
				}
				return out.Items[0].Capacity.String()
			}
			if got := fill(b, "vip"); got != "100" {
				t.Fatalf("B before any override of vip: capacity %s, want 100", got)
			}
			steps := []struct {
				change func() error
				key    string
				want   string
			}{
				{func() error { _, err := a.PutOverride(ctx, "l", capOverride("vip", 500)); return err }, "vip", "500"},
				{func() error { _, err := a.PutOverride(ctx, "l", capOverride("vip", 600)); return err }, "vip", "600"},
				{func() error { _, err := a.PutOverride(ctx, "l", capOverride("v*", 50)); return err }, "vx", "50"},
				{func() error { return a.DeleteOverride(ctx, "l", "vip") }, "vip", "50"},
				{func() error { return a.DeleteOverride(ctx, "l", "v*") }, "vip", "100"},
				{func() error { _, err := a.PutOverride(ctx, "l", capOverride("vip", 700)); return err }, "vip", "700"},
			}
			for i, st := range steps {
				fill(b, st.key) // B has read the overrides as they are
				if err := st.change(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := fill(b, st.key); got != st.want {
					t.Fatalf("step %d: B's Fillup of %q after A's change: capacity %s, want %s", i, st.key, got, st.want)
				}
				if got := capacityOf(t, b, st.key); got != st.want {
					t.Fatalf("step %d: B's CanAccept of %q: capacity %s, want %s", i, st.key, got, st.want)
				}
				if got := capacityOf(t, a, st.key); got != st.want {
					t.Fatalf("step %d: A's CanAccept of %q: capacity %s, want %s", i, st.key, got, st.want)
				}
			}
			if got := capacityOf(t, b, "other-3"); got != "7" {
				t.Fatalf("B: other-3 capacity %s, want 7", got)
			}
			list, err := b.ListOverrides(ctx, "l", "", 1000)
			if err != nil || len(list) != 51 {
				t.Fatalf("B lists %d overrides (%v), want 51", len(list), err)
			}
			if _, err := b.GetOverride(ctx, "l", "v*"); err == nil {
				t.Fatal("B still gets the deleted v*")
			}
		})
	}
}

// byteConn counts the bytes written and read on a connection.
type byteConn struct {
	net.Conn
	n *atomic.Int64
}

func (c byteConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (c byteConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// TestOverridePutNotProportional: a PUT or DELETE of an override moves as
// many bytes to and from the database with 600 other overrides on the limit
// as with none (it writes its own row, not all of them); so does a decision
// once the Store has read them.
func TestOverridePutNotProportional(t *testing.T) {
	ctx := context.Background()
	var n atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return byteConn{Conn: c, n: &n}, nil
	}
	svc := ledger.NewService(open(t, newDatabase(t), mysql.WithDial(dial), mysql.WithPruneInterval(0)))
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fill := func(key string) {
		t.Helper()
		if out, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: key}, Cost: d("1")}}, ledger.Idempotency{}); err != nil || !out.Accepted {
			t.Fatalf("fillup: %+v %v", out, err)
		}
	}
	// measure returns the bytes one put, one delete and one decision moved.
	measure := func(pattern string) (put, del, decision int64) {
		t.Helper()
		fill(pattern)
		fill(pattern) // the Store's copy of the overrides is current
		n.Store(0)
		if _, err := svc.PutOverride(ctx, "l", capOverride(pattern, 50)); err != nil {
			t.Fatal(err)
		}
		put = n.Swap(0)
		if err := svc.DeleteOverride(ctx, "l", pattern); err != nil {
			t.Fatal(err)
		}
		del = n.Swap(0)
		fill(pattern) // reads the tombstone
		n.Store(0)
		fill(pattern)
		return put, del, n.Load()
	}
	put0, del0, dec0 := measure("aaaa")
	for i := range 600 {
		if _, err := svc.PutOverride(ctx, "l", capOverride(fmt.Sprintf("other-%04d", i), 7)); err != nil {
			t.Fatal(err)
		}
	}
	put1, del1, dec1 := measure("bbbb")
	t.Logf("bytes with 0 / 600 overrides: put %d / %d, delete %d / %d, decision %d / %d", put0, put1, del0, del1, dec0, dec1)
	// One override's JSON is ~200 bytes: 600 of them would be 120 kB.
	for _, c := range []struct {
		what      string
		none, all int64
	}{{"put", put0, put1}, {"delete", del0, del1}, {"decision", dec0, dec1}} {
		if c.all > c.none+512 {
			t.Errorf("a %s moved %d bytes with 600 overrides, %d with none: it grows with their number", c.what, c.all, c.none)
		}
	}
}

// TestUpgradeOverridesOutOfSpec: a database at schema version 3, whose
// limits keep their overrides in their spec as budgetd before version 4
// wrote them (exact, prefix, expired), answers the same after the upgrade:
// the overrides are rows of budgetd_overrides (the expired one kept, as the
// rollover and the end of a temporary rule change read it), gone from the
// spec, every bucket resolves the same capacity, a get and a list answer the
// same overrides, and changes work on them.
func TestUpgradeOverridesOutOfSpec(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	db := direct(t, url)
	old := openAtVersion(t, url, 3)
	old.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	os := []ledger.Override{
		{Pattern: "vip", Capacity: decimal.NewNullDecimal(d("500")), CreatedAt: now, UpdatedAt: now},
		{Pattern: "team-*", Capacity: decimal.NewNullDecimal(d("50")), LeakAmount: d("2"), LeakPer: time.Minute, CreatedAt: now, UpdatedAt: now},
		{Pattern: "gone", Capacity: decimal.NewNullDecimal(d("300")), ExpiresAt: now.Add(-time.Hour), CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour)},
		{Pattern: "é*", Capacity: decimal.NewNullDecimal(d("9")), CreatedAt: now, UpdatedAt: now},
	}
	list, err := json.Marshal(os)
	if err != nil {
		t.Fatal(err)
	}
	// The spec as encodeSpec wrote it before version 4.
	spec := `{"capacity":"100","leak_amount":"1","leak_per_us":3600000000,"history":false,"record_denials":false,"mode":"enforce","grace":"0","overrides":` + string(list) + `}`
	if _, err := db.Exec("INSERT INTO budgetd_limits (name, rev, spec, created_us, updated_us) VALUES ('l', 5, ?, ?, ?), ('plain', 1, ?, ?, ?)",
		spec, now.UnixMicro(), now.UnixMicro(), strings.Replace(spec, `,"overrides":`+string(list), "", 1), now.UnixMicro(), now.UnixMicro()); err != nil {
		t.Fatal(err)
	}

	st := open(t, url, mysql.WithPruneInterval(0))
	checkApplied(t, db)
	var n, oseq int
	var left int
	if err := db.QueryRow("SELECT COUNT(*) FROM budgetd_overrides o JOIN budgetd_limits l ON l.id = o.limit_id WHERE l.name = 'l' AND o.body IS NOT NULL").Scan(&n); err != nil || n != len(os) {
		t.Fatalf("override rows after the upgrade: %d %v, want %d", n, err, len(os))
	}
	if err := db.QueryRow("SELECT oseq, JSON_CONTAINS_PATH(spec, 'one', '$.overrides') FROM budgetd_limits WHERE name = 'l'").Scan(&oseq, &left); err != nil || oseq != len(os) || left != 0 {
		t.Fatalf("limit after the upgrade: oseq %d, overrides left in spec %d, %v", oseq, left, err)
	}
	svc := ledger.NewService(st)
	for key, want := range map[string]string{"vip": "500", "team-a": "50", "gone": "100", "x": "100", "é1": "9"} {
		if got := capacityOf(t, svc, key); got != want {
			t.Errorf("%q after the upgrade: capacity %s, want %s", key, got, want)
		}
	}
	got, err := svc.ListOverrides(ctx, "l", "", 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("list after the upgrade: %+v %v", got, err)
	}
	for _, o := range got {
		for _, w := range os {
			if w.Pattern == o.Pattern && (!o.Capacity.Decimal.Equal(w.Capacity.Decimal) || !o.CreatedAt.Equal(w.CreatedAt) || o.LeakPer != w.LeakPer) {
				t.Errorf("override %q after the upgrade: %+v, want %+v", o.Pattern, o, w)
			}
		}
	}
	if g, err := svc.GetOverride(ctx, "l", "team-*"); err != nil || !g.LeakAmount.Equal(d("2")) || g.LeakPer != time.Minute {
		t.Fatalf("get team-* after the upgrade: %+v %v", g, err)
	}
	if _, err := svc.GetOverride(ctx, "l", "gone"); err == nil {
		t.Fatal("the expired override is served after the upgrade")
	}
	if _, err := svc.PutOverride(ctx, "l", capOverride("vip", 600)); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteOverride(ctx, "l", "team-*"); err != nil {
		t.Fatal(err)
	}
	if a, b := capacityOf(t, svc, "vip"), capacityOf(t, svc, "team-a"); a != "600" || b != "100" {
		t.Fatalf("after changes: vip %s team-a %s, want 600 and 100", a, b)
	}
	if got := capacityOf(t, svc, "plain-key"); got != "100" {
		t.Fatal(got)
	}
	if _, err := svc.GetLimit(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
}

// TestOverridesConcurrentCopies: while Store A puts 120 overrides from eight
// goroutines and then deletes every other one, Store B decides on their keys
// from four goroutines, bringing its copy forward again and again; at the
// end B (and a third Store reading them all at once) resolves every key as
// the table says: no change was missed by a copy labelled with a later seq.
func TestOverridesConcurrentCopies(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	a := ledger.NewService(open(t, url, mysql.WithPruneInterval(0)))
	b := ledger.NewService(open(t, url, mysql.WithPruneInterval(0)))
	if _, err := a.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: d("1000"), LeakAmount: d("1"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	const n = 120
	key := func(i int) string { return fmt.Sprintf("p-%03d", i) }
	run := func(change func(i int) error) {
		t.Helper()
		var done atomic.Bool
		errs := make(chan error, 16)
		var readers sync.WaitGroup
		for r := range 4 {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for i := r; !done.Load(); i = (i + 7) % n {
					if _, err := b.CanAccept(ctx, ledger.BucketRef{Limit: "l", Key: key(i)}, decimal.NewFromInt(1)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		work := make(chan int)
		writers := make(chan error, 8)
		for range 8 {
			go func() {
				var err error
				for i := range work {
					if err == nil {
						err = change(i)
					}
				}
				writers <- err
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		for range 8 {
			if err := <-writers; err != nil {
				t.Error(err)
			}
		}
		done.Store(true)
		readers.Wait()
		select {
		case err := <-errs:
			t.Fatalf("B's decision: %v", err)
		default:
		}
	}
	run(func(i int) error { _, err := a.PutOverride(ctx, "l", capOverride(key(i), int64(i+1))); return err })
	run(func(i int) error {
		if i%2 == 1 {
			return nil
		}
		return a.DeleteOverride(ctx, "l", key(i))
	})
	c := ledger.NewService(open(t, url, mysql.WithPruneInterval(0)))
	for _, svc := range []*ledger.Service{b, c} {
		for i := range n {
			want := "1000"
			if i%2 == 1 {
				want = fmt.Sprint(i + 1)
			}
			if got := capacityOf(t, svc, key(i)); got != want {
				t.Errorf("%s: capacity %s, want %s", key(i), got, want)
			}
		}
	}
}
